// Package agent is a member's part in continuous backups: the backup leader's loop (full
// snapshots, deltas, retention, restore drills) while its etcd leads, the backup API it
// serves (status, latest snapshots, an on-demand full snapshot, forwarded to the leader from
// the other members) and its metrics. It reaches the sidecar it runs in only through Member.
package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"time"

	"github.com/etcd-steward/steward/internal/backup"
	"github.com/etcd-steward/steward/internal/backup/retention"
	"github.com/etcd-steward/steward/internal/backup/snapshotter"
	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/etcdutil"
	"github.com/etcd-steward/steward/internal/restore"
	"github.com/etcd-steward/steward/internal/seal"
	"github.com/etcd-steward/steward/internal/store"
	"github.com/etcd-steward/steward/internal/units"
	"github.com/robfig/cron/v3"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Config configures continuous backups. Only the sidecar whose etcd is the raft
// leader writes; every sidecar runs the same loop and takes over when its etcd leads.
type Config struct {
	// StoreURL is the object store (see package store); empty disables backups.
	StoreURL string
	// DeltaPeriod is how often deltas are written (default 5s).
	DeltaPeriod time.Duration
	// DeltaMaxBytes writes a delta early at this size (default 16 MiB).
	DeltaMaxBytes int
	// FullSchedule is a cron schedule for full snapshots (default hourly).
	FullSchedule string
	// Retention is the garbage-collection policy applied after each full snapshot; zero keeps all.
	Retention retention.Policy
	// CheckInterval is how often leadership is checked (default 2s).
	CheckInterval time.Duration
	// DrillSchedule is a cron schedule for restore drills of the timeline being written
	// (default daily, DrillOff for none); DrillScratchDir holds each drill's scratch data dir
	// (default os.TempDir()), where a drill keeps the member's database size free.
	DrillSchedule   string
	DrillScratchDir string
	// FullAfterRevisions and FullAfterBytes compact the chain: a full snapshot is taken as soon
	// as the deltas since the newest one span this many revisions or hold this many (stored)
	// bytes, so a restore never replays more than that. 0: no limit.
	FullAfterRevisions int64
	FullAfterBytes     int64
	// Keys, if set, encrypt every object written and are needed to read any (see package
	// seal). KeysPath and KeyID, when KeysPath is set, are where they were loaded from: they
	// are read again at every backup session and store opening, so a key added to a mounted
	// Secret reaches a running sidecar (a member that leads again after a rotation it missed
	// reads the new key's objects).
	Keys     *seal.Keyring
	KeysPath string
	KeyID    string
	// CredentialsDir holds the backup store's credentials, RestoreCredentialsDir those of
	// another store a bootstrap restore reads (see store.Options.CredentialsDir; empty: the
	// cloud's default credentials). Each store is opened with its own only.
	CredentialsDir        string
	RestoreCredentialsDir string
}

// CurrentKeys are the keys as KeysPath holds them now; if they cannot be read, the keys
// loaded before and why.
func (c Config) CurrentKeys() (*seal.Keyring, error) {
	if c.KeysPath == "" {
		return c.Keys, nil
	}
	k, err := seal.LoadKeyring(c.KeysPath, c.KeyID)
	if err != nil {
		return c.Keys, fmt.Errorf("reading the backup keys again (the ones read before stay in use): %w", err)
	}
	return k, nil
}

// StoreOptions open the store at url for reading: with the configured keys, and with the
// backup store's credentials if url is the backup store, else with those of the store a
// bootstrap restore reads.
func (c Config) StoreOptions(url string) store.Options {
	keys, _ := c.CurrentKeys() // an error keeps the keys read before: the session reports it
	creds := c.RestoreCredentialsDir
	if url == c.StoreURL {
		creds = c.CredentialsDir
	}
	return store.Options{Keys: keys, CredentialsDir: creds}
}

// OpenStore opens the existing store at url (see StoreOptions).
func (c Config) OpenStore(ctx context.Context, url string) (*store.Store, error) {
	return store.Open(ctx, url, c.StoreOptions(url))
}

// DrillOff as Config.DrillSchedule turns restore drills off.
const DrillOff = "off"

// Agent runs the backup leader loop of one sidecar.
type Agent struct {
	cfg      Config
	schedule cron.Schedule
	drills   cron.Schedule // nil: drills are off
	// drillOffset: drills run this long after each scheduled time (drillOffset).
	drillOffset time.Duration
	lg          *zap.Logger
	metrics     *Metrics
	etcd        etcdutil.Dialer
	endpoint    string // this member's client URL
	store       *store.Store

	mu     sync.Mutex
	status cluster.BackupStatus
	// fullRequests carries on-demand full snapshot requests to the running session.
	fullRequests chan chan fullOutcome
	// authAtFull is etcd's auth revision when the newest full snapshot this agent took began,
	// and the timeline it went to (guarded by mu).
	authAtFull struct {
		timeline uint32
		revision uint64
	}
	// sinceFull is the newest full snapshot's revision on the session's timeline, and the
	// newest revision and the bytes of the deltas stored after it (guarded by mu).
	sinceFull struct {
		revision, last, bytes int64
	}
	// own summarises the session's timeline, the cluster's own, as far as its window needs:
	// from the store's index when the session began, with what the session stored since and
	// without what retention deleted; ownCluster is the cluster it is of (guarded by mu).
	own        backup.TimelineIndex
	ownCluster uint64
}

type fullOutcome struct {
	res snapshotter.FullResult
	err error
}

// ErrNotBackupLeader is returned for on-demand snapshots asked of a sidecar whose etcd does not lead.
var ErrNotBackupLeader = errors.New("this member is not the backup leader")

func New(cfg Config, etcd etcdutil.Dialer, endpoint string, st *store.Store, lg *zap.Logger, m *Metrics) (*Agent, error) {
	if cfg.DeltaPeriod <= 0 {
		cfg.DeltaPeriod = snapshotter.DefaultDeltaPeriod
	}
	if cfg.DeltaMaxBytes <= 0 {
		cfg.DeltaMaxBytes = 16 << 20
	}
	if cfg.FullSchedule == "" {
		cfg.FullSchedule = "@hourly"
	}
	if cfg.CheckInterval <= 0 {
		cfg.CheckInterval = 2 * time.Second
	}
	if cfg.DrillSchedule == "" {
		cfg.DrillSchedule = "@daily"
	}
	sched, drills, err := parseSchedules(cfg)
	if err != nil {
		return nil, err
	}
	var offset time.Duration
	if drills != nil {
		offset = drillOffset(drills, st.String())
	}
	return &Agent{cfg: cfg, schedule: sched, drills: drills, drillOffset: offset, lg: lg.Named("backup"), metrics: m, etcd: etcd, endpoint: endpoint, store: st,
		status: cluster.BackupStatus{Store: st.String(), DeltaPeriod: cfg.DeltaPeriod}, fullRequests: make(chan chan fullOutcome)}, nil
}

// ValidateSchedules refuses a --full-schedule or --drill-schedule that does not parse, naming
// the flag and the forms it takes, so that a sidecar refuses it at start rather than running
// without backups (the agent that parses them starts only when backups begin). Empty means the
// default.
func ValidateSchedules(cfg Config) error {
	_, _, err := parseSchedules(cfg)
	return err
}

func parseSchedules(cfg Config) (full, drills cron.Schedule, err error) {
	fs, ds := cfg.FullSchedule, cfg.DrillSchedule
	if fs == "" {
		fs = "@hourly"
	}
	if ds == "" {
		ds = "@daily"
	}
	full, err = units.ParseSchedule(fs)
	if err != nil {
		return nil, nil, fmt.Errorf("--full-schedule %q: %w: use a cron schedule of 5 fields (minute hour day-of-month month day-of-week, e.g. \"0 * * * *\"), @hourly, @daily, @weekly, @monthly, @yearly or @every <duration> (e.g. @every 30m)", fs, err)
	}
	if ds != DrillOff {
		if drills, err = units.ParseSchedule(ds); err != nil {
			return nil, nil, fmt.Errorf("--drill-schedule %q: %w: use a cron schedule of 5 fields (e.g. \"0 3 * * *\"), @daily, @weekly, @every <duration>, or %q for no drills", ds, err, DrillOff)
		}
	}
	return full, drills, nil
}

// Status returns the current backup status, with Ready evaluated now.
func (a *Agent) Status() cluster.BackupStatus {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.refreshLocked(time.Now())
	return a.status
}

// refreshLocked evaluates Ready at now and publishes the status in the metrics.
func (a *Agent) refreshLocked(now time.Time) {
	a.status.Ready, a.status.ReadyReason = backupReady(a.status, now, a.cfg.DeltaPeriod)
	a.metrics.publish(a.status)
}

// backupReady applies the BackupReady hysteresis to s: true while, on the member's own
// timeline, the newest stored revision was the member's own revision less than 2 delta
// periods ago (a delta period of events held, plus the time to read and store them); false
// once that is more than 3 periods ago (in between, as it was). The reason says which
// condition keeps it false.
func backupReady(s cluster.BackupStatus, now time.Time, period time.Duration) (bool, string) {
	age := now.Sub(s.CurrentAt)
	withError := func(why string) string {
		if s.LastError != "" {
			why += "; last error: " + s.LastError
		}
		return why
	}
	switch {
	case !s.Leader:
		return false, "this member's etcd does not lead: the leader's sidecar backs up"
	case s.Timeline == 0:
		why := "the member's own timeline in the store is not known yet"
		if s.TimelineReason != "" {
			why += ": " + s.TimelineReason
		}
		return false, withError(why)
	case s.CurrentAt.IsZero():
		return false, withError(fmt.Sprintf("nothing of the member's history is stored on timeline %d yet (%s)", s.Timeline, s.TimelineReason))
	case age < 2*period:
		return true, ""
	case age > 3*period || !s.Ready:
		why := fmt.Sprintf("the newest stored revision %d on timeline %d was the member's revision %s ago, more than %s (3 delta periods)", s.CurrentRevision, s.Timeline, age.Round(time.Second), 3*period)
		if age <= 3*period {
			why = fmt.Sprintf("the newest stored revision %d on timeline %d was the member's revision %s ago, not yet back within %s (2 delta periods)", s.CurrentRevision, s.Timeline, age.Round(time.Second), 2*period)
		}
		return false, withError(why)
	}
	return true, ""
}

func (a *Agent) update(f func(s *cluster.BackupStatus)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	f(&a.status)
	a.refreshLocked(time.Now())
}

func (a *Agent) fail(what string, err error) {
	a.lg.Warn("backup failure", zap.String("step", what), zap.Error(err))
	a.metrics.backupFailures.WithLabelValues(what).Inc()
	a.update(func(s *cluster.BackupStatus) {
		s.Failures++
		s.LastError = fmt.Sprintf("%s: %v", what, err)
		s.LastErrorTime = time.Now().UTC()
	})
}

// Run checks leadership every CheckInterval and runs a backup session while this member's
// etcd leads. It returns when ctx ends.
func (a *Agent) Run(ctx context.Context) {
	conn := a.etcd.Conn([]string{a.endpoint}, 2*time.Second)
	defer conn.Reset()
	type running struct {
		cli    *clientv3.Client
		cancel context.CancelFunc
		done   chan struct{}
	}
	var cur *running
	stop := func() {
		if cur != nil {
			cur.cancel()
			<-cur.done
			cur = nil
			// What this session knew of the store is not current once another leader writes.
			a.update(func(s *cluster.BackupStatus) { s.Leader, s.Recoverable, a.own = false, nil, backup.TimelineIndex{} })
		}
	}
	defer stop()
	tick := time.NewTicker(a.cfg.CheckInterval)
	defer tick.Stop()
	for {
		cli, _ := conn.Client()
		if cur != nil && cur.cli != cli {
			stop() // etcd refused the old client's login (the root password changed): start again with the new one
		}
		leader := cli != nil && etcdutil.Leads(ctx, cli, a.endpoint, 2*time.Second)
		switch {
		case leader && cur == nil:
			a.lg.Info("this member leads: starting backups", zap.String("store", a.store.String()))
			sctx, cancel := context.WithCancel(ctx)
			cur = &running{cli: cli, cancel: cancel, done: make(chan struct{})}
			a.update(func(s *cluster.BackupStatus) { s.Leader = true })
			go func(done chan struct{}) {
				defer close(done)
				a.session(sctx, snapshotter.Member{Client: cli, Endpoint: a.endpoint})
			}(cur.done)
		case !leader && cur != nil:
			a.lg.Info("this member no longer leads: stopping backups")
			stop()
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// session runs backups until ctx ends, restarting from the store after any failure.
func (a *Agent) session(ctx context.Context, m snapshotter.Member) {
	backoff := time.Second
	for ctx.Err() == nil {
		err := a.sessionOnce(ctx, m)
		if ctx.Err() != nil {
			return
		}
		a.fail("session", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 30*time.Second)
	}
}

// sessionOnce places the member's backups in the store (snapshotter.Place: its own timeline,
// or a new one if its history restarted), takes a full snapshot first if the timeline needs
// one, then captures deltas, with scheduled and on-demand full snapshots alongside. If the
// member's history restarts meanwhile, it returns ErrHistoryRestarted and the next session
// starts a new timeline.
func (a *Agent) sessionOnce(ctx context.Context, m snapshotter.Member) error {
	if a.cfg.KeysPath != "" {
		if keys, err := a.cfg.CurrentKeys(); err != nil {
			a.fail("keys", err)
		} else {
			a.store.SetKeys(keys)
		}
	}
	p, err := snapshotter.Place(ctx, m, a.store)
	if err != nil {
		return err
	}
	tl := p.Timeline()
	resume := p.Placement.Resume
	// A full snapshot comes first only when the deltas cannot go on without one. One that is
	// due by the schedule, or for a change of etcd's auth state, is taken by fullLoop beside
	// the deltas, which go on from the stored revision: taken first, it would leave the
	// revisions between the stored one and its own in no backup.
	newestFull, reason := fullFirst(p)
	if !p.Placement.New {
		gap, err := a.repairDeltas(ctx, m, p, tl)
		if err != nil {
			return err
		}
		reason = cmp.Or(reason, gap)
		a.fillBelowNewestFull(ctx, m, p, tl)
	}
	a.enterTimeline(p)
	if reason != "" {
		a.lg.Info("taking a full snapshot", zap.Uint32("timeline", tl.ID), zap.String("reason", reason))
		res, err := a.full(ctx, m, tl)
		if err != nil {
			return err
		}
		resume, newestFull = max(resume, res.Revision), res.Created
	}

	// Scheduled and on-demand full snapshots, and drills, run beside the delta capture. The
	// session ends only once they have: the store is closed after it.
	fullCtx, stopFull := context.WithCancel(ctx)
	var beside sync.WaitGroup
	defer func() {
		stopFull()
		beside.Wait()
	}()
	a.startSinceFull(p.Chain.Timeline(tl.ID))
	compact := make(chan struct{}, 1)
	beside.Go(func() { a.fullLoop(fullCtx, m, tl, newestFull, compact) })
	beside.Go(func() { a.drillLoop(fullCtx, m, tl.ID, time.Now()) })

	for {
		a.lg.Info("capturing deltas", zap.Uint32("timeline", tl.ID), zap.Int64("from", resume+1))
		err := snapshotter.RunDeltas(ctx, m, a.store, resume+1, snapshotter.DeltaOptions{
			Period: a.cfg.DeltaPeriod, MaxBytes: a.cfg.DeltaMaxBytes, Timeline: tl, EtcdVersion: p.Status.Version,
			OnFlush: func(d snapshotter.Delta) {
				a.stored(d.Key, d.Size, d.Created)
				if a.deltaStored(d) != "" {
					select {
					case compact <- struct{}{}:
					default:
					}
				}
				a.metrics.deltaEvents.Add(float64(d.Events))
				a.update(func(s *cluster.BackupStatus) {
					s.LatestDeltaKey, s.LatestDeltaRevision, s.LatestDeltaTime = d.Key, d.LastRev, d.Created
				})
			},
			OnCurrent: func(rev int64, at time.Time) {
				a.update(func(s *cluster.BackupStatus) {
					if s.Timeline == tl.ID {
						s.CurrentRevision, s.CurrentAt = max(s.CurrentRevision, rev), at
					}
				})
			},
			OnError: func(err error) { a.fail("delta", err) },
		})
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, snapshotter.ErrHistoryRestarted) {
			a.leaveTimeline(err)
			return err
		}
		if errors.Is(err, snapshotter.ErrCompacted) || errors.Is(err, snapshotter.ErrHole) {
			// The chain cannot continue from where it is: a full snapshot starts it again.
			a.fail("delta", err)
			res, ferr := a.full(ctx, m, tl)
			if ferr != nil {
				return ferr
			}
			resume = res.Revision
			continue
		}
		return err
	}
}

// fullFirst decides whether the placed timeline needs a full snapshot before deltas can
// continue (a new timeline, none yet, a hole after the newest), and returns its newest full
// snapshot's time.
func fullFirst(p snapshotter.Placed) (newestFull time.Time, fullReason string) {
	if p.Placement.New {
		return time.Time{}, p.Placement.Reason
	}
	c := p.Chain.Timeline(p.Placement.Timeline)
	var fullRev int64
	if n := len(c.Fulls); n > 0 {
		f := c.Fulls[n-1]
		fullRev, newestFull = f.FirstRev, f.Created
	}
	if len(c.Fulls) == 0 {
		return newestFull, fmt.Sprintf("timeline %d holds no full snapshot", p.Placement.Timeline)
	}
	for _, is := range c.Check() {
		if is.Kind == backup.IssueHole && is.From > fullRev {
			return newestFull, "the chain has a hole: " + is.Message
		}
	}
	return newestFull, ""
}

// deltasToCheck are the deltas of timeline chain c that a restore of its newest revisions
// needs: those reaching past its newest full snapshot (all of them without one). The member
// most likely still has their revisions.
func deltasToCheck(c backup.Chain) []backup.Object {
	var fullRev int64
	if n := len(c.Fulls); n > 0 {
		fullRev = c.Fulls[n-1].FirstRev
	}
	var out []backup.Object
	for _, d := range c.Deltas {
		if d.LastRev > fullRev {
			out = append(out, d)
		}
	}
	return out
}

// repairDeltas reads back the deltas deltasToCheck names and writes each damaged one again
// from the member's history (snapshotter.Recapture). A damaged delta whose revisions the
// member compacted away cannot be: the gap is reported, and repairDeltas returns why a full
// snapshot must restart the chain. Any other failure ends the session (it starts again).
func (a *Agent) repairDeltas(ctx context.Context, m snapshotter.Member, p snapshotter.Placed, tl snapshotter.Timeline) (string, error) {
	var gaps []string
	for _, d := range deltasToCheck(p.Chain.Timeline(tl.ID)) {
		err := backup.VerifyObject(ctx, a.store, d)
		if err == nil {
			continue
		}
		if !errors.Is(err, backup.ErrCorrupt) {
			return "", fmt.Errorf("read back %s: %w", d.Key, err)
		}
		a.lg.Warn("a stored delta is damaged: capturing its revisions again", zap.String("key", d.Key), zap.Error(err))
		rerr := snapshotter.Recapture(ctx, m, a.store, d, tl, p.Status.Version)
		switch {
		case rerr == nil:
			a.lg.Info("damaged delta captured again", zap.String("key", d.Key))
		case errors.Is(rerr, snapshotter.ErrCompacted):
			gap := fmt.Errorf("delta %s is damaged and the member compacted revisions %d-%d away: they are lost from the backups (restores to them fail; steward backup verify lists it); a full snapshot restarts the chain: %w",
				d.Key, d.FirstRev, d.LastRev, err)
			a.fail("delta", gap)
			gaps = append(gaps, gap.Error())
		default:
			return "", rerr
		}
	}
	return strings.Join(gaps, "; "), nil
}

// maxBelowFullFill bounds the revisions fillBelowNewestFull captures in one delta object
// (held in memory until stored): a hole it leaves beyond this stays, reported.
const maxBelowFullFill = 100_000

// fillBelowNewestFull captures the revisions just below the timeline's newest full snapshot
// that no delta holds, while the member still has them. A full snapshot is stored beside the
// deltas; a backup leader lost before it flushed the deltas below it leaves them in no backup,
// and the next leader goes on from the full snapshot. Nothing else fills them: a restore to
// them would fail although every member holds them. A hole the member compacted away stays,
// logged.
func (a *Agent) fillBelowNewestFull(ctx context.Context, m snapshotter.Member, p snapshotter.Placed, tl snapshotter.Timeline) {
	ti, ok := p.Index.Timeline(tl.ID)
	full, hasFull := ti.NewestFull()
	if !ok || !hasFull {
		return
	}
	// The run of deltas that ends nearest below the full snapshot, and no run reaching it.
	from := int64(0)
	for _, r := range ti.Runs {
		if r.From < full.FirstRev && r.To >= full.FirstRev-1 {
			return // the deltas reach the full snapshot
		}
		if r.To < full.FirstRev {
			from = max(from, r.To+1)
		}
	}
	to := full.FirstRev - 1
	if from == 0 || from > to {
		return
	}
	if to-from+1 > maxBelowFullFill {
		a.lg.Warn("revisions below the newest full snapshot are in no backup, too many to capture again in one object",
			zap.Int64("from", from), zap.Int64("to", to), zap.String("full", full.Key))
		return
	}
	hole := backup.Object{Key: fmt.Sprintf("revisions %d-%d of timeline %d", from, to, tl.ID), Kind: backup.KindDelta, Timeline: tl.ID, FirstRev: from, LastRev: to}
	switch err := snapshotter.Recapture(ctx, m, a.store, hole, tl, p.Status.Version); {
	case err == nil:
		a.lg.Info("revisions below the newest full snapshot that no delta held captured", zap.Int64("from", from), zap.Int64("to", to), zap.String("full", full.Key))
	case errors.Is(err, snapshotter.ErrCompacted):
		a.lg.Warn("revisions below the newest full snapshot are in no backup, and the member compacted them away: restores to them fail",
			zap.Int64("from", from), zap.Int64("to", to), zap.String("full", full.Key))
	default:
		a.lg.Warn("capturing the revisions below the newest full snapshot that no delta holds", zap.Int64("from", from), zap.Int64("to", to), zap.Error(err))
	}
}

// enterTimeline records where the session writes: the timeline, and what it holds so far.
// What was known to be stored on another timeline says nothing about this one.
func (a *Agent) enterTimeline(p snapshotter.Placed) {
	a.lg.Info("backup timeline", zap.Uint32("timeline", p.Placement.Timeline), zap.Bool("new", p.Placement.New), zap.String("reason", p.Placement.Reason))
	c := p.Chain.Timeline(p.Placement.Timeline)
	own, _ := p.Index.Timeline(p.Placement.Timeline) // empty for a new timeline
	own.Timeline = p.Placement.Timeline
	a.update(func(s *cluster.BackupStatus) {
		a.own, a.ownCluster = own, p.Timeline().ClusterID
		s.Recoverable = a.recoverableLocked()
		if s.Timeline != p.Placement.Timeline {
			s.CurrentRevision, s.CurrentAt = 0, time.Time{}
			s.LatestFullKey, s.LatestFullRevision, s.LatestFullTime = "", 0, time.Time{}
			s.LatestDeltaKey, s.LatestDeltaRevision, s.LatestDeltaTime = "", 0, time.Time{}
		}
		s.Timeline, s.TimelineReason = p.Placement.Timeline, p.Placement.Reason
		if n := len(c.Fulls); n > 0 {
			f := c.Fulls[n-1]
			s.LatestFullKey, s.LatestFullRevision, s.LatestFullTime = f.Key, f.FirstRev, f.Created
		}
		if n := len(c.Deltas); n > 0 {
			d := c.Deltas[n-1]
			s.LatestDeltaKey, s.LatestDeltaRevision, s.LatestDeltaTime = d.Key, d.LastRev, d.ModTime
		} else if ti, _ := p.Index.Timeline(p.Placement.Timeline); ti.Deltas > 0 {
			d := ti.FurthestDelta // none after the newest full snapshot (p.Chain holds no older)
			s.LatestDeltaKey, s.LatestDeltaRevision, s.LatestDeltaTime = d.Key, d.LastRev, d.ModTime
		}
	})
}

// leaveTimeline records that the member's history is not the timeline's any more: nothing
// it has now is stored until a new timeline starts.
func (a *Agent) leaveTimeline(err error) {
	a.lg.Warn("the member's history restarted: a new timeline starts", zap.Error(err))
	a.update(func(s *cluster.BackupStatus) {
		s.Timeline, s.TimelineReason = 0, err.Error()
		s.CurrentRevision, s.CurrentAt = 0, time.Time{}
		a.own, s.Recoverable = backup.TimelineIndex{}, nil
	})
}

// stored counts an object just stored on the session's timeline into its window.
func (a *Agent) stored(key string, size int64, created time.Time) {
	o, err := backup.ParseKey(key)
	if err != nil {
		return
	}
	o.Size = size
	if o.Kind == backup.KindDelta {
		o.Created = created // the full snapshot's name holds its time
	}
	a.update(func(s *cluster.BackupStatus) {
		if o.Timeline == a.own.Timeline {
			a.own.Add(o)
			s.Recoverable = a.recoverableLocked()
		}
	})
}

// recoverableLocked is the window of the session's timeline (nil: none). a.mu is held.
func (a *Agent) recoverableLocked() *cluster.Recoverable {
	w, ok := a.own.Window()
	if !ok {
		return nil
	}
	return &cluster.Recoverable{Timeline: w.Timeline, ClusterID: fmt.Sprintf("%x", a.ownCluster), FirstRevision: w.FirstRevision,
		FirstTime: w.FirstTime.UTC(), LastRevision: w.LastRevision, LastTime: w.LastTime.UTC()}
}

// fullLoop takes full snapshots on schedule, on demand, and when etcd's auth state changed,
// while the session runs. The auth revision is read every delta period.
func (a *Agent) fullLoop(ctx context.Context, m snapshotter.Member, tl snapshotter.Timeline, newest time.Time, compact <-chan struct{}) {
	authTick := time.NewTicker(a.cfg.DeltaPeriod)
	defer authTick.Stop()
	for {
		next := a.schedule.Next(newest)
		timer := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-authTick.C:
			timer.Stop()
			if reason := a.authFullNeeded(ctx, m, tl.ID); reason != "" {
				a.lg.Info("taking a full snapshot", zap.Uint32("timeline", tl.ID), zap.String("reason", reason))
				if res, err := a.full(ctx, m, tl); err == nil {
					newest = res.Created
				}
			}
		case <-timer.C:
			if res, err := a.full(ctx, m, tl); err == nil {
				newest = res.Created
			} else {
				newest = time.Now() // retry at the next scheduled time
			}
		case <-compact:
			timer.Stop()
			if reason := a.compactionDue(); reason != "" { // not taken meanwhile for another cause
				a.lg.Info("taking a full snapshot", zap.Uint32("timeline", tl.ID), zap.String("reason", reason))
				if res, err := a.full(ctx, m, tl); err == nil {
					newest = res.Created
				}
			}
		case reply := <-a.fullRequests:
			timer.Stop()
			res, err := a.full(ctx, m, tl)
			if err == nil {
				newest = res.Created
			}
			reply <- fullOutcome{res, err}
		}
	}
}

// startSinceFull records where timeline chain c stands: its newest full snapshot and the
// bytes of the deltas after it.
func (a *Agent) startSinceFull(c backup.Chain) {
	var rev, bytes int64
	if n := len(c.Fulls); n > 0 {
		rev = c.Fulls[n-1].FirstRev
	}
	last := rev
	for _, d := range c.Deltas {
		if d.FirstRev > rev {
			bytes, last = bytes+d.Size, max(last, d.LastRev)
		}
	}
	a.mu.Lock()
	a.sinceFull.revision, a.sinceFull.last, a.sinceFull.bytes = rev, last, bytes
	a.mu.Unlock()
}

// deltaStored counts delta d towards the chain's compaction and says why a full snapshot is
// due now ("" when none is).
func (a *Agent) deltaStored(d snapshotter.Delta) string {
	a.mu.Lock()
	a.sinceFull.bytes, a.sinceFull.last = a.sinceFull.bytes+d.Size, max(a.sinceFull.last, d.LastRev)
	a.mu.Unlock()
	return a.compactionDue()
}

func (a *Agent) compactionDue() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return compactionReason(a.sinceFull.last-a.sinceFull.revision, a.sinceFull.bytes, a.cfg.FullAfterRevisions, a.cfg.FullAfterBytes)
}

// compactionReason says why deltas spanning revs revisions and holding bytes bytes since the
// newest full snapshot call for a new one under the limits (0: none), or "".
func compactionReason(revs, bytes, maxRevs, maxBytes int64) string {
	switch {
	case maxRevs > 0 && revs >= maxRevs:
		return fmt.Sprintf("the deltas since the newest full snapshot span %d revisions (limit %d): compacting the chain", revs, maxRevs)
	case maxBytes > 0 && bytes >= maxBytes:
		return fmt.Sprintf("the deltas since the newest full snapshot hold %s (limit %s): compacting the chain", units.Bytes(bytes), units.Bytes(maxBytes))
	}
	return ""
}

// authFullNeeded reads etcd's auth revision and says why it calls for a full snapshot on
// timeline tl (see authFullReason), or "" (also when it cannot be read: the next check tries
// again).
func (a *Agent) authFullNeeded(ctx context.Context, m snapshotter.Member, tl uint32) string {
	now, err := authRevision(ctx, m)
	if err != nil {
		a.lg.Debug("cannot read etcd's auth revision", zap.Error(err))
		return ""
	}
	a.mu.Lock()
	at := a.authAtFull
	a.mu.Unlock()
	return authFullReason(at.revision, at.timeline == tl && at.revision != 0, now)
}

// authFullReason says why etcd's auth state calls for a full snapshot, or "". Users, roles
// and whether auth is enabled are not key events: only full snapshots hold them, and a
// restore would silently roll back a change made after the newest one. etcd counts every
// change in its auth revision (1 on a new cluster). atFull is that revision when the newest
// full snapshot of the timeline began; known=false when this sidecar did not take it (another
// backup leader, or before a restart): then any auth change ever made may be missing from it.
func authFullReason(atFull uint64, known bool, now uint64) string {
	switch {
	case known && now > atFull:
		return fmt.Sprintf("etcd's auth state changed (auth revision %d; %d when the newest full snapshot began)", now, atFull)
	case !known && now > 1:
		return fmt.Sprintf("etcd's auth state was changed (auth revision %d) and this sidecar did not take the newest full snapshot: it may not hold it", now)
	}
	return ""
}

// authRevision is etcd's auth revision (a raft request: read it sparingly).
func authRevision(ctx context.Context, m snapshotter.Member) (uint64, error) {
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r, err := m.Client.AuthStatus(actx)
	if err != nil {
		return 0, err
	}
	return r.AuthRevision, nil
}

// full takes one full snapshot on timeline tl, records it and applies retention.
func (a *Agent) full(ctx context.Context, m snapshotter.Member, tl snapshotter.Timeline) (snapshotter.FullResult, error) {
	// Read before the snapshot begins: a change while it streams is caught by the next check.
	authRev, authErr := authRevision(ctx, m)
	res, err := snapshotter.Full(ctx, m, a.store, tl, nil)
	if err != nil {
		a.fail("full", err)
		return res, err
	}
	a.mu.Lock()
	if authErr == nil {
		a.authAtFull.timeline, a.authAtFull.revision = tl.ID, authRev
	}
	a.sinceFull.revision, a.sinceFull.last, a.sinceFull.bytes = res.Revision, max(a.sinceFull.last, res.Revision), 0
	a.mu.Unlock()
	a.lg.Info("full snapshot stored", zap.String("key", res.Key), zap.Uint32("timeline", res.Timeline), zap.Int64("revision", res.Revision),
		zap.Int64("dbBytes", res.DBSize), zap.Int64("storedBytes", res.Size), zap.Duration("took", time.Duration(res.Duration)))
	a.metrics.fullDuration.Observe(time.Duration(res.Duration).Seconds())
	a.stored(res.Key, res.Size, res.Created)
	a.update(func(s *cluster.BackupStatus) {
		if s.Timeline != res.Timeline {
			return
		}
		first := s.LatestFullRevision == 0 && s.LatestDeltaRevision == 0
		s.LatestFullKey, s.LatestFullRevision, s.LatestFullTime = res.Key, res.Revision, res.Created
		if storedThroughFull(first, s.CurrentRevision, res.Revision) {
			s.CurrentRevision, s.CurrentAt = res.Revision, res.Created
		}
	})
	if p := a.cfg.Retention; p.Name != "" && p.Name != retention.Keep {
		if err := a.collect(ctx, tl.ClusterID); err != nil {
			a.fail("retention", err)
		}
	}
	return res, nil
}

// storedThroughFull says whether a full snapshot at revision full makes every revision of the
// timeline up to it stored, given that every one up to current was: only if it is the
// timeline's first object (the timeline starts there), or it follows current at once. The
// revisions between current and the snapshot are held by the delta capture until it flushes
// them, and a restore to one of them would find a hole meanwhile: "stored up to" waits.
func storedThroughFull(first bool, current, full int64) bool {
	return full >= current && (first || full <= current+1)
}

// collect applies the retention policy to the cluster's timelines, and takes the full
// snapshots it deleted out of the window.
func (a *Agent) collect(ctx context.Context, clusterID uint64) error {
	gone := map[string]bool{}
	deleted, err := retention.Collect(ctx, a.store, a.cfg.Retention, time.Now(), clusterID, func(o backup.Object) {
		if o.Kind == backup.KindFull {
			gone[o.Key] = true
		}
	})
	if len(gone) > 0 {
		a.update(func(s *cluster.BackupStatus) {
			a.own = a.own.WithoutFulls(gone)
			s.Recoverable = a.recoverableLocked()
		})
	}
	if deleted > 0 {
		a.lg.Info("retention: deleted old backups", zap.Int("objects", deleted), zap.String("policy", a.cfg.Retention.String()))
	}
	return err
}

// RequestFull asks the running session for a full snapshot now and waits for it.
func (a *Agent) RequestFull(ctx context.Context) (snapshotter.FullResult, error) {
	reply := make(chan fullOutcome, 1)
	select {
	case a.fullRequests <- reply:
	case <-ctx.Done():
		return snapshotter.FullResult{}, ctx.Err()
	case <-time.After(a.cfg.CheckInterval * 3):
		return snapshotter.FullResult{}, ErrNotBackupLeader
	}
	select {
	case out := <-reply:
		return out.res, out.err
	case <-ctx.Done():
		return snapshotter.FullResult{}, ctx.Err()
	}
}

// nextDrill is when the next restore drill is due: offset after the schedule's next time
// after the last drill, or after the session began if no drill ran since (a new backup leader
// does not drill at once).
func nextDrill(sched cron.Schedule, offset time.Duration, last, since time.Time) time.Time {
	from := since
	if last.After(since) {
		from = last
	}
	return sched.Next(from.Add(-offset)).Add(offset)
}

// maxDrillOffset bounds drillOffset.
const maxDrillOffset = 30 * time.Minute

// drillOffset is how long after each scheduled time the drills of the store at storeURL run:
// a fixed share, from a hash of the URL, of 30 minutes or a quarter of the schedule's period,
// whichever is less. Clusters sharing a node or a bucket then do not all restore their
// databases at once (every @daily drill at midnight), and a drill never runs past the next
// scheduled time.
func drillOffset(sched cron.Schedule, storeURL string) time.Duration {
	ref := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	first := sched.Next(ref)
	limit := min(maxDrillOffset, sched.Next(first).Sub(first)/4)
	if limit <= 0 {
		return 0
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(storeURL))
	return time.Duration(h.Sum64() % uint64(limit))
}

// drillLoop runs restore drills of timeline tl on the drill schedule while the session writes
// it; since is when the session began.
func (a *Agent) drillLoop(ctx context.Context, m snapshotter.Member, tl uint32, since time.Time) {
	if a.drills == nil {
		return
	}
	for {
		timer := time.NewTimer(time.Until(nextDrill(a.drills, a.drillOffset, a.Status().LastDrill.Time, since)))
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		a.drill(ctx, m, tl)
	}
}

// drill restores the newest revision of timeline tl into a scratch dir and compares its
// HashKV with this member's (restore.Drill), and reports the outcome in the status and the
// metrics. A drill that ends because the session ends is not reported.
func (a *Agent) drill(ctx context.Context, m snapshotter.Member, tl uint32) {
	start := time.Now()
	a.lg.Info("restore drill", zap.Uint32("timeline", tl))
	var res restore.DrillResult
	// The scratch dir may share the member's volume (in a pod it does): the drill leaves as
	// much free as the member's database takes, so that etcd keeps room to grow.
	st, err := m.Client.Status(ctx, m.Endpoint)
	if err != nil {
		err = fmt.Errorf("restore drill not run: status of %s: %w", m.Endpoint, err)
	} else {
		stop := restore.HeapBound.Apply()
		res, err = restore.Drill(ctx, restore.DrillOptions{Store: a.store, Timeline: tl, Live: m.Client, LiveEndpoint: m.Endpoint,
			ScratchDir: a.cfg.DrillScratchDir, KeepFree: st.DbSize, Logger: a.lg.WithOptions(zap.IncreaseLevel(zapcore.WarnLevel))})
		stop()
	}
	if ctx.Err() != nil {
		return
	}
	d := cluster.DrillStatus{Timeline: tl, Revision: res.Revision, Time: start.UTC(), Duration: time.Duration(res.Duration), OK: err == nil, Result: "ok"}
	if err != nil {
		d.Result = err.Error()
		a.fail("drill", err)
	} else {
		a.lg.Info("restore drill: the restored data equals the member's", zap.Uint32("timeline", tl), zap.Int64("revision", res.Revision),
			zap.Uint32("hash", res.Hash), zap.Int64("compactRevision", res.CompactRevision), zap.Duration("took", time.Duration(res.Duration)))
	}
	a.update(func(s *cluster.BackupStatus) { s.LastDrill = d })
}
