package operator

import (
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"k8s.io/apimachinery/pkg/api/equality"
)

// figuresMaxAge bounds how far behind the moving figures of a cluster at rest may fall in its
// status: status.revision, lastFullSnapshot, lastDeltaSnapshot, lastBackupTime and the end
// of status.recoverability (lastRevision, lastTime) move while the members serve and back up,
// and writing them at every pass would write the status of every cluster every few minutes.
// They are written with any other change of the status, and otherwise by the first pass this
// long after they were last written (passes come at least every maxRequeue). The conditions
// (BackupReady above all) say at once what matters; the metrics carry the figures of each pass.
const figuresMaxAge = time.Hour

// holdFigures is the status a pass writes (pure): next, unless it differs from prev only in
// its moving figures (withFiguresOf) and these were written less than figuresMaxAge ago
// (written; zero: not known, as after the operator starts), in which case prev, which needs
// no write. A figure that appears or disappears (the first backup, backups turned off) is a
// change like any other.
func holdFigures(prev, next v1alpha1.EtcdClusterStatus, written, now time.Time) v1alpha1.EtcdClusterStatus {
	if written.IsZero() || now.Sub(written) >= figuresMaxAge {
		return next
	}
	if held := withFiguresOf(next, prev); equality.Semantic.DeepEqual(held, prev) {
		return prev
	}
	return next
}

// withFiguresOf is s with the moving figures of from, where both have them.
func withFiguresOf(s, from v1alpha1.EtcdClusterStatus) v1alpha1.EtcdClusterStatus {
	if s.Revision != 0 && from.Revision != 0 {
		s.Revision = from.Revision
	}
	if s.LastFullSnapshot != nil && from.LastFullSnapshot != nil {
		s.LastFullSnapshot = from.LastFullSnapshot
	}
	if s.LastDeltaSnapshot != nil && from.LastDeltaSnapshot != nil {
		s.LastDeltaSnapshot = from.LastDeltaSnapshot
	}
	if s.LastBackupTime != nil && from.LastBackupTime != nil {
		s.LastBackupTime = from.LastBackupTime
	}
	if w, f := s.Recoverability, from.Recoverability; w != nil && f != nil {
		held := *w
		held.LastRevision, held.LastTime = f.LastRevision, f.LastTime
		s.Recoverability = &held
	}
	return s
}
