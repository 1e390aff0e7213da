package local

import (
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/etcd-steward/steward/internal/etcdutil"
	"github.com/etcd-steward/steward/internal/maintenance"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// reconcileMembers brings the running members in line with cluster.json: removals first
// (highest member first, leadership moved away before), then additions one at a time, each
// a healthy voting member before the next starts.
func (s *supervisor) reconcileMembers(ctx context.Context) error {
	want, ok, err := ReadSpec(s.dir)
	if err != nil || !ok {
		return fmt.Errorf("read cluster.json: %v", err)
	}
	s.adoptSpec(want)
	if d := s.currentDirective(); d != nil {
		// A membership change needs a quorum and would race the recovery's own.
		return fmt.Errorf("a quorum-loss recovery (directive %d, %s) is in progress; scaling waits for it", d.Epoch, d.Phase)
	}
	// A member is kept only if its name and ports are unchanged.
	desired := map[MemberSpec]bool{}
	for _, m := range want.Members {
		desired[m] = true
	}
	runs := s.memberRuns()
	s.mu.Lock()
	formed := s.state.ClusterID != ""
	s.mu.Unlock()
	if !formed && !sameMembers(runs, desired) {
		// A member added now would bootstrap with another initial cluster than its peers.
		return fmt.Errorf("the cluster has not formed yet (no quorum has answered); scaling waits for it")
	}
	for i := len(runs) - 1; i >= 0; i-- {
		if r := runs[i]; !desired[r.spec] {
			if err := s.removeMember(ctx, r, want); err != nil {
				return err
			}
		}
	}
	running := map[MemberSpec]bool{}
	for _, r := range s.memberRuns() {
		running[r.spec] = true
	}
	for _, m := range want.Members {
		if running[m] {
			continue
		}
		start := time.Now()
		s.logf("scaling up: adding member %s", m.Name)
		s.mu.Lock()
		s.spec.Members = append(s.spec.Members, m)
		s.state.Members = append(s.state.Members, MemberState{Name: m.Name})
		s.mu.Unlock()
		err := s.startMember(m)
		if err == nil {
			err = s.waitVoter(ctx, m, 5*time.Minute)
		}
		if err != nil {
			return err
		}
		s.logf("member %s joined as a voting member in %s", m.Name, time.Since(start).Round(time.Millisecond))
	}
	return nil
}

func sameMembers(runs []*memberRun, desired map[MemberSpec]bool) bool {
	if len(runs) != len(desired) {
		return false
	}
	for _, r := range runs {
		if !desired[r.spec] {
			return false
		}
	}
	return true
}

// removeMember takes a member out: leadership moves away first (invariant 10), then
// MemberRemove through the remaining members, then its processes stop and its data goes.
func (s *supervisor) removeMember(ctx context.Context, r *memberRun, want Spec) error {
	start := time.Now()
	s.logf("scaling down: removing member %s", r.spec.Name)
	var rest []string
	for _, m := range want.Members {
		rest = append(rest, want.ClientURL(m))
	}
	cli, err := Dialer(s.dir, want).New(rest, 3*time.Second)
	if err != nil {
		return err
	}
	defer cli.Close()
	id, isLeader, err := s.memberToRemove(ctx, r, cli)
	if err != nil {
		return fmt.Errorf("remove member %s: %w", r.spec.Name, err)
	}
	if id != 0 {
		if isLeader {
			if _, _, err := maintenance.MoveLeader(ctx, cli, ""); err != nil {
				return fmt.Errorf("move leadership away from %s: %w", r.spec.Name, err)
			}
			s.logf("moved leadership away from %s", r.spec.Name)
		}
		if err := etcdutil.RemoveMember(ctx, cli, id); err != nil {
			return fmt.Errorf("remove member %s from etcd: %w", r.spec.Name, err)
		}
	} else {
		s.logf("member %s is not in etcd's member list: nothing to remove there", r.spec.Name)
	}
	r.stopEtcd()
	r.wait()
	s.mu.Lock()
	for i, x := range s.runs {
		if x == r {
			s.runs = append(s.runs[:i], s.runs[i+1:]...)
			break
		}
	}
	for i, m := range s.state.Members {
		if m.Name == r.spec.Name {
			s.state.Members = append(s.state.Members[:i], s.state.Members[i+1:]...)
			break
		}
	}
	for i, m := range s.spec.Members {
		if m.Name == r.spec.Name {
			s.spec.Members = append(s.spec.Members[:i], s.spec.Members[i+1:]...)
			break
		}
	}
	s.mu.Unlock()
	_ = s.save()
	if err := os.RemoveAll(s.dir.Member(r.spec.Name)); err != nil {
		s.logf("cannot remove the data of %s: %v", r.spec.Name, err)
	}
	s.logf("member %s removed in %s", r.spec.Name, time.Since(start).Round(time.Millisecond))
	return nil
}

// memberToRemove finds the etcd member ID of r: from r itself when it answers, else from
// the cluster's member list by name or peer URL (id 0: etcd does not list it). Its data is
// deleted only after etcd no longer lists it.
func (s *supervisor) memberToRemove(ctx context.Context, r *memberRun, cli *clientv3.Client) (id uint64, isLeader bool, err error) {
	if c := r.etcdClient(); c != nil {
		sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		st, err := c.Status(sctx, s.currentSpec().ClientURL(r.spec))
		cancel()
		if err == nil {
			return st.Header.MemberId, st.Leader == st.Header.MemberId, nil
		}
	}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	list, err := cli.MemberList(lctx)
	if err != nil {
		return 0, false, fmt.Errorf("%s does not answer and the member list cannot be read: %w", r.spec.Name, err)
	}
	peer := s.currentSpec().PeerURL(r.spec)
	for _, m := range list.Members {
		if m.Name == r.spec.Name || slices.Contains(m.PeerURLs, peer) {
			return m.ID, false, nil
		}
	}
	return 0, false, nil
}

// scaleRetry is how soon a failed scaling pass is tried again.
const scaleRetry = 5 * time.Second

// waitVoter polls until member m is a healthy voting member. It asks the member itself, not
// cluster.json: a newer scale request may already have dropped m from it (the next pass
// removes m again).
func (s *supervisor) waitVoter(ctx context.Context, m MemberSpec, timeout time.Duration) error {
	var run []*memberRun
	for _, r := range s.memberRuns() {
		if r.spec == m {
			run = append(run, r)
		}
	}
	if len(run) != 1 {
		return fmt.Errorf("member %s is not running", m.Name)
	}
	deadline := time.Now().Add(timeout)
	for {
		if o := poll(ctx, s.currentSpec(), run)[0]; o.ready && o.id != "" && !o.learner {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("member %s did not become a healthy voting member within %s; see %s", m.Name, timeout, s.dir.Log(m.Name, "sidecar"))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}
