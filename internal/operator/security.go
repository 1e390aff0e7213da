package operator

import (
	"context"
	"fmt"

	"github.com/etcd-steward/steward/api/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// DefaultsCase names how the defaults of a cluster (status.defaults) were chosen.
type DefaultsCase string

const (
	// DefaultsNewCluster: nothing of the cluster exists yet: TLS, authentication with it, and
	// resource requests.
	DefaultsNewCluster DefaultsCase = "NewCluster"
	// DefaultsExistingCluster: an operator without these defaults already ran the cluster
	// (its status written) or its StatefulSet exists: the defaults are what its members run,
	// so that nothing changes for them.
	DefaultsExistingCluster DefaultsCase = "ExistingCluster"
)

// defaultsInput is what the defaults are chosen from.
type defaultsInput struct {
	// SpecTLS is spec.tls.enabled; nil when spec.tls is left out.
	SpecTLS *bool
	// StatusWritten: an operator reconciled the cluster before (observedGeneration or a
	// cluster ID in the status).
	StatusWritten bool
	// StatefulSet: the cluster's StatefulSet exists (its own, or one a deleted EtcdCluster of
	// its name left); RunsTLS and RunsAuth say whether its pod template serves with TLS and
	// with authentication.
	StatefulSet, RunsTLS, RunsAuth bool
}

// decideDefaults chooses, once, what a cluster runs with where its spec leaves spec.tls,
// spec.auth or the containers' resources out (pure). A new cluster gets TLS, authentication
// when it has TLS (the root password never crosses the network in clear), and resource
// requests. A cluster that already exists keeps what its members run: without a StatefulSet,
// what an absent spec.tls and spec.auth meant before, no TLS and no authentication; and no
// requests it did not ask for, which would restart its members.
func decideDefaults(in defaultsInput) (DefaultsCase, v1alpha1.ClusterDefaults) {
	if in.StatusWritten || in.StatefulSet {
		return DefaultsExistingCluster, v1alpha1.ClusterDefaults{TLS: in.RunsTLS, Auth: in.RunsAuth}
	}
	tls := in.SpecTLS == nil || *in.SpecTLS
	return DefaultsNewCluster, v1alpha1.ClusterDefaults{TLS: true, Auth: tls, Resources: true}
}

// recordDefaults chooses the cluster's defaults (decideDefaults) from its status and
// its StatefulSet read fresh, and records them in the status before anything is made: the
// write fails if the cluster changed meanwhile (its resourceVersion), and the next pass
// chooses again.
func (r *ClusterReconciler) recordDefaults(ctx context.Context, ec *v1alpha1.EtcdCluster) error {
	in := defaultsInput{StatusWritten: ec.Status.ObservedGeneration > 0 || ec.Status.ClusterID != ""}
	if ec.Spec.TLS != nil {
		in.SpecTLS = &ec.Spec.TLS.Enabled
	}
	var sts appsv1.StatefulSet
	err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: ec.Namespace, Name: statefulSetName(ec)}, &sts)
	switch {
	case err == nil && leftByNamesake(ec.Name, sts.Labels, metav1.GetControllerOf(&sts)):
		// Made by Steward for this cluster or a deleted one of its name (one of another
		// maker is a conflict, and says nothing of the cluster).
		in.StatefulSet = true
		_, in.RunsTLS = sts.Spec.Template.Annotations[AnnotationTrust]
		_, in.RunsAuth = sts.Spec.Template.Annotations[AnnotationTokenKey]
	case err != nil && !apierrors.IsNotFound(err):
		return fmt.Errorf("reading the StatefulSet %s/%s: %w", ec.Namespace, statefulSetName(ec), err)
	}
	c, d := decideDefaults(in)
	ec.Status.Defaults = &d
	if err := r.Client.Status().Update(ctx, ec); err != nil {
		return err
	}
	r.Recorder.Eventf(ec, nil, corev1.EventTypeNormal, "DefaultsChosen", "Default", "%s", defaultsMessage(c, d))
	return nil
}

// defaultsMessage says what the defaults are, and why.
func defaultsMessage(c DefaultsCase, d v1alpha1.ClusterDefaults) string {
	onOff := func(b bool) string {
		if b {
			return "on"
		}
		return "off"
	}
	why := "the cluster is new"
	if c == DefaultsExistingCluster {
		why = "the cluster existed already, and keeps what its members run"
	}
	return fmt.Sprintf("where the spec leaves them out, TLS is %s, authentication %s and default resource requests %s (status.defaults): %s",
		onOff(d.TLS), onOff(d.Auth), onOff(d.Resources), why)
}
