package operator

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
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
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Sidecars calls the sidecars of a cluster's members for the operator: full snapshots,
// leadership moves, restore targets. It calls them with the cluster's sidecar API token and,
// with TLS, trusts only the CAs of the members' ca.crt. A sidecar's URL is derived from the
// member's name in the cluster's own peer Service, never read from an object a tenant can
// edit (a ConfigMap, a report): the operator sends its token to no address a tenant chose.
type Sidecars struct {
	Client client.Client
	// APIReader reads the token and certificate Secrets the cache does not hold: the user's
	// own (spec.tls), and one just made (nil: none is read uncached).
	APIReader client.Reader
	// HTTP reaches the sidecars (http.DefaultClient when nil).
	HTTP *http.Client

	snapshots fullSnapshots
}

// sidecarURL is the sidecar URL of the cluster's member name ("X-<ordinal>"); ok is false
// for a name that is not one of its members'.
func sidecarURL(ec *v1alpha1.EtcdCluster, name string) (string, bool) {
	i, ok := ordinal(ec, name)
	if !ok {
		return "", false
	}
	return fmt.Sprintf("%s://%s:%d", scheme(ec), memberDNS(ec, i), SidecarPort), true
}

// snapshotStep is where a full snapshot the operator asked for stands.
type snapshotStep struct {
	// Result is the snapshot stored (when Taking and NotYet are empty and Err is nil).
	Result snapshotter.FullResult
	// Taking says which sidecar is taking it, and since when ("": none is).
	Taking string
	// NotYet says why none could be asked yet; Retry when to look again.
	NotYet string
	Retry  time.Duration
	Err    error
}

// pending: the snapshot is not stored yet, and did not fail.
func (s snapshotStep) pending() bool { return s.Taking != "" || s.NotYet != "" }

// why is what the step waits for.
func (s snapshotStep) why() string { return cmp.Or(s.Taking, s.NotYet) }

// fullSnapshots are the full snapshots under way, one per purpose (a cluster's rolling
// update or hibernation, an EtcdBackup, an EtcdRestore). Each is taken beside the
// reconcilers' workers: it may take many minutes, and a worker waiting for it would hold up
// every other cluster's health handling. Its outcome is handed out once, then forgotten.
type fullSnapshots struct {
	mu   sync.Mutex
	jobs map[string]*snapshotJob
}

type snapshotJob struct {
	url     string
	started time.Time
	done    bool
	res     snapshotter.FullResult
	err     error
}

// fullSnapshot starts, follows or hands out the full snapshot of ec for purpose (a key
// unique to what needs it, such as "EtcdBackup ns/name"). The sidecar is asked in the
// background; until it answers, the step says it is being taken, and the caller looks again
// at Retry.
func (r *Sidecars) fullSnapshot(ctx context.Context, ec *v1alpha1.EtcdCluster, purpose string) snapshotStep {
	j := &r.snapshots
	j.mu.Lock()
	var seen snapshotJob
	running, ok := j.jobs[purpose]
	if ok {
		seen = *running
		if seen.done {
			delete(j.jobs, purpose)
		}
	}
	j.mu.Unlock()
	switch {
	case ok && !seen.done:
		return snapshotStep{Taking: fmt.Sprintf("being taken through %s for %s", seen.url, time.Since(seen.started).Round(time.Second)), Retry: 5 * time.Second}
	case ok:
		if d, later := retryLater(seen.err); later {
			return snapshotStep{NotYet: seen.err.Error(), Retry: d}
		}
		return snapshotStep{Result: seen.res, Err: seen.err}
	}
	url, wait, fatal := r.sidecar(ctx, ec)
	if fatal != "" {
		return snapshotStep{Err: errors.New(fatal)}
	}
	if url == "" {
		return snapshotStep{NotYet: "no sidecar takes it yet: " + wait, Retry: 10 * time.Second}
	}
	job := &snapshotJob{url: url, started: time.Now()}
	j.mu.Lock()
	if j.jobs == nil {
		j.jobs = map[string]*snapshotJob{}
	}
	j.jobs[purpose] = job
	j.mu.Unlock()
	ec = ec.DeepCopy()
	go func() {
		// Not the reconciliation's context: it ends with the pass. takeFull bounds the call.
		res, err := r.takeFull(context.Background(), ec.Namespace, ec.Name, url)
		j.mu.Lock()
		job.res, job.err, job.done = res, err, true
		j.mu.Unlock()
	}()
	return snapshotStep{Taking: "asked of " + url, Retry: 5 * time.Second}
}

// reports asks the sidecar of each member for its report (GET /v1/report), directly and
// now: the members that answered, by name (empty when none did).
func (r *Sidecars) reports(ctx context.Context, ec *v1alpha1.EtcdCluster, members []MemberObservation) map[string]cluster.Report {
	out := map[string]cluster.Report{}
	sc, err := r.sidecarClient(ctx, ec.Namespace, ec.Name)
	if err != nil {
		return out
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, m := range members {
		url, ok := sidecarURL(ec, m.Name)
		if !ok {
			continue
		}
		wg.Go(func() {
			body, err := sc.Call(ctx, http.MethodGet, url+"/v1/report")
			var rep cluster.Report
			if err != nil || json.Unmarshal(body, &rep) != nil || rep.Name != m.Name {
				return
			}
			mu.Lock()
			out[m.Name] = rep
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// sidecar finds the sidecar of ec that takes a full snapshot: the leader's when it reports,
// else any serving voter's (it forwards the request to the backup leader).
func (r *Sidecars) sidecar(ctx context.Context, ec *v1alpha1.EtcdCluster) (url, wait, fatal string) {
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
		if slices.ContainsFunc(cc.Members, func(m v1alpha1.MemberConfig) bool { return m.Name == name }) {
			if url, ok := sidecarURL(ec, name); ok {
				return url, "", ""
			}
		}
	}
	return "", fmt.Sprintf("no member of %s serves yet", ec.Name), ""
}

// takeFull asks a sidecar for a full snapshot and waits for it, with the cluster's sidecar
// API token.
func (r *Sidecars) takeFull(ctx context.Context, ns, clusterName, sidecarURL string) (snapshotter.FullResult, error) {
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
func (r *Sidecars) moveLeader(ctx context.Context, ec *v1alpha1.EtcdCluster, from, to string) (cluster.MoveLeaderResponse, error) {
	var res cluster.MoveLeaderResponse
	var cm corev1.ConfigMap
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: ec.Namespace, Name: configMapName(ec)}, &cm); err != nil {
		return res, fmt.Errorf("ConfigMap %s: %w", configMapName(ec), err)
	}
	cc, err := v1alpha1.ParseClusterConfig(cm.Data)
	if err != nil {
		return res, fmt.Errorf("ConfigMap %s: %w", configMapName(ec), err)
	}
	base, ok := sidecarURL(ec, from)
	if !ok || !slices.ContainsFunc(cc.Members, func(m v1alpha1.MemberConfig) bool { return m.Name == from }) {
		return res, fmt.Errorf("member %s is not in the ConfigMap %s", from, configMapName(ec))
	}
	sc, err := r.sidecarClient(ctx, ec.Namespace, ec.Name)
	if err != nil {
		return res, err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	url := base + "/v1/leader/move"
	if err := sc.PostJSON(ctx, url, cluster.MoveLeaderRequest{To: to}, &res); err != nil {
		return res, fmt.Errorf("moving leadership from %s to %s: %w", from, to, err)
	}
	return res, nil
}

// sidecarClient calls the sidecars of cluster with its token and, when the cluster has TLS,
// over TLS that trusts only the CAs of its members' ca.crt (read at every call: a rollover
// changes them).
func (r *Sidecars) sidecarClient(ctx context.Context, ns, clusterName string) (*sidecarapi.Client, error) {
	tokens, err := r.tokens(ctx, ns, clusterName)
	if err != nil {
		return nil, err
	}
	var ec v1alpha1.EtcdCluster
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: clusterName}, &ec); err != nil {
		return nil, fmt.Errorf("EtcdCluster %s/%s: %w", ns, clusterName, err)
	}
	if !TLSEnabled(&ec) {
		return sidecarapi.NewClient(tokens, r.HTTP), nil
	}
	name := serverSecretName(&ec)
	var s corev1.Secret
	if err := r.secret(ctx, ns, name, &s); err != nil {
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

// secret reads Secret name with readCached: the cache holds the Secrets the operator made.
func (r *Sidecars) secret(ctx context.Context, ns, name string, s *corev1.Secret) error {
	return readCached(ctx, r.Client, r.APIReader, types.NamespacedName{Namespace: ns, Name: name}, s)
}

// tokens reads the cluster's sidecar API tokens from its Secret.
func (r *Sidecars) tokens(ctx context.Context, ns, clusterName string) (sidecarapi.Tokens, error) {
	name := v1alpha1.SidecarTokenSecretName(clusterName)
	var s corev1.Secret
	if err := r.secret(ctx, ns, name, &s); err != nil {
		return nil, fmt.Errorf("reading the sidecar API token Secret %s/%s: %w", ns, name, err)
	}
	from := fmt.Sprintf("Secret %s/%s key %s", ns, name, v1alpha1.SidecarTokenKey)
	toks, err := sidecarapi.ParseTokens(s.Data[v1alpha1.SidecarTokenKey])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", from, err)
	}
	return sidecarapi.Static{List: toks, From: from}, nil
}

// storeCheckTimeout bounds a sidecar's resolution of a restore target in its store.
const storeCheckTimeout = 2 * time.Minute

// resolveTarget asks a serving member's sidecar to resolve the restore target t in the
// cluster's backup store (POST /v1/restore/target). The sidecar reads its own store with its
// own credentials, in the cluster's namespace: nothing of the tenant's (the store URL, its
// credentials Secret) is read or run by the operator. why says why the target is not checked
// against the store (no member serves, or its sidecar has no backups); err is the store's
// refusal of the target, or why the serving member's sidecar could not be asked.
func (r *Sidecars) resolveTarget(ctx context.Context, ec *v1alpha1.EtcdCluster, t cluster.RestoreTarget) (res restore.Result, why string, err error) {
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
