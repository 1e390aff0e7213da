package operator

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/pki"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// RootPasswordMount is where the sidecar mounts the root password Secret (spec.auth);
// RootPasswordFile is the password's file; AppPasswordMount and AppPasswordFile the same for
// the application user's. TokenKeyMount is where the etcd container mounts the token signing
// key Secret.
const (
	RootPasswordMount = "/var/run/steward/auth"
	RootPasswordFile  = RootPasswordMount + "/password"
	AppPasswordMount  = "/var/run/steward/app-auth"
	AppPasswordFile   = AppPasswordMount + "/password"
	TokenKeyMount     = "/var/run/steward/token-key"
)

// Reasons of the Events about the token signing key.
const (
	ReasonTokenKeyCreated       = "TokenKeyCreated"
	ReasonTokenKeySecretMissing = "TokenKeySecretMissing"
)

// authEnabled: spec.auth says, or where it is left out, the defaults the status records.
func authEnabled(ec *v1alpha1.EtcdCluster) bool {
	if ec.Spec.Auth != nil {
		return ec.Spec.Auth.Enabled
	}
	return ec.Status.Defaults != nil && ec.Status.Defaults.Auth
}

func tokenKeySecretName(ec *v1alpha1.EtcdCluster) string { return v1alpha1.TokenKeySecretName(ec.Name) }

// rootPasswordSecretName is the Secret holding the root password: the one the spec names, or
// the one the operator makes.
func rootPasswordSecretName(ec *v1alpha1.EtcdCluster) string {
	if a := ec.Spec.Auth; a != nil && a.RootPasswordSecret != "" {
		return a.RootPasswordSecret
	}
	return v1alpha1.RootPasswordSecretName(ec.Name)
}

// syncAuth keeps the Secrets of a cluster with authentication: its root password and its
// token signing key. Neither is ever logged, recorded in the status or put in an Event.
func syncAuth(ctx context.Context, r *run) error {
	if !authEnabled(r.ec) {
		return nil
	}
	if err := syncRootPassword(ctx, r); err != nil {
		return err
	}
	if err := syncAppPassword(ctx, r); err != nil {
		return err
	}
	if err := renewTokenKey(ctx, r); err != nil {
		return err
	}
	key, err := syncTokenKey(ctx, r)
	if err != nil {
		return err
	}
	r.tokenKey = shortHash(key)
	return nil
}

// syncRootPassword checks the root password Secret, and makes it once (a random password,
// owned by the EtcdCluster) unless the spec names one of the user's.
func syncRootPassword(ctx context.Context, r *run) error {
	var given string
	if a := r.ec.Spec.Auth; a != nil {
		given = a.RootPasswordSecret
	}
	return syncPasswordSecret(ctx, r, rootPasswordSecretName(r.ec), given != "", "the root password", "spec.auth.rootPasswordSecret", "root-password")
}

// syncAppPassword is syncRootPassword for the application user's password.
func syncAppPassword(ctx context.Context, r *run) error {
	u := appUser(r.ec)
	given := r.ec.Spec.Auth != nil && r.ec.Spec.Auth.ApplicationUser != nil && r.ec.Spec.Auth.ApplicationUser.PasswordSecret != ""
	return syncPasswordSecret(ctx, r, u.PasswordSecret, given, "the application user's password", "spec.auth.applicationUser.passwordSecret", "app-password")
}

// syncPasswordSecret checks a password Secret (key "password"): one of the user's (given) is
// only read, and only when tenantSecretsDue; the operator's own is made once, with a random
// password, owned by the cluster.
func syncPasswordSecret(ctx context.Context, r *run, name string, given bool, what, field, component string) error {
	secret := fmt.Sprintf("%s Secret %s/%s", what, r.ec.Namespace, name)
	check := func(data []byte) error {
		if len(data) == 0 {
			return fmt.Errorf("%s has no key %q, or it is empty: put the password there", secret, v1alpha1.RootPasswordKey)
		}
		return nil
	}
	if given {
		if !tenantSecretsDue(r.ec) {
			return nil
		}
		var cur corev1.Secret
		err := r.fresh().Get(ctx, client.ObjectKey{Namespace: r.ec.Namespace, Name: name}, &cur)
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("%s (%s) does not exist: create it with the password under the key %q (kubectl create secret generic %s --from-literal=%s=...)",
				secret, field, v1alpha1.RootPasswordKey, name, v1alpha1.RootPasswordKey)
		}
		if err != nil {
			return fmt.Errorf("reading %s: %w", secret, err)
		}
		return check(cur.Data[v1alpha1.RootPasswordKey])
	}
	_, _, err := ensureGeneratedSecret(ctx, r, name, component, func(data map[string][]byte) error { return check(data[v1alpha1.RootPasswordKey]) },
		singleValue(v1alpha1.RootPasswordKey, randomPassword))
	return err
}

// appUser is the cluster's application user: the spec's, with the defaults filled in.
func appUser(ec *v1alpha1.EtcdCluster) v1alpha1.ApplicationUserSpec {
	u := v1alpha1.ApplicationUserSpec{}
	if a := ec.Spec.Auth; a != nil && a.ApplicationUser != nil {
		u = *a.ApplicationUser
	}
	if u.Name == "" {
		u.Name = v1alpha1.DefaultAppUser
	}
	if u.PasswordSecret == "" {
		u.PasswordSecret = v1alpha1.AppPasswordSecretName(ec.Name)
	}
	return u
}

// syncTokenKey keeps the token signing key Secret: the key pair etcd signs its clients'
// tokens with (ES256), which every member's etcd container mounts, so that a token one
// member issued is valid on every member. It returns the public key. The pair is made once,
// and never again on its own once the cluster formed with members that use it: members
// would then sign with different keys until every one restarted, and refuse each other's
// tokens. Gone then, it is reported (an Event, and the error) and nothing is made.
func syncTokenKey(ctx context.Context, r *run) ([]byte, error) {
	name := tokenKeySecretName(r.ec)
	what := fmt.Sprintf("the token signing key Secret %s/%s", r.ec.Namespace, name)
	data, created, err := ensureGeneratedSecret(ctx, r, name, "token-key", func(data map[string][]byte) error {
		if err := pki.CheckTokenKey(data[pki.TokenKeyFile], data[pki.TokenPublicKeyFile]); err != nil {
			return fmt.Errorf("%s: %w; put the cluster's key pair back (re-apply your backup of the Secret)", what, err)
		}
		return nil
	}, func() (map[string][]byte, error) {
		used, err := membersUseTokenKey(ctx, r)
		if err != nil {
			return nil, err
		}
		if r.formed && used {
			msg := fmt.Sprintf("%s is gone: the members sign and check etcd's authentication tokens with its key, so no new key is made "+
				"(members with different keys refuse each other's tokens) and the member pods are not changed; re-apply your backup of the Secret "+
				"(with its keys %s and %s), or have a new key made and the members rolled onto it (kubectl annotate etcdcluster %s %s=<a new value>; "+
				"tokens of the old key become invalid). Until then a member whose pod restarts does not start: its pod mounts the Secret",
				what, pki.TokenKeyFile, pki.TokenPublicKeyFile, r.ec.Name, v1alpha1.AnnotationRotateTokenKey)
			if !reported(r.ec, errCode("SYNC", "AUTH"), msg) {
				r.event(corev1.EventTypeWarning, ReasonTokenKeySecretMissing, msg)
			}
			return nil, errors.New(msg)
		}
		key, pub, err := pki.NewTokenKey()
		if err != nil {
			return nil, err
		}
		return map[string][]byte{pki.TokenKeyFile: key, pki.TokenPublicKeyFile: pub}, nil
	})
	if err != nil {
		return nil, err
	}
	if created {
		r.event(corev1.EventTypeNormal, ReasonTokenKeyCreated, fmt.Sprintf("the key pair etcd signs its authentication tokens with was made in Secret %s", name))
	}
	return data[pki.TokenPublicKeyFile], nil
}

// membersUseTokenKey says whether the cluster's StatefulSet, read fresh, gives its pods the
// token signing key Secret.
func membersUseTokenKey(ctx context.Context, r *run) (bool, error) {
	var sts appsv1.StatefulSet
	err := r.fresh().Get(ctx, client.ObjectKey{Namespace: r.ec.Namespace, Name: statefulSetName(r.ec)}, &sts)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading the StatefulSet %s/%s: %w", r.ec.Namespace, statefulSetName(r.ec), err)
	}
	for _, v := range sts.Spec.Template.Spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == tokenKeySecretName(r.ec) {
			return true, nil
		}
	}
	return false, nil
}

// reported says whether the status already records the error code with msg.
func reported(ec *v1alpha1.EtcdCluster, code, msg string) bool {
	return slices.ContainsFunc(ec.Status.LastErrors, func(e v1alpha1.LastError) bool { return e.Code == code && e.Description == msg })
}

// deleteAuth deletes the Secrets of authentication the operator made: the token signing key
// and the passwords (a Secret of the user's is not the cluster's: deleteOwnedSecret leaves it).
func deleteAuth(ctx context.Context, r *run) error {
	for _, name := range []string{tokenKeySecretName(r.ec), v1alpha1.RootPasswordSecretName(r.ec.Name), v1alpha1.AppPasswordSecretName(r.ec.Name)} {
		if err := deleteOwnedSecret(ctx, r, name); err != nil {
			return err
		}
	}
	return nil
}

// singleValue is the data of a generated Secret holding what generate returns, as a line,
// under key.
func singleValue(key string, generate func() (string, error)) func() (map[string][]byte, error) {
	return func() (map[string][]byte, error) {
		v, err := generate()
		if err != nil {
			return nil, err
		}
		return map[string][]byte{key: []byte(v + "\n")}, nil
	}
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
// SecretFinalizer, with the data generate returns, and afterwards only checks it: a value
// replaced by hand stays, a bad one is an error (check's), and a Secret deleted anyway (its
// finalizer removed by hand) is made anew, unless generate refuses. A Secret of that name
// the cluster does not own is left alone (a conflict). It returns the Secret's data, and
// whether it made the Secret.
func ensureGeneratedSecret(ctx context.Context, r *run, name, component string, check func(map[string][]byte) error,
	generate func() (map[string][]byte, error)) (data map[string][]byte, created bool, err error) {
	var cur corev1.Secret
	err = r.read(ctx, name, &cur)
	if err == nil {
		if err := r.own(ctx, &cur); err != nil {
			return nil, false, err
		}
		if err := holdSecret(ctx, r, &cur); err != nil {
			return nil, false, err
		}
		return cur.Data, false, check(cur.Data)
	}
	if !apierrors.IsNotFound(err) {
		return nil, false, fmt.Errorf("reading the Secret %s/%s: %w", r.ec.Namespace, name, err)
	}
	data, err = generate()
	if err != nil {
		return nil, false, err
	}
	s := &corev1.Secret{ObjectMeta: objectMeta(r, name), Type: corev1.SecretTypeOpaque, Data: data}
	s.Labels = commonLabels(r.ec, component)
	if err := newOwnedSecret(r, s); err != nil {
		return nil, false, err
	}
	if err := r.c.Create(ctx, s); err != nil {
		if apierrors.IsAlreadyExists(err) {
			// Made meanwhile: that one is the Secret.
			return ensureGeneratedSecret(ctx, r, name, component, check, generate)
		}
		return nil, false, fmt.Errorf("creating the Secret %s/%s: %w", r.ec.Namespace, name, err)
	}
	return data, true, nil
}
