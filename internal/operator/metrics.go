package operator

import (
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// The operator's series of each cluster, labelled with its namespace and name, from the status
// each pass writes: what a dashboard and alerts on the clusters need without scraping the
// members. controller-runtime's own (reconcile counts, durations, work queues) sit beside them.
var (
	clusterLabels = []string{"namespace", "cluster"}

	metricReplicas = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "steward_cluster_replicas",
		Help: "Members the cluster's spec asks for."}, clusterLabels)
	metricReadyMembers = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "steward_cluster_ready_members",
		Help: "Members whose pod is Ready and whose sidecar reports."}, clusterLabels)
	metricVoters = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "steward_cluster_voters",
		Help: "Voting members in etcd's member list."}, clusterLabels)
	metricLearners = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "steward_cluster_learners",
		Help: "Members that are learners (catching up, not voting)."}, clusterLabels)
	metricFormed = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "steward_cluster_formed",
		Help: "1 once the cluster has formed (its members agreed on an etcd cluster ID, status.clusterID), else 0: a cluster still forming has no quorum yet, and has not lost one."}, clusterLabels)
	metricQuorate = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "steward_cluster_quorate",
		Help: "1 while a quorum of the cluster's voters answers (condition Quorate), else 0."}, clusterLabels)
	metricHasLeader = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "steward_cluster_has_leader",
		Help: "1 while the members report a leader, else 0."}, clusterLabels)
	metricHibernating = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "steward_cluster_hibernating",
		Help: "1 while the cluster hibernates or goes into or out of hibernation (its members are meant to be down), else 0."}, clusterLabels)
	metricBackupReady = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "steward_cluster_backup_ready",
		Help: "1 while backups are current (condition BackupReady: a snapshot within three delta periods), else 0; absent without spec.backup."}, clusterLabels)
	metricLeaderChanges = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "steward_cluster_leader_changes_total",
		Help: "Times the cluster's leader was seen to change from one member to another."}, clusterLabels)
	metricLastBackup = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "steward_cluster_last_backup_timestamp_seconds",
		Help: "When the newest snapshot (full or delta) was stored, as of the operator's last pass (Unix time; absent without backups or before the first)."}, clusterLabels)
	metricRevision = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "steward_cluster_revision",
		Help: "The newest revision a member reported, as of the operator's last pass (status.revision may be up to an hour behind at rest)."}, clusterLabels)
	metricCAExpiry = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "steward_cluster_ca_expiry_timestamp_seconds",
		Help: "When the CA of the cluster's certificates expires (Unix time; absent without TLS)."}, clusterLabels)
	metricReconcileErrors = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "steward_cluster_reconcile_errors_total",
		Help: "Errors met by the operator's passes over the cluster, by stable error code."}, append(clusterLabels, "code"))
)

// reconcileErrorCodes are the codes of the errors a pass records about a component or an
// act: each series exists at 0 from the cluster's first pass, so that an increase() alert sees
// the first error. (Codes of rarer errors appear with their first occurrence.)
func reconcileErrorCodes() []string {
	codes := []string{"ERR_BACKUP_SECRET", "ERR_DELETE_POD", "ERR_FENCE_POD", "ERR_CA_ROTATION", ErrImageNotAllowed}
	for _, c := range components {
		codes = append(codes, errCode("SYNC", c.code))
	}
	return codes
}

func init() {
	ctrlmetrics.Registry.MustRegister(metricReplicas, metricReadyMembers, metricVoters, metricLearners, metricFormed, metricQuorate,
		metricHasLeader, metricHibernating, metricBackupReady, metricLeaderChanges, metricLastBackup, metricRevision, metricCAExpiry, metricReconcileErrors)
}

// recordMetrics sets the cluster's series from the status a pass computed (before: the one
// it read), and counts the pass's errors: its figures are the pass's own, also when the
// status keeps older ones (holdFigures).
func recordMetrics(ec *v1alpha1.EtcdCluster, before, after *v1alpha1.EtcdClusterStatus, errs []v1alpha1.LastError) {
	l := prometheus.Labels{"namespace": ec.Namespace, "cluster": ec.Name}
	metricReplicas.With(l).Set(float64(ec.Spec.Replicas))
	metricReadyMembers.With(l).Set(float64(after.ReadyReplicas))
	learners := 0
	for _, m := range after.Members {
		if m.Role == v1alpha1.RoleLearner {
			learners++
		}
	}
	metricVoters.With(l).Set(float64(len(after.Voters)))
	metricLearners.With(l).Set(float64(learners))
	metricFormed.With(l).Set(boolGauge(after.ClusterID != ""))
	metricQuorate.With(l).Set(boolGauge(meta.IsStatusConditionTrue(after.Conditions, v1alpha1.ConditionQuorate)))
	metricHasLeader.With(l).Set(boolGauge(after.Leader != ""))
	metricHibernating.With(l).Set(boolGauge(after.Hibernation != nil))
	if ec.Spec.Backup != nil {
		metricBackupReady.With(l).Set(boolGauge(meta.IsStatusConditionTrue(after.Conditions, v1alpha1.ConditionBackupReady)))
	} else {
		metricBackupReady.Delete(l)
	}
	changes := metricLeaderChanges.With(l) // exists at 0 from the first pass
	if before.Leader != "" && after.Leader != "" && before.Leader != after.Leader {
		changes.Inc()
	}
	setTime(metricLastBackup, l, after.LastBackupTime)
	if after.Revision > 0 {
		metricRevision.With(l).Set(float64(after.Revision))
	} else {
		metricRevision.Delete(l)
	}
	if after.CA != nil {
		setTime(metricCAExpiry, l, &after.CA.NotAfter)
	} else {
		metricCAExpiry.Delete(l)
	}
	for _, code := range reconcileErrorCodes() {
		metricReconcileErrors.WithLabelValues(ec.Namespace, ec.Name, code)
	}
	for _, e := range errs {
		metricReconcileErrors.WithLabelValues(ec.Namespace, ec.Name, e.Code).Inc()
	}
}

// forgetMetrics drops a deleted cluster's series.
func forgetMetrics(namespace, name string) {
	l := prometheus.Labels{"namespace": namespace, "cluster": name}
	for _, g := range []*prometheus.GaugeVec{metricReplicas, metricReadyMembers, metricVoters, metricLearners, metricFormed, metricQuorate,
		metricHasLeader, metricHibernating, metricBackupReady, metricLastBackup, metricRevision, metricCAExpiry} {
		g.Delete(l)
	}
	metricLeaderChanges.Delete(l)
	metricReconcileErrors.DeletePartialMatch(l)
}

func setTime(g *prometheus.GaugeVec, l prometheus.Labels, t *metav1.Time) {
	if t == nil || t.IsZero() {
		g.Delete(l)
		return
	}
	g.With(l).Set(float64(t.Time.UnixNano()) / float64(time.Second))
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
