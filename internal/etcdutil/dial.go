package etcdutil

import (
	"time"

	"github.com/etcd-steward/steward/internal/pki"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Dialer makes the etcd clients Steward uses: plain, or with TLS when TLSDir, a certificate
// directory (tls.crt, tls.key and ca.crt, as cert-manager writes them), is set. Every client
// of a cluster's members is made by one, so none is left plain-text when TLS is on.
type Dialer struct {
	TLSDir string
}

// Config is the client configuration for endpoints.
func (d Dialer) Config(endpoints []string, dialTimeout time.Duration) (clientv3.Config, error) {
	c := clientv3.Config{Endpoints: endpoints, DialTimeout: dialTimeout, Logger: zap.NewNop()}
	if d.TLSDir != "" {
		tc, err := pki.ClientTLS(d.TLSDir)
		if err != nil {
			return c, err
		}
		c.TLS = tc
	}
	return c, nil
}

// New makes a client of endpoints.
func (d Dialer) New(endpoints []string, dialTimeout time.Duration) (*clientv3.Client, error) {
	c, err := d.Config(endpoints, dialTimeout)
	if err != nil {
		return nil, err
	}
	return clientv3.New(c)
}
