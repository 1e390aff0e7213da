package operator

import (
	"bytes"
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

// ReasonCARotation is the Progressing reason while a CA rollover waits between its rolling
// restarts.
const ReasonCARotation = "CARotation"

// CAState is what a CA rollover decides from: the CA Secrets, and whether the members run
// the trust the Secrets give.
type CAState struct {
	// Next and Old: the Secrets of the coming CA (<name>-ca-next) and the going one
	// (<name>-ca-old) exist.
	Next, Old bool
	// LeavesIssued is when the newest of the cluster's certificates was issued (by its
	// current CA): the kubelets mount it within the propagation time from then.
	LeavesIssued time.Time
	// Trust identifies the CAs every ca.crt holds now; TemplateTrust those the StatefulSet's
	// pod template, as observed, was made for.
	Trust, TemplateTrust string
	// MembersCurrent: every member's pod runs the StatefulSet's newest observed revision and
	// is Ready, and no rolling update is in progress.
	MembersCurrent bool
	// NotAfter is the end of the current CA's validity.
	NotAfter time.Time
}

// caRenewBefore is how long before its end a CA is reported (CAReady False, an Event) and,
// when it is the cluster's own, rolled over without being asked.
const caRenewBefore = 30 * 24 * time.Hour

// caAction is a step of a CA rollover.
type caAction int

const (
	caWait    caAction = iota
	caStart            // make the coming CA
	caPromote          // the coming CA becomes the cluster's; the going one is kept
	caDropOld          // delete the going CA: it is trusted no more
	caDone
)

// caDecision is the next step of a CA rollover and the status it leaves.
type caDecision struct {
	Action caAction
	Status *v1alpha1.CARotationStatus
	// Rotated is status.caRotated.
	Rotated string
}

// decideCARotation is the next step of a CA rollover (pure). A rollover starts on a new
// request, or by itself once the CA has less than caRenewBefore left (Automatic: it leaves
// status.caRotated as it was, so a request already done is not taken as new). The Secrets
// say where it is, so an operator restarted at any point goes on; status.caRotation only
// adds the request and the start. Each step waits until the last one reached every member: the members trust
// both CAs (they read the CAs they trust when they start) before leaves of the new CA are
// issued, and every kubelet has had `propagation` since the newest leaf was issued to mount
// it before the old CA is dropped.
func decideCARotation(request string, prev *v1alpha1.CARotationStatus, rotated string, st CAState, now time.Time, propagation time.Duration) caDecision {
	d := caDecision{Rotated: rotated}
	cur := func(phase, msg string) *v1alpha1.CARotationStatus {
		s := &v1alpha1.CARotationStatus{Request: request, Phase: phase, Message: msg, StartTime: metav1.NewTime(now)}
		if prev != nil {
			s.Request, s.StartTime, s.Automatic = prev.Request, prev.StartTime, prev.Automatic
		}
		return s
	}
	applied := st.TemplateTrust == st.Trust && st.MembersCurrent
	switch {
	case st.Next && applied:
		d.Action = caPromote
		d.Status = cur(v1alpha1.CARotationNewLeaves, "every member trusts both CAs: the new CA becomes the cluster's, and every certificate is issued again by it")
	case st.Next:
		d.Status = cur(v1alpha1.CARotationTrustBoth, "the members restart, one at a time and the leader last, to trust both CAs")
	case st.Old && !now.Before(st.LeavesIssued.Add(propagation)):
		d.Action = caDropOld
		d.Status = cur(v1alpha1.CARotationDropOld, "the certificates of the new CA are mounted: the old CA is dropped, and the members restart to trust the new one only")
	case st.Old:
		d.Status = cur(v1alpha1.CARotationNewLeaves, fmt.Sprintf("certificates of the new CA issued: the kubelets mount them until %s, then the old CA is dropped",
			st.LeavesIssued.Add(propagation).UTC().Format(time.RFC3339)))
	case prev != nil && applied:
		d.Action = caDone
		if !prev.Automatic {
			d.Rotated = prev.Request
		}
	case prev != nil:
		d.Status = cur(v1alpha1.CARotationDropOld, "the members restart, one at a time and the leader last, to trust the new CA only")
	case request != "" && request != rotated:
		d.Action = caStart
		d.Status = cur(v1alpha1.CARotationTrustBoth, "a new CA is made: every ca.crt trusts both CAs, and the members restart to trust both")
	case !st.NotAfter.IsZero() && !now.Before(st.NotAfter.Add(-caRenewBefore)):
		d.Action = caStart
		d.Status = cur(v1alpha1.CARotationTrustBoth, fmt.Sprintf("the CA ends at %s: a new CA is made, every ca.crt trusts both CAs, and the members restart to trust both",
			st.NotAfter.UTC().Format(time.RFC3339)))
		d.Status.Request, d.Status.Automatic = "expiry "+st.NotAfter.UTC().Format("2006-01-02"), true
	}
	return d
}

// caState completes what the TLS component found with whether the members run it.
func caState(st CAState, o Observation, d Decision) CAState {
	if o.Rollout != nil {
		st.TemplateTrust = o.Rollout.Trust
	}
	st.MembersCurrent = membersCurrent(o, d)
	return st
}

// membersCurrent: every member's pod runs the StatefulSet's newest observed revision and is
// Ready, and no rolling update is in progress.
func membersCurrent(o Observation, d Decision) bool {
	if o.Rollout == nil || o.Rollout.Revision == "" || d.Rollout.Status != nil || d.ClusterSize == 0 {
		return false
	}
	n := int32(0)
	for _, m := range o.Members {
		if int32(m.Ordinal) >= d.ClusterSize {
			continue
		}
		if m.Pod == nil || m.Pod.Deleting || !m.Pod.Ready || m.Pod.Revision != o.Rollout.Revision {
			return false
		}
		n++
	}
	return n == d.ClusterSize
}

// rotateCA takes a step of a CA rollover; false: not taken in this pass. Each step can be
// taken again: an operator stopped in the middle of one finishes it on its next pass.
func (r *ClusterReconciler) rotateCA(ctx context.Context, run *run, a caAction, request string) (bool, error) {
	ec := run.ec
	cur, next, old := v1alpha1.CASecretName(ec.Name), v1alpha1.NextCASecretName(ec.Name), v1alpha1.OldCASecretName(ec.Name)
	switch a {
	case caStart:
		// Decided from status.caRotated as the last pass wrote it: from a cache behind it, a
		// rollover just completed would start again.
		fresh := &v1alpha1.EtcdCluster{}
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(ec), fresh); err != nil {
			return false, err
		}
		if fresh.ResourceVersion != ec.ResourceVersion {
			return false, nil
		}
		ca, err := createCASecret(ctx, run, next)
		if apierrors.IsAlreadyExists(err) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		run.event(corev1.EventTypeNormal, "CARotationStarted", fmt.Sprintf("CA rollover %q: new CA made in Secret %s (valid until %s); the members restart to trust both CAs",
			request, next, ca.Cert.NotAfter.UTC().Format("2006-01-02")))
	case caPromote:
		// The going CA is kept first (never overwritten: once the coming one is current, the
		// current Secret holds it), then the coming one becomes current, then its own Secret goes.
		var curSecret, nextSecret corev1.Secret
		if err := run.fresh().Get(ctx, client.ObjectKey{Namespace: ec.Namespace, Name: next}, &nextSecret); err != nil {
			return false, err
		}
		if err := run.fresh().Get(ctx, client.ObjectKey{Namespace: ec.Namespace, Name: cur}, &curSecret); err != nil {
			return false, err
		}
		for _, s := range []*corev1.Secret{&nextSecret, &curSecret} {
			if _, err := run.claim(s); err != nil {
				return false, err
			}
		}
		if !bytes.Equal(curSecret.Data[pki.CertFile], nextSecret.Data[pki.CertFile]) {
			keep := tlsSecret(run, old, "ca", curSecret.Data[pki.CertFile], curSecret.Data[pki.KeyFile], curSecret.Data[pki.CertFile])
			if err := newOwnedSecret(run, keep); err != nil {
				return false, err
			}
			if err := r.Client.Create(ctx, keep); err != nil && !apierrors.IsAlreadyExists(err) {
				return false, fmt.Errorf("keeping the going CA in Secret %s: %w", old, err)
			}
			curSecret.Data = nextSecret.Data
			if err := r.Client.Update(ctx, &curSecret); err != nil {
				return false, fmt.Errorf("making the new CA the cluster's in Secret %s: %w", cur, err)
			}
		}
		if err := deleteOwnedSecret(ctx, run, next); err != nil {
			return false, err
		}
		// The new CA is the one the status records from now on.
		if certs, err := pki.ParseCerts(nextSecret.Data[pki.CertFile]); err == nil && run.caCheck != nil {
			run.caCheck.CA = caStatus(certs[0])
		}
		run.event(corev1.EventTypeNormal, "CARotationPromoted", fmt.Sprintf("every member trusts both CAs: the new CA is the cluster's (Secret %s), the old one is kept in %s, and every certificate is issued again", cur, old))
	case caDropOld:
		if err := deleteOwnedSecret(ctx, run, old); err != nil {
			return false, err
		}
		run.event(corev1.EventTypeNormal, "CARotationDropOld", "the old CA is trusted no more: the members restart to trust the new CA only")
	case caDone:
		run.event(corev1.EventTypeNormal, "CARotationDone", fmt.Sprintf("CA rollover %q done: every member trusts the new CA only and serves its certificates", ec.Status.CARotation.Request))
	}
	return true, nil
}
