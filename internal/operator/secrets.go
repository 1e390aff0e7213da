package operator

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// SecretFinalizer holds the Secrets a cluster depends on that the operator made (its CAs, the
// members' and the client certificate, the sidecar API token, the root password): a prune
// by a GitOps tool or a `kubectl delete` leaves them in place, Terminating, until the
// EtcdCluster itself is deleted and the operator releases them.
const SecretFinalizer = "etcd.steward.dev/in-use"

// newOwnedSecret is Secret s made by the operator: owned by the cluster and held by
// SecretFinalizer.
func newOwnedSecret(r *run, s *corev1.Secret) error {
	controllerutil.AddFinalizer(s, SecretFinalizer)
	return controllerutil.SetControllerReference(r.ec, s, r.c.Scheme())
}

// holdSecret adds SecretFinalizer to Secret s when the operator made it and it lacks the
// finalizer (a Secret made before the operator held them).
func holdSecret(ctx context.Context, r *run, s *corev1.Secret) error {
	if !metav1.IsControlledBy(s, r.ec) || !s.DeletionTimestamp.IsZero() || !controllerutil.AddFinalizer(s, SecretFinalizer) {
		return nil
	}
	if err := r.c.Update(ctx, s); err != nil {
		return fmt.Errorf("holding the Secret %s/%s with the finalizer %s: %w", s.Namespace, s.Name, SecretFinalizer, err)
	}
	return nil
}

// deleteOwnedSecret releases Secret name from SecretFinalizer and deletes it, when the
// operator made it; a Secret of anyone else is left as it is. It reads the Secret fresh and
// deletes that very object (UID precondition).
func deleteOwnedSecret(ctx context.Context, r *run, name string) error {
	var s corev1.Secret
	err := r.fresh().Get(ctx, client.ObjectKey{Namespace: r.ec.Namespace, Name: name}, &s)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the Secret %s/%s: %w", r.ec.Namespace, name, err)
	}
	if !metav1.IsControlledBy(&s, r.ec) {
		return nil
	}
	if controllerutil.RemoveFinalizer(&s, SecretFinalizer) {
		if err := r.c.Update(ctx, &s); err != nil {
			return fmt.Errorf("releasing the Secret %s/%s: %w", r.ec.Namespace, name, err)
		}
	}
	if err := client.IgnoreNotFound(r.c.Delete(ctx, &s, client.Preconditions{UID: &s.UID})); err != nil {
		return fmt.Errorf("deleting the Secret %s/%s: %w", r.ec.Namespace, name, err)
	}
	return nil
}

// deleteSecretNamed is a component's delete of the Secret the operator made under name.
func deleteSecretNamed(name func(r *run) string) func(context.Context, *run) error {
	return func(ctx context.Context, r *run) error { return deleteOwnedSecret(ctx, r, name(r)) }
}
