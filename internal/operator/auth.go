package operator

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"

	"github.com/etcd-steward/steward/api/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// RootPasswordMount is where the sidecar mounts the root password Secret (spec.auth);
// RootPasswordFile is the password's file.
const (
	RootPasswordMount = "/var/run/steward/auth"
	RootPasswordFile  = RootPasswordMount + "/password"
)

func authEnabled(ec *v1alpha1.EtcdCluster) bool { return ec.Spec.Auth != nil && ec.Spec.Auth.Enabled }

// rootPasswordSecretName is the Secret holding the root password: the one the spec names, or
// the one the operator makes.
func rootPasswordSecretName(ec *v1alpha1.EtcdCluster) string {
	if a := ec.Spec.Auth; a != nil && a.RootPasswordSecret != "" {
		return a.RootPasswordSecret
	}
	return v1alpha1.RootPasswordSecretName(ec.Name)
}

// syncAuth checks the root password Secret of a cluster with authentication, and makes it
// once (a random password, owned by the EtcdCluster) unless the spec names one of the
// user's. The password is never logged, recorded in the status or put in an Event.
func syncAuth(ctx context.Context, r *run) error {
	if !authEnabled(r.ec) {
		return nil
	}
	name := rootPasswordSecretName(r.ec)
	what := fmt.Sprintf("the root password Secret %s/%s", r.ec.Namespace, name)
	check := func(data []byte) error {
		if len(data) == 0 {
			return fmt.Errorf("%s has no key %q, or it is empty: put etcd's root password there", what, v1alpha1.RootPasswordKey)
		}
		return nil
	}
	var err error
	if r.ec.Spec.Auth.RootPasswordSecret != "" {
		var cur corev1.Secret
		err = r.secrets().Get(ctx, client.ObjectKey{Namespace: r.ec.Namespace, Name: name}, &cur)
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("%s (spec.auth.rootPasswordSecret) does not exist: create it with the password under the key %q (kubectl create secret generic %s --from-literal=%s=...)",
				what, v1alpha1.RootPasswordKey, name, v1alpha1.RootPasswordKey)
		}
		if err != nil {
			return fmt.Errorf("reading %s: %w", what, err)
		}
		err = check(cur.Data[v1alpha1.RootPasswordKey])
	} else {
		err = ensureGeneratedSecret(ctx, r, name, "root-password", v1alpha1.RootPasswordKey, check, randomPassword)
	}
	r.rootPasswordReady = err == nil
	return err
}

// deleteAuth deletes the root password Secret the operator made (never one of the user's).
func deleteAuth(ctx context.Context, r *run) error {
	if a := r.ec.Spec.Auth; a != nil && a.RootPasswordSecret != "" {
		return nil
	}
	return deleteOwnedSecret(ctx, r, v1alpha1.RootPasswordSecretName(r.ec.Name))
}

// randomPassword is 256 random bits, base64url.
func randomPassword() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// ensureGeneratedSecret makes the Secret name once, owned by the EtcdCluster and held by
// SecretFinalizer, with key holding what generate returns, and afterwards only checks it: a
// value replaced by hand stays, a bad one is an error (check's), and a Secret deleted anyway
// (its finalizer removed by hand) is made anew. A Secret of that name the cluster does not
// own is left alone (a conflict).
func ensureGeneratedSecret(ctx context.Context, r *run, name, component, key string, check func([]byte) error, generate func() (string, error)) error {
	var cur corev1.Secret
	err := r.secrets().Get(ctx, client.ObjectKey{Namespace: r.ec.Namespace, Name: name}, &cur)
	if err == nil {
		if err := r.own(ctx, &cur); err != nil {
			return err
		}
		if err := holdSecret(ctx, r, &cur); err != nil {
			return err
		}
		return check(cur.Data[key])
	}
	if !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading the Secret %s/%s: %w", r.ec.Namespace, name, err)
	}
	v, err := generate()
	if err != nil {
		return err
	}
	s := &corev1.Secret{ObjectMeta: objectMeta(r, name), Type: corev1.SecretTypeOpaque, Data: map[string][]byte{key: []byte(v + "\n")}}
	s.Labels = commonLabels(r.ec, component)
	if err := newOwnedSecret(r, s); err != nil {
		return err
	}
	if err := r.c.Create(ctx, s); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the Secret %s/%s: %w", r.ec.Namespace, name, err)
	}
	return nil
}
