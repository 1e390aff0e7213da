package operator

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/backup/agent"
	"github.com/etcd-steward/steward/internal/backup/snapshotter"
	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/kubeview"
	"github.com/etcd-steward/steward/internal/pki"
	"github.com/etcd-steward/steward/internal/restore"
	"github.com/etcd-steward/steward/internal/sidecarapi"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
)

// backupWait is how long an EtcdBackup waits for its cluster to exist and to have a serving
// member before it fails.
const backupWait = 10 * time.Minute

// BackupReconciler carries out EtcdBackups: one full snapshot each, taken by the backup
// leader's sidecar (any member's sidecar forwards the request to it).
type BackupReconciler struct {
	Client client.Client
	// APIReader reads the cluster's sidecar API token Secret uncached (Client when nil).
	APIReader client.Reader
	Recorder  events.EventRecorder
	// HTTP reaches the sidecars (http.DefaultClient when nil).
	HTTP *http.Client
	Now  func() time.Time
}

// SetupWithManager registers the reconciler.
func (r *BackupReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.EtcdBackup{}).
		Named("etcdbackup").
		WithOptions(controller.Options{MaxConcurrentReconciles: 2}).
		Complete(r)
}

// Reconcile takes the snapshot of one EtcdBackup that has not completed or failed yet. A
// backup found Running (the operator restarted during it) is taken again: one more full
// snapshot in the store does no harm.
func (r *BackupReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	eb := &v1alpha1.EtcdBackup{}
	if err := r.Client.Get(ctx, req.NamespacedName, eb); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if eb.Status.Phase == v1alpha1.BackupCompleted || eb.Status.Phase == v1alpha1.BackupFailed {
		return ctrl.Result{}, nil
	}
	now := r.now()
	url, wait, fatal := r.target(ctx, eb)
	switch {
	case fatal != "":
		return ctrl.Result{}, r.finish(ctx, eb, nil, fatal)
	case wait != "":
		if now.Sub(eb.CreationTimestamp.Time) > backupWait {
			return ctrl.Result{}, r.finish(ctx, eb, nil, wait+fmt.Sprintf("; gave up after %s", backupWait))
		}
		return ctrl.Result{RequeueAfter: 10 * time.Second}, r.setPhase(ctx, eb, v1alpha1.BackupPending, wait)
	}
	if err := r.setPhase(ctx, eb, v1alpha1.BackupRunning, "taking a full snapshot through "+url); err != nil {
		return ctrl.Result{}, err
	}
	res, err := r.takeFull(ctx, eb.Namespace, eb.Spec.Cluster, url)
	if err != nil {
		if retry, ok := retryLater(err); ok && now.Sub(eb.CreationTimestamp.Time) <= backupWait {
			return ctrl.Result{RequeueAfter: retry}, r.setPhase(ctx, eb, v1alpha1.BackupPending, fmt.Sprintf("%v; retrying in %s", err, retry))
		}
		return ctrl.Result{}, r.finish(ctx, eb, nil, err.Error())
	}
	return ctrl.Result{}, r.finish(ctx, eb, &res, "")
}

// retryLater says whether a full snapshot refused by a sidecar is worth asking again, and
// when: snapshots are spaced (429), or the token is not yet everywhere after a rotation
// (401/403).
func retryLater(err error) (time.Duration, bool) {
	switch sidecarapi.StatusCode(err) {
	case http.StatusTooManyRequests, http.StatusUnauthorized, http.StatusForbidden:
		if d, ok := sidecarapi.RetryAfter(err); ok {
			return d, true
		}
		return 10 * time.Second, true
	}
	return 0, false
}

func (r *BackupReconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// target finds the sidecar to ask: the leader's when it reports, else any serving member's.
// wait says what is missing for now; fatal why the backup can never be taken.
func (r *BackupReconciler) target(ctx context.Context, eb *v1alpha1.EtcdBackup) (url, wait, fatal string) {
	ec := &v1alpha1.EtcdCluster{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: eb.Namespace, Name: eb.Spec.Cluster}, ec)
	switch {
	case apierrors.IsNotFound(err):
		return "", fmt.Sprintf("EtcdCluster %s/%s does not exist", eb.Namespace, eb.Spec.Cluster), ""
	case err != nil:
		return "", err.Error(), ""
	case ec.Spec.Backup == nil:
		return "", "", fmt.Sprintf("EtcdCluster %s has no spec.backup: set a store there, then create another EtcdBackup", ec.Name)
	}
	return r.sidecar(ctx, ec)
}

// sidecar finds the sidecar of ec that takes a full snapshot: the leader's when it reports,
// else any serving voter's (it forwards the request to the backup leader).
func (r *BackupReconciler) sidecar(ctx context.Context, ec *v1alpha1.EtcdCluster) (url, wait, fatal string) {
	var cm corev1.ConfigMap
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: ec.Namespace, Name: configMapName(ec)}, &cm); err != nil {
		return "", fmt.Sprintf("ConfigMap %s: %v", configMapName(ec), err), ""
	}
	cc, err := v1alpha1.ParseClusterConfig(cm.Data)
	if err != nil {
		return "", "", fmt.Sprintf("ConfigMap %s: %v", configMapName(ec), err)
	}
	var ems v1alpha1.EtcdMemberList
	if err := r.Client.List(ctx, &ems, client.InNamespace(ec.Namespace), client.MatchingLabels(selectorLabels(ec))); err != nil {
		return "", err.Error(), ""
	}
	var serving []string
	for i := range ems.Items {
		em := &ems.Items[i]
		rep, ok := kubeview.MemberReport(em, time.Time{})
		if !ok || !rep.Serving || rep.Learner {
			continue
		}
		if rep.Leader {
			serving = append([]string{em.Name}, serving...)
		} else {
			serving = append(serving, em.Name)
		}
	}
	for _, name := range serving {
		if i := slices.IndexFunc(cc.Members, func(m v1alpha1.MemberConfig) bool { return m.Name == name }); i >= 0 {
			return cc.Members[i].SidecarURL, "", ""
		}
	}
	return "", fmt.Sprintf("no member of %s serves yet", ec.Name), ""
}

// takeFull asks a sidecar for a full snapshot and waits for it, with the cluster's sidecar
// API token.
func (r *BackupReconciler) takeFull(ctx context.Context, ns, clusterName, sidecarURL string) (snapshotter.FullResult, error) {
	var res snapshotter.FullResult
	sc, err := r.sidecarClient(ctx, ns, clusterName)
	if err != nil {
		return res, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	body, err := sc.Call(ctx, http.MethodPost, strings.TrimRight(sidecarURL, "/")+"/v1/snapshots/full")
	if err != nil {
		return res, fmt.Errorf("full snapshot through %s: %w", sidecarURL, err)
	}
	if err := json.Unmarshal(body, &res); err != nil {
		return res, fmt.Errorf("full snapshot through %s: unreadable answer: %w", sidecarURL, err)
	}
	return res, nil
}

// moveLeader asks the sidecar of member from to hand leadership to member to, and waits for it.
func (r *BackupReconciler) moveLeader(ctx context.Context, ec *v1alpha1.EtcdCluster, from, to string) (cluster.MoveLeaderResponse, error) {
	var res cluster.MoveLeaderResponse
	var cm corev1.ConfigMap
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: ec.Namespace, Name: configMapName(ec)}, &cm); err != nil {
		return res, fmt.Errorf("ConfigMap %s: %w", configMapName(ec), err)
	}
	cc, err := v1alpha1.ParseClusterConfig(cm.Data)
	if err != nil {
		return res, fmt.Errorf("ConfigMap %s: %w", configMapName(ec), err)
	}
	i := slices.IndexFunc(cc.Members, func(m v1alpha1.MemberConfig) bool { return m.Name == from })
	if i < 0 {
		return res, fmt.Errorf("member %s is not in the ConfigMap %s", from, configMapName(ec))
	}
	sc, err := r.sidecarClient(ctx, ec.Namespace, ec.Name)
	if err != nil {
		return res, err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	url := strings.TrimRight(cc.Members[i].SidecarURL, "/") + "/v1/leader/move"
	if err := sc.PostJSON(ctx, url, cluster.MoveLeaderRequest{To: to}, &res); err != nil {
		return res, fmt.Errorf("moving leadership from %s to %s: %w", from, to, err)
	}
	return res, nil
}

// sidecarClient calls the sidecars of cluster with its token and, when the cluster has TLS,
// over TLS that trusts only the CAs of its members' ca.crt (read at every call: a rollover
// changes them).
func (r *BackupReconciler) sidecarClient(ctx context.Context, ns, clusterName string) (*sidecarapi.Client, error) {
	tokens, err := r.tokens(ctx, ns, clusterName)
	if err != nil {
		return nil, err
	}
	var ec v1alpha1.EtcdCluster
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: clusterName}, &ec); err != nil {
		return nil, fmt.Errorf("EtcdCluster %s/%s: %w", ns, clusterName, err)
	}
	if !tlsEnabled(&ec) {
		return sidecarapi.NewClient(tokens, r.HTTP), nil
	}
	name := serverSecretName(&ec)
	var s corev1.Secret
	if err := r.reader().Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &s); err != nil {
		return nil, fmt.Errorf("reading the members' CAs from the Secret %s/%s: %w", ns, name, err)
	}
	tc, err := pki.TrustPEM(s.Data[pki.CAFile])
	if err != nil {
		return nil, fmt.Errorf("the members' CAs in the Secret %s/%s: %w", ns, name, err)
	}
	return sidecarapi.NewClient(tokens, withTLS(r.HTTP, tc)), nil
}

// withTLS is hc with tc as its TLS configuration. A transport of the caller's own (not an
// *http.Transport) is kept as it is: it carries its own TLS.
func withTLS(hc *http.Client, tc *tls.Config) *http.Client {
	if hc == nil {
		return sidecarapi.HTTPClient(tc, 0)
	}
	out := *hc
	switch t := hc.Transport.(type) {
	case nil:
		out.Transport = sidecarapi.HTTPClient(tc, 0).Transport
	case *http.Transport:
		t = t.Clone()
		t.TLSClientConfig = tc
		out.Transport = t
	}
	return &out
}

func (r *BackupReconciler) reader() client.Reader {
	if r.APIReader == nil {
		return r.Client
	}
	return r.APIReader
}

// tokens reads the cluster's sidecar API tokens from its Secret.
func (r *BackupReconciler) tokens(ctx context.Context, ns, clusterName string) (sidecarapi.Tokens, error) {
	name := v1alpha1.SidecarTokenSecretName(clusterName)
	var s corev1.Secret
	if err := r.reader().Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &s); err != nil {
		return nil, fmt.Errorf("reading the sidecar API token Secret %s/%s: %w", ns, name, err)
	}
	from := fmt.Sprintf("Secret %s/%s key %s", ns, name, v1alpha1.SidecarTokenKey)
	toks, err := sidecarapi.ParseTokens(s.Data[v1alpha1.SidecarTokenKey])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", from, err)
	}
	return sidecarapi.Static{List: toks, From: from}, nil
}

func (r *BackupReconciler) setPhase(ctx context.Context, eb *v1alpha1.EtcdBackup, phase, msg string) error {
	if eb.Status.Phase == phase && eb.Status.Message == msg {
		return nil
	}
	eb.Status.Phase, eb.Status.Message = phase, msg
	if phase == v1alpha1.BackupRunning {
		t := metav1.NewTime(r.now())
		eb.Status.StartTime = &t
	}
	return r.Client.Status().Update(ctx, eb)
}

// finish records the outcome: Completed with what was stored, or Failed with why.
func (r *BackupReconciler) finish(ctx context.Context, eb *v1alpha1.EtcdBackup, res *snapshotter.FullResult, failure string) error {
	t := metav1.NewTime(r.now())
	eb.Status.EndTime = &t
	if res == nil {
		eb.Status.Phase, eb.Status.Message = v1alpha1.BackupFailed, failure
		r.Recorder.Eventf(eb, nil, corev1.EventTypeWarning, "BackupFailed", "Backup", "%s", failure)
	} else {
		eb.Status.Phase, eb.Status.Message = v1alpha1.BackupCompleted, ""
		eb.Status.Revision, eb.Status.Size, eb.Status.Key = res.Revision, res.Size, res.Key
		r.Recorder.Eventf(eb, nil, corev1.EventTypeNormal, "BackupCompleted", "Backup", "full snapshot %s at revision %d (%d bytes)", res.Key, res.Revision, res.Size)
	}
	return r.Client.Status().Update(ctx, eb)
}

// storeCheckTimeout bounds a sidecar's resolution of a restore target in its store.
const storeCheckTimeout = 2 * time.Minute

// resolveTarget asks a serving member's sidecar to resolve the restore target t in the
// cluster's backup store (POST /v1/restore/target). The sidecar reads its own store with its
// own credentials, in the cluster's namespace: nothing of the tenant's (the store URL, its
// credentials Secret) is read or run by the operator. why says why the target is not checked
// against the store (no member serves, or its sidecar has no backups); err is the store's
// refusal of the target, or why the serving member's sidecar could not be asked.
func (r *BackupReconciler) resolveTarget(ctx context.Context, ec *v1alpha1.EtcdCluster, t cluster.RestoreTarget) (res restore.Result, why string, err error) {
	url, wait, fatal := r.sidecar(ctx, ec)
	if url == "" {
		return res, cmp.Or(wait, fatal), nil
	}
	sc, err := r.sidecarClient(ctx, ec.Namespace, ec.Name)
	if err != nil {
		return res, "", err
	}
	return askTarget(ctx, sc, url, t)
}

// askTarget asks the sidecar at url to resolve t (see resolveTarget).
func askTarget(ctx context.Context, sc *sidecarapi.Client, url string, t cluster.RestoreTarget) (res restore.Result, why string, err error) {
	ctx, cancel := context.WithTimeout(ctx, storeCheckTimeout)
	defer cancel()
	err = sc.PostJSON(ctx, strings.TrimRight(url, "/")+agent.ResolveTargetPath, t, &res)
	switch {
	case err == nil:
		return res, "", nil
	case sidecarapi.StatusCode(err) == http.StatusNotFound:
		return res, fmt.Sprintf("the sidecar at %s has no backups to resolve it in", url), nil
	}
	// A store that refused the target, or a sidecar that could not be asked: no restore is
	// started on a target nothing vouched for.
	return res, "", err
}
