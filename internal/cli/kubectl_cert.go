package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/etcdutil"
	"github.com/etcd-steward/steward/internal/operator"
	"github.com/etcd-steward/steward/internal/pki"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// issuedCertificate is what `certificate` prints.
type issuedCertificate struct {
	Cluster       string    `json:"cluster"`
	User          string    `json:"user"`
	Cert          string    `json:"cert"`
	Key           string    `json:"key"`
	CA            string    `json:"ca"`
	NotAfter      time.Time `json:"notAfter"`
	CAFingerprint string    `json:"caFingerprint"`
	Endpoint      string    `json:"endpoint,omitempty"`
}

// userName is what a certificate's common name may be here: etcd takes it as the user name.
var userName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$`)

func newKubectlCertificateCommand(f *kubeFlags) *cobra.Command {
	var (
		dir      string
		validity time.Duration
		out      outputFlag
	)
	cmd := &cobra.Command{
		Use:   "certificate CLUSTER USER [--dir DIR]",
		Short: "Issue a client certificate for etcd user USER from the cluster's own CA",
		Long: `Issue a client certificate whose common name is USER from the cluster's own CA (Secret
CLUSTER-ca), and write it as tls.crt, tls.key (0600) and ca.crt, the CAs the members trust,
into DIR (default CLUSTER-USER; no file there is overwritten). With etcd authentication, etcd
takes the certificate's name as the user: create the user and grant it a role first (a
certificate of a user etcd does not know is refused every request).
It is signed here, with your own Kubernetes rights: anyone who may read the CA Secret can
issue certificates of the cluster. Refused for a cluster without TLS, one whose certificates
come from spec.tls.serverSecret (your issuer makes them), a CA Secret the cluster did not make
or that is not the CA status.ca records, and for the names root (etcd's administrator, who
logs in with the root password) and steward-member (a member's: it would be taken for a peer).`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(); err != nil {
				return err
			}
			user := args[1]
			switch {
			case !userName.MatchString(user):
				return fmt.Errorf("user %q: a name of letters, digits, '.', '_', '@' and '-', at most 64 characters", user)
			case user == etcdutil.RootUser:
				return fmt.Errorf("user root: a certificate would make its holder etcd's administrator without the root password; log in as root with the password of status.rootPasswordSecret instead")
			case user == pki.MemberCN:
				return fmt.Errorf("user %s: the members' own name, which etcd takes for a peer; choose another", user)
			}
			if validity <= 0 {
				return fmt.Errorf("--validity %s: give a positive duration, e.g. 720h", validity)
			}
			ctx := cmd.Context()
			k, ec, err := f.connectTo(ctx, args[0])
			if err != nil {
				return err
			}
			where := fmt.Sprintf("EtcdCluster %s/%s", ec.Namespace, ec.Name)
			switch {
			case !operator.TLSEnabled(ec):
				return fmt.Errorf("%s has no TLS: its members take clients without certificates; nothing to issue", where)
			case operator.ProvidedTLS(ec):
				return fmt.Errorf("%s takes its certificates from spec.tls.serverSecret %s: issue the certificate with the issuer of that Secret", where, ec.Spec.TLS.ServerSecret)
			case ec.Status.CA == nil:
				return fmt.Errorf("%s has no CA yet (status.ca): wait for the operator to make it", where)
			}
			caName := v1alpha1.CASecretName(ec.Name)
			caSecret, err := k.ownedSecret(ctx, ec, caName)
			if err != nil {
				return err
			}
			ca, err := pki.ParseCA(caSecret.Data[pki.CertFile], caSecret.Data[pki.KeyFile])
			if err != nil {
				return fmt.Errorf("the CA Secret %s/%s: %w", ec.Namespace, caName, err)
			}
			if fp := pki.Fingerprint(ca.Cert); fp != ec.Status.CA.Fingerprint {
				return fmt.Errorf("the CA Secret %s/%s holds the CA of fingerprint %s, not the one %s records (status.ca, %s): no certificate is issued from it (condition CAReady says why; during a CA rollover, run it again in a moment)",
					ec.Namespace, caName, fp, where, ec.Status.CA.Fingerprint)
			}
			// The CAs the members trust: the bundle the operator puts beside its client
			// certificate (during a CA rollover, more than one).
			clientSecret, err := k.ownedSecret(ctx, ec, v1alpha1.ClientCertificateSecretName(ec.Name))
			if err != nil {
				return err
			}
			trust := clientSecret.Data[pki.CAFile]
			if len(trust) == 0 {
				return fmt.Errorf("the Secret %s/%s has no %s: wait for the operator to issue it", ec.Namespace, clientSecret.Name, pki.CAFile)
			}
			certPEM, keyPEM, err := ca.Issue(pki.Leaf{CommonName: user, ClientOnly: true}, time.Now(), validity)
			if err != nil {
				return err
			}
			certs, err := pki.ParseCerts(certPEM)
			if err != nil {
				return err
			}
			if dir == "" {
				dir = ec.Name + "-" + user
			}
			res := issuedCertificate{Cluster: ec.Name, User: user, Cert: filepath.Join(dir, pki.CertFile), Key: filepath.Join(dir, pki.KeyFile),
				CA: filepath.Join(dir, pki.CAFile), NotAfter: certs[0].NotAfter.UTC(),
				CAFingerprint: ec.Status.CA.Fingerprint, Endpoint: ec.Status.Endpoints.Client}
			if err := writeNew(dir, map[string][]byte{res.Cert: certPEM, res.Key: keyPEM, res.CA: trust}, res.Key); err != nil {
				return err
			}
			return out.print(cmd.OutOrStdout(), res, func(t *table) {
				t.row("user", res.User)
				t.row("cluster", ec.Namespace+"/"+res.Cluster)
				t.row("certificate", res.Cert)
				t.row("key", res.Key)
				t.row("CAs", res.CA)
				t.row("valid until", res.NotAfter.Format(time.RFC3339))
				t.row("CA fingerprint", res.CAFingerprint)
				if res.Endpoint != "" {
					t.row("etcdctl", fmt.Sprintf("etcdctl --endpoints %s --cacert %s --cert %s --key %s ...", res.Endpoint, res.CA, res.Cert, res.Key))
				}
			})
		},
	}
	cmd.Flags().StringVarP(&dir, "dir", "d", "", "directory to write tls.crt, tls.key and ca.crt into (default: CLUSTER-USER)")
	cmd.Flags().DurationVar(&validity, "validity", pki.LeafValidity, "how long the certificate is valid (never past the CA's end)")
	out.register(cmd)
	return cmd
}

// ownedSecret reads Secret name of cluster ec, which must have been made by ec.
func (k *kube) ownedSecret(ctx context.Context, ec *v1alpha1.EtcdCluster, name string) (*corev1.Secret, error) {
	var s corev1.Secret
	if err := k.c.Get(ctx, types.NamespacedName{Namespace: ec.Namespace, Name: name}, &s); err != nil {
		return nil, fmt.Errorf("reading Secret %s/%s of EtcdCluster %s: %w", ec.Namespace, name, ec.Name, err)
	}
	if !metav1.IsControlledBy(&s, ec) {
		return nil, fmt.Errorf("the Secret %s/%s was not made by EtcdCluster %s: it is not used", ec.Namespace, name, ec.Name)
	}
	return &s, nil
}

// writeNew writes files (path: content) into dir, made if missing; secret is the one written
// 0600. No file that exists is overwritten, and none is written unless all can be.
func writeNew(dir string, files map[string][]byte, secret string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for path := range files {
		if _, err := os.Lstat(path); err == nil {
			return fmt.Errorf("%s exists: it is never overwritten (--dir names another directory)", path)
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	for path, data := range files {
		mode := os.FileMode(0o644)
		if path == secret {
			mode = 0o600
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
		if err != nil {
			return err
		}
		_, err = f.Write(data)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("writing %s: %w", path, err)
		}
	}
	return nil
}
