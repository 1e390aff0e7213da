package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/etcd-steward/steward/internal/maintenance"
	"github.com/etcd-steward/steward/internal/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// runSteward runs the command line with args and returns what it printed and its error.
func runSteward(ctx context.Context, args ...string) (string, error) {
	cmd := NewRootCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	return out.String(), err
}

func TestMaintenanceCommandsRefuseBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"defrag"}, "--endpoints is required"},
		{[]string{"defrag", "--endpoints", "http://127.0.0.1:1", "--threshold", "150"}, "--threshold 150: give a percentage from 0 to 100"},
		{[]string{"defrag", "--endpoints", "http://127.0.0.1:1", "--min-reclaim", "lots"}, `--min-reclaim "lots": give a size such as 100Mi`},
		{[]string{"compact", "--endpoints", "http://127.0.0.1:1"}, "give exactly one of --revision R"},
		{[]string{"compact", "--endpoints", "http://127.0.0.1:1", "--revision", "5", "--keep", "3"}, "give exactly one of --revision R"},
		{[]string{"move-leader"}, "--endpoints is required"},
		{[]string{"sidecar", "--name", "m0", "--data-dir", "/nonexistent", "--local-dir", "/nonexistent", "--defrag-threshold", "-1"}, "--defrag-threshold -1"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, err := runSteward(context.Background(), tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v (output %q), want one containing %q", err, out, tc.want)
			}
		})
	}
}

// TestMaintenanceCommands: on a real 3-member cluster, move-leader hands leadership to the
// member named, defrag --all defragments all three with the (new) leader last after moving
// its leadership, and compact compacts at the revision asked for.
func TestMaintenanceCommands(t *testing.T) {
	ctx := context.Background()
	ms := testutil.Cluster(t, 3)
	eps := strings.Join([]string{ms[0].Endpoint, ms[1].Endpoint, ms[2].Endpoint}, ",")
	for i := 0; i < 20; i++ {
		if _, err := ms[0].Client.Put(ctx, fmt.Sprintf("k%d", i%5), strings.Repeat("x", 1000)); err != nil {
			t.Fatal(err)
		}
	}

	out, err := runSteward(ctx, "move-leader", "--endpoints", eps, "--to", "m1")
	if err != nil {
		t.Fatalf("move-leader: %v\n%s", err, out)
	}
	st, err := ms[0].Client.Status(ctx, ms[1].Endpoint)
	if err != nil || st.Leader != st.Header.MemberId {
		t.Fatalf("after move-leader --to m1 (%q): m1 does not lead (%v)", out, err)
	}

	out, err = runSteward(ctx, "defrag", "--endpoints", eps, "--all", "-o", "json")
	if err != nil {
		t.Fatalf("defrag: %v\n%s", err, out)
	}
	var res maintenance.Result
	if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &res); err != nil {
		t.Fatalf("defrag -o json: %v\n%s", err, out)
	}
	if len(res.Members) != 3 || res.Members[2].Name != "m1" || res.Members[2].MovedTo == "" {
		t.Fatalf("defrag --all: %+v, want three members with m1, the leader, last after its leadership moved", res.Members)
	}
	if !strings.Contains(out, "moving leadership from m1 to ") {
		t.Fatalf("defrag printed no progress for the leadership move:\n%s", out)
	}

	out, err = runSteward(ctx, "compact", "--endpoints", eps, "--revision", "10")
	if err != nil || !strings.Contains(out, "compacted at revision 10") {
		t.Fatalf("compact --revision 10: %v\n%s", err, out)
	}
	if _, err := ms[0].Client.Get(ctx, "k0", clientv3.WithRev(9)); err == nil {
		t.Fatal("revision 9 still readable after compacting at 10")
	}
}
