package local

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/heal"
)

// TestRelocationBegunBeforeARestart: a supervisor that stopped after it recorded a move of
// misplaced data, but before it recorded what the move voids, voids it at its next round: a
// seed chosen from what the dirs held before the move is chosen again, in a new epoch, and the
// record of the move is cleared.
func TestRelocationBegunBeforeARestart(t *testing.T) {
	dir := Dir(t.TempDir())
	if err := os.MkdirAll(dir.Path("run"), 0o700); err != nil {
		t.Fatal(err)
	}
	lost := time.Now().Add(-time.Minute)
	st := State{Status: heal.Status{LastEpoch: 4, QuorumLostSince: lost, Directive: &cluster.Directive{Epoch: 4,
		Phase: cluster.PhaseSeeding, Mode: cluster.RecoverFromSurvivor, Seed: "m0", PhaseSince: lost}},
		Relocating: []heal.Relocation{{From: "m0", Owner: "m1", Swap: true}}}
	if err := writeState(dir, st); err != nil {
		t.Fatal(err)
	}
	previous, err := ReadState(dir)
	if err != nil || len(previous.Relocating) != 1 {
		t.Fatalf("the recorded move did not survive the state file: %+v, %v", previous.Relocating, err)
	}
	spec := Spec{Name: "c", Host: "127.0.0.1", Members: []MemberSpec{{Name: "m0"}, {Name: "m1"}, {Name: "m2"}}}
	s := &supervisor{dir: dir, logf: t.Logf, spec: spec, state: State{Status: previous.Status, Relocating: previous.Relocating}}
	s.heal(context.Background(), &healer{timing: heal.DefaultTiming})

	got, err := ReadState(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Relocating) != 0 {
		t.Fatalf("the move is still recorded as under way: %+v", got.Relocating)
	}
	if d := got.Directive; d == nil || d.Epoch != 5 || d.Phase != cluster.PhaseFencing || d.Seed != "" || !got.QuorumLostSince.After(lost) ||
		!strings.Contains(d.Reason, "moved back") {
		t.Fatalf("the seed chosen before the move was kept: %+v, quorum lost since %s", got.Directive, got.QuorumLostSince)
	}
}
