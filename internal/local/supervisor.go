package local

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/datadir"
	"github.com/etcd-steward/steward/internal/etcdproc"
	"github.com/etcd-steward/steward/internal/etcdutil"
	"github.com/etcd-steward/steward/internal/heal"
	"github.com/etcd-steward/steward/internal/local/localdir"
	"github.com/etcd-steward/steward/internal/pki"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// maxStartsBeforeReady is how often a process may die while the cluster first comes up
// before Up gives up and reports it.
const maxStartsBeforeReady = 4

// Up runs the local cluster in opts.Dir until ctx ends, then stops it gracefully. It returns
// an error if the cluster cannot be started or does not become healthy in time.
func Up(ctx context.Context, opts UpOptions) (err error) {
	opts.defaults()
	spec, err := Prepare(opts)
	if err != nil {
		return err
	}
	dir := Dir(opts.Dir)
	lockF, err := lock(dir)
	if err != nil {
		return err
	}
	defer lockF.Close()

	if spec.Binary == "" {
		src := opts.Binary
		if src == "" {
			src = "/proc/self/exe"
		}
		if err := installBinary(src, dir.Binary("")); err != nil {
			return err
		}
	} else if _, err := os.Stat(dir.Binary(spec.Binary)); err != nil {
		// An upgrade installed it (generation spec.Generation); `up` keeps it.
		return fmt.Errorf("the members' steward binary (installed by `steward local upgrade`, generation %d) cannot be used: %w; put the steward binary the members ran back at that path, or remove \"binary\" from %s to run this steward's own", spec.Generation, err, dir.Spec())
	}

	// SIGHUP: cluster.json changed (`steward local scale`): reconcile the members. Caught from
	// the start, so a scale request during start-up is taken up once the cluster is ready.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	previous, err := ReadState(dir)
	if err != nil {
		// The status is rebuilt from the members' reports and data: members with valid data
		// restart on it; a cluster whose every member lost its data is restored from backup.
		to := fmt.Sprintf("%s.damaged-%d", dir.State(), time.Now().Unix())
		if mvErr := os.Rename(dir.State(), to); mvErr != nil {
			return fmt.Errorf("%v; moving it aside failed: %w", err, mvErr)
		}
		opts.Logf("%v; moved aside to %s, rebuilding the status from the members", err, to)
		previous = State{}
	}
	s := &supervisor{dir: dir, opts: opts, logf: opts.Logf, spec: spec, etcdExited: make(chan struct{}, 1),
		state: State{SupervisorPID: os.Getpid(), Phase: PhaseStarting, Version: previous.Version, Status: previous.Status, RestoreAnswer: previous.RestoreAnswer,
			Relocating: previous.Relocating}}
	// The member IDs recorded earlier are part of the cluster's status: they persist across
	// restarts of the supervisor, as an EtcdCluster's status does.
	recorded := map[string]string{}
	for _, m := range previous.Members {
		recorded[m.Name] = m.ID
	}
	for _, m := range spec.Members {
		s.state.Members = append(s.state.Members, MemberState{Name: m.Name, ID: recorded[m.Name]})
	}
	if s.state.ClusterID == "" {
		s.rebuildStatus(spec)
	}
	if err := s.save(); err != nil {
		return fmt.Errorf("write %s: %w", dir.State(), err)
	}
	defer func() {
		if err != nil {
			s.setPhase(PhaseFailed, err.Error())
		}
	}()
	// Graceful stop: etcd members first (each leaves a clean-shutdown marker), then sidecars.
	defer func() {
		s.setPhase(PhaseStopping, "")
		opts.Logf("stopping etcd members")
		runs := s.memberRuns()
		for _, r := range runs {
			r.stopEtcd()
		}
		for _, r := range runs {
			r.wait()
		}
		if err == nil {
			s.setPhase(PhaseStopped, "")
			opts.Logf("stopped; data kept in %s", opts.Dir)
		}
	}()
	opts.Logf("starting %d-member cluster %q in %s", len(spec.Members), spec.Name, opts.Dir)
	for _, m := range spec.Members {
		if err := s.startMember(m); err != nil {
			return err
		}
	}

	h := &healer{timing: heal.Timing{Grace: opts.QuorumLossGrace, ReportTimeout: heal.DefaultTiming.ReportTimeout, SeedTimeout: heal.DefaultTiming.SeedTimeout, ReportCurrent: heal.DefaultTiming.ReportCurrent}}
	if err := s.waitReady(ctx, h, opts.ReadyTimeout); err != nil {
		return err
	}
	s.setPhase(PhaseReady, "")
	opts.Logf("all %d members are healthy; client endpoints: %s", len(spec.Members), strings.Join(spec.ClientURLs(), ","))
	if opts.OnReady != nil {
		opts.OnReady(spec)
	}
	// One reconciler; requests that arrive while it works are coalesced into one more pass.
	pending := make(chan struct{}, 1)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-pending:
				s.takeRestartRequest()
				if err := s.reconcileMembers(ctx); err != nil && ctx.Err() == nil {
					s.logf("scaling failed: %v; retrying in %s", err, scaleRetry)
					time.AfterFunc(scaleRetry, func() {
						select {
						case pending <- struct{}{}:
						default:
						}
					})
				}
			}
		}
	}()
	for _, sub := range []string{s.dir.Reports(), s.dir.Acks()} {
		if err := os.MkdirAll(sub, 0o700); err != nil {
			return err
		}
	}
	reports, err := watchFiles(ctx, s.dir.Reports(), s.dir.Acks())
	if err != nil {
		opts.Logf("cannot watch the members' reports (%v): observing every second only", err)
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	// Certificates due are renewed while the cluster runs; etcd takes them at the next
	// handshake.
	renew := time.NewTicker(certCheckInterval)
	defer renew.Stop()
	var lastRound time.Time
	var deferred <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-renew.C:
			if err := ensureCerts(s.dir, s.currentSpec(), time.Now(), s.logf); err != nil {
				opts.Logf("renewing the cluster's certificates: %v", err)
			}
		case <-hup:
			select {
			case pending <- struct{}{}:
			default: // a pass is already queued; it reads the newest cluster.json
			}
			continue
		case <-tick.C:
			if err := stillLocked(dir, lockF); err != nil {
				return err
			}
			if s.dir.Pending(localdir.RestartKind) {
				// Signalled with SIGHUP; this catches a request left while no supervisor ran.
				select {
				case pending <- struct{}{}:
				default:
				}
			}
		case <-s.etcdExited:
			// A member's etcd that exits may have taken the quorum with it: observe at once,
			// not at the next tick.
		case <-reports:
			// A recovery moves on, and a lost quorum's loss is proven, as soon as a member
			// reports or acknowledges, but no faster than 4 rounds a second: a report that
			// comes sooner is taken by a round deferred to then.
			if !s.reportsDecide() {
				continue
			}
			if wait := 250*time.Millisecond - time.Since(lastRound); wait > 0 {
				if deferred == nil {
					deferred = time.After(wait)
				}
				continue
			}
		case <-deferred:
		}
		lastRound, deferred = time.Now(), nil
		s.observe(ctx)
		s.heal(ctx, h)
	}
}

type supervisor struct {
	dir  Dir
	opts UpOptions
	logf func(string, ...any)

	mu    sync.Mutex
	spec  Spec
	runs  []*memberRun // in spec order
	state State
	// saveMu orders the writes of state.json as their copies were taken: a slow writer
	// must not put an older state back over a newer one.
	saveMu sync.Mutex
	// etcdExited receives a value when a member's etcd exits unasked (coalesced).
	etcdExited chan struct{}
}

// memberRun is one member's two processes and the supervisor's client to it.
type memberRun struct {
	spec                  MemberSpec
	etcd, sidecar         *process
	stopEtcd, stopSidecar context.CancelFunc
	etcdDone, sidecarDone chan struct{}

	// conn keeps the supervisor's client of this member (see etcdClient).
	clientMu  sync.Mutex
	conn      *etcdutil.Conn
	failedAt  time.Time
	clientEnd bool
}

// etcdClient is the supervisor's client of the member, or nil while none can be made. It is
// made on first use, and tried again at most every few seconds: with etcd authentication,
// making it logs in, which needs the member to serve.
func (r *memberRun) etcdClient() *clientv3.Client {
	r.clientMu.Lock()
	defer r.clientMu.Unlock()
	if r.clientEnd || time.Since(r.failedAt) < 3*time.Second {
		return nil
	}
	c, err := r.conn.Client()
	if err != nil {
		r.failedAt = time.Now()
		return nil
	}
	return c
}

// wait stops the sidecar after etcd has stopped and waits for both.
func (r *memberRun) wait() {
	<-r.etcdDone
	r.stopSidecar()
	<-r.sidecarDone
	r.clientMu.Lock()
	defer r.clientMu.Unlock()
	r.clientEnd = true
	r.conn.Reset()
}

// currentSpec returns a copy of the spec (scaling changes its members).
func (s *supervisor) currentSpec() Spec {
	s.mu.Lock()
	defer s.mu.Unlock()
	spec := s.spec
	spec.Members = append([]MemberSpec(nil), s.spec.Members...)
	return spec
}

func (s *supervisor) memberRuns() []*memberRun {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*memberRun(nil), s.runs...)
}

// startMember starts a member's sidecar and etcd processes.
func (s *supervisor) startMember(m MemberSpec) error {
	r, err := s.startRun(m)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.runs = append(s.runs, r)
	s.mu.Unlock()
	return nil
}

// startRun starts a member's processes on the current spec, and records its generation.
func (s *supervisor) startRun(m MemberSpec) (*memberRun, error) {
	spec := s.currentSpec()
	dataDir := s.dir.MemberData(m.Name)
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, err
	}
	bin := s.dir.Binary(spec.Binary)
	sidecarArgs := []string{"sidecar", "--name", m.Name, "--data-dir", dataDir,
		"--listen", fmt.Sprintf("%s:%d", spec.Host, m.SidecarPort), "--local-dir", s.dir.String(), "--api-token-file", s.dir.Token()}
	if d := MemberTLSDir(s.dir, spec, m.Name); d != "" {
		// A member added by scaling gets its certificate here; every start renews one due.
		if err := ensureCerts(s.dir, spec, time.Now(), s.logf); err != nil {
			return nil, err
		}
		sidecarArgs = append(sidecarArgs, "--tls-dir", d)
	}
	if p := RootPasswordPath(s.dir, spec); p != "" {
		sidecarArgs = append(sidecarArgs, "--root-password-file", p, "--token-key-dir", TokenKeyPath(s.dir, spec),
			"--app-user", AppUser, "--app-password-file", AppPasswordPath(s.dir, spec))
	}
	if spec.Backup != "" {
		sidecarArgs = append(sidecarArgs, "--store", spec.Backup)
		if p := BackupKeysPath(s.dir, spec); p != "" {
			sidecarArgs = append(sidecarArgs, "--encryption-keys", p)
		}
	}
	for _, f := range etcdproc.FlagList(spec.EtcdFlags) {
		sidecarArgs = append(sidecarArgs, "--etcd-flag="+f)
	}
	sidecarArgs = append(sidecarArgs, s.opts.SidecarArgs...)
	etcdArgs := []string{"etcd", "--sidecar", spec.SidecarURL(m), "--api-token-file", s.dir.Token(),
		"--listen-health", fmt.Sprintf("%s:%d", spec.Host, m.HealthPort)}
	if d := MemberTLSDir(s.dir, spec, m.Name); d != "" {
		etcdArgs = append(etcdArgs, "--sidecar-ca", filepath.Join(d, pki.CAFile))
	}
	r := &memberRun{spec: m, etcdDone: make(chan struct{}), sidecarDone: make(chan struct{}),
		sidecar: &process{member: m.Name, kind: "sidecar", bin: bin, log: s.dir.Log(m.Name, "sidecar"),
			stopGrace: s.opts.StopGrace, logf: s.logf, args: sidecarArgs},
		etcd: &process{member: m.Name, kind: "etcd", bin: bin, log: s.dir.Log(m.Name, "etcd"),
			stopGrace: s.opts.StopGrace, logf: s.logf, args: etcdArgs, exited: s.notifyEtcdExited,
			// A fenced member's report from disk counts once made after its stop.
			stopped: func() { s.askReports(m) }},
	}
	r.conn = Dialer(s.dir, spec).Conn([]string{spec.ClientURL(m)}, time.Second)
	// A member fenced by the directive in force (recorded before a supervisor restart)
	// does not start its etcd until the directive releases it.
	if slices.Contains(s.currentDirective().Fenced(spec.memberNames()), m.Name) {
		r.etcd.hold(0)
	}
	var sidecarCtx, etcdCtx context.Context
	sidecarCtx, r.stopSidecar = context.WithCancel(context.Background())
	etcdCtx, r.stopEtcd = context.WithCancel(context.Background())
	go func() { defer close(r.sidecarDone); r.sidecar.run(sidecarCtx) }()
	go func() { defer close(r.etcdDone); r.etcd.run(etcdCtx) }()
	s.mu.Lock()
	if ms := s.memberStateLocked(m.Name); ms != nil {
		ms.Generation = spec.Generation
	}
	s.mu.Unlock()
	return r, nil
}

func (s *supervisor) notifyEtcdExited() {
	select {
	case s.etcdExited <- struct{}{}:
	default:
	}
}

func (s *supervisor) setPhase(phase, msg string) {
	s.mu.Lock()
	s.state.Phase, s.state.Error = phase, msg
	s.mu.Unlock()
	_ = s.save()
}

func (s *supervisor) save() error {
	s.saveMu.Lock()
	defer s.saveMu.Unlock()
	s.mu.Lock()
	s.state.Version++
	st := s.state
	st.Members = append([]MemberState(nil), s.state.Members...)
	s.mu.Unlock()
	return writeState(s.dir, st)
}

// observe refreshes each member's processes, readiness and ID, and records them.
func (s *supervisor) observe(ctx context.Context) {
	runs := s.memberRuns()
	obs := poll(ctx, s.currentSpec(), runs)
	s.mu.Lock()
	for i, r := range runs {
		m := s.memberStateLocked(r.spec.Name)
		if m == nil || !slices.Contains(s.runs, r) {
			// Removed, or restarted while polled: the old run's processes are not the member's.
			continue
		}
		recordProcesses(m, r)
		m.Ready, m.Learner = obs[i].ready, obs[i].learner
		if obs[i].id != "" {
			if m.ID != "" && m.ID != obs[i].id {
				s.logf("member %s changed ID from %s to %s", m.Name, m.ID, obs[i].id)
			}
			m.ID = obs[i].id
		}
	}
	s.mu.Unlock()
	if err := s.save(); err != nil {
		s.logf("cannot record state: %v", err)
	}
}

// recordProcesses records the pids and restart counts of a member's current run.
func recordProcesses(m *MemberState, r *memberRun) {
	m.EtcdPID, m.EtcdRestarts, _ = r.etcd.snapshot()
	m.SidecarPID, m.SidecarRestarts, _ = r.sidecar.snapshot()
	m.EtcdRestarts = max(m.EtcdRestarts-1, 0)
	m.SidecarRestarts = max(m.SidecarRestarts-1, 0)
}

func (s *supervisor) memberStateLocked(name string) *MemberState {
	for i := range s.state.Members {
		if s.state.Members[i].Name == name {
			return &s.state.Members[i]
		}
	}
	return nil
}

// waitReady polls until every member is healthy and the status records the cluster they
// formed, healing meanwhile (a cluster that formed before may come up without its quorum).
// It fails early when a process of a new cluster keeps dying, with the end of its log.
func (s *supervisor) waitReady(ctx context.Context, h *healer, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		s.observe(ctx)
		s.heal(ctx, h)
		s.mu.Lock()
		var waiting []string
		identified := true
		for _, m := range s.state.Members {
			if !m.Ready {
				waiting = append(waiting, m.Name)
			}
			identified = identified && m.ID != ""
		}
		formed := s.state.ClusterID != ""
		s.mu.Unlock()
		if len(waiting) == 0 && identified && formed {
			// Ready only once the status records the cluster, saved: a member that loses its
			// data from then on sees that the cluster formed, and waits for its quorum or a
			// recovery instead of bootstrapping beside it. And only once every member has
			// answered with its ID: until then this round's healing could not count it among
			// the voters that serve (with authentication, a member's client logs in only once
			// the root user exists), and the status would say the quorum is lost.
			return s.save()
		}
		for _, r := range s.memberRuns() {
			for _, p := range []*process{r.etcd, r.sidecar} {
				if _, starts, lastExit := p.snapshot(); starts >= maxStartsBeforeReady && lastExit != "" && !formed {
					return fmt.Errorf("member %s: %s keeps failing to start (%d starts, last: %s); its log %s ends with:\n%s",
						p.member, p.kind, starts, lastExit, p.log, TailFile(p.log, 15))
				}
			}
		}
		if time.Now().After(deadline) {
			if len(waiting) == 0 {
				why := ""
				if p := RootPasswordPath(s.dir, s.currentSpec()); p != "" {
					why = fmt.Sprintf(" (is the password in %s root's?)", p)
				}
				return fmt.Errorf("every member is healthy, but the supervisor could not read the cluster's member list and every member's status within %s%s; see the logs in %s/logs", timeout, why, s.dir)
			}
			return fmt.Errorf("members %s did not become healthy within %s; see their logs in %s/logs", strings.Join(waiting, ", "), timeout, s.dir)
		}
		select {
		case <-ctx.Done():
			return errors.New("interrupted before the cluster became healthy")
		case <-tick.C:
		}
	}
}

// reportsDecide says the members' reports decide what happens next: a recovery is under way,
// or the quorum is lost and their reports from disk may prove it lost for good.
func (s *supervisor) reportsDecide() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.Directive != nil || !s.state.QuorumLostSince.IsZero()
}

func (s *supervisor) currentDirective() *cluster.Directive {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.Directive
}

type memberObservation struct {
	ready   bool
	id      string
	learner bool
}

// poll asks each member's health endpoint and etcd status, concurrently.
func poll(ctx context.Context, spec Spec, runs []*memberRun) []memberObservation {
	out := make([]memberObservation, len(runs))
	// Short timeouts: a poll paces the supervisor's loop, and with it how soon a lost
	// quorum is noticed.
	hc := &http.Client{Timeout: time.Second}
	var wg sync.WaitGroup
	for i, r := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i].ready = httpOK(ctx, hc, spec.HealthURL(r.spec)+"/readyz")
			// An etcd that exited is told at once: a call (or making a client, which logs
			// in) would wait for its deadline, and the poll paces the round that notices a
			// lost quorum.
			if !etcdutil.Listening(spec.ClientURL(r.spec)) {
				return
			}
			if c := r.etcdClient(); c != nil {
				sctx, cancel := context.WithTimeout(ctx, time.Second)
				defer cancel()
				if st, err := c.Status(sctx, spec.ClientURL(r.spec)); err == nil {
					out[i].id, out[i].learner = fmt.Sprintf("%x", st.Header.MemberId), st.IsLearner
				}
			}
		}()
	}
	wg.Wait()
	return out
}

func httpOK(ctx context.Context, hc *http.Client, url string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// TailFile returns the last n lines of a file.
func TailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// rebuildStatus recovers the cluster ID and voters from the members' data dirs when the
// status records none (lost or damaged state, or a cluster that never formed): see
// heal.RebuildStatus.
func (s *supervisor) rebuildStatus(spec Spec) {
	var dirs []heal.DataDir
	peers := map[string]string{}
	for _, m := range spec.Members {
		peers[m.Name] = spec.PeerURL(m)
		dataDir := s.dir.MemberData(m.Name)
		d := heal.DataDir{Member: m.Name}
		if id, ok, err := datadir.ReadIdentity(dataDir); err == nil && ok {
			d.Token, d.Owner, d.ClusterID, d.MemberID, d.Epoch = id.ClusterToken, id.MemberName, id.ClusterID, id.MemberID, id.RecoveryEpoch
		}
		// A record that cannot be read counts as superseding the data, as the sidecar takes it.
		if epoch, err := datadir.ReadSuperseded(dataDir); err != nil {
			d.Superseded = d.Epoch + 1
		} else {
			d.Superseded = epoch
		}
		if walMember, _, err := datadir.ReadWALMetadata(filepath.Join(dataDir, "member", "wal")); err == nil {
			d.WALMemberID = fmt.Sprintf("%x", walMember)
		}
		if a, err := datadir.ReadApplied(datadir.DBPath(dataDir)); err == nil {
			d.Applied = a.Index
			for _, m := range a.Members {
				d.Members = append(d.Members, cluster.LiveMember{ID: m.ID, Name: m.Name, IsLearner: m.Learner})
			}
		}
		dirs = append(dirs, d)
	}
	st := heal.RebuildStatus(spec.Token, spec.memberNames(), dirs)
	// The newest epoch any dir carried out or records superseding its data: the next
	// directive's is above it.
	s.state.LastEpoch = max(s.state.LastEpoch, st.LastEpoch)
	if st.ClusterID == "" {
		return
	}
	for i, v := range st.Voters {
		st.Voters[i].PeerURL = peers[v.Name]
	}
	s.state.ClusterID, s.state.Voters, s.state.LastEpoch = st.ClusterID, st.Voters, max(s.state.LastEpoch, st.LastEpoch)
	s.logf("no cluster in the status: rebuilt from the members' data dirs: cluster %s, voters %s", st.ClusterID, voterNames(st.Voters))
}
