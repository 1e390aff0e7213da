package local

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/etcd-steward/steward/internal/datadir"
	"github.com/etcd-steward/steward/internal/member"
)

// quorumWatch decides, like the operator does under Kubernetes, when a quorum is lost for
// good and which member seeds the recovery; the sidecars carry it out.
type quorumWatch struct {
	grace     time.Duration
	lostSince time.Time
	issuedAt  time.Time
	warned    bool
	// quorumSeen: a majority has been healthy since the supervisor started; before that,
	// only a cluster that formed in an earlier run can have a quorum to lose.
	quorumSeen bool
}

// recoveryTimeout is how long a seed may take to serve before a new directive is issued.
const recoveryTimeout = 3 * time.Minute

// memberData is a sidecar's GET /v1/data answer.
type memberData struct {
	Name     string         `json:"name"`
	Data     *datadir.State `json:"data"`
	Own      bool           `json:"own"`
	Serving  bool           `json:"serving"`
	Revision int64          `json:"revision"`
}

// memberDatas asks every member's sidecar what data it holds, all at once.
func memberDatas(ctx context.Context, spec Spec, runs []*memberRun) ([]memberData, error) {
	hc := &http.Client{Timeout: 2 * time.Second}
	datas := make([]memberData, len(runs))
	errs := make([]error, len(runs))
	var wg sync.WaitGroup
	for i, r := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := memberData{Name: r.spec.Name}
			err := getJSON(ctx, hc, spec.SidecarURL(r.spec)+"/v1/data", &d)
			if err == nil && d.Data == nil && !d.Serving {
				err = errors.New("its data dir has not been inspected yet")
			}
			if err != nil {
				errs[i] = fmt.Errorf("member %s cannot say what data it holds (%v)", r.spec.Name, err)
			}
			datas[i] = d
		}()
	}
	wg.Wait()
	return datas, errors.Join(errs...)
}

// valid: the member serves, or holds valid data of its own (a foreign volume does not count:
// it can never be started on in this member's place).
func (d memberData) valid() bool { return d.Serving || d.Own }

// chooseRecovery is the pure part: given what each member holds, pick the seed. Members with
// valid data win, the highest revision first (no acknowledged write is lost); only when none
// has valid data is the backup used. ok=false: no recovery possible or needed.
func chooseRecovery(datas []memberData, size int, haveBackup bool, epoch int64) (r member.Recovery, ok bool, why string) {
	var valid []memberData
	for _, d := range datas {
		if d.valid() {
			valid = append(valid, d)
		}
	}
	if len(valid) > size/2 {
		return r, false, "a majority still has valid data: it re-forms the quorum by restarting"
	}
	if len(valid) > 0 {
		sort.SliceStable(valid, func(i, j int) bool {
			if valid[i].Revision != valid[j].Revision {
				return valid[i].Revision > valid[j].Revision
			}
			return valid[i].Name < valid[j].Name
		})
		return member.Recovery{Epoch: epoch, Mode: member.RecoverFromSurvivor, Seed: valid[0].Name}, true, "survivor with the newest data"
	}
	if haveBackup && len(datas) > 0 {
		return member.Recovery{Epoch: epoch, Mode: member.RecoverFromBackup, Seed: datas[0].Name}, true, "no member has valid data: restore from backup"
	}
	return r, false, "no member has valid data and there is no backup store: recover by hand (restore a backup with `steward restore`)"
}

func (s *supervisor) currentRecovery() *member.Recovery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.Recovery
}

// check runs every observation; it returns a directive to issue, if the time has come.
func (q *quorumWatch) check(ctx context.Context, s *supervisor) {
	s.mu.Lock()
	n, ready := 0, 0
	for _, m := range s.state.Members {
		if m.Name == s.joining {
			continue
		}
		n++
		if m.Ready {
			ready++
		}
	}
	if ready > n/2 {
		q.lostSince, q.quorumSeen = time.Time{}, true
		if s.state.Recovery != nil && ready == n {
			s.logf("quorum recovered (directive %d); all %d members healthy", s.state.Recovery.Epoch, n)
			s.state.Recovery = nil
		}
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	if !q.quorumSeen && !s.formedBefore {
		return // a cluster still bootstrapping has no quorum to lose
	}
	now := time.Now()
	if q.lostSince.IsZero() {
		q.lostSince = now
		s.logf("quorum lost: %d of %d members healthy; recovery starts if it lasts %s", ready, n, q.grace)
	}
	if now.Sub(q.lostSince) < q.grace || ctx.Err() != nil {
		return
	}
	if r := s.currentRecovery(); r != nil && now.Sub(q.issuedAt) < recoveryTimeout {
		return // a recovery is under way: the seed serves alone first, then the others join one by one
	}
	runs, spec := s.memberRuns(), s.currentSpec()
	datas, err := memberDatas(ctx, spec, runs)
	if err != nil {
		// Deciding without knowing what every member holds could discard newer data.
		if !q.warned {
			s.logf("quorum lost, but %v: waiting", err)
			q.warned = true
		}
		return
	}
	s.mu.Lock()
	epoch := s.state.LastRecoveryEpoch + 1
	s.mu.Unlock()
	rec, ok, why := chooseRecovery(datas, n, spec.Backup != "", epoch)
	if !ok {
		if !q.warned {
			s.logf("quorum lost for %s: %s", now.Sub(q.lostSince).Round(time.Second), why)
			q.warned = true
		}
		return
	}
	q.issuedAt, q.warned = now, false
	s.logf("quorum lost for good: recovering with %s as seed (%s, directive %d)", rec.Seed, why, rec.Epoch)
	s.mu.Lock()
	s.state.Recovery, s.state.LastRecoveryEpoch = &rec, rec.Epoch
	s.mu.Unlock()
	if err := s.save(); err != nil {
		s.logf("cannot record the recovery directive: %v", err)
		return
	}
	// Members whose etcd still runs on its old configuration re-initialise under the
	// directive; the others are waiting in their initialisation and see it there.
	for i, d := range datas {
		if d.Serving {
			runs[i].etcd.restart()
		}
	}
}
