package operator

import (
	"context"
	"fmt"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/pki"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// annotationTokenKeyRequest on the token signing key Secret is the renewal request
// (etcd.steward.dev/rotate-token-key) whose key pair it holds: written with the pair, so a
// renewal makes its key once, whatever happens between the write and the status's record.
const annotationTokenKeyRequest = "etcd.steward.dev/token-key-request"

// Reasons of the Events of a token signing key renewal.
const (
	ReasonTokenKeyRotated           = "TokenKeyRotated"
	ReasonTokenKeyRotationRefused   = "TokenKeyRotationRefused"
	ReasonTokenKeyRotationRequested = "TokenKeyRotationRequested"
)

// TokenKeyCase names a step of the renewal of the token signing key.
type TokenKeyCase string

const (
	// TokenKeyNone: no renewal asked for (no annotation, or its value's renewal is done).
	TokenKeyNone TokenKeyCase = "None"
	// TokenKeyRefused: asked for a cluster without authentication: there is no key.
	TokenKeyRefused TokenKeyCase = "Refused"
	// TokenKeyRecord: a new request: recorded in status.tokenKeyRotation before any key is made.
	TokenKeyRecord TokenKeyCase = "Record"
	// TokenKeyMint: recorded, and the Secret does not hold the request's key yet: it is made now.
	TokenKeyMint TokenKeyCase = "Mint"
	// TokenKeyDone: the Secret holds the request's key: the renewal is recorded as done; the
	// changed pod template rolls the members onto it.
	TokenKeyDone TokenKeyCase = "Done"
)

// tokenKeyInput is what decides a renewal step.
type tokenKeyInput struct {
	// Request is the annotation's value; Rotation and Rotated the status's record.
	Request  string
	Rotation *v1alpha1.TokenKeyRotationStatus
	Rotated  string
	Auth     bool
	// Minted is the request whose key the Secret holds ("": none, or not read).
	Minted string
}

func newTokenKeyInput(ec *v1alpha1.EtcdCluster, minted string) tokenKeyInput {
	return tokenKeyInput{Request: ec.Annotations[v1alpha1.AnnotationRotateTokenKey], Rotation: ec.Status.TokenKeyRotation,
		Rotated: ec.Status.TokenKeyRotated, Auth: authEnabled(ec), Minted: minted}
}

// decideTokenKeyRotation is the next step of a renewal of the token signing key. The intent
// is recorded before the key is made; a recorded renewal is carried out even if the
// annotation changes meanwhile (a newer value starts the next one).
func decideTokenKeyRotation(in tokenKeyInput) TokenKeyCase {
	switch rot := in.Rotation; {
	case rot != nil && in.Minted == rot.Request:
		return TokenKeyDone
	case rot != nil:
		return TokenKeyMint
	case in.Request == "" || in.Request == in.Rotated:
		return TokenKeyNone
	case !in.Auth:
		return TokenKeyRefused
	}
	return TokenKeyRecord
}

// renewTokenKey carries out a recorded renewal in the AUTH component: a new key pair in the
// Secret, read fresh and written with its resourceVersion (made anew when it is gone), marked
// with the request. It records in the run which request's key the Secret holds.
func renewTokenKey(ctx context.Context, r *run) error {
	rot := r.ec.Status.TokenKeyRotation
	if rot == nil {
		return nil
	}
	name := tokenKeySecretName(r.ec)
	cur := &corev1.Secret{}
	err := r.fresh().Get(ctx, client.ObjectKey{Namespace: r.ec.Namespace, Name: name}, cur)
	found := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading the Secret %s/%s: %w", r.ec.Namespace, name, err)
	}
	if found {
		if err := r.own(ctx, cur); err != nil {
			return err
		}
	}
	minted := cur.Annotations[annotationTokenKeyRequest]
	if decideTokenKeyRotation(newTokenKeyInput(r.ec, minted)) != TokenKeyMint {
		r.tokenKeyMinted = minted
		return nil
	}
	key, pub, err := pki.NewTokenKey()
	if err != nil {
		return err
	}
	data := map[string][]byte{pki.TokenKeyFile: key, pki.TokenPublicKeyFile: pub}
	if found {
		cur.Data = data
		metav1.SetMetaDataAnnotation(&cur.ObjectMeta, annotationTokenKeyRequest, rot.Request)
		err = r.c.Update(ctx, cur)
	} else {
		cur = &corev1.Secret{ObjectMeta: objectMeta(r, name), Type: corev1.SecretTypeOpaque, Data: data}
		cur.Labels = commonLabels(r.ec, "token-key")
		cur.Annotations = map[string]string{annotationTokenKeyRequest: rot.Request}
		if err := newOwnedSecret(r, cur); err != nil {
			return err
		}
		err = r.c.Create(ctx, cur)
	}
	if err != nil {
		return fmt.Errorf("writing the new token signing key to the Secret %s/%s: %w", r.ec.Namespace, name, err)
	}
	r.tokenKeyMinted = rot.Request
	r.event(corev1.EventTypeNormal, ReasonTokenKeyRotated, fmt.Sprintf("a new key pair etcd signs its authentication tokens with is in Secret %s (%s=%s): "+
		"the members roll onto it, one at a time; a member refuses the tokens signed with another key than its own, and clients log in again",
		name, v1alpha1.AnnotationRotateTokenKey, rot.Request))
	return nil
}

// tokenKeyStatus records the renewal's step in the status, with its Event once stored.
func (r *ClusterReconciler) tokenKeyStatus(ec *v1alpha1.EtcdCluster, run *run, p *pass, status *v1alpha1.EtcdClusterStatus) {
	status.TokenKeyRotation, status.TokenKeyRotated = ec.Status.TokenKeyRotation, ec.Status.TokenKeyRotated
	in := newTokenKeyInput(ec, run.tokenKeyMinted)
	switch decideTokenKeyRotation(in) {
	case TokenKeyRefused:
		status.TokenKeyRotated = in.Request
		p.stored = append(p.stored, func() {
			r.Recorder.Eventf(ec, nil, corev1.EventTypeWarning, ReasonTokenKeyRotationRefused, "RotateTokenKey",
				"token signing key renewal %q refused: the cluster has no etcd authentication, so no token signing key", in.Request)
		})
	case TokenKeyRecord:
		status.TokenKeyRotation = &v1alpha1.TokenKeyRotationStatus{Request: in.Request, StartTime: metav1.NewTime(p.now)}
		p.requeue = min(p.requeue, time.Second) // the next pass makes the key
		p.stored = append(p.stored, func() {
			r.Recorder.Eventf(ec, nil, corev1.EventTypeNormal, ReasonTokenKeyRotationRequested, "RotateTokenKey",
				"token signing key renewal %q recorded: a new key pair is made next, then the members roll onto it", in.Request)
		})
	case TokenKeyDone:
		status.TokenKeyRotation, status.TokenKeyRotated = nil, in.Rotation.Request
	}
}
