package member

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/etcd-steward/steward/internal/backup"
	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/datadir"
	"github.com/etcd-steward/steward/internal/etcdutil"
	"github.com/etcd-steward/steward/internal/restore"
	"go.uber.org/zap"
)

// restoreFromBackup recovers a quorum lost with all data: restore the plan's target (on a
// quorum loss, the newest revision of this cluster's newest timeline) into the data dir as a
// one-member cluster, start alone, and take a full snapshot once serving (the others rejoin
// as learners). statusClusterID is the cluster ID the cluster's status records: with the
// spec, it says which timelines of its own store are this cluster's.
func (s *Sidecar) restoreFromBackup(ctx context.Context, spec cluster.Spec, statusClusterID string, plan Plan, identity datadir.Identity) ([]byte, error) {
	var target cluster.RestoreTarget
	if plan.Restore != nil {
		target = *plan.Restore
	}
	storeURL := cmp.Or(target.Store, s.cfg.Backup.StoreURL)
	if storeURL == "" {
		return nil, errors.New("directed to restore from backup, but this member has no backup store (--store)")
	}
	if err := s.dispose(plan.Disposal); err != nil {
		return nil, err
	}
	st, err := s.cfg.Backup.OpenStore(ctx, storeURL)
	if err != nil {
		return nil, fmt.Errorf("%w: backup store: %v", errTryAgain, err)
	}
	defer st.Close()
	self, _ := spec.Member(s.cfg.Name)
	// Restore builds <dir>.part and renames it into place: the (empty) data dir goes first.
	if err := os.Remove(s.cfg.DataDir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("prepare %s for the restore: %w", s.cfg.DataDir, err)
	}
	var rootPassword string
	if s.cfg.RootPasswordFile != "" {
		if rootPassword, err = etcdutil.ReadPassword(s.cfg.RootPasswordFile); err != nil {
			return nil, fmt.Errorf("%w: %v", errTryAgain, err)
		}
	}
	// The timeline is resolved as restore.ResolveTarget does: from this cluster's own backup
	// store, only its own timelines (never another cluster's on the same prefix); from the
	// store a new cluster bootstraps from (another cluster's), any timeline.
	var own []uint64
	if target.Store == "" {
		own = cluster.IDs(spec, statusClusterID)
		if id, err := strconv.ParseUint(identity.ClusterID, 16, 64); err == nil && id != 0 && !slices.Contains(own, id) {
			own = append(own, id) // the cluster this member's data was of
		}
	}
	initialCluster, token := founderCluster(spec, s.cfg.Name, plan)
	start := time.Now()
	stopBound := restore.HeapBound.Apply()
	res, err := restore.Restore(ctx, restore.Options{Store: st, DataDir: s.cfg.DataDir, Name: self.Name, RootPassword: rootPassword,
		InitialCluster: initialCluster, InitialClusterToken: token, PeerURLs: []string{self.PeerURL},
		ToRevision: target.Revision, ToTime: target.Time, Timeline: target.Timeline, ClusterIDs: own,
		MissingLeaseTTL: restore.DefaultMissingLeaseTTL, Logger: s.lg.Named("restore")})
	stopBound()
	if mkErr := os.MkdirAll(s.cfg.DataDir, 0o700); mkErr != nil && err == nil {
		err = mkErr
	}
	if err != nil {
		s.metrics.membership.WithLabelValues("restore", "failed").Inc()
		return nil, fmt.Errorf("%w: restore from backup: %v", errTryAgain, err)
	}
	s.metrics.membership.WithLabelValues("restore", "ok").Inc()
	s.metrics.membershipSeconds.WithLabelValues("restore").Observe(time.Since(start).Seconds())
	s.lg.Info("restored from backup", zap.String("event", "restored-from-backup"), zap.Uint32("timeline", res.Timeline), zap.Int64("revision", res.Revision), zap.String("full", res.Full.Key),
		zap.Int("deltas", len(res.Deltas)), zap.Duration("took", time.Since(start)))
	// A new cluster and member: their IDs are recorded once etcd serves. A cluster restored
	// with founders serves only once they start: its IDs are recorded now, so that a
	// status lost meanwhile still finds the cluster (the data holds writes that were
	// acknowledged) and never takes it for one that never formed.
	identity.ClusterID, identity.MemberID = "", ""
	identity.RestoredTimeline, identity.RestoredRevision = res.Timeline, res.Revision
	if len(plan.Founders) > 0 {
		memberID, clusterID, err := datadir.ReadWALMetadata(filepath.Join(s.cfg.DataDir, "member", "wal"))
		if err != nil {
			return nil, fmt.Errorf("%w: the restored WAL's member and cluster IDs: %v", errTryAgain, err)
		}
		identity.ClusterID, identity.MemberID = fmt.Sprintf("%x", clusterID), fmt.Sprintf("%x", memberID)
	}
	if err := s.writeIdentity(identity); err != nil {
		return nil, err
	}
	if err := s.stillSeeding(ctx, plan.RecoveryEpoch, identity); err != nil {
		// Kept beside, never started on: a restore onto the same member with the same token
		// makes the same member and cluster IDs, so left in place it could pass for this
		// member's data of the running cluster.
		to, mvErr := datadir.MoveAside(s.cfg.DataDir, "restored")
		if mvErr != nil {
			return nil, fmt.Errorf("%v; moving the restored data aside failed: %w", err, mvErr)
		}
		s.lg.Warn("the restore's directive is no longer in force: the restored data is moved aside", zap.String("to", to), zap.Error(err))
		return nil, err
	}
	// Whichever member leads the restored cluster takes its first full snapshot.
	s.fullAfterStart.Store(true)
	if plan.Case == CaseFounderRestore {
		// A founder starts its etcd only once the recovery records its restore.
		s.kickReport()
		return nil, errDecideAgain
	}
	return s.etcdConfig(spec, plan, initialCluster)
}

// founderCluster is the membership a restore from the backup writes, as etcd's initial
// cluster, and the token etcd derives the member and cluster IDs from: the seed alone, or
// every founder (Plan.Founders) under the directive's token (Plan.FoundersToken).
func founderCluster(spec cluster.Spec, self string, plan Plan) (initialCluster, token string) {
	if len(plan.Founders) == 0 {
		m, _ := spec.Member(self)
		return m.Name + "=" + m.PeerURL, spec.Token
	}
	var members []cluster.MemberSpec
	for _, n := range plan.Founders {
		if m, ok := spec.Member(n); ok {
			members = append(members, m)
		}
	}
	return staticCluster(cluster.Spec{Members: members}), plan.FoundersToken
}

// stillSeeding checks, after a restore that may have taken long, that directive epoch still
// names this member as its seed or one of its founders. A restore cancelled meanwhile (the
// members restart on their own data) or replaced by a new epoch must not start: a cluster on
// the restored data would form beside them. A founder's restore must also have made the
// very cluster its seed restored (restored is the identity it recorded): the same cluster
// ID and revision as the seed, or another founder, reports; it never starts on other data.
func (s *Sidecar) stillSeeding(ctx context.Context, epoch int64, restored datadir.Identity) error {
	if epoch == 0 {
		return nil
	}
	snap, err := s.cfg.View.Snapshot(ctx)
	if err != nil {
		return fmt.Errorf("%w: restored; cannot read the cluster view to check that directive %d is still in force: %v", errTryAgain, epoch, err)
	}
	d := snap.Directive
	if d == nil || d.Epoch != epoch || d.Phase != cluster.PhaseSeeding || (d.Seed != s.cfg.Name && !d.Founder(s.cfg.Name)) {
		now := "no directive"
		if d != nil {
			now = fmt.Sprintf("directive %d (%s, seed %q)", d.Epoch, d.Phase, d.Seed)
		}
		return fmt.Errorf("%w: restored for directive %d, which is no longer in force (now %s): not starting on the restored data", errTryAgain, epoch, now)
	}
	if d.Seed == s.cfg.Name {
		return nil
	}
	if p := restoredPoint(snap.Status, *d, s.cfg.Name); p != nil && p.ClusterID == restored.ClusterID && p.RestoredRevision == restored.RestoredRevision {
		return nil
	}
	return fmt.Errorf("%w: restored cluster %s at revision %d for directive %d, which is not what its seed %s (or another founder) reports having restored: not starting on it",
		errTryAgain, restored.ClusterID, restored.RestoredRevision, epoch, d.Seed)
}

// ownBackup reads which timelines of the backup store are this cluster's (known by the
// cluster IDs ids): the newest of them (0: none) and how many are of other clusters (or
// cannot say whose they are).
func (s *Sidecar) ownBackup(ctx context.Context, ids []uint64) (timeline uint32, foreign int, err error) {
	st, err := s.cfg.Backup.OpenStore(ctx, s.cfg.Backup.StoreURL)
	if err != nil {
		return 0, 0, err
	}
	defer st.Close()
	ix, err := backup.ReadIndex(ctx, st)
	if err != nil {
		return 0, 0, err
	}
	tls, err := backup.ObserveIndex(ctx, st, ix)
	if err != nil {
		return 0, 0, err
	}
	for _, tl := range tls {
		if !tl.Of(ids) {
			foreign++
		}
	}
	own, _ := backup.OwnTimeline(tls, ids)
	return own.Timeline, foreign, nil
}
