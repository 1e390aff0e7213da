package local

import (
	"context"
	"errors"
	"fmt"
	"github.com/etcd-steward/steward/internal/units"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/etcd-steward/steward/internal/backup/snapshotter"
	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/etcdproc"
	"github.com/etcd-steward/steward/internal/heal"
	"github.com/etcd-steward/steward/internal/local/localdir"
	"github.com/etcd-steward/steward/internal/restore"
	"github.com/etcd-steward/steward/internal/sidecarapi"
	"github.com/etcd-steward/steward/internal/store"
)

// A RestoreRequest (localdir.RestoreKind) is how `steward local restore` asks the running
// supervisor. The supervisor records its answer in the state (RestoreAnswer), in the same
// write as the directive it issues, so a supervisor that dies in between has done neither
// and takes the request up again when it starts.

// restoreRequestTTL is how long a request waits for the supervisor to take it up. A
// supervisor that finds it later (it was not running) refuses it: the user has been told it
// failed.
const restoreRequestTTL = localdir.RequestTTL

// RestoreRequest asks the supervisor to restore the running cluster to Target, or (Cancel)
// to withdraw the restore in progress.
type RestoreRequest struct {
	ID          string                 `json:"id"`
	Target      *cluster.RestoreTarget `json:"target,omitempty"`
	Cancel      bool                   `json:"cancel,omitempty"`
	RequestedAt time.Time              `json:"requestedAt"`
	Expires     time.Time              `json:"expires"`
}

// RestoreAnswer is the supervisor's answer to a RestoreRequest, recorded in the state.
type RestoreAnswer struct {
	ID       string `json:"id"`
	Accepted bool   `json:"accepted"`
	// Epoch is the directive issued (the restore, or the one that withdraws it).
	Epoch int64     `json:"epoch,omitempty"`
	Error string    `json:"error,omitempty"`
	At    time.Time `json:"at"`
}

// answerRestoreRequest decides a request from the cluster's status: a restore starts only
// with a backup store and no directive in force (heal.StartRestore); a cancel only while
// heal.CancelRestore finds it safe. A request found after it expired is refused.
func answerRestoreRequest(o heal.Observation, req RestoreRequest, backupConfigured bool) (heal.Decision, RestoreAnswer) {
	refuse := func(err error) (heal.Decision, RestoreAnswer) {
		return heal.Decision{Status: o.Status}, RestoreAnswer{ID: req.ID, Error: err.Error(), At: o.Now}
	}
	switch {
	case req.Cancel == (req.Target != nil):
		return refuse(errors.New("malformed restore request: it must name a target or cancel"))
	case o.Now.After(req.Expires):
		return refuse(fmt.Errorf("the request made at %s expired at %s before the supervisor took it up (it was not running); nothing was changed: ask again",
			req.RequestedAt.Format(time.RFC3339), req.Expires.Format(time.RFC3339)))
	case req.Cancel:
		dec, err := heal.CancelRestoreOf(o, 0)
		if err != nil {
			return refuse(err)
		}
		return dec, RestoreAnswer{ID: req.ID, Accepted: true, Epoch: dec.Status.Directive.Epoch, At: o.Now}
	case !backupConfigured:
		return refuse(errors.New("the cluster has no backup store (backups are off): there is nothing to restore from"))
	}
	dec, err := heal.StartRestore(o, *req.Target)
	if err != nil {
		return refuse(fmt.Errorf("a restore cannot start now: %w", err))
	}
	return dec, RestoreAnswer{ID: req.ID, Accepted: true, Epoch: dec.Status.Directive.Epoch, At: o.Now}
}

// takeRestoreRequest answers a restore request left in the cluster dir, if any: the new
// status and the answer are recorded together; the request file goes only after that.
func (s *supervisor) takeRestoreRequest(h *healer, members []heal.Member, spec Spec) {
	req, ok := takeRequest[RestoreRequest](s, localdir.RestoreKind)
	if !ok {
		return
	}
	s.mu.Lock()
	st, answered := s.state.Status, s.state.RestoreAnswer != nil && s.state.RestoreAnswer.ID == req.ID
	s.mu.Unlock()
	if answered {
		s.dir.Done(localdir.RestoreKind)
		return
	}
	dec, ans := answerRestoreRequest(heal.Observation{Now: time.Now(), Status: st, Members: members, Timing: h.timing}, req, spec.Backup != "")
	s.mu.Lock()
	s.state.Status, s.state.RestoreAnswer = dec.Status, &ans
	s.mu.Unlock()
	if !s.recordAnswer(localdir.RestoreKind, req.ID) {
		return
	}
	if ans.Accepted {
		s.logf("%s", dec.Event)
	} else {
		s.logf("restore request refused: %s", ans.Error)
	}
}

// RestoreOptions configure Restore.
type RestoreOptions struct {
	Dir string
	// ToRevision or ToTime (at most one) pick the point; neither: the newest revision.
	// Timeline picks the timeline (0: the cluster's newest, or the one of ToTime).
	ToRevision int64
	ToTime     time.Time
	Timeline   uint32
	// Timeout bounds the whole restore (the wait for the cluster to serve again).
	Timeout time.Duration
	// Progress receives a line whenever the restore moves on.
	Progress func(string)
}

// RestoreResult is the output of `steward local restore`. Other tools parse its JSON: keep names.
type RestoreResult struct {
	// Target is the point restored, resolved to a timeline and revision of the cluster's own
	// backups; TargetBasis (for --to-time) the object that dates it, TargetAfterEnd a warning
	// that the time is after the newest backup.
	Target         cluster.RestoreTarget `json:"target"`
	TargetBasis    string                `json:"targetBasis,omitempty"`
	TargetAfterEnd string                `json:"targetAfterEnd,omitempty"`
	// Snapshot is the full snapshot taken before anything changed: the present stays restorable.
	Snapshot snapshotter.FullResult `json:"snapshot"`
	// Epoch is the directive that carried the restore out (a later one if it restarted).
	Epoch int64 `json:"epoch"`
	// Revision is the restored revision; ClusterID the restored (new) cluster's, replacing
	// PreviousClusterID; Timeline the backup timeline its history is written to.
	Revision          int64          `json:"revision"`
	ClusterID         string         `json:"clusterID"`
	PreviousClusterID string         `json:"previousClusterID"`
	Timeline          uint32         `json:"timeline"`
	Seed              string         `json:"seed"`
	Duration          units.Duration `json:"duration"`
}

// Restore restores the running cluster in opts.Dir back to a point of its own backups, as
// one operation: it checks the target against the store, takes a full snapshot (so the
// present stays restorable), asks the supervisor for the restore, and waits until every
// member serves the restored cluster and its backups continue on their timeline. Nothing is
// changed when a check fails.
func Restore(ctx context.Context, opts RestoreOptions) (RestoreResult, error) {
	start := time.Now()
	progress := opts.Progress
	if progress == nil {
		progress = func(string) {}
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	dir := Dir(opts.Dir)
	spec, st, err := restorable(dir)
	if err != nil {
		return RestoreResult{}, err
	}
	s, err := openBackupStore(ctx, dir, spec)
	if err != nil {
		return RestoreResult{}, fmt.Errorf("the backup store %s of the cluster in %s cannot be opened: %w; nothing was changed", spec.Backup, opts.Dir, err)
	}
	defer s.Close()
	ids := cluster.IDs(spec.memberView(), st.ClusterID)
	if _, err := resolveTarget(ctx, s, ids, opts); err != nil {
		return RestoreResult{}, fmt.Errorf("%w; nothing was changed", err)
	}

	res := RestoreResult{PreviousClusterID: st.ClusterID}
	progress("taking a full snapshot first, so the present stays restorable")
	if res.Snapshot, err = fullSnapshotNow(ctx, dir, spec, s); err != nil {
		return res, fmt.Errorf("%w; nothing was changed", err)
	}
	progress(fmt.Sprintf("full snapshot %s stored (revision %d, timeline %d)", res.Snapshot.Key, res.Snapshot.Revision, res.Snapshot.Timeline))
	// Resolved again: the newest revision, or a time after the newest backup, now includes
	// the snapshot.
	r, err := resolveTarget(ctx, s, ids, opts)
	if err != nil {
		return res, fmt.Errorf("%w; nothing was changed (the full snapshot %s was taken)", err, res.Snapshot.Key)
	}
	res.Target = cluster.RestoreTarget{Timeline: r.Timeline, Revision: r.Target}
	res.TargetBasis, res.TargetAfterEnd = r.TargetBasis, r.TargetAfterEnd
	if r.TargetAfterEnd != "" {
		progress("WARNING: " + r.TargetAfterEnd)
	}

	ans, err := request(ctx, dir, RestoreRequest{Target: &res.Target})
	if err != nil {
		return res, err
	}
	progress(fmt.Sprintf("directive %d: restoring %s of timeline %d", ans.Epoch, res.Target.Point(), res.Target.Timeline))
	done, err := followRestore(ctx, dir, res.Target, ans.Epoch, progress)
	if err != nil {
		return res, err
	}
	res.Epoch, res.Seed, res.Revision, res.ClusterID = done.Epoch, done.Seed, done.Ack.Revision, done.Ack.ClusterID
	progress(fmt.Sprintf("every member serves cluster %s at revision %d; waiting for its backups to continue", res.ClusterID, res.Revision))
	if res.Timeline, err = waitBackupsContinue(ctx, dir, res.Revision); err != nil {
		return res, err
	}
	res.Duration = units.Duration(time.Since(start))
	return res, nil
}

// CancelRestore withdraws the restore in progress in dir while that is safe (see
// heal.CancelRestore), and waits until the members serve their own data again.
func CancelRestore(ctx context.Context, dir Dir, timeout time.Duration, progress func(string)) (epoch int64, err error) {
	if progress == nil {
		progress = func(string) {}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if _, running := dir.SupervisorRunning(); !running {
		return 0, fmt.Errorf("the cluster in %s is not running: no restore is in progress; start it with `steward local up --dir %s`", dir, dir)
	}
	ans, err := request(ctx, dir, RestoreRequest{Cancel: true})
	if err != nil {
		return 0, err
	}
	progress(fmt.Sprintf("directive %d: the restore is withdrawn; the members restart on their own data", ans.Epoch))
	err = waitFor(ctx, dir, progress, func(st State, rep Report) (bool, error) {
		if d := st.Directive; d != nil && d.Epoch > ans.Epoch {
			return false, fmt.Errorf("directive %d replaced the cancel: %s; follow it with `steward local status --dir %s`", d.Epoch, d.Reason, dir)
		}
		return st.Directive == nil && allHealthyVoters(rep) && len(rep.Members) == rep.Cluster.Size, nil
	})
	return ans.Epoch, err
}

// restorable checks that the cluster in dir can be restored in place now.
func restorable(dir Dir) (Spec, State, error) {
	spec, ok, err := ReadSpec(dir)
	if err != nil {
		return spec, State{}, err
	}
	if !ok {
		return spec, State{}, fmt.Errorf("no local cluster in %s; nothing was changed", dir)
	}
	if _, running := dir.SupervisorRunning(); !running {
		return spec, State{}, fmt.Errorf("the cluster in %s is not running: start it with `steward local up --dir %s` and restore it then (or restore into a new data dir with `steward restore`); nothing was changed", dir, dir)
	}
	if spec.Backup == "" {
		return spec, State{}, fmt.Errorf("the cluster in %s has no backup store (it was started with --backup none): there is nothing to restore from; nothing was changed", dir)
	}
	st, err := ReadState(dir)
	if err != nil {
		return spec, st, err
	}
	if d := st.Directive; d != nil {
		what := "a quorum-loss recovery"
		if d.Restore != nil {
			what = "a restore to " + d.Restore.Point()
		}
		return spec, st, fmt.Errorf("%s (directive %d, %s) is in progress in %s: a second restore cannot start until it completes (follow it with `steward local status --dir %s`); nothing was changed", what, d.Epoch, d.Phase, dir, dir)
	}
	return spec, st, nil
}

// resolveTarget checks the target against the cluster's own timelines in the store (never
// another cluster's on the same prefix, unless one is named) and resolves it to a timeline
// and revision, as a dry run of the restore the seed will make (restore.ResolveTarget).
func resolveTarget(ctx context.Context, s *store.Store, ids []uint64, opts RestoreOptions) (restore.Result, error) {
	return restore.ResolveTarget(ctx, s, ids, cluster.RestoreTarget{Timeline: opts.Timeline, Revision: opts.ToRevision, Time: opts.ToTime})
}

// fullSnapshotNow has the backup leader take a full snapshot, and checks that the store holds it.
func fullSnapshotNow(ctx context.Context, dir Dir, spec Spec, s *store.Store) (snapshotter.FullResult, error) {
	rep, err := Status(ctx, dir)
	if err != nil {
		return snapshotter.FullResult{}, err
	}
	var base string
	for _, m := range spec.Members {
		if m.Name == rep.Cluster.Leader {
			base = spec.SidecarURL(m)
		}
	}
	if base == "" {
		return snapshotter.FullResult{}, fmt.Errorf("no member of the cluster in %s leads (has it lost its quorum? see `steward local status --dir %s`): the full snapshot that keeps the present restorable cannot be taken", dir, dir)
	}
	client, err := SidecarClient(dir, spec, 0)
	if err != nil {
		return snapshotter.FullResult{}, err
	}
	res, err := etcdproc.FullSnapshot(ctx, client, base)
	for sidecarapi.StatusCode(err) == http.StatusTooManyRequests {
		// Full snapshots are spaced (each runs retention): wait for the next one allowed.
		wait, ok := sidecarapi.RetryAfter(err)
		if !ok {
			wait = 5 * time.Second
		}
		select {
		case <-ctx.Done():
			return res, fmt.Errorf("the full snapshot that keeps the present restorable: %w (waiting for the sidecar's next allowed snapshot); nothing was changed", ctx.Err())
		case <-time.After(wait):
		}
		res, err = etcdproc.FullSnapshot(ctx, client, base)
	}
	if err != nil {
		return res, fmt.Errorf("the full snapshot that keeps the present restorable failed: %w; check the backups with `steward local status --dir %s`", err, dir)
	}
	if _, err := s.Stat(ctx, res.Key); err != nil {
		return res, fmt.Errorf("the full snapshot %s is not in the store %s after it was taken: %w", res.Key, s, err)
	}
	return res, nil
}

// request leaves a restore request for the supervisor and waits for its answer.
func request(ctx context.Context, dir Dir, req RestoreRequest) (RestoreAnswer, error) {
	var ans RestoreAnswer
	err := ask(ctx, dir, localdir.RestoreKind, func(h requestHeader) RestoreRequest {
		req.ID, req.RequestedAt, req.Expires = h.ID, h.RequestedAt, h.Expires
		return req
	}, func(st State, id string) (bool, error) {
		if a := st.RestoreAnswer; a != nil && a.ID == id {
			ans = *a
			if !a.Accepted {
				return true, fmt.Errorf("the supervisor of %s refused: %s", dir, a.Error)
			}
			return true, nil
		}
		return false, nil
	})
	return ans, err
}

// followRestore waits until the restore to target (issued as directive epoch) is retired, and
// returns the retired directive. A restore whose seed never served restarts in a new epoch
// with the same target; it is followed there.
func followRestore(ctx context.Context, dir Dir, target cluster.RestoreTarget, epoch int64, progress func(string)) (cluster.Directive, error) {
	var done cluster.Directive
	err := waitFor(ctx, dir, progress, func(st State, rep Report) (bool, error) {
		if d := st.Directive; d != nil {
			if d.Restore == nil && d.Ack == nil && d.Epoch > epoch {
				return false, fmt.Errorf("the restore was withdrawn: directive %d: %s", d.Epoch, d.Reason)
			}
			return false, nil
		}
		lr := st.LastRecovery
		if (lr == nil || lr.Epoch < epoch) && st.LastEpoch > epoch {
			// A later directive replaced the restore and was withdrawn between two looks (a
			// cancel does that within seconds): the members restarted on their own data.
			return false, fmt.Errorf("the restore was withdrawn: directive %d replaced directive %d and the members restarted on their own data", st.LastEpoch, epoch)
		}
		if lr == nil || lr.Epoch < epoch || lr.Restore == nil || *lr.Restore != target || lr.Ack == nil {
			return false, fmt.Errorf("the restore did not complete: no directive is in force and the last one retired is not it (%+v); see `steward local status --dir %s`", lr, dir)
		}
		done = *lr
		return allHealthyVoters(rep) && len(rep.Members) == rep.Cluster.Size, nil
	})
	return done, err
}

// waitBackupsContinue waits until the backup leader stores the restored cluster's history
// (a full snapshot at or past the restored revision, backups current) and returns its timeline.
func waitBackupsContinue(ctx context.Context, dir Dir, rev int64) (uint32, error) {
	var tl uint32
	err := waitFor(ctx, dir, nil, func(_ State, rep Report) (bool, error) {
		b := rep.Backup
		if b == nil || !b.Ready || b.Timeline == 0 || b.LatestFullRevision < rev {
			return false, nil
		}
		tl = b.Timeline
		return true, nil
	})
	return tl, err
}

// waitFor polls the state and the status until cond is done or fails, reporting every new
// phase and wait reason of the directive in force through progress.
func waitFor(ctx context.Context, dir Dir, progress func(string), cond func(State, Report) (bool, error)) error {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	last, lastWhy := "", ""
	for {
		st, err := ReadState(dir)
		if err == nil {
			// Wait reasons count seconds: a line is new when more than the numbers changed.
			if line := describeDirective(st); progress != nil && line != "" && digits.ReplaceAllString(line, "") != last {
				progress(line)
				last = digits.ReplaceAllString(line, "")
			}
			rep, serr := Status(ctx, dir)
			switch {
			case serr != nil:
				lastWhy = serr.Error()
			case !rep.Supervisor.Running:
				lastWhy = "the supervisor is not running"
			default:
				ok, cerr := cond(st, rep)
				if cerr != nil || ok {
					return cerr
				}
				lastWhy = st.Waiting
			}
		}
		select {
		case <-ctx.Done():
			why := ""
			if lastWhy != "" {
				why = " (last: " + lastWhy + ")"
			}
			return fmt.Errorf("not done in time%s; it goes on in the supervisor: follow it with `steward local status --dir %s`", why, dir)
		case <-tick.C:
		}
	}
}

var digits = regexp.MustCompile(`[0-9.]+`)

// describeDirective is a progress line for the directive in force ("" when none).
func describeDirective(st State) string {
	d := st.Directive
	if d == nil {
		return ""
	}
	line := fmt.Sprintf("directive %d %s", d.Epoch, strings.ToLower(d.Phase))
	if d.Seed != "" {
		line += " (seed " + d.Seed + ")"
	}
	if st.Waiting != "" {
		line += ": " + strings.TrimPrefix(st.Waiting, fmt.Sprintf("directive %d: ", d.Epoch))
	}
	if st.Stuck != "" {
		line += "; " + st.Stuck // names what each member waits for, e.g. a store the seed cannot read
	}
	return line
}
