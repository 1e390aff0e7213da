package member

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/etcd-steward/steward/internal/backup"
	"github.com/etcd-steward/steward/internal/backup/retention"
	"github.com/etcd-steward/steward/internal/backup/snapshotter"
	"github.com/etcd-steward/steward/internal/store"
	"github.com/robfig/cron/v3"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// BackupConfig configures continuous backups. Only the sidecar whose etcd is the raft
// leader writes; every sidecar runs the same loop and takes over when its etcd leads.
type BackupConfig struct {
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
}

// BackupStatus is what the sidecar reports about backups (GET /v1/backup).
type BackupStatus struct {
	// Leader is true if this sidecar is the backup leader (its etcd leads).
	Leader bool `json:"leader"`
	// Ready: backups are current (the newest stored revision was current less than two delta
	// periods ago; false after three).
	Ready bool `json:"ready"`
	// ReadyReason says which condition keeps Ready false ("" when it is true).
	ReadyReason string `json:"readyReason,omitempty"`
	Store       string `json:"store"`
	// DeltaPeriod is how often deltas are written (Ready turns false after 3 periods).
	DeltaPeriod         time.Duration `json:"deltaPeriod"`
	LatestFullKey       string        `json:"latestFullKey,omitempty"`
	LatestFullRevision  int64         `json:"latestFullRevision"`
	LatestFullTime      time.Time     `json:"latestFullTime"`
	LatestDeltaKey      string        `json:"latestDeltaKey,omitempty"`
	LatestDeltaRevision int64         `json:"latestDeltaRevision"`
	LatestDeltaTime     time.Time     `json:"latestDeltaTime"`
	// CurrentRevision is the newest revision known to be stored, CurrentAt when it was current.
	CurrentRevision int64     `json:"currentRevision"`
	CurrentAt       time.Time `json:"currentAt"`
	Failures        int64     `json:"failures"`
	LastError       string    `json:"lastError,omitempty"`
	LastErrorTime   time.Time `json:"lastErrorTime"`
}

// backupAgent runs the backup leader loop of one sidecar.
type backupAgent struct {
	cfg      BackupConfig
	schedule cron.Schedule
	lg       *zap.Logger
	metrics  *metrics
	endpoint string // this member's client URL
	store    *store.Store

	mu     sync.Mutex
	status BackupStatus
	// fullRequests carries on-demand full snapshot requests to the running session.
	fullRequests chan chan fullOutcome
}

type fullOutcome struct {
	res snapshotter.FullResult
	err error
}

// ErrNotBackupLeader is returned for on-demand snapshots asked of a sidecar whose etcd does not lead.
var ErrNotBackupLeader = errors.New("this member is not the backup leader")

func newBackupAgent(cfg BackupConfig, endpoint string, st *store.Store, lg *zap.Logger, m *metrics) (*backupAgent, error) {
	if cfg.DeltaPeriod <= 0 {
		cfg.DeltaPeriod = 5 * time.Second
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
	sched, err := cron.ParseStandard(cfg.FullSchedule)
	if err != nil {
		return nil, fmt.Errorf("--full-schedule %q: %w (use cron syntax, e.g. \"0 * * * *\" or @hourly)", cfg.FullSchedule, err)
	}
	return &backupAgent{cfg: cfg, schedule: sched, lg: lg.Named("backup"), metrics: m, endpoint: endpoint, store: st,
		status: BackupStatus{Store: st.String(), DeltaPeriod: cfg.DeltaPeriod}, fullRequests: make(chan chan fullOutcome)}, nil
}

// Status returns the current backup status, with Ready evaluated now.
func (a *backupAgent) Status() BackupStatus {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.updateReadyLocked(time.Now())
	return a.status
}

func (a *backupAgent) updateReadyLocked(now time.Time) {
	a.status.Ready, a.status.ReadyReason = backupReady(a.status, now, a.cfg.DeltaPeriod)
	if a.status.Ready {
		a.metrics.backupReady.Set(1)
	} else {
		a.metrics.backupReady.Set(0)
	}
}

// backupReady applies the BackupReady hysteresis to s: true while the stored data was current
// less than 2 delta periods ago, false once it is more than 3 periods old (in between, as it
// was). The reason says which condition keeps it false.
func backupReady(s BackupStatus, now time.Time, period time.Duration) (bool, string) {
	age := now.Sub(s.CurrentAt)
	switch {
	case !s.Leader:
		return false, "this member's etcd does not lead: the leader's sidecar backs up"
	case s.CurrentAt.IsZero():
		return false, "nothing is stored yet"
	case age < 2*period:
		return true, ""
	case age > 3*period || !s.Ready:
		why := fmt.Sprintf("the newest stored revision %d was current %s ago, more than %s (3 delta periods)", s.CurrentRevision, age.Round(time.Second), 3*period)
		if age <= 3*period {
			why = fmt.Sprintf("the newest stored revision %d was current %s ago, not yet back within %s (2 delta periods)", s.CurrentRevision, age.Round(time.Second), 2*period)
		}
		if s.LastError != "" {
			why += "; last error: " + s.LastError
		}
		return false, why
	}
	return true, ""
}

func (a *backupAgent) update(f func(s *BackupStatus)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	f(&a.status)
	a.updateReadyLocked(time.Now())
}

func (a *backupAgent) fail(what string, err error) {
	a.lg.Warn("backup failure", zap.String("step", what), zap.Error(err))
	a.metrics.backupFailures.WithLabelValues(what).Inc()
	a.update(func(s *BackupStatus) {
		s.Failures++
		s.LastError = fmt.Sprintf("%s: %v", what, err)
		s.LastErrorTime = time.Now().UTC()
	})
}

// Run checks leadership every CheckInterval and runs a backup session while this member's
// etcd leads. It returns when ctx ends.
func (a *backupAgent) Run(ctx context.Context) {
	var cli *clientv3.Client
	defer func() {
		if cli != nil {
			cli.Close()
		}
	}()
	type running struct {
		cancel context.CancelFunc
		done   chan struct{}
	}
	var cur *running
	stop := func() {
		if cur != nil {
			cur.cancel()
			<-cur.done
			cur = nil
			a.update(func(s *BackupStatus) { s.Leader = false })
		}
	}
	defer stop()
	tick := time.NewTicker(a.cfg.CheckInterval)
	defer tick.Stop()
	for {
		if cli == nil {
			c, err := clientv3.New(clientv3.Config{Endpoints: []string{a.endpoint}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
			if err == nil {
				cli = c
			}
		}
		leader := false
		if cli != nil {
			sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			st, err := cli.Status(sctx, a.endpoint)
			cancel()
			leader = err == nil && st.Leader == st.Header.MemberId && st.Leader != 0
		}
		switch {
		case leader && cur == nil:
			a.lg.Info("this member leads: starting backups", zap.String("store", a.store.String()))
			sctx, cancel := context.WithCancel(ctx)
			cur = &running{cancel: cancel, done: make(chan struct{})}
			a.update(func(s *BackupStatus) { s.Leader = true })
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
func (a *backupAgent) session(ctx context.Context, m snapshotter.Member) {
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

// sessionOnce resumes the chain from the newest revision in the store: a full snapshot
// first if the chain needs one, then deltas, with scheduled and on-demand full snapshots
// alongside.
func (a *backupAgent) sessionOnce(ctx context.Context, m snapshotter.Member) error {
	chain, err := backup.ListChain(ctx, a.store)
	if err != nil {
		return err
	}
	resume, newestFull, reason := resumePoint(chain, a.schedule, time.Now())
	a.recordChain(chain)
	if reason != "" {
		a.lg.Info("taking a full snapshot", zap.String("reason", reason))
		res, err := a.full(ctx, m)
		if err != nil {
			return err
		}
		resume, newestFull = max(resume, res.Revision), res.Created
	}
	st, err := m.Client.Status(ctx, m.Endpoint)
	if err != nil {
		return err
	}

	// Scheduled and on-demand full snapshots run beside the delta capture.
	fullCtx, stopFull := context.WithCancel(ctx)
	defer stopFull()
	go a.fullLoop(fullCtx, m, newestFull)

	for {
		a.lg.Info("capturing deltas", zap.Int64("from", resume+1))
		err := snapshotter.RunDeltas(ctx, m, a.store, resume+1, snapshotter.DeltaOptions{
			Period: a.cfg.DeltaPeriod, MaxBytes: a.cfg.DeltaMaxBytes, ClusterID: st.Header.ClusterId, EtcdVersion: st.Version,
			OnFlush: func(d snapshotter.Delta) {
				a.metrics.deltaEvents.Add(float64(d.Events))
				a.metrics.latestDeltaRevision.Set(float64(d.LastRev))
				a.metrics.latestDeltaTime.Set(float64(d.Created.Unix()))
				a.update(func(s *BackupStatus) {
					s.LatestDeltaKey, s.LatestDeltaRevision, s.LatestDeltaTime = d.Key, d.LastRev, d.Created
				})
			},
			OnCurrent: func(rev int64, at time.Time) {
				a.update(func(s *BackupStatus) { s.CurrentRevision, s.CurrentAt = max(s.CurrentRevision, rev), at })
			},
			OnError: func(err error) { a.fail("delta", err) },
		})
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, snapshotter.ErrCompacted) || errors.Is(err, snapshotter.ErrHole) {
			// The chain cannot continue from where it is: a full snapshot starts it again.
			a.fail("delta", err)
			res, ferr := a.full(ctx, m)
			if ferr != nil {
				return ferr
			}
			resume = res.Revision
			continue
		}
		return err
	}
}

// resumePoint decides where the chain continues and whether a full snapshot is needed first.
func resumePoint(c backup.Chain, sched cron.Schedule, now time.Time) (resume int64, newestFull time.Time, fullReason string) {
	var fullRev int64
	if n := len(c.Fulls); n > 0 {
		f := c.Fulls[n-1]
		fullRev, newestFull, resume = f.FirstRev, f.Created, f.FirstRev
	}
	for _, d := range c.Deltas {
		resume = max(resume, d.LastRev)
	}
	switch {
	case len(c.Fulls) == 0:
		return resume, newestFull, "the store holds no full snapshot"
	case !sched.Next(newestFull).After(now):
		return resume, newestFull, "the newest full snapshot is older than the schedule"
	}
	for _, is := range c.Check() {
		if is.Kind == backup.IssueHole && is.From > fullRev {
			return resume, newestFull, "the chain has a hole: " + is.Message
		}
	}
	return resume, newestFull, ""
}

func (a *backupAgent) recordChain(c backup.Chain) {
	a.update(func(s *BackupStatus) {
		if n := len(c.Fulls); n > 0 {
			f := c.Fulls[n-1]
			s.LatestFullKey, s.LatestFullRevision, s.LatestFullTime = f.Key, f.FirstRev, f.Created
		}
		if n := len(c.Deltas); n > 0 {
			d := c.Deltas[n-1]
			s.LatestDeltaKey, s.LatestDeltaRevision, s.LatestDeltaTime = d.Key, d.LastRev, d.ModTime
		}
	})
}

// fullLoop takes full snapshots on schedule and on demand while the session runs.
func (a *backupAgent) fullLoop(ctx context.Context, m snapshotter.Member, newest time.Time) {
	for {
		next := a.schedule.Next(newest)
		timer := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
			if res, err := a.full(ctx, m); err == nil {
				newest = res.Created
			} else {
				newest = time.Now() // retry at the next scheduled time
			}
		case reply := <-a.fullRequests:
			timer.Stop()
			res, err := a.full(ctx, m)
			if err == nil {
				newest = res.Created
			}
			reply <- fullOutcome{res, err}
		}
	}
}

// full takes one full snapshot, records it and applies retention.
func (a *backupAgent) full(ctx context.Context, m snapshotter.Member) (snapshotter.FullResult, error) {
	res, err := snapshotter.Full(ctx, m, a.store, nil)
	if err != nil {
		a.fail("full", err)
		return res, err
	}
	a.lg.Info("full snapshot stored", zap.String("key", res.Key), zap.Int64("revision", res.Revision),
		zap.Int64("dbBytes", res.DBSize), zap.Int64("storedBytes", res.Size), zap.Duration("took", res.Duration))
	a.metrics.fullDuration.Observe(res.Duration.Seconds())
	a.metrics.latestFullRevision.Set(float64(res.Revision))
	a.metrics.latestFullTime.Set(float64(res.Created.Unix()))
	a.update(func(s *BackupStatus) {
		s.LatestFullKey, s.LatestFullRevision, s.LatestFullTime = res.Key, res.Revision, res.Created
		if res.Revision >= s.CurrentRevision {
			s.CurrentRevision, s.CurrentAt = res.Revision, time.Now()
		}
	})
	if a.cfg.Retention.Name != "" {
		if err := a.collect(ctx); err != nil {
			a.fail("retention", err)
		}
	}
	return res, nil
}

func (a *backupAgent) collect(ctx context.Context) error {
	deleted, err := retention.Collect(ctx, a.store, a.cfg.Retention, time.Now())
	if len(deleted) > 0 {
		a.lg.Info("retention: deleted old backups", zap.Int("objects", len(deleted)), zap.String("policy", a.cfg.Retention.String()))
	}
	return err
}

// RequestFull asks the running session for a full snapshot now and waits for it.
func (a *backupAgent) RequestFull(ctx context.Context) (snapshotter.FullResult, error) {
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
