// Package kubeview is a member's cluster.View on the Kubernetes API server: the sidecar of a
// member pod reads its cluster from the objects the operator keeps and reports through its own.
//
//   - spec: the ConfigMap <cluster>-config (cluster.yaml: members, token, tuning, backups);
//   - status: the EtcdCluster's status (cluster ID, voters, member readiness) and every
//     member's EtcdMember (their reports);
//   - report: this member's EtcdMember status, written when something that matters changes
//     (and the figures at most every reportRefresh), and its member Lease, renewed with holder
//     "<memberID>:<role>" while etcd serves.
package kubeview

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/cluster"
	"go.uber.org/zap"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const (
	// renewEvery is how often the member Lease is renewed while etcd serves (a third of the
	// Lease's duration, which the operator sets).
	renewEvery = 10 * time.Second
	// reportRefresh is how often a report whose figures alone changed (revision, indexes,
	// term) is written: changes that matter are written at once.
	reportRefresh = 10 * time.Second
)

// View implements cluster.View for one member of one EtcdCluster.
type View struct {
	c                     client.Client // reads from the cache, writes to the API server
	direct                client.Client // reads that precede a write
	subsMu                sync.Mutex
	subs                  []chan struct{}
	ns, clusterName, name string
	now                   func() time.Time

	mu              sync.Mutex
	published       map[string]snapshotLease // snapshot Leases as last written, by name
	lastBackup      *v1alpha1.MemberBackup   // the backup account as last written
	lastBackupWrite time.Time
	lastKey         string // what matters of the last report written
	lastWrite       time.Time
	lastRenew       time.Time
	lastHolder      string

	lg *zap.Logger
	// synced is closed once the cache has read the cluster; until then waitingFor says why not.
	synced     chan struct{}
	waitingFor atomic.Pointer[string]
}

var _ cluster.View = (*View)(nil)

// New returns the view of member name of cluster in namespace ns. It reads through a cache
// that watches the cluster's ConfigMap, EtcdCluster, EtcdMembers and Leases (no polling of
// the API server); reads that precede a write go to the API server. It returns at once: the
// cache first reads the cluster in the background, however long the API server takes to
// answer (an outage, a slow server, a Role not there yet), and logs what it waits for. Until
// then Snapshot and Config fail with cluster.ErrViewNotReady. The cache runs until ctx ends.
func New(ctx context.Context, cfg *rest.Config, ns, clusterName, name string, lg *zap.Logger) (*View, error) {
	if ns == "" || clusterName == "" || name == "" {
		return nil, errors.New("the Kubernetes view needs the namespace (POD_NAMESPACE), the cluster (--kubernetes-cluster) and the member name (--name)")
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	// The view knows the four kinds it reads and writes (and their lists), all namespaced: it
	// needs no discovery from the API server, and nothing it sets up fails while that does not
	// answer.
	mapper := meta.NewDefaultRESTMapper(nil)
	for _, gvk := range []schema.GroupVersionKind{corev1.SchemeGroupVersion.WithKind("ConfigMap"),
		coordinationv1.SchemeGroupVersion.WithKind("Lease"), v1alpha1.GroupVersion.WithKind("EtcdCluster"),
		v1alpha1.GroupVersion.WithKind("EtcdMember")} {
		mapper.Add(gvk, meta.RESTScopeNamespace)
		mapper.Add(gvk.GroupVersion().WithKind(gvk.Kind+"List"), meta.RESTScopeNamespace)
	}
	mine := labels.SelectorFromSet(labels.Set{v1alpha1.LabelCluster: clusterName})
	ca, err := cache.New(cfg, cache.Options{Scheme: scheme, Mapper: mapper, DefaultNamespaces: map[string]cache.Config{ns: {}},
		ByObject: map[client.Object]cache.ByObject{
			&corev1.ConfigMap{}:     {Field: fields.OneTermEqualSelector("metadata.name", v1alpha1.ConfigMapName(clusterName))},
			&v1alpha1.EtcdCluster{}: {Field: fields.OneTermEqualSelector("metadata.name", clusterName)},
			&v1alpha1.EtcdMember{}:  {Label: mine},
			&coordinationv1.Lease{}: {Label: mine},
		}})
	if err != nil {
		return nil, fmt.Errorf("kubernetes cache: %w", err)
	}
	direct, err := client.New(cfg, client.Options{Scheme: scheme, Mapper: mapper})
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	cached, err := client.New(cfg, client.Options{Scheme: scheme, Mapper: mapper, Cache: &client.CacheOptions{Reader: ca}})
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	if lg == nil {
		lg = zap.NewNop()
	}
	v := &View{c: cached, direct: direct, ns: ns, clusterName: clusterName, name: name, now: time.Now, lg: lg, synced: make(chan struct{})}
	v.waitingFor.Store(new("the first answer of the API server"))
	if err := v.watchObjects(ctx, ca); err != nil {
		return nil, err
	}
	go func() { _ = ca.Start(ctx) }()
	go v.connect(ctx, ca)
	return v, nil
}

// NewReporter returns the writing half of member name's view, through c: Report,
// PublishBackup and AckDirective write what the member's sidecar writes, as often as it
// does. It has no cache (Snapshot and Config read through c; Watch never notifies) and is
// never synced: it stands in for many sidecars at once sharing one client (the operator
// benchmark).
func NewReporter(c client.Client, ns, clusterName, name string) *View {
	return &View{c: c, direct: c, ns: ns, clusterName: clusterName, name: name, now: time.Now, lg: zap.NewNop(), synced: make(chan struct{})}
}

// Synced is closed once the view has read the cluster for the first time.
func (v *View) Synced() <-chan struct{} { return v.synced }

// Ready fails with cluster.ErrViewNotReady, and what the view waits for, until the view has
// read the cluster (reads from the cache would block until then).
func (v *View) Ready() error {
	select {
	case <-v.synced:
		return nil
	default:
		return fmt.Errorf("%w: reading EtcdCluster %s/%s: waiting for %s", cluster.ErrViewNotReady, v.ns, v.clusterName, *v.waitingFor.Load())
	}
}

// connect waits for the cache's first read of the cluster, for as long as it takes (its
// informers retry their lists and watches on their own), and logs what it waits for with a
// backoff until then.
func (v *View) connect(ctx context.Context, ca cache.Cache) {
	synced := make(chan bool, 1)
	go func() { synced <- ca.WaitForCacheSync(ctx) }()
	for n := 1; ; n++ {
		select {
		case ok := <-synced:
			if ok {
				close(v.synced)
				v.lg.Info("the cluster view has read the cluster", zap.String("cluster", v.ns+"/"+v.clusterName))
				v.notify()
			}
			return
		case <-ctx.Done():
			return
		case <-time.After(retryDelay(n)):
		}
		v.probe(ctx)
		v.lg.Warn("the cluster view waits for the Kubernetes API server; this member restarts on its own valid data meanwhile, anything else waits",
			zap.String("cluster", v.ns+"/"+v.clusterName), zap.String("waitingFor", *v.waitingFor.Load()))
	}
}

// watchObjects sets up the cache's informers. Lease renewals are not news: they only refresh
// report times, so Leases are cached without notifications.
func (v *View) watchObjects(ctx context.Context, ca cache.Cache) error {
	for _, obj := range []client.Object{&corev1.ConfigMap{}, &v1alpha1.EtcdCluster{}, &v1alpha1.EtcdMember{}, &coordinationv1.Lease{}} {
		inf, err := ca.GetInformer(ctx, obj)
		if err != nil {
			return fmt.Errorf("kubernetes cache: %w", err)
		}
		if _, lease := obj.(*coordinationv1.Lease); lease {
			continue
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { v.notify() },
			UpdateFunc: func(any, any) { v.notify() },
			DeleteFunc: func(any) { v.notify() },
		}); err != nil {
			return fmt.Errorf("kubernetes cache: %w", err)
		}
	}
	return nil
}

// probe asks the API server directly for the cluster's ConfigMap, to say what the first read
// of the cluster waits for.
func (v *View) probe(ctx context.Context) {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var cm corev1.ConfigMap
	err := v.direct.Get(pctx, v.key(v.configMapName()), &cm)
	switch {
	case err == nil:
		v.waitingFor.Store(new(fmt.Sprintf("the first list of the cluster's objects: the API server answers; can this member's ServiceAccount list and watch ConfigMap %s, EtcdCluster %s, its EtcdMembers and Leases (the Role the operator creates)?", v.configMapName(), v.clusterName)))
	case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
		v.waitingFor.Store(new(fmt.Sprintf("the right to read ConfigMap %s/%s (%v): the Role and RoleBinding the operator creates give it", v.ns, v.configMapName(), err)))
	default:
		v.waitingFor.Store(new(fmt.Sprintf("the API server (%v)", err)))
	}
}

// retryDelay is the wait before the nth retry of the first read: doubling from a second up to
// half a minute.
func retryDelay(n int) time.Duration {
	return min(time.Second<<min(n-1, 5), 30*time.Second)
}

// notify wakes every Watch.
func (v *View) notify() {
	v.subsMu.Lock()
	defer v.subsMu.Unlock()
	for _, ch := range v.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (v *View) key(name string) types.NamespacedName {
	return types.NamespacedName{Namespace: v.ns, Name: name}
}

func (v *View) configMapName() string { return v1alpha1.ConfigMapName(v.clusterName) }

// Config reads the cluster's configuration (cluster.yaml of its ConfigMap).
func (v *View) Config(ctx context.Context) (v1alpha1.ClusterConfig, string, error) {
	if err := v.Ready(); err != nil {
		return v1alpha1.ClusterConfig{}, "", err
	}
	var cm corev1.ConfigMap
	if err := v.c.Get(ctx, v.key(v.configMapName()), &cm); err != nil {
		return v1alpha1.ClusterConfig{}, "", fmt.Errorf("reading ConfigMap %s/%s: %w", v.ns, v.configMapName(), err)
	}
	cfg, err := v1alpha1.ParseClusterConfig(cm.Data)
	if err != nil {
		return cfg, "", fmt.Errorf("ConfigMap %s/%s: %w", v.ns, v.configMapName(), err)
	}
	return cfg, cm.ResourceVersion, nil
}

// Snapshot implements cluster.View.
func (v *View) Snapshot(ctx context.Context) (cluster.Snapshot, error) {
	cfg, cmVersion, err := v.Config(ctx)
	if err != nil {
		return cluster.Snapshot{}, err
	}
	var ec v1alpha1.EtcdCluster
	if err := v.c.Get(ctx, v.key(v.clusterName), &ec); err != nil {
		return cluster.Snapshot{}, fmt.Errorf("reading EtcdCluster %s/%s: %w", v.ns, v.clusterName, err)
	}
	var ems v1alpha1.EtcdMemberList
	if err := v.c.List(ctx, &ems, client.InNamespace(v.ns), client.MatchingLabels{v1alpha1.LabelCluster: v.clusterName}); err != nil {
		return cluster.Snapshot{}, fmt.Errorf("listing EtcdMembers of %s/%s: %w", v.ns, v.clusterName, err)
	}
	var leases coordinationv1.LeaseList
	if err := v.c.List(ctx, &leases, client.InNamespace(v.ns), client.MatchingLabels{v1alpha1.LabelCluster: v.clusterName}); err != nil {
		return cluster.Snapshot{}, fmt.Errorf("listing Leases of %s/%s: %w", v.ns, v.clusterName, err)
	}
	return snapshot(cfg, &ec, ems.Items, leases.Items, cmVersion), nil
}

// snapshot assembles the member's picture of the cluster from what was read.
func snapshot(cfg v1alpha1.ClusterConfig, ec *v1alpha1.EtcdCluster, ems []v1alpha1.EtcdMember, leases []coordinationv1.Lease, cmVersion string) cluster.Snapshot {
	snap := cluster.Snapshot{Spec: cluster.Spec{Name: cfg.Name, Token: cfg.Token, Fenced: cfg.FencedMembers}}
	for _, m := range cfg.Members {
		snap.Spec.Members = append(snap.Spec.Members, cluster.MemberSpec{Name: m.Name, ClientURL: m.ClientURL, PeerURL: m.PeerURL, SidecarURL: m.SidecarURL})
	}
	snap.Status.ClusterID = ec.Status.ClusterID
	for _, vt := range ec.Status.Voters {
		snap.Status.Voters = append(snap.Status.Voters, cluster.Voter{ID: vt.ID, Name: vt.Name, PeerURL: vt.PeerURL})
	}
	renewed := map[string]time.Time{}
	for i := range leases {
		renewed[leases[i].Name] = LeaseRenewed(&leases[i])
	}
	byName := map[string]*cluster.StatusMember{}
	add := func(name string) *cluster.StatusMember {
		if m, ok := byName[name]; ok {
			return m
		}
		byName[name] = &cluster.StatusMember{Name: name}
		return byName[name]
	}
	for _, m := range snap.Spec.Members {
		add(m.Name)
	}
	for _, m := range ec.Status.Members {
		sm := add(m.Name)
		sm.ID, sm.Ready, sm.Learner = m.ID, m.Status == v1alpha1.MemberReady, m.Role == v1alpha1.RoleLearner
	}
	versions := []string{cmVersion, ec.ResourceVersion}
	for i := range ems {
		em := &ems[i]
		versions = append(versions, em.Name+"="+em.ResourceVersion)
		r, ok := MemberReport(em, renewed[em.Name])
		if !ok {
			continue
		}
		sm := add(em.Name)
		sm.Report = &r
		if sm.ID == "" {
			sm.ID = r.MemberID
		}
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		snap.Status.Members = append(snap.Status.Members, *byName[n])
	}
	if ec.Status.Recovery != nil {
		var rec struct {
			Directive *cluster.Directive `json:"directive"`
		}
		if json.Unmarshal(ec.Status.Recovery.Raw, &rec) == nil && rec.Directive != nil {
			d := *rec.Directive
			// The seed sees its own acknowledgement at once, before the operator records it.
			if d.Ack == nil {
				for i := range ems {
					if a, ok := MemberAck(&ems[i]); ok && ems[i].Name == d.Seed && a.Epoch == d.Epoch {
						d.Ack = &a.Result
					}
				}
			}
			snap.Directive = &d
		}
	}
	snap.Version = strings.Join(versions, ",")
	return snap
}

// Report implements cluster.View: it writes the report to this member's EtcdMember
// when something that matters changed (or the figures are reportRefresh old), and renews the
// member Lease while etcd serves.
func (v *View) Report(ctx context.Context, r cluster.Report) error {
	now := v.now()
	v.mu.Lock()
	key, write := reportKey(r), false
	if key != v.lastKey || now.Sub(v.lastWrite) >= reportRefresh {
		write = true
	}
	holder := holderOf(r)
	renew := holder != "" && (holder != v.lastHolder || now.Sub(v.lastRenew) >= renewEvery)
	v.mu.Unlock()

	// The report and the Lease are written independently: a report the API server refuses
	// (a webhook, a quota, a conflict) must not also leave the Lease to expire, which would
	// make a serving member look silent.
	var reportErr, leaseErr error
	if write {
		if reportErr = v.writeReport(ctx, r); reportErr == nil {
			v.mu.Lock()
			v.lastKey, v.lastWrite = key, now
			v.mu.Unlock()
		}
	}
	if renew {
		if leaseErr = v.renewLease(ctx, holder, now); leaseErr == nil {
			v.mu.Lock()
			v.lastHolder, v.lastRenew = holder, now
			v.mu.Unlock()
		}
	}
	return errors.Join(reportErr, leaseErr)
}

func (v *View) writeReport(ctx context.Context, r cluster.Report) error {
	raw, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return v.writeStatus(ctx, func(st *v1alpha1.EtcdMemberStatus) { st.Report = &runtime.RawExtension{Raw: raw} })
}

// reportKey is what of a report matters at once: identity, data, role, formation, the
// member list, the start-up decision and problems. Revision, term and indexes change with
// every write and are refreshed every reportRefresh.
func reportKey(r cluster.Report) string {
	r.At, r.Revision, r.Term, r.LastTerm, r.LastIndex, r.Commit, r.Applied = time.Time{}, 0, 0, 0, 0, 0, 0
	b, _ := json.Marshal(r)
	return string(b)
}

// holderOf is the member Lease's holder for a report: "<memberID>:<role>" while etcd serves,
// "" (no renewal) otherwise.
func holderOf(r cluster.Report) string {
	if !r.Serving || r.MemberID == "" {
		return ""
	}
	role := v1alpha1.RoleMember
	switch {
	case r.Learner:
		role = v1alpha1.RoleLearner
	case r.Leader:
		role = v1alpha1.RoleLeader
	}
	return r.MemberID + ":" + role
}

// memberBackup is the EtcdMember's account of the backup status s.
func memberBackup(s cluster.BackupStatus) v1alpha1.MemberBackup {
	mb := v1alpha1.MemberBackup{Ready: s.Ready, Reason: s.ReadyReason, LastError: s.LastError}
	if d := s.LastDrill; !d.Time.IsZero() {
		mb.LastDrill = &v1alpha1.MemberDrill{Timeline: int64(d.Timeline), Revision: d.Revision, Time: metav1.NewTime(d.Time),
			Duration: metav1.Duration{Duration: d.Duration}, OK: d.OK, Result: d.Result}
	}
	if w := s.Recoverable; w != nil {
		// Whole seconds, as the API server stores them: an unchanged window must compare equal
		// to the one written, or every report would write it again.
		first, last := metav1.NewTime(w.FirstTime.Truncate(time.Second)), metav1.NewTime(w.LastTime.Truncate(time.Second))
		mb.Recoverable = &v1alpha1.Recoverability{Timeline: int64(w.Timeline), ClusterID: w.ClusterID, FirstRevision: w.FirstRevision, FirstTime: &first,
			LastRevision: w.LastRevision, LastTime: &last}
	}
	return mb
}

// backupKey is what of a backup account matters at once: all but the end of the recoverable
// window, which moves with every delta and is refreshed every reportRefresh.
func backupKey(mb v1alpha1.MemberBackup) v1alpha1.MemberBackup {
	if w := mb.Recoverable; w != nil {
		w = w.DeepCopy()
		w.LastRevision, w.LastTime = 0, nil
		mb.Recoverable = w
	}
	return mb
}

// snapshotLease is what a snapshot Lease says: the revision stored (holder) and when.
type snapshotLease struct {
	revision int64
	at       time.Time
}

// PublishBackup implements cluster.BackupPublisher: the backup leader writes the newest full
// snapshot to the Lease <cluster>-full-snapshot, and the newest revision known stored (and
// when it was current) to <cluster>-delta-snapshot; holder = revision, renewTime = time. A
// Lease is written when its revision changes, or its time is a delta period old.
func (v *View) PublishBackup(ctx context.Context, s cluster.BackupStatus) error {
	want := map[string]snapshotLease{}
	if !s.LatestFullTime.IsZero() {
		want[v1alpha1.FullSnapshotLeaseName(v.clusterName)] = snapshotLease{s.LatestFullRevision, s.LatestFullTime}
	}
	if !s.CurrentAt.IsZero() {
		want[v1alpha1.DeltaSnapshotLeaseName(v.clusterName)] = snapshotLease{s.CurrentRevision, s.CurrentAt}
	}
	mb := memberBackup(s)
	v.mu.Lock()
	changed := v.lastBackup == nil || !equality.Semantic.DeepEqual(backupKey(*v.lastBackup), backupKey(mb)) ||
		(!equality.Semantic.DeepEqual(*v.lastBackup, mb) && v.now().Sub(v.lastBackupWrite) >= reportRefresh)
	v.mu.Unlock()
	if changed {
		if err := v.writeStatus(ctx, func(st *v1alpha1.EtcdMemberStatus) { st.Backup = &mb }); err != nil {
			return err
		}
		v.mu.Lock()
		v.lastBackup, v.lastBackupWrite = &mb, v.now()
		v.mu.Unlock()
	}
	for name, l := range want {
		v.mu.Lock()
		prev, ok := v.published[name]
		v.mu.Unlock()
		if ok && prev.revision == l.revision && l.at.Sub(prev.at) < s.DeltaPeriod {
			continue
		}
		if err := v.writeLease(ctx, name, strconv.FormatInt(l.revision, 10), l.at); err != nil {
			return err
		}
		v.mu.Lock()
		if v.published == nil {
			v.published = map[string]snapshotLease{}
		}
		v.published[name] = l
		v.mu.Unlock()
	}
	return nil
}

// AckDirective implements cluster.View.
func (v *View) AckDirective(ctx context.Context, epoch int64, result cluster.DirectiveResult) error {
	raw, err := json.Marshal(cluster.DirectiveAck{Epoch: epoch, Result: result})
	if err != nil {
		return err
	}
	return v.writeStatus(ctx, func(st *v1alpha1.EtcdMemberStatus) { st.Ack = &runtime.RawExtension{Raw: raw} })
}

// writeStatus updates this member's EtcdMember status, retrying on conflicts.
func (v *View) writeStatus(ctx context.Context, set func(*v1alpha1.EtcdMemberStatus)) error {
	for try := 0; ; try++ {
		var em v1alpha1.EtcdMember
		if err := v.direct.Get(ctx, v.key(v.name), &em); err != nil {
			return fmt.Errorf("reading EtcdMember %s/%s (the operator creates it): %w", v.ns, v.name, err)
		}
		before := em.Status.DeepCopy()
		set(&em.Status)
		if statusEqual(before, &em.Status) {
			return nil
		}
		err := v.c.Status().Update(ctx, &em)
		if err == nil || !apierrors.IsConflict(err) || try == 5 {
			if err != nil {
				return fmt.Errorf("writing the status of EtcdMember %s/%s: %w", v.ns, v.name, err)
			}
			return nil
		}
	}
}

func statusEqual(a, b *v1alpha1.EtcdMemberStatus) bool {
	raw := func(r *runtime.RawExtension) []byte {
		if r == nil {
			return nil
		}
		return r.Raw
	}
	return bytes.Equal(raw(a.Report), raw(b.Report)) && bytes.Equal(raw(a.Ack), raw(b.Ack)) &&
		(a.Backup == nil) == (b.Backup == nil) && (a.Backup == nil || *a.Backup == *b.Backup)
}

// renewLease renews this member's Lease.
func (v *View) renewLease(ctx context.Context, holder string, now time.Time) error {
	return v.writeLease(ctx, v.name, holder, now)
}

// writeLease sets a Lease's holder and renew time (the operator creates the Leases).
func (v *View) writeLease(ctx context.Context, name, holder string, now time.Time) error {
	for try := 0; ; try++ {
		var l coordinationv1.Lease
		if err := v.direct.Get(ctx, v.key(name), &l); err != nil {
			return fmt.Errorf("reading Lease %s/%s (the operator creates it): %w", v.ns, name, err)
		}
		t := metav1.NewMicroTime(now)
		l.Spec.HolderIdentity, l.Spec.RenewTime = &holder, &t
		err := v.c.Update(ctx, &l)
		if err == nil || !apierrors.IsConflict(err) || try == 5 {
			if err != nil {
				return fmt.Errorf("writing Lease %s/%s: %w", v.ns, name, err)
			}
			return nil
		}
	}
}

// Watch implements cluster.View: a value whenever the ConfigMap, the EtcdCluster or an
// EtcdMember of the cluster changes (from the cache's watches).
func (v *View) Watch(ctx context.Context) (<-chan struct{}, error) {
	ch := make(chan struct{}, 1)
	v.subsMu.Lock()
	v.subs = append(v.subs, ch)
	v.subsMu.Unlock()
	go func() {
		<-ctx.Done()
		v.subsMu.Lock()
		defer v.subsMu.Unlock()
		v.subs = slices.DeleteFunc(v.subs, func(c chan struct{}) bool { return c == ch })
		close(ch)
	}()
	return ch, nil
}
