package operator

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/pki"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TLSMount is where both containers of a member pod mount the members' certificate Secret:
// etcd serves from it and the sidecar dials with it.
const TLSMount = "/var/run/steward/tls"

// TLSEnabled: spec.tls says, or where it is left out, the defaults the status records.
func TLSEnabled(ec *v1alpha1.EtcdCluster) bool {
	if ec.Spec.TLS != nil {
		return ec.Spec.TLS.Enabled
	}
	return ec.Status.Defaults != nil && ec.Status.Defaults.TLS
}

// ProvidedTLS: the certificates come from Secrets the user keeps (spec.tls.serverSecret), not
// from the cluster's own CA.
func ProvidedTLS(ec *v1alpha1.EtcdCluster) bool {
	return TLSEnabled(ec) && ec.Spec.TLS != nil && ec.Spec.TLS.ServerSecret != ""
}

// serverSecretName is the Secret of the members' certificate, which the member pods mount.
func serverSecretName(ec *v1alpha1.EtcdCluster) string {
	if ProvidedTLS(ec) {
		return ec.Spec.TLS.ServerSecret
	}
	return v1alpha1.ServerCertificateSecretName(ec.Name)
}

// clientSecretName is the Secret of the client certificate published in the status: none
// when the user provides the members' certificate but no client one.
func clientSecretName(ec *v1alpha1.EtcdCluster) string {
	if ProvidedTLS(ec) {
		return ec.Spec.TLS.ClientSecret
	}
	return v1alpha1.ClientCertificateSecretName(ec.Name)
}

// scheme is the URL scheme of the cluster's client and peer traffic.
func scheme(ec *v1alpha1.EtcdCluster) string {
	if TLSEnabled(ec) {
		return "https"
	}
	return "http"
}

// serverLeaf is what the members' certificate names: every member through the peer Service,
// the client Service, and localhost for the sidecar and etcd's own clients in the pod. The
// members share it (one Secret, mounted by the StatefulSet), so a member added by scaling
// needs no new certificate.
func serverLeaf(ec *v1alpha1.EtcdCluster) pki.Leaf {
	peer := fmt.Sprintf("%s.%s.svc", peerServiceName(ec), ec.Namespace)
	svc := clientServiceName(ec)
	return pki.Leaf{CommonName: pki.MemberCN,
		DNSNames: []string{"*." + peer, "*." + peer + ".cluster.local", svc, svc + "." + ec.Namespace,
			svc + "." + ec.Namespace + ".svc", svc + "." + ec.Namespace + ".svc.cluster.local", "localhost"},
		IPs: []net.IP{net.ParseIP("127.0.0.1")}}
}

// syncTLS keeps the Secrets of a cluster with TLS: its CA, made once, and the members' and
// the client certificate, issued from it when missing, when pki.Renewal gives a reason (less
// than a third of the lifetime left, another CA, a name missing), and with ca.crt kept equal
// to the CAs the cluster trusts: its own, and during a rollover the coming or the going one.
// The kubelet updates the mounted Secret and etcd reads its certificate at every handshake,
// so a renewal restarts nothing. No key is logged, put in an Event or the status.
func syncTLS(ctx context.Context, r *run) error {
	if !TLSEnabled(r.ec) {
		return nil
	}
	if ProvidedTLS(r.ec) {
		return checkProvidedTLS(ctx, r)
	}
	// A rollover's state is its Secrets: while one is due, all of them are read fresh, so
	// that one pass never mixes Secrets of two of its steps.
	get, getRollover := cachedSecret, rolloverSecret
	if caRolloverDue(r.ec) {
		get, getRollover = freshSecret, freshSecret
	}
	next, err := readCASecret(ctx, r, v1alpha1.NextCASecretName(r.ec.Name), getRollover)
	if err != nil {
		return err
	}
	old, err := readCASecret(ctx, r, v1alpha1.OldCASecretName(r.ec.Name), getRollover)
	if err != nil {
		return err
	}
	ca, err := clusterCA(ctx, r, old, get)
	if err != nil {
		return err
	}
	state := CAState{NotAfter: ca.Cert.NotAfter}
	trusted := [][]byte{ca.CertPEM}
	if next != nil {
		state.Next, trusted = true, append(trusted, next.CertPEM)
	}
	if old != nil {
		state.Old, trusted = true, append(trusted, old.CertPEM)
	}
	bundle := trustBundle(trusted)
	// On the pod template: a change restarts the members, as etcd reads the CAs it trusts
	// only when it starts.
	state.Trust = shortHash(bundle)
	for _, s := range []struct {
		name string
		leaf pki.Leaf
	}{
		{v1alpha1.ServerCertificateSecretName(r.ec.Name), serverLeaf(r.ec)},
		{v1alpha1.ClientCertificateSecretName(r.ec.Name), pki.ClientLeaf()},
	} {
		cert, err := ensureLeafSecret(ctx, r, s.name, s.leaf, ca, bundle, get)
		if err != nil {
			return err
		}
		if issued := pki.Issued(cert); issued.After(state.LeavesIssued) {
			state.LeavesIssued = issued
		}
	}
	r.ca = &state
	return nil
}

// checkProvidedTLS checks the certificates of the Secrets the user keeps, and writes nothing:
// the members' one (spec.tls.serverSecret) must serve every member, and the client one
// (spec.tls.clientSecret) reach them. Their issuer renews them, and etcd reads a renewal at
// the next handshake. The members' ca.crt is what they trust: a change of it restarts them,
// one at a time and leader last, as etcd reads it only when it starts.
func checkProvidedTLS(ctx context.Context, r *run) error {
	name := r.ec.Spec.TLS.ServerSecret
	s, err := readProvidedSecret(ctx, r, name, "spec.tls.serverSecret")
	if err != nil {
		return err
	}
	n := max(r.ec.Spec.Replicas, r.decision.ConfigMembers, r.decision.StatefulSetReplicas)
	cn, err := pki.CheckMember(s.Data[pki.CertFile], s.Data[pki.KeyFile], s.Data[pki.CAFile], memberHosts(r.ec, int(n)), r.now)
	if err != nil {
		return fmt.Errorf("the members' certificate Secret %s/%s (spec.tls.serverSecret): %w", r.ec.Namespace, name, err)
	}
	r.ca = &CAState{Trust: shortHash(s.Data[pki.CAFile])}
	// The CA to warn about is the one that issued the members' certificate.
	if issuer, err := pki.IssuerOf(s.Data[pki.CertFile], s.Data[pki.CAFile]); err == nil {
		r.caCheck = &caCheck{Secret: r.ec.Namespace + "/" + name, Provided: true, CA: caStatus(issuer)}
	}
	if name := r.ec.Spec.TLS.ClientSecret; name != "" {
		c, err := readProvidedSecret(ctx, r, name, "spec.tls.clientSecret")
		if err != nil {
			return err
		}
		if err := pki.CheckClient(c.Data[pki.CertFile], c.Data[pki.KeyFile], s.Data[pki.CAFile], cn, r.now); err != nil {
			return fmt.Errorf("the client certificate Secret %s/%s (spec.tls.clientSecret): %w", r.ec.Namespace, name, err)
		}
	}
	return nil
}

// readProvidedSecret reads a Secret the user keeps, named in field.
func readProvidedSecret(ctx context.Context, r *run, name, field string) (*corev1.Secret, error) {
	var s corev1.Secret
	err := r.fresh().Get(ctx, client.ObjectKey{Namespace: r.ec.Namespace, Name: name}, &s)
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("the Secret %s/%s (%s) does not exist: create it with tls.crt, tls.key and ca.crt, or the cert-manager Certificate whose secretName it is", r.ec.Namespace, name, field)
	}
	if err != nil {
		return nil, fmt.Errorf("reading the Secret %s/%s (%s): %w", r.ec.Namespace, name, field, err)
	}
	return &s, nil
}

// memberHosts are the host names of the first n members.
func memberHosts(ec *v1alpha1.EtcdCluster, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = memberDNS(ec, i)
	}
	return out
}

func deleteTLS(ctx context.Context, r *run) error {
	if ProvidedTLS(r.ec) {
		// The user's Secrets are theirs; the operator made none.
		return nil
	}
	for _, name := range []func(string) string{v1alpha1.ClientCertificateSecretName, v1alpha1.ServerCertificateSecretName,
		v1alpha1.NextCASecretName, v1alpha1.OldCASecretName, v1alpha1.CASecretName} {
		if err := deleteOwnedSecret(ctx, r, name(r.ec.Name)); err != nil {
			return err
		}
	}
	return nil
}

// trustBundle is the PEM bundle of the CAs in cas, each once, in a fixed order: the same
// CAs make the same bundle whichever is current.
func trustBundle(cas [][]byte) []byte {
	cas = slices.Clone(cas)
	slices.SortFunc(cas, bytes.Compare)
	return bytes.Join(slices.CompactFunc(cas, bytes.Equal), nil)
}

// readCASecret reads the CA in Secret name with get: nil when the Secret does not exist; an
// error naming it when it holds no CA or the cluster does not own it.
func readCASecret(ctx context.Context, r *run, name string, get secretGetter) (*pki.CA, error) {
	var s corev1.Secret
	err := get(ctx, r, name, &s)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the CA Secret %s/%s: %w", r.ec.Namespace, name, err)
	}
	if err := r.own(ctx, &s); err != nil {
		return nil, err
	}
	ca, err := pki.ParseCA(s.Data[pki.CertFile], s.Data[pki.KeyFile])
	if err != nil {
		return nil, fmt.Errorf("the CA Secret %s/%s: %w; put the CA back (the cluster's certificates are issued from it, and the members trust it)", r.ec.Namespace, name, err)
	}
	if err := holdSecret(ctx, r, &s); err != nil {
		return nil, err
	}
	return &ca, nil
}

// secretGetter reads the Secret name of the run's cluster into s.
type secretGetter func(ctx context.Context, r *run, name string, s *corev1.Secret) error

// cachedSecret reads with run.read: from the cache, and from the API server when the cache
// has none of that name.
func cachedSecret(ctx context.Context, r *run, name string, s *corev1.Secret) error {
	return r.read(ctx, name, s)
}

// freshSecret reads from the API server.
func freshSecret(ctx context.Context, r *run, name string, s *corev1.Secret) error {
	return r.fresh().Get(ctx, client.ObjectKey{Namespace: r.ec.Namespace, Name: name}, s)
}

// rolloverSecret reads a Secret of a CA rollover (the coming CA's or the going one's) while
// none is due: none is expected then, and the cache, which holds the Secrets the operator
// made, says so without a request. One it holds is read fresh (the rollover that just ended
// may have deleted it).
func rolloverSecret(ctx context.Context, r *run, name string, s *corev1.Secret) error {
	if err := r.c.Get(ctx, client.ObjectKey{Namespace: r.ec.Namespace, Name: name}, s); err != nil {
		return err
	}
	return freshSecret(ctx, r, name, s)
}

// caRolloverDue: a CA rollover is in force (status.caRotation), or asked for and not done.
func caRolloverDue(ec *v1alpha1.EtcdCluster) bool {
	req := ec.Annotations[v1alpha1.AnnotationRotateCA]
	return ec.Status.CARotation != nil || (req != "" && req != ec.Status.CARotated)
}

// caCheck is what the TLS component found of the CA that issues the cluster's certificates:
// what the CAReady condition (caCondition) and status.ca say.
type caCheck struct {
	// Secret (namespace/name) holds the cluster's own CA, or the certificate of
	// spec.tls.serverSecret (Provided).
	Secret   string
	Provided bool
	// CA is the CA in use: the one found, or with a Problem the one the status expects (nil
	// when the status recorded none).
	CA *v1alpha1.CAStatus
	// Problem is ReasonCASecretMissing or ReasonCASecretChanged ("": none), and Message says
	// what it is and how to put it right.
	Problem, Message string
}

func caStatus(cert *x509.Certificate) *v1alpha1.CAStatus {
	return &v1alpha1.CAStatus{Fingerprint: pki.Fingerprint(cert), NotAfter: metav1.NewTime(cert.NotAfter)}
}

// clusterCA is the cluster's own CA, from its Secret, made only while the cluster has none:
// never before the status records a CA (status.ca), never once the cluster formed. After
// that, a CA Secret that is gone, or that holds another CA than status.ca, is reported (the
// CAReady condition, an Event) and an error, and nothing is issued: the members trust the CA
// they started with (etcd reads its trusted CAs only at start), so certificates of another
// would cut them off from each other and from their clients. The CA of status.ca found in
// the going CA's Secret (old) is a promotion whose status was not written yet: the current
// one is the new CA.
func clusterCA(ctx context.Context, r *run, old *pki.CA, get secretGetter) (pki.CA, error) {
	name := v1alpha1.CASecretName(r.ec.Name)
	cur, err := readCASecret(ctx, r, name, get)
	if err != nil {
		return pki.CA{}, err
	}
	expected := r.ec.Status.CA
	secret := r.ec.Namespace + "/" + name
	check := &caCheck{Secret: secret, CA: expected}
	r.caCheck = check
	switch {
	case cur == nil && (expected != nil || r.formed):
		trusted := fmt.Sprintf("whose tls.crt the Secret %s's ca.crt holds", v1alpha1.ServerCertificateSecretName(r.ec.Name))
		if expected != nil {
			trusted = "of SHA-256 fingerprint " + expected.Fingerprint + " (status.ca)"
		}
		check.Problem, check.Message = v1alpha1.ReasonCASecretMissing, fmt.Sprintf(
			"the CA Secret %s is gone: the members trust its CA, %s, so no new CA is made and no certificate is issued; "+
				"re-apply your backup of the Secret (with its key, tls.key). Without one, the members serve with their certificates until these end; "+
				"move the data to a new EtcdCluster (spec.bootstrap.restore from this one's backups) before then", secret, trusted)
		return pki.CA{}, errors.New(check.Message)
	case cur == nil:
		ca, err := createCASecret(ctx, r, name)
		if err != nil {
			return pki.CA{}, err
		}
		r.event(corev1.EventTypeNormal, "CACreated", fmt.Sprintf("the cluster's own CA was made in Secret %s (SHA-256 fingerprint %s, valid until %s)",
			name, pki.Fingerprint(ca.Cert), ca.Cert.NotAfter.UTC().Format("2006-01-02")))
		check.CA = caStatus(ca.Cert)
		return ca, nil
	case expected != nil && pki.Fingerprint(cur.Cert) != expected.Fingerprint && (old == nil || pki.Fingerprint(old.Cert) != expected.Fingerprint):
		check.Problem, check.Message = v1alpha1.ReasonCASecretChanged, fmt.Sprintf(
			"the CA Secret %s holds another CA (SHA-256 fingerprint %s) than the one the members trust (%s, status.ca): it is not used, and no certificate is issued from it; "+
				"put back the CA of fingerprint %s (re-apply your backup of the Secret). A new CA comes only by a rollover (annotation %s), which has every member trust it before it is used",
			secret, pki.Fingerprint(cur.Cert), expected.Fingerprint, expected.Fingerprint, v1alpha1.AnnotationRotateCA)
		return pki.CA{}, errors.New(check.Message)
	}
	check.CA = caStatus(cur.Cert)
	return *cur, nil
}

// createCASecret makes a new CA in Secret name, owned by the cluster.
func createCASecret(ctx context.Context, r *run, name string) (pki.CA, error) {
	ca, err := pki.NewCA(r.ec.Name+"-ca", r.now, pki.CAValidity)
	if err != nil {
		return pki.CA{}, err
	}
	key, err := ca.KeyPEM()
	if err != nil {
		return pki.CA{}, err
	}
	s := tlsSecret(r, name, "ca", ca.CertPEM, key, ca.CertPEM)
	if err := newOwnedSecret(r, s); err != nil {
		return pki.CA{}, err
	}
	if err := r.c.Create(ctx, s); err != nil {
		return pki.CA{}, fmt.Errorf("creating the CA Secret %s/%s: %w", r.ec.Namespace, name, err)
	}
	return ca, nil
}

// ensureLeafSecret keeps Secret name (read with get) holding a certificate for leaf issued
// by ca, and the trust bundle as its ca.crt. It returns the certificate the Secret holds.
func ensureLeafSecret(ctx context.Context, r *run, name string, leaf pki.Leaf, ca pki.CA, bundle []byte, get secretGetter) ([]byte, error) {
	var cur corev1.Secret
	err := get(ctx, r, name, &cur)
	found, why := err == nil, "it did not exist"
	switch {
	case found:
		if err := r.own(ctx, &cur); err != nil {
			return nil, err
		}
		if err := holdSecret(ctx, r, &cur); err != nil {
			return nil, err
		}
		why = pki.Renewal(cur.Data[pki.CertFile], []*x509.Certificate{ca.Cert}, leaf, r.now)
		if why == "" {
			if bytes.Equal(cur.Data[pki.CAFile], bundle) {
				return cur.Data[pki.CertFile], nil
			}
			// The leaf serves: only the CAs to trust change.
			cur.Data[pki.CAFile] = bundle
			if err := r.c.Update(ctx, &cur); err != nil {
				return nil, fmt.Errorf("updating the CAs Secret %s/%s trusts: %w", r.ec.Namespace, name, err)
			}
			return cur.Data[pki.CertFile], nil
		}
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("reading the certificate Secret %s/%s: %w", r.ec.Namespace, name, err)
	}
	certPEM, keyPEM, err := ca.Issue(leaf, r.now, pki.LeafValidity)
	if err != nil {
		return nil, fmt.Errorf("issuing the certificate of Secret %s/%s: %w", r.ec.Namespace, name, err)
	}
	desired := tlsSecret(r, name, "certificate", certPEM, keyPEM, bundle)
	if found {
		cur.Data, cur.Type = desired.Data, desired.Type
		if err := r.c.Update(ctx, &cur); err != nil {
			return nil, fmt.Errorf("renewing the certificate Secret %s/%s: %w", r.ec.Namespace, name, err)
		}
	} else {
		if err := newOwnedSecret(r, desired); err != nil {
			return nil, err
		}
		if err := r.c.Create(ctx, desired); err != nil {
			return nil, fmt.Errorf("creating the certificate Secret %s/%s: %w", r.ec.Namespace, name, err)
		}
	}
	r.event(corev1.EventTypeNormal, "CertificateIssued", fmt.Sprintf("certificate %s issued by the cluster's CA, valid for %s: %s", name, pki.LeafValidity, why))
	return certPEM, nil
}

// tlsSecret is a kubernetes.io/tls Secret with cert-manager's keys.
func tlsSecret(r *run, name, component string, certPEM, keyPEM, caPEM []byte) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: objectMeta(r, name), Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{pki.CertFile: certPEM, pki.KeyFile: keyPEM, pki.CAFile: caPEM}}
	s.Labels = commonLabels(r.ec, component)
	return s
}

// caCondition is the CAReady condition from what the TLS component found (pure): False while
// the CA Secret is gone or holds another CA (the check's Problem), or while the CA has less
// than caRenewBefore left (the cluster's own CA is then rolled over by itself; the issuer of
// spec.tls.serverSecret rolls over its own); True otherwise.
func caCondition(c caCheck, now time.Time) (ok bool, reason, msg string) {
	if c.Problem != "" {
		return false, c.Problem, c.Message
	}
	end := c.CA.NotAfter.UTC().Format(time.RFC3339)
	switch {
	case now.Before(c.CA.NotAfter.Add(-caRenewBefore)):
		return true, v1alpha1.ReasonCAValid, fmt.Sprintf("the CA of SHA-256 fingerprint %s is valid until %s", c.CA.Fingerprint, end)
	case c.Provided:
		return false, v1alpha1.ReasonCAExpiring, fmt.Sprintf(
			"the CA that issued the certificate of Secret %s (spec.tls.serverSecret), of SHA-256 fingerprint %s, is valid until %s: "+
				"roll it over with its issuer (both CAs in ca.crt, the certificates issued from the new one, then the old one dropped from ca.crt)",
			c.Secret, c.CA.Fingerprint, end)
	default:
		return false, v1alpha1.ReasonCAExpiring, fmt.Sprintf(
			"the cluster's CA (Secret %s, SHA-256 fingerprint %s) is valid until %s: the operator rolls the cluster over to a new CA (status.caRotation)",
			c.Secret, c.CA.Fingerprint, end)
	}
}
