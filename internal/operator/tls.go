package operator

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"net"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/pki"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// TLSMount is where both containers of a member pod mount the members' certificate Secret:
// etcd serves from it and the sidecar dials with it.
const TLSMount = "/var/run/steward/tls"

func tlsEnabled(ec *v1alpha1.EtcdCluster) bool { return ec.Spec.TLS != nil && ec.Spec.TLS.Enabled }

// scheme is the URL scheme of the cluster's client and peer traffic.
func scheme(ec *v1alpha1.EtcdCluster) string {
	if tlsEnabled(ec) {
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
// to the CA. The kubelet updates the mounted Secret and etcd reads its certificate at every
// handshake, so a renewal restarts nothing. No key is logged, put in an Event or the status.
func syncTLS(ctx context.Context, r *run) error {
	if !tlsEnabled(r.ec) {
		return nil
	}
	ca, err := ensureCASecret(ctx, r)
	if err != nil {
		return err
	}
	for _, s := range []struct {
		name string
		leaf pki.Leaf
	}{
		{v1alpha1.ServerCertificateSecretName(r.ec.Name), serverLeaf(r.ec)},
		{v1alpha1.ClientCertificateSecretName(r.ec.Name), pki.Leaf{CommonName: pki.ClientCN}},
	} {
		if err := ensureLeafSecret(ctx, r, s.name, s.leaf, ca); err != nil {
			return err
		}
	}
	return nil
}

func deleteTLS(ctx context.Context, r *run) error {
	for _, name := range []string{v1alpha1.ClientCertificateSecretName(r.ec.Name), v1alpha1.ServerCertificateSecretName(r.ec.Name),
		v1alpha1.CASecretName(r.ec.Name)} {
		s := &corev1.Secret{ObjectMeta: objectMeta(r, name)}
		if err := client.IgnoreNotFound(r.c.Delete(ctx, s)); err != nil {
			return err
		}
	}
	return nil
}

// ensureCASecret reads the cluster's CA from its Secret, or makes it once. A CA Secret that
// does not hold a CA is an error, never replaced: every certificate of the cluster comes from
// it, and the members trust it from their start.
func ensureCASecret(ctx context.Context, r *run) (pki.CA, error) {
	name := v1alpha1.CASecretName(r.ec.Name)
	var cur corev1.Secret
	err := r.secrets().Get(ctx, client.ObjectKey{Namespace: r.ec.Namespace, Name: name}, &cur)
	if err == nil {
		ca, err := pki.ParseCA(cur.Data[pki.CertFile], cur.Data[pki.KeyFile])
		if err != nil {
			return pki.CA{}, fmt.Errorf("the CA Secret %s/%s: %w; put the cluster's CA back (every certificate of the cluster is issued from it, and the members trust it)", r.ec.Namespace, name, err)
		}
		return ca, nil
	}
	if !apierrors.IsNotFound(err) {
		return pki.CA{}, fmt.Errorf("reading the CA Secret %s/%s: %w", r.ec.Namespace, name, err)
	}
	ca, err := pki.NewCA(r.ec.Name+"-ca", r.now, pki.CAValidity)
	if err != nil {
		return pki.CA{}, err
	}
	key, err := ca.KeyPEM()
	if err != nil {
		return pki.CA{}, err
	}
	s := tlsSecret(r, name, "ca", ca.CertPEM, key, ca.CertPEM)
	if err := controllerutil.SetControllerReference(r.ec, s, r.c.Scheme()); err != nil {
		return pki.CA{}, err
	}
	if err := r.c.Create(ctx, s); err != nil {
		return pki.CA{}, fmt.Errorf("creating the CA Secret %s/%s: %w", r.ec.Namespace, name, err)
	}
	r.event(corev1.EventTypeNormal, "CACreated", fmt.Sprintf("the cluster's own CA was made in Secret %s (valid until %s)", name, ca.Cert.NotAfter.UTC().Format("2006-01-02")))
	return ca, nil
}

// ensureLeafSecret keeps Secret name holding a certificate for leaf issued by ca.
func ensureLeafSecret(ctx context.Context, r *run, name string, leaf pki.Leaf, ca pki.CA) error {
	var cur corev1.Secret
	err := r.secrets().Get(ctx, client.ObjectKey{Namespace: r.ec.Namespace, Name: name}, &cur)
	found, why := err == nil, "it did not exist"
	switch {
	case found:
		why = pki.Renewal(cur.Data[pki.CertFile], []*x509.Certificate{ca.Cert}, leaf, r.now)
		if why == "" && bytes.Equal(cur.Data[pki.CAFile], ca.CertPEM) {
			return nil
		}
		if why == "" {
			why = "its ca.crt was not the cluster's CA"
		}
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("reading the certificate Secret %s/%s: %w", r.ec.Namespace, name, err)
	}
	certPEM, keyPEM, err := ca.Issue(leaf, r.now, pki.LeafValidity)
	if err != nil {
		return fmt.Errorf("issuing the certificate of Secret %s/%s: %w", r.ec.Namespace, name, err)
	}
	desired := tlsSecret(r, name, "certificate", certPEM, keyPEM, ca.CertPEM)
	if found {
		cur.Data, cur.Type = desired.Data, desired.Type
		if err := r.c.Update(ctx, &cur); err != nil {
			return fmt.Errorf("renewing the certificate Secret %s/%s: %w", r.ec.Namespace, name, err)
		}
	} else {
		if err := controllerutil.SetControllerReference(r.ec, desired, r.c.Scheme()); err != nil {
			return err
		}
		if err := r.c.Create(ctx, desired); err != nil {
			return fmt.Errorf("creating the certificate Secret %s/%s: %w", r.ec.Namespace, name, err)
		}
	}
	r.event(corev1.EventTypeNormal, "CertificateIssued", fmt.Sprintf("certificate %s issued by the cluster's CA, valid for %s: %s", name, pki.LeafValidity, why))
	return nil
}

// tlsSecret is a kubernetes.io/tls Secret with cert-manager's keys.
func tlsSecret(r *run, name, component string, certPEM, keyPEM, caPEM []byte) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: objectMeta(r, name), Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{pki.CertFile: certPEM, pki.KeyFile: keyPEM, pki.CAFile: caPEM}}
	s.Labels = commonLabels(r.ec, component)
	return s
}
