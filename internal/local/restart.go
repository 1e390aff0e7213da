package local

import (
	"fmt"
	"time"

	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/local/localdir"
)

// RestartRequest (localdir.RestartKind) is how `steward local upgrade` asks the running
// supervisor to restart one member on the current spec. The supervisor records its answer in
// the state (RestartAnswer) in the same write as the member's new generation, so a supervisor
// that dies in between answers again when it starts: by then every member started on the
// current spec, and the answer is "done".
//
// RestartRequest asks the supervisor to restart Member on the spec of Generation.
type RestartRequest struct {
	requestHeader
	Member     string `json:"member"`
	Generation int64  `json:"generation"`
}

// RestartAnswer is the supervisor's answer to a RestartRequest, recorded in the state.
type RestartAnswer struct {
	ID       string    `json:"id"`
	Member   string    `json:"member"`
	Accepted bool      `json:"accepted"`
	Error    string    `json:"error,omitempty"`
	At       time.Time `json:"at"`
}

// answerRestartRequest decides a restart request: refused when it expired, names no member,
// asks for another generation than the spec's (cluster.json changed since), or while a
// recovery or restore directive is in force (it fences and restarts members itself); done
// without a restart when the member already runs the generation.
func answerRestartRequest(now time.Time, req RestartRequest, specGeneration int64, d *cluster.Directive, ms *MemberState) (restart bool, ans RestartAnswer) {
	ans = RestartAnswer{ID: req.ID, Member: req.Member, At: now}
	refuse := func(format string, args ...any) (bool, RestartAnswer) {
		ans.Error = fmt.Sprintf(format, args...)
		return false, ans
	}
	switch {
	case now.After(req.Expires):
		return refuse("the request made at %s expired at %s before the supervisor took it up (it was not running); nothing was changed: run the upgrade again",
			req.RequestedAt.Format(time.RFC3339), req.Expires.Format(time.RFC3339))
	case ms == nil:
		return refuse("the cluster has no member %s", req.Member)
	case req.Generation != specGeneration:
		return refuse("the request is for generation %d of the cluster's spec, which is at generation %d now (another upgrade changed it): run the upgrade again", req.Generation, specGeneration)
	case d != nil:
		return refuse("directive %d (%s) is in force: members restart for an upgrade only after it completes", d.Epoch, d.Phase)
	}
	ans.Accepted = true
	return ms.Generation != specGeneration, ans
}

// takeRestartRequest answers a restart request left in the cluster dir, if any, restarting
// the member first when it asks for one.
func (s *supervisor) takeRestartRequest() {
	req, ok := takeRequest[RestartRequest](s, localdir.RestartKind)
	if !ok {
		return
	}
	want, ok, err := ReadSpec(s.dir)
	if err != nil || !ok {
		s.logf("restart request %s: cannot read cluster.json (%v): taken up again next round", req.ID, err)
		return
	}
	s.adoptSpec(want)
	s.mu.Lock()
	answered := s.state.RestartAnswer != nil && s.state.RestartAnswer.ID == req.ID
	var ms *MemberState
	if m := s.memberStateLocked(req.Member); m != nil {
		mc := *m
		ms = &mc
	}
	d := s.state.Directive
	s.mu.Unlock()
	if answered {
		s.dir.Done(localdir.RestartKind)
		return
	}
	restart, ans := answerRestartRequest(time.Now(), req, want.Generation, d, ms)
	if restart {
		if err := s.restartMember(req.Member); err != nil {
			ans.Accepted, ans.Error = false, err.Error()
		}
	}
	s.mu.Lock()
	s.state.RestartAnswer = &ans
	s.mu.Unlock()
	if !s.recordAnswer(localdir.RestartKind, req.ID) {
		return
	}
	if !ans.Accepted {
		s.logf("restart of %s refused: %s", req.Member, ans.Error)
	}
}

// adoptSpec takes up what the members run from cluster.json: members started from now on
// (restarted by an upgrade, added by scaling) run it.
func (s *supervisor) adoptSpec(want Spec) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.spec.Generation, s.spec.Binary, s.spec.EtcdFlags = want.Generation, want.Binary, want.EtcdFlags
}

// restartMember stops a member's etcd (gracefully: it leaves a clean-shutdown marker) and
// sidecar, and starts both again on the current spec. It is a stop the supervisor asks for:
// the old processes' run loops end without a crash or a backoff, and healing sees a member
// that is down for a moment, as after a crash, in a cluster that keeps its quorum (the
// rollout restarts one member at a time, only while all others are healthy).
func (s *supervisor) restartMember(name string) error {
	var old *memberRun
	for _, r := range s.memberRuns() {
		if r.spec.Name == name {
			old = r
		}
	}
	if old == nil {
		return fmt.Errorf("member %s is not running", name)
	}
	start := time.Now()
	s.logf("restarting member %s on spec generation %d", name, s.currentSpec().Generation)
	old.stopEtcd()
	old.wait()
	r, err := s.startRun(old.spec)
	if err != nil {
		return fmt.Errorf("start %s again: %w", name, err)
	}
	s.mu.Lock()
	for i, x := range s.runs {
		if x == old {
			s.runs[i] = r
		}
	}
	// The answer that follows is saved with the new run's pids (none yet, or the new
	// processes'), never the stopped ones'.
	if ms := s.memberStateLocked(name); ms != nil {
		recordProcesses(ms, r)
	}
	s.mu.Unlock()
	s.logf("member %s restarted (its old processes stopped in %s)", name, time.Since(start).Round(time.Millisecond))
	return nil
}
