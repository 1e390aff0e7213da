package chaos

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"time"

	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/datadir"
	"github.com/etcd-steward/steward/internal/local"
	"github.com/etcd-steward/steward/internal/testutil"
)

// Overlapping faults: the next fault lands while the cluster is still healing from the
// previous one. Each is one entry of the fault list, so TestChaos runs it under porcupine and
// the loss checks like any other.
func init() {
	faults = append(faults,
		fault{"wipe-two", wipeTwo},
		fault{"wipe-during-replacement", wipeDuringReplacement},
		fault{"fault-during-recovery", faultDuringRecovery},
		fault{"kill-backup-leader-during-flush", killBackupLeaderDuringFlush},
		fault{"supervisor-state-lost", supervisorStateLost},
	)
}

// twoMembers picks two distinct members at random.
func twoMembers(ctx context.Context, c *localCluster, rng *rand.Rand) (a, b local.MemberReport, err error) {
	ms, err := c.members(ctx, "")
	if err != nil {
		return a, b, err
	}
	i := rng.Intn(len(ms))
	j := (i + 1 + rng.Intn(len(ms)-1)) % len(ms)
	return ms[i], ms[j], nil
}

// wipeTwo: two members lose their data within 100 ms of each other (the overlap that once
// deadlocked a cluster for good).
func wipeTwo(ctx context.Context, c *localCluster, _ *traffic, rng *rand.Rand) (string, error) {
	a, b, err := twoMembers(ctx, c, rng)
	if err != nil {
		return "", err
	}
	gap := time.Duration(rng.Intn(100)) * time.Millisecond
	if err := local.Fault(local.Dir(c.dir), a.Name, local.FaultWipe, ""); err != nil {
		return "", err
	}
	time.Sleep(gap) // the fault's timing, not a synchronisation
	if err := local.Fault(local.Dir(c.dir), b.Name, local.FaultWipe, ""); err != nil {
		return "", err
	}
	return fmt.Sprintf("wiped %s (%s) and, %s later, %s (%s)", a.Name, a.Role, gap, b.Name, b.Role), nil
}

// wipeDuringReplacement wipes a member, waits until its replacement is a learner (joined,
// not yet promoted), then wipes another member.
func wipeDuringReplacement(ctx context.Context, c *localCluster, _ *traffic, rng *rand.Rand) (string, error) {
	a, b, err := twoMembers(ctx, c, rng)
	if err != nil {
		return "", err
	}
	if err := local.Fault(local.Dir(c.dir), a.Name, local.FaultWipe, ""); err != nil {
		return "", err
	}
	stage := "before it rejoined"
	if testutil.Poll(30*time.Second, 20*time.Millisecond, func() error {
		ms, err := c.members(ctx, "learner")
		if err != nil {
			return err
		}
		for _, m := range ms {
			if m.Name == a.Name {
				return nil
			}
		}
		return fmt.Errorf("%s is no learner yet", a.Name)
	}) == nil {
		stage = "while it was a learner"
	}
	kind := []string{local.FaultWipe, local.FaultKill, local.FaultCorrupt}[rng.Intn(3)]
	if err := local.Fault(local.Dir(c.dir), b.Name, kind, ""); err != nil {
		return "", err
	}
	return fmt.Sprintf("wiped %s, then %s of %s (%s) %s", a.Name, kind, b.Name, b.Role, stage), nil
}

// faultDuringRecovery loses the quorum (two members wiped), waits until the recovery has a
// seed, then strikes again: the seed's etcd is killed, or another member is killed or wiped.
// (Wiping the seed, the one survivor, would be a total loss: TestTotalLossRestoreFromBackup
// covers that, with the losses it allows.)
func faultDuringRecovery(ctx context.Context, c *localCluster, tr *traffic, rng *rand.Rand) (string, error) {
	what, err := wipeTwo(ctx, c, tr, rng)
	if err != nil {
		return "", err
	}
	var d cluster.Directive
	if err := testutil.Poll(2*time.Minute, 20*time.Millisecond, func() error {
		st, err := local.ReadState(local.Dir(c.dir))
		if err != nil {
			return err
		}
		if st.Directive == nil || st.Directive.Seed == "" {
			return fmt.Errorf("no seeded directive yet (waiting: %s)", st.Waiting)
		}
		d = *st.Directive
		return nil
	}); err != nil {
		return "", fmt.Errorf("%s: no recovery started: %w", what, err)
	}
	target, kind := d.Seed, local.FaultKill
	if rng.Intn(2) == 0 {
		kind = []string{local.FaultKill, local.FaultWipe}[rng.Intn(2)]
		for _, m := range c.spec.Members {
			if m.Name != d.Seed {
				target = m.Name
				break
			}
		}
	}
	switch {
	case kind == local.FaultKill:
		// The seed starts its etcd once it has decided; a fenced member has none: strike
		// the process as soon as there is one.
		if err := testutil.Poll(time.Minute, 20*time.Millisecond, func() error { return local.Fault(local.Dir(c.dir), target, kind, "") }); err != nil {
			return "", err
		}
	case local.Fault(local.Dir(c.dir), target, kind, "") != nil:
		// A fenced member has no etcd process to stop first: its data still can be wiped.
		if err := datadir.Wipe(local.Dir(c.dir).MemberData(target)); err != nil {
			return "", err
		}
	}
	return fmt.Sprintf("%s; then, during directive %d (%s, seed %s), %s of %s", what, d.Epoch, d.Phase, d.Seed, kind, target), nil
}

// killBackupLeaderDuringFlush kills the backup leader at a random moment within a delta
// period after it stored a delta.
func killBackupLeaderDuringFlush(ctx context.Context, c *localCluster, _ *traffic, rng *rand.Rand) (string, error) {
	var leader string
	var rev int64
	if err := testutil.Poll(30*time.Second, 50*time.Millisecond, func() error {
		rep, err := c.status(ctx)
		if err != nil || rep.Backup == nil || rep.Backup.Leader == "" {
			return fmt.Errorf("no backup leader: %v", err)
		}
		if rev == 0 {
			rev = rep.Backup.LatestDeltaRevision
		}
		if rep.Backup.LatestDeltaRevision == rev {
			return fmt.Errorf("no new delta since revision %d", rev)
		}
		leader = rep.Backup.Leader
		return nil
	}); err != nil {
		return "", err
	}
	wait := time.Duration(rng.Intn(1000)) * time.Millisecond
	time.Sleep(wait) // lands somewhere in the next delta period (1 s)
	if err := local.Fault(local.Dir(c.dir), leader, local.FaultKill, ""); err != nil {
		return "", err
	}
	return fmt.Sprintf("kill -9 of the backup leader %s, %s after a delta was stored", leader, wait), nil
}

// supervisorStateLost stops the supervisor, damages or deletes its state file while a member
// also loses its data, and starts it again: the status is rebuilt from the members.
func supervisorStateLost(ctx context.Context, c *localCluster, _ *traffic, rng *rand.Rand) (string, error) {
	ms, err := c.members(ctx, "")
	if err != nil {
		return "", err
	}
	victim := ms[rng.Intn(len(ms))].Name
	damage := rng.Intn(2) == 0
	err = c.restartSupervisor(func() error {
		path := filepath.Join(c.dir, "run", "state.json")
		if damage {
			if err := os.WriteFile(path, []byte(`{"phase": "ready", "members": [`), 0o644); err != nil {
				return err
			}
		} else if err := os.Remove(path); err != nil {
			return err
		}
		return datadir.Wipe(local.Dir(c.dir).MemberData(victim))
	})
	how := "deleted"
	if damage {
		how = "damaged"
	}
	if err != nil {
		return "", fmt.Errorf("supervisor restart with its state file %s and %s wiped: %w", how, victim, err)
	}
	return fmt.Sprintf("supervisor restarted with its state file %s and %s's data wiped", how, victim), nil
}
