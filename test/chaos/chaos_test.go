// Package chaos proves Steward's invariants under failure on real `steward local` clusters:
// clients record a history of gets, puts, deletes and compare-and-swaps while faults are
// injected, and the history is checked for linearizability with porcupine. Quorum loss and
// total loss are checked by their own tests. Run with `make chaos` (SEED=… DURATION=…).
//
// The tests skip unless STEWARD_CHAOS is set. Settings, from the environment:
// STEWARD_CHAOS_SEED, STEWARD_CHAOS_DURATION (of TestChaos's traffic), STEWARD_CHAOS_MEMBERS
// (3 or 5), STEWARD_CHAOS_FAULTS (comma-separated kinds, default all), STEWARD_CHAOS_OUT
// (where failed runs leave cluster dirs and visualisations), STEWARD_CHAOS_KEEP (keep cluster
// dirs of passing runs too), STEWARD_CHAOS_BINARY (a prebuilt steward, e.g. a broken one).
package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/etcd-steward/steward/internal/testutil/linearizable"
)

const (
	healTimeout  = 2 * time.Minute
	checkTimeout = 5 * time.Minute
	// calm is the traffic between a heal and the next fault.
	calm = 3 * time.Second
)

// TestChaos runs traffic for the configured duration while injecting faults one after
// another, each chosen by the seed; the cluster must heal after each, all members must end
// with the same key space, and the history must be linearizable. The cluster runs with TLS
// and etcd authentication, so every healing path also renews logins and dials with
// certificates (the other chaos tests run in plain text).
func TestChaos(t *testing.T) {
	cfg := chaosConfig(t)
	duration := cfg.duration
	if dl, ok := t.Deadline(); ok && time.Until(dl)-10*time.Minute < duration {
		duration = max(time.Until(dl)-10*time.Minute, time.Minute)
		t.Logf("duration capped to %s by the test timeout (raise go test -timeout)", duration)
	}
	t.Logf("chaos run: seed %d, duration %s, %d members; reproduce with `make chaos SEED=%d DURATION=%s`",
		cfg.seed, duration, cfg.members, cfg.seed, cfg.duration)
	rng := rand.New(rand.NewSource(cfg.seed))
	c := startCluster(t, cfg, clusterOptions{basePort: 24000, quorumGrace: 10 * time.Second,
		sidecarArgs: []string{"--delta-period=1s"}, secure: true})
	ctx := context.Background()

	kinds := faults
	if cfg.faults != nil {
		kinds = slices.DeleteFunc(slices.Clone(faults), func(f fault) bool { return !slices.Contains(cfg.faults, f.name) })
	}
	if err := c.checkOwners(ctx); err != nil {
		t.Fatal(err)
	}
	tr := startTraffic(c.client(), cfg.seed)
	// Each kind once, in an order the seed chooses, then kinds at random until time is up.
	var queue []fault
	for _, i := range rng.Perm(len(kinds)) {
		queue = append(queue, kinds[i])
	}
	var injected []string
	var failure error
	n := 0 // faults injected
	for failure == nil && len(kinds) > 0 && (n == 0 || tr.h.Since() < duration) {
		f := kinds[rng.Intn(len(kinds))]
		if len(queue) > 0 {
			f, queue = queue[0], queue[1:]
		}
		at := time.Since(c.began)
		what, err := f.inject(ctx, c, tr, rng)
		if errors.Is(err, errSkip) {
			c.logf("fault %-13s skipped: %v", f.name, err)
			injected = append(injected, fmt.Sprintf("+%6.1fs %-13s skipped (%v)", at.Seconds(), f.name, err))
			kinds = slices.DeleteFunc(slices.Clone(kinds), func(k fault) bool { return k.name == f.name })
			continue
		}
		n++
		if err != nil {
			failure = fmt.Errorf("inject %s: %w", f.name, err)
			break
		}
		c.logf("fault %-13s injected: %s", f.name, what)
		took, err := c.waitHealthy(ctx, healTimeout, true)
		if err == nil {
			err = c.checkOwners(ctx)
		}
		if err != nil {
			failure = fmt.Errorf("after %s (%s): %w", f.name, what, err)
		}
		c.logf("fault %-13s healed in %s", f.name, took.Round(100*time.Millisecond))
		injected = append(injected, fmt.Sprintf("+%6.1fs %-13s %s; healthy again after %s", at.Seconds(), f.name, what, took.Round(100*time.Millisecond)))
		if failure == nil {
			before := tr.acked.Load()
			time.Sleep(calm) // traffic on the healed cluster before the next fault
			if tr.acked.Load() == before {
				failure = fmt.Errorf("after %s: healthy, but no operation succeeded for %s (the last failed with %s)", f.name, calm, tr.lastError())
			}
		}
	}
	tr.finish()
	if failure == nil && n == 0 {
		failure = errors.New("no fault could be injected")
	}
	if failure == nil {
		var rev int64
		if rev, failure = c.converged(ctx); failure == nil {
			failure = c.verifyBackups(ctx, rev)
		}
	}

	ops := tr.h.Operations()
	t.Logf("injected:\n  %s", strings.Join(injected, "\n  "))
	t.Logf("operations: %d recorded over %s (%s)", len(ops), tr.h.Since().Round(time.Second), tr.summary())
	verdict := check(t, cfg, ops)
	if failure != nil {
		t.Errorf("FAIL: %v", failure)
		verdict = fmt.Sprintf("FAIL (%v); history %s", failure, verdict)
	}
	t.Logf("verdict: %s", verdict)
}

// check runs porcupine over the history; on a violation it writes the visualisation and fails.
func check(t *testing.T, cfg config, ops []porcupine.Operation) string {
	verdict, err := linearizable.Check(ops, checkTimeout, cfg.out, fmt.Sprintf("%s-seed%d-%s", t.Name(), cfg.seed, time.Now().Format("150405")))
	if err != nil {
		t.Error(err)
	}
	return verdict
}
