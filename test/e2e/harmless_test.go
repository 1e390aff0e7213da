package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/testutil"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The operator never harms a healthy cluster: what it cannot see (an API server away, Leases
// not renewed, a Secret gone) and what the user asks for (hibernation, orphan deletion) leave
// the members serving their data.

// outage is how long the API server, or the sidecars' Lease renewals, are away: three times the
// NotReady grace the suite installs Steward with, so that any fence would have come.
const outage = 90 * time.Second

// TestHealthyClusterUntouched keeps a client writing through a 3-member cluster's client
// Service while first the API server is stopped, then the sidecars' Lease renewals are
// denied, each for longer than every grace: no pod is deleted or restarted, nothing is
// fenced, no acknowledged write is lost, and the cluster ID stays.
func TestHealthyClusterUntouched(t *testing.T) {
	ns := namespace(t)
	storeSecret(t, ns)
	apply(t, ns, clusterYAML(ns, "h", 3, plainHTTP))
	waitReady(t, ns, "h", 3, 3*time.Minute)
	id := etcdClusterID(t, ns, "h")
	before := podStates(t, ns, "h")
	acked := map[string]string{}

	runStep(t, "the API server stopped", func(t *testing.T) {
		w := startWriter(t, ns, "h", "api-down", 200*time.Millisecond)
		restarts := operatorRestarts(t)
		ctx := context.Background()
		if err := kubeNode.StopAPIServer(ctx); err != nil {
			t.Fatal(err)
		}
		stopped := true
		defer func() { // the rest of the suite needs it, whatever happened here
			if stopped {
				if err := kubeNode.StartAPIServer(ctx); err != nil {
					t.Errorf("starting the API server again: %v", err)
				}
			}
		}()
		testutil.Throughout(t, outage, "etcd serving through the client Service while the API server is stopped", func() error {
			return w.serving(10 * time.Second)
		})
		if err := kubeNode.StartAPIServer(ctx); err != nil {
			t.Fatal(err)
		}
		stopped, back := false, time.Now()
		// Back, the operator and the node's controllers find every Lease and the node's
		// heartbeat two minutes old: past every grace, nothing must be deleted or fenced,
		// from when the operator leads again until the cluster is Ready.
		afterOutage(t, ns, "h", before, back)
		// It exits once, having lost its leadership; restarted, it waits for the API server.
		if n := operatorRestarts(t) - restarts; n > 1 {
			t.Errorf("the operator restarted %d times over the outage: once for its lost leadership, the others exits while the API server was away", n)
		}
		w.Stop()
		maps.Copy(acked, w.Acked())
		assertKeysOnEveryMember(t, ns, "h", acked)
		assertUntouched(t, ns, "h", before, id)
	})

	runStep(t, "the sidecars' Lease renewals denied", func(t *testing.T) {
		w := startWriter(t, ns, "h", "leases-denied", 200*time.Millisecond)
		lift := denyLeaseRenewals(t, ns, "h")
		sidecars := []string{"h-0", "h-1", "h-2"}
		var degraded string
		testutil.Throughout(t, outage, "serving, no pod deleted or restarted and no fence while the Leases are not renewed", func() error {
			if err := w.serving(10 * time.Second); err != nil {
				return err
			}
			ec, harm, err := harmDone(ns, "h", before)
			if err != nil {
				t.Logf("reading the cluster: %v", err)
				return nil
			}
			if harm != "" {
				return fmt.Errorf("%s", harm)
			}
			if c := conditionOf(ec, v1alpha1.ConditionDegraded); c != nil && c.Status == metav1.ConditionTrue &&
				strings.Contains(c.Message, "Lease") && namesAll(c.Message, sidecars) {
				degraded = c.Message
			}
			return nil
		})
		if degraded == "" {
			t.Fatalf("within %s of the denial, Degraded=True naming the sidecars of %v was never seen; the cluster's conditions now: %s",
				outage, sidecars, conditionsJSON(ns, "h"))
		}
		t.Logf("Degraded said: %s", degraded)
		lift()
		waitReady(t, ns, "h", 3, 2*time.Minute)
		waitCondition(t, ns, "h", v1alpha1.ConditionDegraded, "False", time.Minute)
		w.Stop()
		maps.Copy(acked, w.Acked())
		assertKeysOnEveryMember(t, ns, "h", acked)
		assertUntouched(t, ns, "h", before, id)
	})
}

// TestHibernateThenOrphan scales a 3-member cluster to 0 and back, hibernates and resumes it
// with the kubectl plugin, then deletes it with --cascade=orphan: hibernation keeps the
// claims, the member IDs, the cluster ID and every acknowledged write; orphan deletion deletes
// nothing, and the members serve on without their EtcdCluster.
func TestHibernateThenOrphan(t *testing.T) {
	t.Parallel() // touches nothing outside its namespace
	ns := namespace(t)
	storeSecret(t, ns)
	apply(t, ns, clusterYAML(ns, "z", 3, plainHTTP))
	ec := waitReady(t, ns, "z", 3, 3*time.Minute)
	id, members := etcdClusterID(t, ns, "z"), memberIDs(ec)
	acked := map[string]string{}

	// Hibernated and resumed twice: by the scale subresource, then by the kubectl plugin (its
	// annotation); each keeps the claims, the member IDs and the cluster ID.
	ways := []struct {
		name         string
		stop, resume func(t *testing.T)
	}{
		{"replicas 0 and back",
			func(t *testing.T) { kubectl(t, ns, "scale", "ec/z", "--replicas=0") },
			func(t *testing.T) { kubectl(t, ns, "scale", "ec/z", "--replicas=3") }},
		{"kubectl steward hibernate on, then off",
			func(t *testing.T) { kubectlSteward(t, ns, "hibernate", "z", "on") },
			func(t *testing.T) { kubectlSteward(t, ns, "hibernate", "z", "off") }},
	}
	for i, way := range ways {
		runStep(t, way.name, func(t *testing.T) {
			w := startWriter(t, ns, "z", fmt.Sprintf("hibernate%d", i), 100*time.Millisecond)
			testutil.Eventually(t, 30*time.Second, "the writer's first writes acknowledged", func() error {
				if n := len(w.Acked()); n < 20 {
					return fmt.Errorf("%d acknowledged", n)
				}
				return nil
			})
			claims := uids(t, ns, "z", &corev1.PersistentVolumeClaimList{})
			way.stop(t)
			testutil.Eventually(t, 3*time.Minute, "Hibernated=True, the StatefulSet at 0 replicas, no member pod", func() error {
				e, err := getEC(ns, "z")
				if err != nil {
					return err
				}
				var sts appsv1.StatefulSet
				if err := kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "z"}, &sts); err != nil {
					return err
				}
				pods := memberPods(t, ns, "z")
				if condition(e, v1alpha1.ConditionHibernated) != "True" || *sts.Spec.Replicas != 0 || sts.Status.Replicas != 0 || len(pods) != 0 {
					return fmt.Errorf("Hibernated=%s, StatefulSet replicas %d (%d running), %d member pods, status.hibernation %+v",
						condition(e, v1alpha1.ConditionHibernated), *sts.Spec.Replicas, sts.Status.Replicas, len(pods), e.Status.Hibernation)
				}
				return nil
			})
			w.Stop()
			maps.Copy(acked, w.Acked())
			if now := uids(t, ns, "z", &corev1.PersistentVolumeClaimList{}); !maps.Equal(now, claims) {
				t.Fatalf("volume claims hibernated: %v; before: %v (want the same claims, same UIDs)", now, claims)
			}
			way.resume(t)
			ec := waitReady(t, ns, "z", 3, 4*time.Minute)
			if condition(ec, v1alpha1.ConditionHibernated) != "False" || ec.Status.Hibernation != nil {
				t.Fatalf("resumed, Hibernated=%s and status.hibernation %+v; want False and none", condition(ec, v1alpha1.ConditionHibernated), ec.Status.Hibernation)
			}
			if got := etcdClusterID(t, ns, "z"); got != id {
				t.Fatalf("etcd cluster ID %s after resuming, %s before hibernating", got, id)
			}
			if got := memberIDs(ec); !maps.Equal(got, members) {
				t.Fatalf("member IDs %v after resuming, %v before hibernating: members were replaced, not resumed", got, members)
			}
			if now := uids(t, ns, "z", &corev1.PersistentVolumeClaimList{}); !maps.Equal(now, claims) {
				t.Fatalf("volume claims resumed: %v; before: %v", now, claims)
			}
			assertKeysOnEveryMember(t, ns, "z", acked)
		})
	}

	runStep(t, "deleted with --cascade=orphan", func(t *testing.T) {
		pods := podStates(t, ns, "z")
		kinds := map[string]func() client.ObjectList{
			"StatefulSets":           func() client.ObjectList { return &appsv1.StatefulSetList{} },
			"PersistentVolumeClaims": func() client.ObjectList { return &corev1.PersistentVolumeClaimList{} },
			"Secrets":                func() client.ObjectList { return &corev1.SecretList{} },
			"Services":               func() client.ObjectList { return &corev1.ServiceList{} },
		}
		kept := map[string]map[string]string{}
		for kind, list := range kinds {
			kept[kind] = uids(t, ns, "z", list())
		}
		if len(kept["StatefulSets"]) != 1 || len(kept["PersistentVolumeClaims"]) != 3 || len(kept["Secrets"]) == 0 || len(kept["Services"]) != 2 {
			t.Fatalf("before the deletion, the cluster's objects: %v; want its StatefulSet, 3 claims, its Secrets and 2 Services", kept)
		}
		w := startWriter(t, ns, "z", "orphaned", 100*time.Millisecond)
		kubectl(t, ns, "delete", "ec", "z", "--cascade=orphan", "--timeout=2m")
		testutil.Eventually(t, time.Minute, "EtcdCluster z gone", func() error {
			if _, err := getEC(ns, "z"); !apierrors.IsNotFound(err) {
				return fmt.Errorf("still there (%v)", err)
			}
			return nil
		})
		// The garbage collector removes the owner references meanwhile: nothing may go with them.
		testutil.Throughout(t, 20*time.Second, "the orphaned members serving, nothing of theirs deleted", func() error {
			if err := w.serving(10 * time.Second); err != nil {
				return err
			}
			for kind, want := range kept {
				if got := uids(t, ns, "z", kinds[kind]()); !maps.Equal(got, want) {
					return fmt.Errorf("%s %v; before the deletion %v", kind, got, want)
				}
			}
			if now := podStates(t, ns, "z"); !maps.Equal(now, pods) {
				return fmt.Errorf("member pods %v; before the deletion %v", now, pods)
			}
			return nil
		})
		w.Stop()
		maps.Copy(acked, w.Acked())
		assertKeysOnEveryMember(t, ns, "z", acked)

		// Cleaning up is the user's, explicitly: what is held by Steward's finalizer is released first.
		selector := v1alpha1.LabelCluster + "=z"
		for name := range kept["Secrets"] {
			kubectl(t, ns, "patch", "secret", name, "--type=merge", "-p", `{"metadata":{"finalizers":null}}`)
		}
		kubectl(t, ns, "delete", "statefulset,pvc,secret,service,configmap,lease,etcdmember,poddisruptionbudget,serviceaccount,role,rolebinding",
			"-l", selector, "--timeout=2m")
		testutil.Eventually(t, 2*time.Minute, "nothing of cluster z left", func() error {
			left, err := kubectlIn(ns, "", "get", "statefulset,pod,pvc,secret,service,configmap,lease,etcdmember", "-l", selector, "-o", "name")
			if err != nil || left != "" {
				return fmt.Errorf("left: %s %v", left, err)
			}
			return nil
		})
	})
}

// TestCASecretDeleted deletes the CA Secret of a serving TLS cluster, its finalizer forced off
// as a GitOps prune would: the cluster serves on with the certificates it has, says which
// Secret is missing, makes no CA of its own and issues nothing; the saved copy re-applied is
// the cluster's CA again.
func TestCASecretDeleted(t *testing.T) {
	t.Parallel() // touches nothing outside its namespace
	ns := namespace(t)
	storeSecret(t, ns)
	apply(t, ns, clusterYAML(ns, "ca", 1, "  tls: {enabled: true}\n  auth: {enabled: false}\n"))
	ec := waitReady(t, ns, "ca", 1, 3*time.Minute)
	waitCondition(t, ns, "ca", v1alpha1.ConditionCAReady, "True", time.Minute)
	if ec.Status.CA == nil {
		t.Fatal("status.ca is empty on a Ready TLS cluster")
	}
	fingerprint := ec.Status.CA.Fingerprint
	caName := v1alpha1.CASecretName("ca")
	var saved corev1.Secret
	if err := kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: caName}, &saved); err != nil {
		t.Fatal(err)
	}
	certs := resourceVersions(t, ns, v1alpha1.ServerCertificateSecretName("ca"), v1alpha1.ClientCertificateSecretName("ca"))
	pods := podStates(t, ns, "ca")
	// The writer's backups also bring the operator round: it does not watch Secrets.
	w := startWriter(t, ns, "ca", "ca-gone", 200*time.Millisecond)

	kubectl(t, ns, "delete", "secret", caName, "--wait=false")
	kubectl(t, ns, "patch", "secret", caName, "--type=merge", "-p", `{"metadata":{"finalizers":null}}`)
	testutil.Eventually(t, 2*time.Minute, fmt.Sprintf("CAReady=False, reason %s, naming %s", v1alpha1.ReasonCASecretMissing, caName), func() error {
		e, err := getEC(ns, "ca")
		if err != nil {
			return err
		}
		c := conditionOf(e, v1alpha1.ConditionCAReady)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonCASecretMissing || !strings.Contains(c.Message, caName) {
			return fmt.Errorf("CAReady %+v", c)
		}
		return nil
	})
	waitEvent(t, ns, "ca", v1alpha1.ReasonCASecretMissing, time.Minute)
	// Past the operator's retries (every 15 s while a sync fails): it still makes no CA,
	// issues nothing and restarts nothing, and clients still connect.
	testutil.Throughout(t, 40*time.Second, "serving without the CA Secret, nothing issued or restarted", func() error {
		if err := w.serving(10 * time.Second); err != nil {
			return err
		}
		var s corev1.Secret
		if err := kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: caName}, &s); !apierrors.IsNotFound(err) {
			return fmt.Errorf("Secret %s is there again (%v), made by the operator", caName, err)
		}
		if now := resourceVersions(t, ns, v1alpha1.ServerCertificateSecretName("ca"), v1alpha1.ClientCertificateSecretName("ca")); !maps.Equal(now, certs) {
			return fmt.Errorf("certificate Secrets' resourceVersions %v, before %v: re-issued", now, certs)
		}
		if now := podStates(t, ns, "ca"); !maps.Equal(now, pods) {
			return fmt.Errorf("member pods %v, before %v", now, pods)
		}
		return nil
	})
	// A new connection, a new TLS handshake with the client certificate.
	c := etcdClient(t, ns, "ca")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_, err := c.Get(ctx, "any")
	cancel()
	if err != nil {
		t.Fatalf("a new client with the client certificate, without the CA Secret: %v", err)
	}

	restored := saved.DeepCopy()
	restored.ObjectMeta = metav1.ObjectMeta{Name: saved.Name, Namespace: saved.Namespace, Labels: saved.Labels,
		Annotations: saved.Annotations, OwnerReferences: saved.OwnerReferences}
	if err := kube.Create(context.Background(), restored); err != nil {
		t.Fatalf("re-applying the saved CA Secret: %v", err)
	}
	waitCondition(t, ns, "ca", v1alpha1.ConditionCAReady, "True", time.Minute)
	waitEvent(t, ns, "ca", v1alpha1.ReasonCAValid, time.Minute)
	w.Stop()
	if e, err := getEC(ns, "ca"); err != nil || e.Status.CA == nil || e.Status.CA.Fingerprint != fingerprint {
		t.Fatalf("status.ca after the CA Secret came back: %+v (%v); want fingerprint %s", e.Status.CA, err, fingerprint)
	}
	if now := resourceVersions(t, ns, v1alpha1.ServerCertificateSecretName("ca"), v1alpha1.ClientCertificateSecretName("ca")); !maps.Equal(now, certs) {
		t.Fatalf("certificate Secrets' resourceVersions %v, before %v: re-issued", now, certs)
	}
	if now := podStates(t, ns, "ca"); !maps.Equal(now, pods) {
		t.Fatalf("member pods %v, before %v", now, pods)
	}
	assertKeysOnEveryMember(t, ns, "ca", w.Acked())
}

// podStates is each member pod's UID and its containers' restart counts: a pod deleted or a
// container restarted changes it.
func podStates(t *testing.T, ns, name string) map[string]string {
	t.Helper()
	out, err := podStatesOf(ns, name)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func podStatesOf(ns, name string) (map[string]string, error) {
	var pods corev1.PodList
	if err := kube.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{v1alpha1.LabelCluster: name}); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, p := range pods.Items {
		s := "uid " + string(p.UID)
		for _, cs := range p.Status.ContainerStatuses {
			s += fmt.Sprintf(", %s restarts %d", cs.Name, cs.RestartCount)
		}
		out[p.Name] = s
	}
	return out, nil
}

// harmDone reads the cluster and says what harm was done to it since its pods were as
// before: a pod deleted or restarted, a recovery directive, a Fenced Event ("" for none).
// An error is a failed read, which says nothing either way.
func harmDone(ns, name string, before map[string]string) (*v1alpha1.EtcdCluster, string, error) {
	ec, err := getEC(ns, name)
	if err != nil {
		return nil, "", err
	}
	pods, err := podStatesOf(ns, name)
	if err != nil {
		return nil, "", err
	}
	var events corev1.EventList
	if err := kube.List(context.Background(), &events, client.InNamespace(ns)); err != nil {
		return nil, "", err
	}
	var harm []string
	if !maps.Equal(pods, before) {
		harm = append(harm, fmt.Sprintf("member pods %v, before %v", pods, before))
	}
	if d := directive(ec); d != "" {
		harm = append(harm, "a recovery directive in status.recovery: "+d)
	}
	for _, e := range events.Items {
		if e.InvolvedObject.Kind == "EtcdCluster" && e.InvolvedObject.Name == name && e.Reason == "Fenced" {
			harm = append(harm, "a Fenced Event: "+e.Message)
		}
	}
	return ec, strings.Join(harm, "; "), nil
}

// afterOutage waits until the operator leads again after the API server came back at
// `back`, checking meanwhile and for longer than the graces after that nothing is deleted,
// restarted or fenced; then waits for the cluster to be Ready again.
func afterOutage(t *testing.T, ns, name string, before map[string]string, back time.Time) {
	t.Helper()
	noHarm := func() error {
		_, harm, err := harmDone(ns, name, before)
		if err != nil {
			t.Logf("reading the cluster: %v", err)
			return nil
		}
		if harm != "" {
			return fmt.Errorf("%s", harm)
		}
		return nil
	}
	// The former leader's Lease runs out 15 s after the new operator first reads it, and the
	// new one asks the API server every 2 s while it waits for it.
	testutil.Eventually(t, time.Minute, "the operator leading again, and nothing harmed meanwhile", func() error {
		if err := noHarm(); err != nil {
			t.Fatal(err)
		}
		_, err := operatorLeadingSince(back)
		return err
	})
	t.Logf("the operator leads again %s after the API server came back", time.Since(back).Round(time.Second))
	// The NotReady and Unknown graces of the suite's install, and some.
	testutil.Throughout(t, 45*time.Second, "no pod deleted or restarted and no fence after the API server came back", noHarm)
	waitReady(t, ns, name, int32(len(before)), 2*time.Minute)
}

// operatorLeadingSince returns the operator pod that runs now and holds the leader Lease,
// renewed after t.
func operatorLeadingSince(t time.Time) (string, error) {
	var lease coordinationv1.Lease
	if err := kube.Get(context.Background(), client.ObjectKey{Namespace: "steward-system", Name: "steward-operator.etcd.steward.dev"}, &lease); err != nil {
		return "", err
	}
	holder := ptr.Deref(lease.Spec.HolderIdentity, "")
	renewed := ptr.Deref(lease.Spec.RenewTime, metav1.MicroTime{})
	if !renewed.After(t) {
		return "", fmt.Errorf("the leader Lease (holder %q) last renewed at %s, before %s", holder, renewed.Format(time.RFC3339), t.Format(time.RFC3339))
	}
	pods, err := operatorPods()
	if err != nil {
		return "", err
	}
	for _, p := range pods {
		// controller-runtime's identity is the hostname (the pod's name) and a UUID.
		if strings.HasPrefix(holder, p.Name+"_") && p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			return p.Name, nil
		}
	}
	return "", fmt.Errorf("the leader Lease is held by %q, no running operator pod", holder)
}

// restartOperator kills the operator's process and deletes its pod, as a node that dies
// takes it (what it was doing is cut off, its leadership not given up: killed first, it gets
// no SIGTERM), and waits until the Deployment's new pod leads. The tests running beside see a
// pause.
func restartOperator(t *testing.T) {
	t.Helper()
	pods, err := operatorPods()
	if err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	for _, p := range pods {
		for _, cs := range p.Status.ContainerStatuses {
			if cs.State.Running != nil && cs.ContainerID != "" {
				if err := killContainer(cs.ContainerID); err != nil {
					t.Fatalf("killing operator pod %s: %v", p.Name, err)
				}
			}
		}
		kubectl(t, "steward-system", "delete", "pod", p.Name, "--wait=false")
	}
	testutil.Eventually(t, 2*time.Minute, "a new operator pod leading", func() error {
		leader, err := operatorLeadingSince(killed)
		if err != nil {
			return err
		}
		for _, p := range pods {
			if p.Name == leader {
				return fmt.Errorf("the killed pod %s still leads", leader)
			}
		}
		return nil
	})
	t.Logf("the operator's pod killed; a new one leads %s later", time.Since(killed).Round(time.Second))
}

// operatorPods are the pods of the operator's Deployment.
func operatorPods() ([]corev1.Pod, error) {
	var pods corev1.PodList
	err := kube.List(context.Background(), &pods, client.InNamespace("steward-system"), client.MatchingLabels{"app.kubernetes.io/component": "operator"})
	return pods.Items, err
}

// operatorRestarts is how often the containers of the operator's pods restarted.
func operatorRestarts(t *testing.T) int32 {
	t.Helper()
	pods, err := operatorPods()
	if err != nil {
		t.Fatal(err)
	}
	var n int32
	for _, p := range pods {
		for _, cs := range p.Status.ContainerStatuses {
			n += cs.RestartCount
		}
	}
	return n
}

// assertUntouched fails the test if harm was done to the cluster or its etcd cluster ID changed.
func assertUntouched(t *testing.T, ns, name string, before map[string]string, id string) {
	t.Helper()
	if _, harm, err := harmDone(ns, name, before); err != nil || harm != "" {
		t.Fatalf("want the cluster untouched: %s %v", harm, err)
	}
	if got := etcdClusterID(t, ns, name); got != id {
		t.Fatalf("etcd cluster ID %s, was %s", got, id)
	}
}

// directive is status.recovery.directive as JSON, "" when there is none.
func directive(ec *v1alpha1.EtcdCluster) string {
	if ec.Status.Recovery == nil {
		return ""
	}
	var rec struct {
		Directive json.RawMessage `json:"directive"`
	}
	if err := json.Unmarshal(ec.Status.Recovery.Raw, &rec); err != nil {
		return "unreadable status.recovery: " + err.Error()
	}
	if len(rec.Directive) == 0 || string(rec.Directive) == "null" {
		return ""
	}
	return string(rec.Directive)
}

// etcdClusterID is the cluster ID etcd itself reports through the client Service (hex), and
// fails the test if the status records another.
func etcdClusterID(t *testing.T, ns, name string) string {
	t.Helper()
	var id string
	testutil.Eventually(t, 30*time.Second, "etcd's cluster ID", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := etcdClient(t, ns, name).MemberList(ctx)
		if err != nil {
			return err
		}
		id = fmt.Sprintf("%x", resp.Header.ClusterId)
		return nil
	})
	if ec, err := getEC(ns, name); err == nil && ec.Status.ClusterID != id {
		t.Fatalf("status.clusterID %q, etcd reports %s", ec.Status.ClusterID, id)
	}
	return id
}

// denyLeaseRenewals denies every Lease update by the members' ServiceAccount in ns with a
// ValidatingAdmissionPolicy, as a policy or webhook on Leases would, and waits until a
// renewal as a sidecar is refused. It returns the function that lifts the denial (also run
// at cleanup).
func denyLeaseRenewals(t *testing.T, ns, name string) func() {
	t.Helper()
	policy := "e2e-deny-leases-" + ns
	sa := fmt.Sprintf("system:serviceaccount:%s:%s", ns, name)
	apply(t, "", fmt.Sprintf(`apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: %[1]s}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - {apiGroups: [coordination.k8s.io], apiVersions: ["*"], operations: [UPDATE], resources: [leases]}
  matchConditions:
  - {name: the-sidecars, expression: 'request.userInfo.username == "%[2]s"'}
  validations:
  - {expression: "false", message: "the e2e test denies the sidecars' Lease renewals"}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: %[1]s}
spec:
  policyName: %[1]s
  validationActions: [Deny]
  matchResources:
    namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: %[3]s}}
`, policy, sa, ns))
	lifted := false
	lift := func() {
		if lifted {
			return
		}
		lifted = true
		if _, err := kubectlIn("", "", "delete", "validatingadmissionpolicybinding,validatingadmissionpolicy", policy); err != nil {
			t.Errorf("lifting the Lease denial: %v", err)
		}
	}
	t.Cleanup(lift)
	testutil.Eventually(t, 30*time.Second, "a Lease renewal as the sidecars refused", func() error {
		// As member 0's sidecar: its token is bound to its pod (the admission policy that keeps
		// each member to its own Lease reads the pod's name from it).
		_, err := kubectlIn(ns, "", "--as", sa, "--as-user-extra", "authentication.kubernetes.io/pod-name="+name+"-0",
			"annotate", "lease", name+"-0", "e2e-probe=1", "--overwrite", "--dry-run=server")
		if err == nil || !strings.Contains(err.Error(), "denies the sidecars' Lease renewals") {
			return fmt.Errorf("a renewal as %s: %v", sa, err)
		}
		return nil
	})
	return lift
}

// uids lists the cluster's objects of a kind (by Steward's cluster label): name -> UID.
func uids(t *testing.T, ns, name string, list client.ObjectList) map[string]string {
	t.Helper()
	if err := kube.List(context.Background(), list, client.InNamespace(ns), client.MatchingLabels{v1alpha1.LabelCluster: name}); err != nil {
		t.Fatal(err)
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, item := range items {
		o, err := meta.Accessor(item)
		if err != nil {
			t.Fatal(err)
		}
		out[o.GetName()] = string(o.GetUID())
	}
	return out
}

// resourceVersions of Secrets by name: a Secret written again changes it.
func resourceVersions(t *testing.T, ns string, names ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, n := range names {
		var s corev1.Secret
		if err := kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: n}, &s); err != nil {
			t.Fatal(err)
		}
		out[n] = s.ResourceVersion
	}
	return out
}

func conditionOf(ec *v1alpha1.EtcdCluster, typ string) *metav1.Condition {
	for i := range ec.Status.Conditions {
		if ec.Status.Conditions[i].Type == typ {
			return &ec.Status.Conditions[i]
		}
	}
	return nil
}

func conditionsJSON(ns, name string) string {
	ec, err := getEC(ns, name)
	if err != nil {
		return err.Error()
	}
	b, _ := json.Marshal(ec.Status.Conditions)
	return string(b)
}

func namesAll(s string, names []string) bool {
	for _, n := range names {
		if !strings.Contains(s, n) {
			return false
		}
	}
	return true
}
