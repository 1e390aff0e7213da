package operator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/backup/snapshotter"
	"github.com/etcd-steward/steward/internal/sidecarapi"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// component owns one kind of object of a cluster: sync makes it as desired, delete removes it.
type component struct {
	// code is the stable error code of a failed sync (ERR_SYNC_<code>) or delete (ERR_DELETE_<code>).
	code   string
	sync   func(ctx context.Context, r *run) error
	delete func(ctx context.Context, r *run) error
}

// run is one reconciliation of one cluster: what the components sync from.
type run struct {
	c client.Client
	// reader reads uncached: what a delete, an ownership check or a CA rollover must see
	// fresh, the Secrets the user keeps (the cache holds only Steward's), and what the cache
	// does not hold (see read).
	reader client.Reader
	ec     *v1alpha1.EtcdCluster
	// image is the operator's default member image; allowedImages the patterns of
	// --allowed-images (empty: any image).
	image         string
	allowedImages []string
	// operatorNamespace is where the operator's pods run ("": unknown), which the
	// NetworkPolicy lets reach the sidecars.
	operatorNamespace string
	decision          Decision
	// memberLeases is how many member Leases must exist (ordinals 0..n-1).
	memberLeases int
	now          time.Time
	// formed: the cluster has formed (Observation.Formed).
	formed bool
	// ca is what the TLS component found of the cluster's CAs (nil: no TLS, or not usable).
	ca *CAState
	// caCheck is what the TLS component found of the CA that issues the certificates (nil:
	// no TLS, or not read).
	caCheck *caCheck
	// tokenKey identifies the token signing key the AUTH component found good this pass (a
	// hash of its public key; "": none, or no authentication).
	tokenKey string
	// tokenKeyMinted is the renewal request whose key pair the token signing key Secret holds
	// this pass ("": none recorded, or not read).
	tokenKeyMinted string
	// statefulSetObserved: the StatefulSet as this pass left it holds the newest pod template
	// (none waits) and has been seen by the StatefulSet controller (status.observedGeneration),
	// so its rollout state is current.
	statefulSetObserved bool
	// recorder, when set, takes the Events of the components.
	recorder events.EventRecorder
	// orphanClusterIDs are the etcd cluster IDs that members a deleted EtcdCluster of this
	// name left behind report: adoption must match them.
	orphanClusterIDs []string
	// conflicts are the objects under the cluster's names this pass left alone.
	conflicts []conflict
}

// fresh reads what must be read fresh: uncached when the run has a reader.
func (r *run) fresh() client.Reader {
	if r.reader != nil {
		return r.reader
	}
	return r.c
}

// read reads the object named name in the cluster's namespace with readCached.
func (r *run) read(ctx context.Context, name string, obj client.Object) error {
	return readCached(ctx, r.c, r.reader, client.ObjectKey{Namespace: r.ec.Namespace, Name: name}, obj)
}

// readCached reads key from the cache (cached), and from the API server (fresh; nil: never)
// only when the cache has none of that name: the cache holds only what is labelled for a
// Steward cluster (one made by someone else under the name is not there) and may not hold
// yet what was just made. A pass at rest finds everything it made in the cache, and asks
// the API server nothing.
func readCached(ctx context.Context, cached, fresh client.Reader, key client.ObjectKey, obj client.Object) error {
	err := cached.Get(ctx, key, obj)
	if apierrors.IsNotFound(err) && fresh != nil {
		err = fresh.Get(ctx, key, obj)
	}
	return err
}

func (r *run) event(typ, reason, msg string) {
	if r.recorder != nil {
		r.recorder.Eventf(r.ec, nil, typ, reason, "Sync", "%s", msg)
	}
}

// components in creation order: what the pods need exists before the StatefulSet creates
// them. Deletion runs in reverse.
var components = []component{
	{code: "RBAC", sync: syncRBAC, delete: deleteRBAC},
	{code: "TOKEN", sync: syncToken, delete: deleteSecretNamed(func(r *run) string { return tokenSecretName(r.ec) })},
	{code: "TLS", sync: syncTLS, delete: deleteTLS},
	{code: "AUTH", sync: syncAuth, delete: deleteAuth},
	{code: "CONFIGMAP", sync: syncConfigMap, delete: deleteByName(&corev1.ConfigMap{}, configMapName)},
	{code: "SERVICES", sync: syncServices, delete: deleteServices},
	{code: "NETWORKPOLICY", sync: syncNetworkPolicy, delete: deleteByName(&networkingv1.NetworkPolicy{}, networkPolicyName)},
	{code: "MEMBERS", sync: syncMembers, delete: deleteMembers},
	{code: "PDB", sync: syncPDB, delete: deleteByName(&policyv1.PodDisruptionBudget{}, statefulSetName)},
	{code: "STATEFULSET", sync: syncStatefulSet, delete: deleteByName(&appsv1.StatefulSet{}, statefulSetName)},
}

// apply creates obj or updates it with mutate's changes; it writes nothing when mutate
// changes nothing (a cluster at rest causes no writes), and never changes an object the
// cluster does not own (claim).
func apply(ctx context.Context, r *run, obj client.Object, component string, mutate func() error) error {
	adopted := false
	_, err := controllerutil.CreateOrUpdate(ctx, r.c, obj, func() error {
		if obj.GetResourceVersion() != "" { // it exists
			var err error
			if adopted, err = r.claim(obj); err != nil {
				return err
			}
		}
		labels := obj.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		for k, v := range commonLabels(r.ec, component) {
			labels[k] = v
		}
		obj.SetLabels(labels)
		if err := controllerutil.SetControllerReference(r.ec, obj, r.c.Scheme()); err != nil {
			return err
		}
		return mutate()
	})
	if apierrors.IsAlreadyExists(err) {
		// The cache does not hold it (a cache limited to Steward's labels does not see
		// objects others made): read it from the API server to say whose it is.
		if err := r.fresh().Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		if _, cerr := r.claim(obj); cerr != nil {
			return cerr
		}
	}
	if err == nil && adopted {
		r.adopted(obj)
	}
	return err
}

// claim decides whether the run may change obj, which exists under a name the cluster needs
// (decideClaim). Its own: yes. An orphan the adopt annotation asks for: yes, and obj now
// carries this EtcdCluster as its controller (adopted is true; the caller writes it and
// records it with adopted). Any other: the conflict, recorded in the run, and obj is left alone.
func (r *run) claim(obj client.Object) (adopted bool, err error) {
	switch c := decideClaim(newClaimInput(r.ec, r.orphanClusterIDs), obj); c {
	case ClaimOwned:
		return false, nil
	case ClaimAdopt:
		refs := slices.DeleteFunc(obj.GetOwnerReferences(), func(o metav1.OwnerReference) bool { return o.Controller != nil && *o.Controller })
		obj.SetOwnerReferences(refs)
		if err := controllerutil.SetControllerReference(r.ec, obj, r.c.Scheme()); err != nil {
			return false, err
		}
		return true, nil
	default:
		cf := conflict{Case: c, Kind: kindOf(r, obj), Name: obj.GetName(), Cluster: r.ec.Name, Namespace: r.ec.Namespace, IDs: r.orphanClusterIDs}
		if !slices.ContainsFunc(r.conflicts, func(o conflict) bool { return o.Kind == cf.Kind && o.Name == cf.Name }) {
			r.conflicts = append(r.conflicts, cf)
		}
		return false, cf
	}
}

// own makes obj, read from the API server, the run's to use: its own, or adopted now (the
// owner reference written); else the conflict.
func (r *run) own(ctx context.Context, obj client.Object) error {
	adopted, err := r.claim(obj)
	if err != nil || !adopted {
		return err
	}
	if err := r.c.Update(ctx, obj); err != nil {
		return err
	}
	r.adopted(obj)
	return nil
}

func (r *run) adopted(obj client.Object) {
	r.event(corev1.EventTypeNormal, "Adopted", fmt.Sprintf("%s %s, left by a deleted EtcdCluster of this name, is adopted (annotation %s)",
		kindOf(r, obj), obj.GetName(), v1alpha1.AnnotationAdopt))
}

func kindOf(r *run, obj client.Object) string {
	if gvk, err := apiutil.GVKForObject(obj, r.c.Scheme()); err == nil {
		return gvk.Kind
	}
	return fmt.Sprintf("%T", obj)
}

func objectMeta(r *run, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: r.ec.Namespace}
}

// deleteByName deletes the object of the cluster named name, if the cluster owns it.
func deleteByName(proto client.Object, name func(*v1alpha1.EtcdCluster) string) func(context.Context, *run) error {
	return func(ctx context.Context, r *run) error {
		obj := proto.DeepCopyObject().(client.Object)
		return deleteOwned(ctx, r, obj, name(r.ec))
	}
}

// deleteOwned deletes the object of obj's type named name only if its controller owner
// reference is this EtcdCluster, read fresh from the API server, and only that very object
// (a UID precondition): what others made under the cluster's names stays.
func deleteOwned(ctx context.Context, r *run, obj client.Object, name string) error {
	err := r.fresh().Get(ctx, client.ObjectKey{Namespace: r.ec.Namespace, Name: name}, obj)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	return deleteIfOwned(ctx, r, obj)
}

// deleteIfOwned deletes obj, as read, if the cluster owns it, with a UID precondition.
func deleteIfOwned(ctx context.Context, r *run, obj client.Object) error {
	if !metav1.IsControlledBy(obj, r.ec) {
		return nil
	}
	uid := obj.GetUID()
	return client.IgnoreNotFound(r.c.Delete(ctx, obj, client.Preconditions{UID: &uid}, client.PropagationPolicy(metav1.DeletePropagationBackground)))
}

// syncToken makes the cluster's sidecar API token Secret once: 256 random bits, owned by the
// EtcdCluster and held by SecretFinalizer. An existing Secret is never rewritten (a token
// replaced by hand stays), only checked; a Secret deleted anyway is made anew. The token is
// never logged, recorded in the status or put in an Event.
func syncToken(ctx context.Context, r *run) error {
	name := tokenSecretName(r.ec)
	_, _, err := ensureGeneratedSecret(ctx, r, name, "sidecar-token", func(data map[string][]byte) error {
		if _, err := sidecarapi.ParseTokens(data[v1alpha1.SidecarTokenKey]); err != nil {
			return fmt.Errorf("the sidecar API token Secret %s/%s, key %s: %w; put a valid token there, or delete the Secret to have a new one made", r.ec.Namespace, name, v1alpha1.SidecarTokenKey, err)
		}
		return nil
	}, singleValue(v1alpha1.SidecarTokenKey, sidecarapi.GenerateToken))
	return err
}

func syncConfigMap(ctx context.Context, r *run) error {
	data, err := configMapData(r.ec, int(r.decision.ConfigMembers), r.decision.Fenced)
	if err != nil {
		return err
	}
	cm := &corev1.ConfigMap{ObjectMeta: objectMeta(r, configMapName(r.ec))}
	return apply(ctx, r, cm, "config", func() error {
		cm.Data = data
		return nil
	})
}

func syncServices(ctx context.Context, r *run) error {
	client := &corev1.Service{ObjectMeta: objectMeta(r, clientServiceName(r.ec))}
	if err := apply(ctx, r, client, "client", func() error {
		client.Spec.Type = corev1.ServiceTypeClusterIP
		client.Spec.Selector = selectorLabels(r.ec)
		client.Spec.Ports = []corev1.ServicePort{{Name: "client", Port: ClientPort, TargetPort: intstr.FromInt(ClientPort), Protocol: corev1.ProtocolTCP}}
		return nil
	}); err != nil {
		return err
	}
	peer := &corev1.Service{ObjectMeta: objectMeta(r, peerServiceName(r.ec))}
	return apply(ctx, r, peer, "peer", func() error {
		peer.Spec.ClusterIP = corev1.ClusterIPNone
		peer.Spec.Selector = selectorLabels(r.ec)
		// Members must find each other before they are Ready: they become Ready only once
		// they have formed the cluster.
		peer.Spec.PublishNotReadyAddresses = true
		peer.Spec.Ports = []corev1.ServicePort{
			{Name: "peer", Port: PeerPort, TargetPort: intstr.FromInt(PeerPort), Protocol: corev1.ProtocolTCP},
			{Name: "client", Port: ClientPort, TargetPort: intstr.FromInt(ClientPort), Protocol: corev1.ProtocolTCP},
			{Name: "sidecar", Port: SidecarPort, TargetPort: intstr.FromInt(SidecarPort), Protocol: corev1.ProtocolTCP},
		}
		return nil
	})
}

func deleteServices(ctx context.Context, r *run) error {
	for _, name := range []string{clientServiceName(r.ec), peerServiceName(r.ec)} {
		if err := deleteOwned(ctx, r, &corev1.Service{}, name); err != nil {
			return err
		}
	}
	return nil
}

// syncMembers keeps each member's Lease and EtcdMember, and the snapshot Leases.
func syncMembers(ctx context.Context, r *run) error {
	if err := syncLeases(ctx, r); err != nil {
		return err
	}
	return syncEtcdMembers(ctx, r)
}

// syncLeases keeps one member Lease per member (created empty: the sidecar renews it with
// holder "<memberID>:<role>"), the two snapshot Leases, and deletes the Leases of members
// that no longer exist (status table cases 11 to 13).
func syncLeases(ctx context.Context, r *run) error {
	want := map[string]string{fullLeaseName(r.ec): "full-snapshot", deltaLeaseName(r.ec): "delta-snapshot"}
	for i := 0; i < r.memberLeases; i++ {
		want[memberName(r.ec, i)] = "member"
	}
	var have coordinationv1.LeaseList
	if err := r.c.List(ctx, &have, client.InNamespace(r.ec.Namespace), client.MatchingLabels(selectorLabels(r.ec))); err != nil {
		return err
	}
	duration := map[string]*int32{} // the duration a Lease needs: its lapse wakes the operator (leaseClock)
	for name, kind := range want {
		switch kind {
		case "member":
			duration[name] = ptr(int32(leaseDuration.Seconds()))
		case "delta-snapshot":
			// Three delta periods without a delta make the backups stale (BackupReady).
			if b := r.ec.Spec.Backup; b != nil {
				period := snapshotter.DefaultDeltaPeriod
				if b.DeltaPeriod != nil {
					period = b.DeltaPeriod.Duration
				}
				duration[name] = ptr(int32(max((3*period+time.Second-1)/time.Second, 1)))
			}
		}
	}
	current := map[string]bool{} // owned, and for the delta-snapshot Lease with the duration it needs (the delta period may change)
	for i := range have.Items {
		l := &have.Items[i]
		current[l.Name] = metav1.IsControlledBy(l, r.ec) && (l.Name != deltaLeaseName(r.ec) || ptrEqual(l.Spec.LeaseDurationSeconds, duration[l.Name]))
		if _, ok := want[l.Name]; !ok {
			if err := deleteIfOwned(ctx, r, l); err != nil {
				return err
			}
		}
	}
	for name, kind := range want {
		if current[name] {
			continue // the sidecar renews it: nothing to write
		}
		l := &coordinationv1.Lease{ObjectMeta: objectMeta(r, name)}
		if err := apply(ctx, r, l, "lease", func() error {
			l.Labels[LabelLeaseKind] = kind
			l.Spec.LeaseDurationSeconds = duration[name]
			return nil
		}); err != nil {
			return err
		}
	}
	return nil
}

func ptrEqual[T comparable](a, b *T) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

// deleteMembers deletes the cluster's own EtcdMembers and Leases, listed fresh.
func deleteMembers(ctx context.Context, r *run) error {
	var members v1alpha1.EtcdMemberList
	var leases coordinationv1.LeaseList
	for _, list := range []client.ObjectList{&members, &leases} {
		if err := r.fresh().List(ctx, list, client.InNamespace(r.ec.Namespace), client.MatchingLabels(selectorLabels(r.ec))); err != nil {
			return err
		}
	}
	for i := range members.Items {
		if err := deleteIfOwned(ctx, r, &members.Items[i]); err != nil {
			return err
		}
	}
	for i := range leases.Items {
		if err := deleteIfOwned(ctx, r, &leases.Items[i]); err != nil {
			return err
		}
	}
	return nil
}

// syncEtcdMembers keeps one EtcdMember per member (its sidecar writes the status) and deletes
// those of members that no longer exist.
func syncEtcdMembers(ctx context.Context, r *run) error {
	var have v1alpha1.EtcdMemberList
	if err := r.c.List(ctx, &have, client.InNamespace(r.ec.Namespace), client.MatchingLabels(selectorLabels(r.ec))); err != nil {
		return err
	}
	owned := map[string]bool{}
	for i := range have.Items {
		m := &have.Items[i]
		owned[m.Name] = metav1.IsControlledBy(m, r.ec)
		if n, ok := ordinal(r.ec, m.Name); !ok || n >= r.memberLeases {
			if err := deleteIfOwned(ctx, r, m); err != nil {
				return err
			}
		}
	}
	for i := 0; i < r.memberLeases; i++ {
		if owned[memberName(r.ec, i)] {
			continue // its sidecar writes the status: nothing to write
		}
		m := &v1alpha1.EtcdMember{ObjectMeta: objectMeta(r, memberName(r.ec, i))}
		if err := apply(ctx, r, m, "member", func() error { return nil }); err != nil {
			return err
		}
	}
	return nil
}

func syncPDB(ctx context.Context, r *run) error {
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: objectMeta(r, statefulSetName(r.ec))}
	return apply(ctx, r, pdb, "member", func() error {
		min := intstr.FromInt32(r.decision.MinAvailable)
		pdb.Spec.MinAvailable = &min
		pdb.Spec.Selector = &metav1.LabelSelector{MatchLabels: selectorLabels(r.ec)}
		return nil
	})
}

func syncRBAC(ctx context.Context, r *run) error {
	sa := &corev1.ServiceAccount{ObjectMeta: objectMeta(r, r.ec.Name)}
	if err := apply(ctx, r, sa, "sidecar", func() error {
		sa.Annotations = serviceAccountAnnotations(sa.Annotations, r.ec.Spec.ServiceAccount.Annotations)
		return nil
	}); err != nil {
		return err
	}
	role := &rbacv1.Role{ObjectMeta: objectMeta(r, r.ec.Name)}
	if err := apply(ctx, r, role, "sidecar", func() error {
		role.Rules = SidecarRules(r.ec, r.memberLeases)
		return nil
	}); err != nil {
		return err
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: objectMeta(r, r.ec.Name)}
	return apply(ctx, r, rb, "sidecar", func() error {
		rb.RoleRef = rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name}
		rb.Subjects = []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa.Name, Namespace: r.ec.Namespace}}
		return nil
	})
}

// SidecarRules let a sidecar touch only its own cluster: read its EtcdCluster and ConfigMap
// (get, or list/watch by name), read the EtcdMembers of the namespace and write the status of
// its cluster's, renew its cluster's Leases, and record Events. (list/watch cannot be limited
// by name to several objects: EtcdMembers are read namespace-wide, and hold no secret.)
func SidecarRules(ec *v1alpha1.EtcdCluster, members int) []rbacv1.PolicyRule {
	leases := []string{fullLeaseName(ec), deltaLeaseName(ec)}
	for i := 0; i < members; i++ {
		leases = append(leases, memberName(ec, i))
	}
	var names []string
	for i := 0; i < members; i++ {
		names = append(names, memberName(ec, i))
	}
	return []rbacv1.PolicyRule{
		{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"etcdclusters"}, ResourceNames: []string{ec.Name},
			Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{configMapName(ec)},
			Verbs: []string{"get", "list", "watch"}},
		// Members read each other's reports and write their own.
		{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"etcdmembers"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"etcdmembers/status"}, ResourceNames: names,
			Verbs: []string{"get", "update", "patch"}},
		// Leases are read namespace-wide (list and watch cannot name several; the sidecar's
		// cache watches its cluster's by label) and written only by name.
		{APIGroups: []string{coordinationv1.GroupName}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{coordinationv1.GroupName}, Resources: []string{"leases"}, ResourceNames: leases,
			Verbs: []string{"update", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	}
}

func deleteRBAC(ctx context.Context, r *run) error {
	for _, obj := range []client.Object{&rbacv1.RoleBinding{}, &rbacv1.Role{}, &corev1.ServiceAccount{}} {
		if err := deleteOwned(ctx, r, obj, r.ec.Name); err != nil {
			return err
		}
	}
	return nil
}

func syncStatefulSet(ctx context.Context, r *run) error {
	sts := &appsv1.StatefulSet{ObjectMeta: objectMeta(r, statefulSetName(r.ec))}
	err := r.read(ctx, sts.Name, sts)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if err == nil {
		if _, err := r.claim(sts.DeepCopy()); err != nil {
			return err
		}
	}
	if err == nil && !sts.DeletionTimestamp.IsZero() {
		return nil // a volume expansion makes it anew once it is gone
	}
	// An image the operator does not allow is never rolled out: no StatefulSet is made for
	// it, and an existing one keeps the template its members run.
	refused := imageRefusal(r.ec, r.image, r.allowedImages)
	if refused != nil && apierrors.IsNotFound(err) {
		return r.refuseImage(refused)
	}
	if len(r.conflicts) > 0 {
		// Pods would run with objects the cluster does not own (its identity, its Services, ...).
		return fmt.Errorf("the member pods are not created or changed while objects the cluster needs are not its own (condition %s)", v1alpha1.ConditionOwnershipConflict)
	}
	if authEnabled(r.ec) && r.tokenKey == "" {
		// Pods made without them could not start: the StatefulSet waits.
		return errors.New("the member pods are not created or changed before the root password and token signing key Secrets are good (component AUTH)")
	}
	want := statefulSetSpec(r.ec, r.image, r.decision.StatefulSetReplicas)
	if authEnabled(r.ec) {
		// etcd reads the key only when it starts: another key (put back by hand) reaches the
		// members by the ordered rolling update, not as their pods happen to restart.
		want.Template.Annotations[AnnotationTokenKey] = r.tokenKey
	}
	if TLSEnabled(r.ec) {
		// The CAs the members trust: a change restarts them, as etcd reads them only when it
		// starts. Without the TLS Secrets this pass, the template keeps what it had.
		trust := sts.Spec.Template.Annotations[AnnotationTrust]
		if r.ca != nil {
			trust = r.ca.Trust
		} else if ProvidedTLS(r.ec) {
			// A member made or scaled to now might not be named by the certificate, or trusted.
			return errors.New("the member pods are not created or changed while the members' certificate Secret is not good (component TLS)")
		}
		if trust == "" {
			return errors.New("the member pods are not created before the cluster's certificates (component TLS)")
		}
		want.Template.Annotations[AnnotationTrust] = trust
	}
	hash := templateHash(want.Template)
	defer func() {
		r.statefulSetObserved = sts.Generation > 0 && sts.Status.ObservedGeneration >= sts.Generation && sts.Annotations[annotationTemplatePending] == ""
	}()
	if apierrors.IsNotFound(err) {
		sts.Spec = want
		return apply(ctx, r, sts, "member", func() error { metav1.SetMetaDataAnnotation(&sts.ObjectMeta, annotationTemplateHash, hash); return nil })
	}
	err = apply(ctx, r, sts, "member", func() error {
		// Selector, service name and claim templates are immutable in a StatefulSet: a
		// volume expansion makes it anew (expandVolumes).
		sts.Spec.Replicas = want.Replicas
		sts.Spec.PodManagementPolicy = want.PodManagementPolicy
		sts.Spec.PersistentVolumeClaimRetentionPolicy = want.PersistentVolumeClaimRetentionPolicy
		// A new pod template waits, recorded as pending, until the rolling update owns it
		// (decideRollout): with OnDelete updates, any pod recreated after the StatefulSet
		// takes it runs it.
		switch {
		case sts.Annotations[annotationTemplateHash] == hash:
			delete(sts.Annotations, annotationTemplatePending)
		case refused != nil:
			// Nothing waits: the spec no longer asks for a template that was waiting.
			delete(sts.Annotations, annotationTemplatePending)
		case r.decision.Rollout.mayApply(hash):
			sts.Spec.Template = want.Template
			metav1.SetMetaDataAnnotation(&sts.ObjectMeta, annotationTemplateHash, hash)
			delete(sts.Annotations, annotationTemplatePending)
		default:
			metav1.SetMetaDataAnnotation(&sts.ObjectMeta, annotationTemplatePending, hash)
		}
		return nil
	})
	if err != nil || refused == nil {
		return err
	}
	return r.refuseImage(refused)
}

// refuseImage is the error of the member image the allowlist refuses, with its code, and its
// Warning Event unless the status already records it.
func (r *run) refuseImage(refusal error) error {
	if !reported(r.ec, ErrImageNotAllowed, refusal.Error()) {
		r.event(corev1.EventTypeWarning, ReasonImageNotAllowed, refusal.Error())
	}
	return codedError{code: ErrImageNotAllowed, err: refusal}
}

// templateHash identifies the pod template Steward renders. It is kept in an annotation of
// the StatefulSet: comparing it, not the stored template (which the API server defaults),
// finds every change of the spec or of Steward's own rendering, and nothing else.
func templateHash(t corev1.PodTemplateSpec) string {
	b, err := json.Marshal(t)
	if err != nil {
		panic(err) // a PodTemplateSpec always marshals
	}
	return shortHash(b)
}

func errCode(phase, code string) string { return fmt.Sprintf("ERR_%s_%s", phase, code) }

// codedError is a component's error with a stable code of its own, for a cause that is not
// the component's sync failing (ERR_SYNC_<component>) but a refusal the user must answer.
type codedError struct {
	code string
	err  error
}

func (e codedError) Error() string { return e.err.Error() }
func (e codedError) Unwrap() error { return e.err }

// syncErrorCode is the code of a component's failed sync.
func syncErrorCode(component string, err error) string {
	if ce := (codedError{}); errors.As(err, &ce) {
		return ce.code
	}
	return errCode("SYNC", component)
}
