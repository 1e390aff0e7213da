package etcdutil

import (
	"context"
	"crypto/tls"
	"errors"
	"net"

	"github.com/etcd-steward/steward/internal/pki"
	"google.golang.org/grpc/credentials"
)

// hostTLS are gRPC transport credentials of the client TLS configuration tc that bind each
// connection to the host it dials (pki.ForHost): a member dialed by IP address must present a
// certificate that names the address, not only one of the cluster's CA.
type hostTLS struct{ tc *tls.Config }

// ClientHandshake is gRPC's TLS handshake, with tc bound to authority's host.
func (h hostTLS) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	host, _, err := net.SplitHostPort(authority)
	if err != nil {
		host = authority // no port
	}
	return credentials.NewTLS(pki.ForHost(h.tc, host)).ClientHandshake(ctx, authority, raw)
}

func (hostTLS) ServerHandshake(net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("etcdutil's transport credentials are a client's only")
}

func (h hostTLS) Info() credentials.ProtocolInfo { return credentials.NewTLS(h.tc).Info() }

func (h hostTLS) Clone() credentials.TransportCredentials { return hostTLS{h.tc.Clone()} }

// OverrideServerName is deprecated in gRPC and unused: the name comes from each address.
func (hostTLS) OverrideServerName(string) error { return nil }
