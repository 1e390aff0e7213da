package local

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/etcd-steward/steward/internal/backup"
	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/datadir"
	"github.com/etcd-steward/steward/internal/heal"
	"github.com/etcd-steward/steward/internal/store"
)

// stuckAfter is how long the cluster may stay unhealthy with nothing changing before the
// watchdog reports the step it is stuck on.
const stuckAfter = 60 * time.Second

// healer carries the supervisor's healing between ticks: the timing, the watchdog and a
// cached look at the backup store.
type healer struct {
	timing heal.Timing
	// Watchdog: what the cluster looked like, since when, and when it was last reported.
	progressKey   string
	progressSince time.Time
	lastStuckLog  time.Time
	// The newest revision of this cluster in the backup store that the cluster vouches for
	// (of the cluster IDs backupIDs), read at most every backupCheckEvery.
	backupRev     int64
	backupIDs     []uint64
	backupChecked time.Time
}

const backupCheckEvery = 10 * time.Second

// heal runs one round of the cluster-wide healing: record the voters a quorum lists, move
// misplaced data back, let heal.Decide move any recovery on, and enforce its fence. It
// decides from the members' reports and readiness; heal.Decide is pure.
func (s *supervisor) heal(ctx context.Context, h *healer) {
	runs, spec := s.memberRuns(), s.currentSpec()
	s.refreshVoters(ctx, runs)
	members := s.healMembers(runs)
	s.takeRestoreRequest(h, members, spec)
	s.mu.Lock()
	// Relocating: moves an earlier supervisor began, what they void not yet recorded.
	st, rels := s.state.Status, s.state.Relocating
	s.mu.Unlock()
	st = heal.FoldAck(st, func(seed string) (ack, bool) { return readMemberFile[ack](s.dir.Ack(seed)) })
	if len(rels) == 0 {
		if rels = heal.Relocations(members); len(rels) > 0 {
			s.mu.Lock()
			s.state.Relocating = rels
			s.mu.Unlock()
			if err := s.save(); err != nil {
				s.logf("cannot record state: %v; the data is not moved", err)
				return
			}
			for _, rel := range rels {
				s.relocate(ctx, rel, runs)
			}
		}
	}
	if len(rels) > 0 {
		// Even a move that failed half-way may have changed the dirs: the reports are void.
		dec := heal.Relocated(heal.Observation{Now: time.Now(), Status: st, Members: members, Timing: h.timing}, st, rels)
		if dec.Event != "" {
			s.logf("%s", dec.Event)
		}
		s.mu.Lock()
		s.state.Status, s.state.Relocating = dec.Status, nil
		s.mu.Unlock()
		if err := s.save(); err != nil {
			s.logf("cannot record state: %v", err)
		}
		return // observe again before deciding anything else
	}
	b := heal.Backup{Configured: spec.Backup != ""}
	if ready, total := heal.Quorum(st.Voters, members); b.Configured && (total == 0 || ready <= total/2 || st.Directive != nil) {
		b.Revision = h.backupRevision(ctx, s.dir, spec.Backup, cluster.IDs(spec.memberView(), st.ClusterID))
	}
	dec := heal.Decide(heal.Observation{Now: time.Now(), Status: st, Members: members, Backup: b, Timing: h.timing})
	if dec.Event != "" {
		s.logf("%s", dec.Event)
	}
	if st.QuorumLostSince.IsZero() && !dec.Status.QuorumLostSince.IsZero() && dec.Status.Directive == nil {
		s.askReports(spec.Members...)
	}
	s.mu.Lock()
	s.state.Status = dec.Status
	s.mu.Unlock()
	s.enforceFence(dec.Status.Directive, runs)
	h.watch(s, dec.Status, members)
	if err := s.save(); err != nil {
		s.logf("cannot record state: %v", err)
	}
}

// askReports asks the sidecars of members for a report made now, without waiting for the
// answers: a lost quorum is proven lost, and a fenced member's data counted, only by reports
// made since (since the quorum was lost, since its etcd stopped), and each sidecar would
// otherwise report at its next interval. The reports arrive as files, which move the next
// round on.
func (s *supervisor) askReports(members ...MemberSpec) {
	spec := s.currentSpec()
	sc, err := SidecarClient(s.dir, spec, 5*time.Second)
	if err != nil {
		return
	}
	for _, m := range members {
		go func() { _, _ = sc.Call(context.Background(), http.MethodGet, spec.SidecarURL(m)+"/v1/report?fresh=1") }()
	}
}

// healMembers assembles what heal.Decide reads about each member.
func (s *supervisor) healMembers(runs []*memberRun) []heal.Member {
	s.mu.Lock()
	defer s.mu.Unlock()
	sms := make([]cluster.StatusMember, 0, len(runs))
	byName := map[string]*memberRun{}
	for _, r := range runs {
		sm := cluster.StatusMember{Name: r.spec.Name}
		if ms := s.memberStateLocked(r.spec.Name); ms != nil {
			sm.Ready, sm.ID, sm.Learner = ms.Ready, ms.ID, ms.Learner
		}
		if rep, ok := readMemberFile[cluster.Report](s.dir.Report(r.spec.Name)); ok {
			sm.Report = &rep
		}
		sms = append(sms, sm)
		byName[r.spec.Name] = r
	}
	return heal.Members(sms, func(name string) (bool, time.Time) { return byName[name].etcd.fenced() })
}

// refreshVoters records the cluster ID and the voting members from a linearizable member
// list (which only a quorum answers), and only for the cluster the status already records.
func (s *supervisor) refreshVoters(ctx context.Context, runs []*memberRun) {
	s.mu.Lock()
	known := s.state.ClusterID
	var readyRuns []*memberRun
	for _, r := range runs {
		if ms := s.memberStateLocked(r.spec.Name); ms != nil && ms.Ready {
			readyRuns = append(readyRuns, r)
		}
	}
	s.mu.Unlock()
	for _, r := range readyRuns {
		c := r.etcdClient()
		if c == nil {
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := c.MemberList(lctx)
		cancel()
		if err != nil {
			continue
		}
		id := fmt.Sprintf("%x", resp.Header.ClusterId)
		if known != "" && id != known {
			s.logf("member %s serves cluster %s, but the status records cluster %s: not recorded", r.spec.Name, id, known)
			return
		}
		var voters []cluster.Voter
		for _, m := range resp.Members {
			if !m.IsLearner {
				v := cluster.Voter{ID: fmt.Sprintf("%x", m.ID), Name: m.Name}
				if len(m.PeerURLs) > 0 {
					v.PeerURL = m.PeerURLs[0]
				}
				voters = append(voters, v)
			}
		}
		s.mu.Lock()
		if known == "" {
			s.logf("cluster %s formed; voters: %s", id, voterNames(voters))
		} else if !slices.Equal(voters, s.state.Voters) {
			s.logf("voters now: %s", voterNames(voters))
		}
		s.state.ClusterID, s.state.Voters = id, voters
		s.mu.Unlock()
		return
	}
}

func voterNames(vs []cluster.Voter) string {
	var names []string
	for _, v := range vs {
		n := v.Name
		if n == "" {
			n = "(unstarted)"
		}
		names = append(names, n+"="+v.ID)
	}
	return strings.Join(names, ", ")
}

// enforceFence holds the etcd of every member the directive fences and releases the others.
func (s *supervisor) enforceFence(d *cluster.Directive, runs []*memberRun) {
	var names []string
	for _, r := range runs {
		names = append(names, r.spec.Name)
	}
	fenced := d.Fenced(names)
	for _, r := range runs {
		if slices.Contains(fenced, r.spec.Name) {
			r.etcd.hold(s.fenceGrace())
		} else {
			r.etcd.unhold()
		}
	}
	s.mu.Lock()
	for _, r := range runs {
		if ms := s.memberStateLocked(r.spec.Name); ms != nil {
			ms.Fenced = slices.Contains(fenced, r.spec.Name)
		}
	}
	s.mu.Unlock()
}

// fenceGrace bounds a fenced member's graceful stop before it is killed.
func (s *supervisor) fenceGrace() time.Duration { return min(s.opts.StopGrace, 5*time.Second) }

// relocate moves a member's data found in another member's data dir back where it belongs,
// with both members' etcd stopped: a swap is undone; otherwise the owner's dir contents are
// moved aside (kept) and the data moved in, and the emptied member rejoins.
func (s *supervisor) relocate(ctx context.Context, rel heal.Relocation, runs []*memberRun) {
	var pair []*memberRun
	for _, r := range runs {
		if r.spec.Name == rel.From || r.spec.Name == rel.Owner {
			pair = append(pair, r)
		}
	}
	if len(pair) != 2 {
		return
	}
	for _, r := range pair {
		r.etcd.hold(s.fenceGrace())
	}
	defer func() {
		for _, r := range pair {
			r.etcd.unhold() // the next round fences them again if a directive says so
		}
	}()
	deadline := time.Now().Add(s.fenceGrace() + 5*time.Second)
	for {
		a, _ := pair[0].etcd.fenced()
		b, _ := pair[1].etcd.fenced()
		if a && b {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			s.logf("cannot move %s's data back from %s: their etcd did not stop", rel.Owner, rel.From)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	from, to := s.dir.MemberData(rel.From), s.dir.MemberData(rel.Owner)
	if err := moveData(from, to, rel.Swap); err != nil {
		s.logf("cannot move %s's data back from %s: %v", rel.Owner, rel.From, err)
		return
	}
	if rel.Swap {
		s.logf("the data dirs of %s and %s were swapped: swapped back", rel.From, rel.Owner)
	} else {
		s.logf("%s's data was in %s's data dir: moved back (what %s's dir held is kept beside it)", rel.Owner, rel.From, rel.Owner)
	}
}

// swapDirs exchanges the directories a and b.
func swapDirs(a, b string) error {
	tmp := a + ".swapping"
	if err := os.Rename(a, tmp); err != nil {
		return err
	}
	if err := os.Rename(b, a); err != nil {
		return err
	}
	return os.Rename(tmp, b)
}

// moveData moves the data in dir from to dir to: exchanging them when swap, else moving
// to's contents aside first and leaving from empty.
func moveData(from, to string, swap bool) error {
	if swap {
		return swapDirs(from, to)
	}
	if entries, err := os.ReadDir(to); err == nil && len(entries) > 0 {
		if _, err := datadir.MoveAside(to, "replaced"); err != nil {
			return err
		}
	}
	if err := os.RemoveAll(to); err != nil {
		return err
	}
	if err := os.Rename(from, to); err != nil {
		return err
	}
	return os.MkdirAll(from, 0o700)
}

// backupRevision is the newest revision of this cluster (known by the cluster IDs ids) in
// the backup store that the cluster itself vouches for (0 when the store holds none, -1 when
// it cannot be read): the newest revision of its newest timeline there, never of another
// cluster's, and never above the revision the backup leader recorded as stored
// (Dir.BackupRecord): names and headers in the store are anyone's who may write to it, and a
// backup that claims more than the cluster stored must not be preferred over a survivor. A
// cluster whose backup leader has recorded nothing yet (made by an earlier Steward) has only
// the store's word. It is read at most every backupCheckEvery while the IDs stay the same.
func (h *healer) backupRevision(ctx context.Context, d Dir, url string, ids []uint64) int64 {
	if time.Since(h.backupChecked) < backupCheckEvery && slices.Equal(ids, h.backupIDs) {
		return h.backupRev
	}
	h.backupChecked, h.backupIDs, h.backupRev = time.Now(), ids, -1
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	// Headers only, without the keys: with them, an object planted without the keys at the
	// end of the cluster's timeline would hide the timeline; the record bounds what any
	// header claims, and the seed's restore reads only what vouches for itself.
	st, err := store.Open(sctx, url, store.Options{})
	if err != nil {
		return -1
	}
	defer st.Close()
	ix, err := backup.ReadIndex(sctx, st)
	if err != nil {
		return -1
	}
	tls, err := backup.ObserveIndex(sctx, st, ix)
	if err != nil {
		return -1
	}
	h.backupRev = 0
	if own, ok := backup.OwnTimeline(tls, ids); ok {
		h.backupRev = own.Newest.LastRev
		if rec, ok := readMemberFile[BackupRecord](d.BackupRecord()); ok {
			h.backupRev = min(h.backupRev, rec.Revision)
		}
	}
	return h.backupRev
}

// watch is the watchdog: when the cluster is unhealthy and nothing has changed for
// stuckAfter, it reports the step it is stuck on, in the status and the log.
func (h *healer) watch(s *supervisor, st heal.Status, members []heal.Member) {
	healthy := st.Directive == nil
	var waits []string
	key := fmt.Sprintf("%v|%v", st.Voters, st.Directive != nil)
	if d := st.Directive; d != nil {
		key += fmt.Sprintf("|%d/%s", d.Epoch, d.Phase)
	}
	for _, m := range members {
		key += fmt.Sprintf("|%s:%v:%v:%s", m.Name, m.Ready, m.Learner, m.ID)
		if !m.Ready || m.Learner {
			healthy = false
			if m.Report != nil && m.Report.Case != "" {
				waits = append(waits, fmt.Sprintf("%s waits in %s (%s)", m.Name, m.Report.Case, m.Report.Reason))
			} else {
				waits = append(waits, m.Name+" is not ready")
			}
		}
	}
	now := time.Now()
	if healthy || key != h.progressKey {
		h.progressKey, h.progressSince = key, now
		s.mu.Lock()
		s.state.Stuck = ""
		s.mu.Unlock()
		return
	}
	if now.Sub(h.progressSince) < stuckAfter {
		return
	}
	stuck := fmt.Sprintf("no progress for %s", now.Sub(h.progressSince).Round(time.Second))
	if st.Waiting != "" {
		stuck += ": " + st.Waiting
	}
	if len(waits) > 0 {
		stuck += "; " + strings.Join(waits, "; ")
	}
	s.mu.Lock()
	s.state.Stuck = stuck
	s.mu.Unlock()
	if now.Sub(h.lastStuckLog) >= stuckAfter {
		h.lastStuckLog = now
		s.logf("watchdog: %s", stuck)
	}
}
