package local

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/etcd-steward/steward/internal/units"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/etcd-steward/steward/internal/backup/snapshotter"
	"github.com/etcd-steward/steward/internal/etcdproc"
	"github.com/etcd-steward/steward/internal/local/localdir"
	"github.com/etcd-steward/steward/internal/maintenance"
	"github.com/etcd-steward/steward/internal/version"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// UpgradeOptions configure Upgrade.
type UpgradeOptions struct {
	Dir string
	// Binary is the steward executable the members run from now on ("": unchanged).
	Binary string
	// SetFlags and UnsetFlags change the extra etcd options (etcd's flag names).
	SetFlags   map[string]string
	UnsetFlags []string
	// Leader is how the leader, last, is restarted (maintenance.LeaderMoveLeader by default).
	Leader       maintenance.LeaderUpdate
	SkipSnapshot bool
	// WaitTimeout bounds each wait for a member or the cluster to be healthy (default 5 minutes).
	WaitTimeout time.Duration
	// Progress receives a line whenever the upgrade moves on.
	Progress func(string)
}

// LeaderMove is one leadership transfer of a rolling update.
type LeaderMove struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// UpgradeResult is the output of `steward local upgrade`. Other tools parse its JSON: keep names.
type UpgradeResult struct {
	// Generation is the spec generation every member runs now; Resumed: an earlier upgrade to
	// it was completed.
	Generation int64 `json:"generation"`
	Resumed    bool  `json:"resumed,omitempty"`
	// Binary is the members' steward executable, EtcdVersion the etcd version it embeds
	// (when --binary was given), EtcdFlags the extra etcd options.
	Binary      string            `json:"binary"`
	EtcdVersion string            `json:"etcdVersion,omitempty"`
	EtcdFlags   map[string]string `json:"etcdFlags,omitempty"`
	// Snapshot is the full snapshot taken before any member restarted.
	Snapshot *snapshotter.FullResult `json:"snapshot,omitempty"`
	// Restarted lists the members in the order they restarted; LeaderMoves the transfers.
	Restarted   []string       `json:"restarted"`
	LeaderMoves []LeaderMove   `json:"leaderMoves"`
	Duration    units.Duration `json:"duration"`
}

// Upgrade changes what the members of the running cluster in opts.Dir run (the steward
// binary, extra etcd flags) and rolls them onto it one at a time (maintenance.Roll):
// followers first, each healthy and caught up before the next, the leader last after its
// leadership moved. It starts only when every member is healthy, after a full snapshot the
// store holds. The new spec is recorded before any member restarts: an interrupted upgrade
// is completed by running Upgrade again; an upgrade that changes nothing restarts every
// member (a rolling restart). Bad input changes nothing.
func Upgrade(ctx context.Context, opts UpgradeOptions) (UpgradeResult, error) {
	start := time.Now()
	progress := opts.Progress
	if progress == nil {
		progress = func(string) {}
	}
	if opts.WaitTimeout <= 0 {
		opts.WaitTimeout = 5 * time.Minute
	}
	dir := Dir(opts.Dir)
	spec, ok, err := ReadSpec(dir)
	if err != nil {
		return UpgradeResult{}, err
	}
	if !ok {
		return UpgradeResult{}, fmt.Errorf("no local cluster in %s; nothing was changed", dir)
	}
	if _, running := dir.SupervisorRunning(); !running {
		return UpgradeResult{}, fmt.Errorf("the cluster in %s is not running: start it with `steward local up --dir %s`, then upgrade it; nothing was changed", dir, dir)
	}
	flags, err := changeFlags(spec.EtcdFlags, opts.SetFlags, opts.UnsetFlags)
	if err != nil {
		return UpgradeResult{}, fmt.Errorf("%w; nothing was changed", err)
	}
	if err := etcdproc.CheckFlags(flags); err != nil {
		return UpgradeResult{}, fmt.Errorf("%w; nothing was changed", err)
	}
	cli, err := Dialer(dir, spec).New(spec.ClientURLs(), 3*time.Second)
	if err != nil {
		return UpgradeResult{}, err
	}
	defer cli.Close()
	res := UpgradeResult{EtcdFlags: flags}
	sameBinary := true
	if opts.Binary != "" {
		if res.EtcdVersion, err = binaryEtcdVersion(ctx, opts.Binary); err != nil {
			return res, fmt.Errorf("%w; nothing was changed", err)
		}
		running, err := runningEtcdVersion(ctx, cli, spec)
		if err != nil {
			return res, fmt.Errorf("%w; nothing was changed", err)
		}
		if err := checkEtcdUpgrade(running, res.EtcdVersion); err != nil {
			return res, fmt.Errorf("%s: %w; nothing was changed", opts.Binary, err)
		}
		sameBinary = sameContents(opts.Binary, dir.Binary(spec.Binary))
	}
	st, err := ReadState(dir)
	if err != nil {
		return res, err
	}
	rep, err := Status(ctx, dir)
	if err != nil {
		return res, err
	}
	if err := upgradeCanStart(rep, st, spec.Generation); err != nil {
		return res, fmt.Errorf("%w; see `steward local status --dir %s`; nothing was changed", err, dir)
	}
	changed := !sameBinary || !maps.Equal(flags, spec.EtcdFlags)
	asked := opts.Binary != "" || len(opts.SetFlags) > 0 || len(opts.UnsetFlags) > 0
	res.Resumed = !changed && len(outdated(st, spec.Generation)) > 0
	if !changed && !res.Resumed && asked {
		progress(fmt.Sprintf("every member runs this specification already (generation %d): nothing to do", spec.Generation))
		res.Generation, res.Binary, res.Duration = spec.Generation, dir.Binary(spec.Binary), units.Duration(time.Since(start))
		return res, nil
	}
	if !opts.SkipSnapshot {
		if res.Snapshot, err = snapshotBeforeUpgrade(ctx, dir, spec, progress); err != nil {
			return res, err
		}
	}
	previous := spec
	if res.Resumed {
		progress(fmt.Sprintf("completing the upgrade to spec generation %d: %s still run an older one", spec.Generation, strings.Join(outdated(st, spec.Generation), ", ")))
	} else {
		spec.Generation++
		if !sameBinary {
			spec.Binary = localdir.GenerationBinaryRel(spec.Generation)
			if err := installBinary(opts.Binary, dir.Binary(spec.Binary)); err != nil {
				return res, fmt.Errorf("%w; nothing was changed", err)
			}
		}
		spec.EtcdFlags = flags
		if err := writeSpec(dir, spec); err != nil {
			return res, fmt.Errorf("record the new spec in %s: %w; nothing was changed", dir.Spec(), err)
		}
		progress(fmt.Sprintf("recorded spec generation %d: binary %s, etcd flags [%s]; rolling the members onto it",
			spec.Generation, dir.Binary(spec.Binary), strings.Join(etcdproc.FlagList(flags), " ")))
	}
	res.Generation, res.Binary = spec.Generation, dir.Binary(spec.Binary)
	err = maintenance.Roll(ctx, cli, maintenance.RollOptions{
		Leader:      opts.Leader,
		WaitTimeout: opts.WaitTimeout,
		Outdated: func(context.Context) ([]string, error) {
			st, err := ReadState(dir)
			return outdated(st, spec.Generation), err
		},
		Restart: func(ctx context.Context, m maintenance.Member) error {
			if err := askRestart(ctx, dir, m.Name, spec.Generation, opts.WaitTimeout, progress); err != nil {
				return err
			}
			res.Restarted = append(res.Restarted, m.Name)
			return nil
		},
		Progress: func(s maintenance.Step) {
			switch s.Kind {
			case maintenance.StepRestart:
				progress("restarting " + s.Reason)
			case maintenance.StepMoveLeader:
				progress(fmt.Sprintf("moving leadership from %s to %s (%s)", s.Member.Name, s.To.Name, s.Reason))
				res.LeaderMoves = append(res.LeaderMoves, LeaderMove{From: s.Member.Name, To: s.To.Name})
			case maintenance.StepWait:
				progress(s.Reason)
			}
		},
	})
	res.Duration = units.Duration(time.Since(start))
	if errors.Is(err, maintenance.ErrStalled) {
		return res, stalled(err, dir, res, previous, spec)
	}
	if err != nil {
		return res, fmt.Errorf("%w; spec generation %d stays recorded: run `steward local upgrade --dir %s` again to complete it", err, spec.Generation, dir)
	}
	if err := pruneBinaries(dir, spec.Binary, previous.Binary); err != nil {
		progress(fmt.Sprintf("could not remove older member binaries: %v", err))
	}
	return res, nil
}

// pruneBinaries removes the member binaries of earlier generations (DIR/bin/steward-gN) but
// those kept: the one the members run and the one they ran before, to go back to.
func pruneBinaries(dir Dir, keep ...string) error {
	old, err := dir.GenerationBinaries()
	if err != nil {
		return err
	}
	var errs []error
	for _, rel := range old {
		if slices.Contains(keep, rel) {
			continue
		}
		if err := os.Remove(dir.Path(rel)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// stalled explains a rollout that stopped on a member that did not come back: which, what
// its log says, and how to go back.
func stalled(err error, dir Dir, res UpgradeResult, previous, spec Spec) error {
	which := ""
	if n := len(res.Restarted); n > 0 {
		last := res.Restarted[n-1]
		which = fmt.Sprintf("; %s was restarted on spec generation %d and is not healthy; %s ends with:\n%s\n",
			last, spec.Generation, dir.Log(last, "etcd"), TailFile(dir.Log(last, "etcd"), 5))
	}
	back := []string{"steward local upgrade --dir " + dir.String()}
	if previous.Generation == spec.Generation {
		return fmt.Errorf("%w%s; to go back, run `%s` with the binary and flags the cluster ran before", err, which, back[0])
	}
	if previous.Binary != spec.Binary {
		back = append(back, "--binary "+dir.Binary(previous.Binary))
	}
	for _, name := range slices.Sorted(maps.Keys(spec.EtcdFlags)) {
		if _, ok := previous.EtcdFlags[name]; !ok {
			back = append(back, "--unset-flag "+name)
		}
	}
	for _, f := range etcdproc.FlagList(previous.EtcdFlags) {
		name, value, _ := strings.Cut(f, "=")
		if v, ok := spec.EtcdFlags[name]; !ok || v != value {
			back = append(back, "--set-flag "+f)
		}
	}
	return fmt.Errorf("%w%s; the members not restarted yet still run generation %d: to go back, run `%s` (it restarts the member that is down first)", err, which, previous.Generation, strings.Join(back, " "))
}

// changeFlags applies --set-flag and --unset-flag to the current extra etcd flags.
func changeFlags(current, set map[string]string, unset []string) (map[string]string, error) {
	out := maps.Clone(current)
	if out == nil {
		out = map[string]string{}
	}
	for _, name := range unset {
		if _, ok := set[name]; ok {
			return nil, fmt.Errorf("etcd flag %q is both set and unset", name)
		}
		if _, ok := out[name]; !ok {
			return nil, fmt.Errorf("etcd flag %q is not set (the members run with [%s]): there is nothing to unset", name, strings.Join(etcdproc.FlagList(current), " "))
		}
		delete(out, name)
	}
	maps.Copy(out, set)
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// outdated lists the members whose processes started on a spec older than generation.
func outdated(st State, generation int64) []string {
	var out []string
	for _, m := range st.Members {
		if m.Generation < generation {
			out = append(out, m.Name)
		}
	}
	return out
}

// upgradeCanStart says why an upgrade cannot start now: a directive in force, or a member
// that is not a healthy voter. A member down on the newest generation while others are
// outdated is allowed: an unfinished upgrade took it down, and the next one restarts it first.
func upgradeCanStart(rep Report, st State, generation int64) error {
	if d := st.Directive; d != nil {
		return fmt.Errorf("directive %d (%s: %s) is in force: an upgrade starts only after it completes", d.Epoch, d.Phase, d.Reason)
	}
	gens := map[string]int64{}
	for _, m := range st.Members {
		gens[m.Name] = m.Generation
	}
	unfinished := len(outdated(st, generation)) > 0
	var bad []string
	for _, m := range rep.Members {
		if m.Healthy && m.Role != RoleLearner {
			continue
		}
		if g, ok := gens[m.Name]; ok && unfinished && g == generation {
			continue
		}
		bad = append(bad, fmt.Sprintf("%s (%s, healthy %t)", m.Name, m.Role, m.Healthy))
	}
	if len(bad) > 0 {
		return fmt.Errorf("an upgrade starts only when every member is a healthy voter; not: %s", strings.Join(bad, ", "))
	}
	return nil
}

// snapshotBeforeUpgrade takes the full snapshot that keeps the present restorable.
func snapshotBeforeUpgrade(ctx context.Context, dir Dir, spec Spec, progress func(string)) (*snapshotter.FullResult, error) {
	if spec.Backup == "" {
		return nil, fmt.Errorf("the cluster in %s has no backup store, so no full snapshot can be taken before the upgrade: pass --skip-snapshot to upgrade without one; nothing was changed", dir)
	}
	s, err := openBackupStore(ctx, dir, spec)
	if err != nil {
		return nil, fmt.Errorf("the backup store %s cannot be opened: %w; nothing was changed", spec.Backup, err)
	}
	defer s.Close()
	progress("taking a full snapshot first, so the present stays restorable")
	snap, err := fullSnapshotNow(ctx, dir, spec, s)
	if err != nil {
		return nil, fmt.Errorf("%w; nothing was changed", err)
	}
	progress(fmt.Sprintf("full snapshot %s stored (revision %d, timeline %d)", snap.Key, snap.Revision, snap.Timeline))
	return &snap, nil
}

// askRestart asks the supervisor to restart member name on spec generation, once no
// directive is in force (a recovery or a restore fences and restarts members itself).
func askRestart(ctx context.Context, dir Dir, name string, generation int64, timeout time.Duration, progress func(string)) error {
	deadline := time.Now().Add(timeout)
	waiting := ""
	for {
		st, err := ReadState(dir)
		if err != nil {
			return err
		}
		if d := st.Directive; d != nil {
			if why := fmt.Sprintf("waiting: directive %d (%s) is in force; %s restarts after it", d.Epoch, d.Phase, name); why != waiting {
				progress(why)
				waiting = why
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%w: directive %d stayed in force for %s", maintenance.ErrStalled, d.Epoch, timeout)
			}
			if err := sleepCtx(ctx, time.Second); err != nil {
				return err
			}
			continue
		}
		var refused string
		err = ask(ctx, dir, localdir.RestartKind, func(h requestHeader) RestartRequest {
			return RestartRequest{requestHeader: h, Member: name, Generation: generation}
		}, func(st State, id string) (bool, error) {
			a := st.RestartAnswer
			if a == nil || a.ID != id {
				return false, nil
			}
			refused = a.Error
			return true, nil
		})
		switch {
		case err != nil:
			return err
		case refused == "":
			return nil
		case !strings.Contains(refused, "is in force"):
			return fmt.Errorf("the supervisor of %s refused to restart %s: %s", dir, name, refused)
		}
		// A directive came between the look and the request: wait for it as above.
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// binaryEtcdVersion checks that path is a steward executable and returns the etcd version
// it embeds (its `version -o json`).
func binaryEtcdVersion(ctx context.Context, path string) (string, error) {
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		return "", fmt.Errorf("--binary %s: %w", path, err)
	case !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0:
		return "", fmt.Errorf("--binary %s is not an executable file (mode %s)", path, fi.Mode())
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "version", "-o", "json").Output()
	if err != nil {
		return "", fmt.Errorf("--binary %s: `%s version -o json` failed (%v): is it a steward binary?", path, path, err)
	}
	var v version.Info
	if err := json.Unmarshal(out, &v); err != nil || v.Etcd == "" {
		return "", fmt.Errorf("--binary %s: `version -o json` reports no etcd version (%q): is it a steward binary?", path, bytes.TrimSpace(out))
	}
	return v.Etcd, nil
}

// runningEtcdVersion is the lowest etcd version the members that answer run (etcd's cluster
// version follows the lowest).
func runningEtcdVersion(ctx context.Context, cli *clientv3.Client, spec Spec) (string, error) {
	lowest := ""
	for _, u := range spec.ClientURLs() {
		sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		st, err := cli.Status(sctx, u)
		cancel()
		if err == nil && (lowest == "" || compareVersions(st.Version, lowest) < 0) {
			lowest = st.Version
		}
	}
	if lowest == "" {
		return "", errors.New("no member answers: the etcd version the cluster runs is unknown")
	}
	return lowest, nil
}

// checkEtcdUpgrade says whether members running etcd version from may restart on version to:
// the same minor version (any patch) or the next one. etcd upgrades one minor version at a
// time, and goes back only through its downgrade procedure.
func checkEtcdUpgrade(from, to string) error {
	fmaj, fmin, ferr := majorMinor(from)
	tmaj, tmin, terr := majorMinor(to)
	switch {
	case ferr != nil:
		return ferr
	case terr != nil:
		return terr
	case tmaj != fmaj:
		return fmt.Errorf("its etcd %s is another major version than the cluster's %s: Steward does not upgrade across major versions", to, from)
	case tmin > fmin+1:
		return fmt.Errorf("its etcd %s skips a minor version (the cluster runs %s): etcd upgrades one minor version at a time, so upgrade to a steward binary with etcd %d.%d first, then to this one", to, from, fmaj, fmin+1)
	case tmin < fmin:
		return fmt.Errorf("its etcd %s is older than the cluster's %s: going back a minor version needs etcd's downgrade procedure, which Steward does not support yet; use a binary with etcd %d.%d or %d.%d", to, from, fmaj, fmin, fmaj, fmin+1)
	}
	return nil
}

func majorMinor(v string) (major, minor int, err error) {
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	if len(parts) >= 2 {
		if major, err = strconv.Atoi(parts[0]); err == nil {
			if minor, err = strconv.Atoi(parts[1]); err == nil {
				return major, minor, nil
			}
		}
	}
	return 0, 0, fmt.Errorf("etcd version %q is not MAJOR.MINOR.PATCH", v)
}

// compareVersions orders etcd versions by major, minor and patch (unparsable ones first).
func compareVersions(a, b string) int {
	num := func(v string) []int {
		var out []int
		for _, p := range strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3) {
			n, _ := strconv.Atoi(strings.SplitN(p, "-", 2)[0])
			out = append(out, n)
		}
		return out
	}
	return slices.Compare(num(a), num(b))
}

// sameContents reports whether two files hold the same bytes.
func sameContents(a, b string) bool {
	x, err := os.ReadFile(a)
	if err != nil {
		return false
	}
	y, err := os.ReadFile(b)
	return err == nil && bytes.Equal(x, y)
}
