package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os/exec"
	"strings"
	"time"

	"github.com/etcd-steward/steward/internal/local"
	"github.com/etcd-steward/steward/internal/testutil"
)

// A fault is injected into a running cluster while traffic runs; the cluster must heal by
// itself. inject returns what it did, in words.
type fault struct {
	name   string
	inject func(ctx context.Context, c *localCluster, tr *traffic, rng *rand.Rand) (string, error)
}

// errSkip marks a fault that this build cannot inject (e.g. scaling before it exists).
var errSkip = errors.New("not available in this build")

var faults = []fault{
	{"kill-leader", func(ctx context.Context, c *localCluster, _ *traffic, rng *rand.Rand) (string, error) {
		return killRole(ctx, c, rng, "leader")
	}},
	{"kill-follower", func(ctx context.Context, c *localCluster, _ *traffic, rng *rand.Rand) (string, error) {
		return killRole(ctx, c, rng, "follower")
	}},
	{"wipe", func(ctx context.Context, c *localCluster, _ *traffic, rng *rand.Rand) (string, error) {
		return memberFault(ctx, c, rng, local.FaultWipe)
	}},
	{"corrupt", func(ctx context.Context, c *localCluster, _ *traffic, rng *rand.Rand) (string, error) {
		return memberFault(ctx, c, rng, local.FaultCorrupt)
	}},
	{"swap", func(ctx context.Context, c *localCluster, _ *traffic, rng *rand.Rand) (string, error) {
		ms, err := c.members(ctx, "")
		if err != nil {
			return "", err
		}
		i := rng.Intn(len(ms))
		j := (i + 1 + rng.Intn(len(ms)-1)) % len(ms)
		return fmt.Sprintf("swapped the data dirs of %s (%s) and %s (%s)", ms[i].Name, ms[i].Role, ms[j].Name, ms[j].Role),
			local.Fault(local.Dir(c.dir), ms[i].Name, local.FaultSwap, ms[j].Name)
	}},
	{"backup-outage", backupOutage},
	{"scale", scale},
}

func killRole(ctx context.Context, c *localCluster, rng *rand.Rand, role string) (string, error) {
	ms, err := c.members(ctx, role)
	if err != nil {
		return "", err
	}
	m := ms[rng.Intn(len(ms))]
	return fmt.Sprintf("kill -9 of %s's etcd (%s)", m.Name, role), local.Fault(local.Dir(c.dir), m.Name, local.FaultKill, "")
}

func memberFault(ctx context.Context, c *localCluster, rng *rand.Rand, kind string) (string, error) {
	ms, err := c.members(ctx, "")
	if err != nil {
		return "", err
	}
	m := ms[rng.Intn(len(ms))]
	return fmt.Sprintf("%s of %s (%s)", kind, m.Name, m.Role), local.Fault(local.Dir(c.dir), m.Name, kind, "")
}

// backupOutage takes the backup store down: backups must report the failure while etcd keeps
// serving, and catch up once the store is back.
func backupOutage(ctx context.Context, c *localCluster, tr *traffic, _ *rand.Rand) (string, error) {
	c.s3.SetDown(true)
	defer c.s3.SetDown(false)
	err := testutil.Poll(30*time.Second, 500*time.Millisecond, func() error {
		rep, err := c.status(ctx)
		if err == nil && rep.Backup != nil && !rep.Backup.Ready {
			return nil
		}
		return fmt.Errorf("%+v, %v", rep.Backup, err)
	})
	if err != nil {
		return "", fmt.Errorf("backup store down for 30s, but backups still report ready (%v)", err)
	}
	before := tr.acked.Load()
	time.Sleep(3 * time.Second) // traffic runs during the outage
	served := tr.acked.Load() - before
	if served == 0 {
		return "", errors.New("no operation succeeded during a backup store outage: backups must never cut client traffic")
	}
	return fmt.Sprintf("backup store down until BackupReady=false, then 3s more (%d operations served meanwhile)", served), nil
}

// scale grows the cluster by two members and shrinks it back, with `steward local scale`,
// if the build has it.
func scale(ctx context.Context, c *localCluster, _ *traffic, _ *rand.Rand) (string, error) {
	help, _ := exec.CommandContext(ctx, c.cfg.binary, "local", "--help").CombinedOutput()
	if !strings.Contains(string(help), "\n  scale ") {
		return "", errSkip
	}
	n, start := len(c.spec.Members), time.Now()
	for _, size := range []int{n + 2, n} {
		out, err := exec.CommandContext(ctx, c.cfg.binary, "local", "scale", "--dir", c.dir, fmt.Sprint(size)).CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("steward local scale %d: %v\n%s", size, err, out)
		}
		if _, err := c.waitHealthy(ctx, 3*time.Minute, false); err != nil {
			return "", fmt.Errorf("after scaling to %d: %w", size, err)
		}
	}
	return fmt.Sprintf("scaled %d → %d → %d members, healthy at each size, in %s", n, n+2, n, time.Since(start).Round(100*time.Millisecond)), nil
}
