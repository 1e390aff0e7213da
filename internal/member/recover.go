package member

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/etcd-steward/steward/internal/backup"
	"github.com/etcd-steward/steward/internal/datadir"
	"github.com/etcd-steward/steward/internal/restore"
	"github.com/etcd-steward/steward/internal/store"
	"go.uber.org/zap"
)

// restoreFromBackup recovers a quorum lost with all data: restore the plan's target (on a
// quorum loss, the newest revision of this cluster's newest timeline) into the data dir as a
// one-member cluster, start alone, and take a full snapshot once serving (the others rejoin
// as learners).
func (s *Sidecar) restoreFromBackup(ctx context.Context, spec ClusterSpec, plan Plan, identity datadir.Identity) ([]byte, error) {
	var target RestoreTarget
	if plan.Restore != nil {
		target = *plan.Restore
	}
	storeURL := firstNonEmpty(target.Store, s.cfg.Backup.StoreURL)
	if storeURL == "" {
		return nil, errors.New("directed to restore from backup, but this member has no backup store (--store)")
	}
	if err := s.dispose(plan.Disposal); err != nil {
		return nil, err
	}
	st, err := store.Open(ctx, storeURL)
	if err != nil {
		return nil, fmt.Errorf("%w: backup store: %v", errTryAgain, err)
	}
	defer st.Close()
	self, _ := spec.Member(s.cfg.Name)
	// Restore builds <dir>.part and renames it into place: the (empty) data dir goes first.
	if err := os.Remove(s.cfg.DataDir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("prepare %s for the restore: %w", s.cfg.DataDir, err)
	}
	start := time.Now()
	res, err := restore.Restore(ctx, restore.Options{Store: st, DataDir: s.cfg.DataDir, Name: self.Name,
		InitialCluster: self.Name + "=" + self.PeerURL, InitialClusterToken: spec.Token, PeerURLs: []string{self.PeerURL},
		ToRevision: target.Revision, ToTime: target.Time, Timeline: target.Timeline,
		MissingLeaseTTL: restore.DefaultMissingLeaseTTL, Logger: s.lg.Named("restore")})
	if mkErr := os.MkdirAll(s.cfg.DataDir, 0o700); mkErr != nil && err == nil {
		err = mkErr
	}
	if err != nil {
		s.metrics.membership.WithLabelValues("restore", "failed").Inc()
		return nil, fmt.Errorf("%w: restore from backup: %v", errTryAgain, err)
	}
	s.metrics.membership.WithLabelValues("restore", "ok").Inc()
	s.metrics.membershipSeconds.WithLabelValues("restore").Observe(time.Since(start).Seconds())
	s.lg.Info("restored from backup", zap.Uint32("timeline", res.Timeline), zap.Int64("revision", res.Revision), zap.String("full", res.Full.Key),
		zap.Int("deltas", len(res.Deltas)), zap.Duration("took", time.Since(start)))
	// A new cluster and member: their IDs are recorded once etcd serves.
	identity.ClusterID, identity.MemberID = "", ""
	if err := s.writeIdentity(identity); err != nil {
		return nil, err
	}
	s.fullAfterStart.Store(true)
	return s.etcdConfig(spec, plan, self.Name+"="+self.PeerURL)
}

// ownBackup reads which timelines of the backup store are this cluster's (known by the
// cluster IDs ids): the newest of them (0: none) and how many are of other clusters (or
// cannot say whose they are).
func (s *Sidecar) ownBackup(ctx context.Context, ids []uint64) (timeline uint32, foreign int, err error) {
	st, err := store.Open(ctx, s.cfg.Backup.StoreURL)
	if err != nil {
		return 0, 0, err
	}
	defer st.Close()
	chain, err := backup.ListChain(ctx, st)
	if err != nil {
		return 0, 0, err
	}
	tls, err := backup.ObserveTimelines(ctx, st, chain)
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
