// Package kubemembers plays, on a real API server where no kubelet and no StatefulSet
// controller run, what Kubernetes does under an EtcdCluster's StatefulSet: the controller's
// status and pods (labels, owner, one revision) and the kubelet's readiness of each pod. The
// operator's envtest suite and the operator benchmark use it; the sidecars' side is
// kubeview's (a View's writes).
package kubemembers

import (
	"context"
	"fmt"
	"maps"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Revision is the one revision of the pods Pods makes: no rolling update is played here.
const Revision = "harness"

// maxOrdinal bounds the ordinals whose pods Pods deletes above the StatefulSet's size.
const maxOrdinal = 20

// Pods makes the StatefulSet's status say its controller saw the newest template, makes the
// pods 0..replicas-1 exist (deleting those above), and sets each pod's Ready condition to
// ready(i). It returns the StatefulSet's size. A conflict with another writer is left to the
// next call.
func Pods(ctx context.Context, c client.Client, sts *appsv1.StatefulSet, ready func(i int) bool) (int32, error) {
	n := *sts.Spec.Replicas
	if sts.Status.ObservedGeneration != sts.Generation || sts.Status.UpdateRevision == "" {
		sts.Status.ObservedGeneration, sts.Status.Replicas, sts.Status.UpdateRevision = sts.Generation, n, Revision
		if err := c.Status().Update(ctx, sts); err != nil && !apierrors.IsConflict(err) {
			return n, err
		}
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(sts.Namespace), client.MatchingLabels(sts.Spec.Selector.MatchLabels)); err != nil {
		return n, err
	}
	have := map[string]*corev1.Pod{}
	for i := range pods.Items {
		have[pods.Items[i].Name] = &pods.Items[i]
	}
	for i := int32(0); i < maxOrdinal; i++ {
		pn := fmt.Sprintf("%s-%d", sts.Name, i)
		p, ok := have[pn]
		if i >= n {
			if ok {
				if err := c.Delete(ctx, p, client.GracePeriodSeconds(0)); client.IgnoreNotFound(err) != nil {
					return n, err
				}
			}
			continue
		}
		if !ok {
			p = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: sts.Namespace, Name: pn, Labels: maps.Clone(sts.Spec.Template.Labels), OwnerReferences: Owners(sts)},
				Spec: *sts.Spec.Template.Spec.DeepCopy()}
			p.Labels[appsv1.ControllerRevisionHashLabelKey] = Revision
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
			switch err := c.Create(ctx, p); {
			case apierrors.IsAlreadyExists(err):
				continue // made by an earlier call, not yet in c's cache
			case err != nil:
				return n, err
			}
		}
		if err := SetReady(ctx, c, p, ready(int(i))); err != nil {
			return n, err
		}
	}
	return n, nil
}

// SetReady sets the pod's Ready condition (and its phase Running) as the kubelet would, if it
// does not say so already.
func SetReady(ctx context.Context, c client.Client, p *corev1.Pod, ready bool) error {
	want := corev1.ConditionFalse
	if ready {
		want = corev1.ConditionTrue
	}
	if p.Status.Phase == corev1.PodRunning && len(p.Status.Conditions) > 0 && p.Status.Conditions[0].Status == want {
		return nil
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: want}}
	if err := c.Status().Update(ctx, p); err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

// Owners are the owner references the StatefulSet controller gives the pods it makes.
func Owners(sts *appsv1.StatefulSet) []metav1.OwnerReference {
	return []metav1.OwnerReference{*metav1.NewControllerRef(sts, appsv1.SchemeGroupVersion.WithKind("StatefulSet"))}
}
