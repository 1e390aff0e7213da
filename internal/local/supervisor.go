package local

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
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
	lockF, err := lock(opts.Dir)
	if err != nil {
		return err
	}
	defer lockF.Close()

	src := opts.Binary
	if src == "" {
		src = "/proc/self/exe"
	}
	bin, err := installBinary(opts.Dir, src)
	if err != nil {
		return err
	}

	s := &supervisor{dir: opts.Dir, spec: spec, logf: opts.Logf, state: State{SupervisorPID: os.Getpid(), Phase: PhaseStarting}}
	for _, m := range spec.Members {
		s.state.Members = append(s.state.Members, MemberState{Name: m.Name})
		if err := os.MkdirAll(MemberDataDir(opts.Dir, m.Name), 0o700); err != nil {
			return err
		}
		sidecarArgs := []string{"sidecar", "--name", m.Name, "--data-dir", MemberDataDir(opts.Dir, m.Name),
			"--listen", fmt.Sprintf("%s:%d", spec.Host, m.SidecarPort), "--local-dir", opts.Dir}
		if spec.Backup != "" {
			sidecarArgs = append(sidecarArgs, "--store", spec.Backup)
			sidecarArgs = append(sidecarArgs, opts.SidecarArgs...)
		}
		s.sidecars = append(s.sidecars, &process{member: m.Name, kind: "sidecar", bin: bin, log: LogPath(opts.Dir, m.Name, "sidecar"),
			stopGrace: opts.StopGrace, logf: opts.Logf, args: sidecarArgs})
		s.etcds = append(s.etcds, &process{member: m.Name, kind: "etcd", bin: bin, log: LogPath(opts.Dir, m.Name, "etcd"),
			stopGrace: opts.StopGrace, logf: opts.Logf,
			args: []string{"etcd", "--sidecar", spec.SidecarURL(m), "--listen-health", fmt.Sprintf("%s:%d", spec.Host, m.HealthPort)}})
	}
	if err := s.save(); err != nil {
		return fmt.Errorf("write %s: %w", stateFile, err)
	}
	defer func() {
		if err != nil {
			s.setPhase(PhaseFailed, err.Error())
		}
	}()

	sidecarCtx, stopSidecars := context.WithCancel(context.Background())
	etcdCtx, stopEtcds := context.WithCancel(context.Background())
	var sidecarWG, etcdWG sync.WaitGroup
	start := func(wg *sync.WaitGroup, ctx context.Context, ps []*process) {
		for _, p := range ps {
			wg.Add(1)
			go func() { defer wg.Done(); p.run(ctx) }()
		}
	}
	// Graceful stop: etcd members first (each leaves a clean-shutdown marker), then sidecars.
	defer func() {
		s.setPhase(PhaseStopping, "")
		opts.Logf("stopping etcd members")
		stopEtcds()
		etcdWG.Wait()
		stopSidecars()
		sidecarWG.Wait()
		if err == nil {
			s.setPhase(PhaseStopped, "")
			opts.Logf("stopped; data kept in %s", opts.Dir)
		}
	}()
	opts.Logf("starting %d-member cluster %q in %s", len(spec.Members), spec.Name, opts.Dir)
	start(&sidecarWG, sidecarCtx, s.sidecars)
	start(&etcdWG, etcdCtx, s.etcds)

	mon := newMonitor(spec)
	defer mon.close()
	if err := s.waitReady(ctx, mon, opts.ReadyTimeout); err != nil {
		return err
	}
	s.setPhase(PhaseReady, "")
	opts.Logf("all %d members are healthy; client endpoints: %s", len(spec.Members), strings.Join(spec.ClientURLs(), ","))
	if opts.OnReady != nil {
		opts.OnReady(spec)
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			s.observe(ctx, mon)
		}
	}
}

type supervisor struct {
	dir      string
	spec     Spec
	logf     func(string, ...any)
	etcds    []*process
	sidecars []*process

	mu    sync.Mutex
	state State
}

func (s *supervisor) setPhase(phase, msg string) {
	s.mu.Lock()
	s.state.Phase, s.state.Error = phase, msg
	s.mu.Unlock()
	_ = s.save()
}

func (s *supervisor) save() error {
	s.mu.Lock()
	st := s.state
	st.Members = append([]MemberState(nil), s.state.Members...)
	s.mu.Unlock()
	return writeState(s.dir, st)
}

// observe refreshes each member's processes, readiness and ID, and records them.
func (s *supervisor) observe(ctx context.Context, mon *monitor) {
	obs := mon.poll(ctx)
	s.mu.Lock()
	for i := range s.state.Members {
		m := &s.state.Members[i]
		m.EtcdPID, m.EtcdRestarts, _ = s.etcds[i].snapshot()
		m.SidecarPID, m.SidecarRestarts, _ = s.sidecars[i].snapshot()
		m.EtcdRestarts = max(m.EtcdRestarts-1, 0)
		m.SidecarRestarts = max(m.SidecarRestarts-1, 0)
		m.Ready = obs[i].ready
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

// waitReady polls until every member is healthy. It fails early when a process keeps
// dying, with the end of its log.
func (s *supervisor) waitReady(ctx context.Context, mon *monitor, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		s.observe(ctx, mon)
		s.mu.Lock()
		all := true
		var waiting []string
		for _, m := range s.state.Members {
			if !m.Ready {
				all = false
				waiting = append(waiting, m.Name)
			}
		}
		s.mu.Unlock()
		if all {
			return nil
		}
		for _, p := range append(append([]*process{}, s.etcds...), s.sidecars...) {
			if _, starts, lastExit := p.snapshot(); starts >= maxStartsBeforeReady && lastExit != "" {
				return fmt.Errorf("member %s: %s keeps failing to start (%d starts, last: %s); its log %s ends with:\n%s",
					p.member, p.kind, starts, lastExit, p.log, TailFile(p.log, 15))
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("members %s did not become healthy within %s; see their logs in %s/logs", strings.Join(waiting, ", "), timeout, s.dir)
		}
		select {
		case <-ctx.Done():
			return errors.New("interrupted before the cluster became healthy")
		case <-tick.C:
		}
	}
}

// monitor polls members' health endpoints and etcd status.
type monitor struct {
	spec    Spec
	http    *http.Client
	clients []*clientv3.Client
}

type memberObservation struct {
	ready bool
	id    string
}

func newMonitor(spec Spec) *monitor {
	m := &monitor{spec: spec, http: &http.Client{Timeout: 2 * time.Second}}
	for _, ms := range spec.Members {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{spec.ClientURL(ms)}, DialTimeout: 2 * time.Second,
			Logger: zap.NewNop(), DialOptions: []grpc.DialOption{}})
		if err != nil {
			c = nil
		}
		m.clients = append(m.clients, c)
	}
	return m
}

func (m *monitor) close() {
	for _, c := range m.clients {
		if c != nil {
			c.Close()
		}
	}
}

func (m *monitor) poll(ctx context.Context) []memberObservation {
	out := make([]memberObservation, len(m.spec.Members))
	var wg sync.WaitGroup
	for i, ms := range m.spec.Members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i].ready = httpOK(ctx, m.http, m.spec.HealthURL(ms)+"/readyz")
			if c := m.clients[i]; c != nil {
				sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				defer cancel()
				if st, err := c.Status(sctx, m.spec.ClientURL(ms)); err == nil {
					out[i].id = fmt.Sprintf("%x", st.Header.MemberId)
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
