// Package etcdproc runs an etcd server inside the steward process (`steward etcd`): it obtains
// its configuration (from its sidecar, a file or flags), serves health endpoints and records
// how it stopped.
package etcdproc

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/etcd-steward/steward/internal/pki"

	"go.etcd.io/etcd/server/v3/embed"
	"sigs.k8s.io/yaml"
)

// Config is the subset of etcd's configuration file that steward generates. Field names are
// etcd's own (the format of `etcd --config-file`), so a generated file is a valid etcd config.
type Config struct {
	Name                     string `json:"name"`
	DataDir                  string `json:"data-dir"`
	ListenClientURLs         string `json:"listen-client-urls"`
	AdvertiseClientURLs      string `json:"advertise-client-urls"`
	ListenPeerURLs           string `json:"listen-peer-urls"`
	InitialAdvertisePeerURLs string `json:"initial-advertise-peer-urls"`
	InitialCluster           string `json:"initial-cluster"`
	InitialClusterState      string `json:"initial-cluster-state"`
	InitialClusterToken      string `json:"initial-cluster-token"`
	ForceNewCluster          bool   `json:"force-new-cluster,omitempty"`
	SnapshotCount            uint64 `json:"snapshot-count,omitempty"`
	HeartbeatIntervalMs      uint   `json:"heartbeat-interval,omitempty"`
	ElectionTimeoutMs        uint   `json:"election-timeout,omitempty"`
	QuotaBackendBytes        int64  `json:"quota-backend-bytes,omitempty"`
	AutoCompactionMode       string `json:"auto-compaction-mode,omitempty"`
	AutoCompactionRetention  string `json:"auto-compaction-retention,omitempty"`
	LogLevel                 string `json:"log-level,omitempty"`
	// AuthToken is how etcd makes its authentication tokens (JWTAuthToken); empty: etcd's
	// default, simple tokens.
	AuthToken string `json:"auth-token,omitempty"`
	// ClientTransportSecurity and PeerTransportSecurity turn TLS on for client and peer
	// traffic; nil: plain text.
	ClientTransportSecurity *TransportSecurity `json:"client-transport-security,omitempty"`
	PeerTransportSecurity   *TransportSecurity `json:"peer-transport-security,omitempty"`
}

// TokenTTL is how long a token etcd issues is valid; a client whose token ran out gets
// "invalid auth token", and etcd's client then logs in again by itself.
const TokenTTL = 10 * time.Minute

// JWTAuthToken is etcd's auth-token setting for tokens signed with the key pair in dir
// (pki.TokenKeyFile, pki.TokenPublicKeyFile): a signed token is valid on every member that
// has the public key, not only on the member that issued it, as etcd's simple tokens are.
func JWTAuthToken(dir string) string {
	return fmt.Sprintf("jwt,pub-key=%s,priv-key=%s,sign-method=ES256,ttl=%s",
		filepath.Join(dir, pki.TokenPublicKeyFile), filepath.Join(dir, pki.TokenKeyFile), TokenTTL)
}

// TransportSecurity is etcd's TLS setting for client or peer traffic. etcd reads the
// certificate and key again at every handshake (a renewed leaf needs no restart); the CAs it
// trusts only when it starts.
type TransportSecurity struct {
	CertFile      string `json:"cert-file"`
	KeyFile       string `json:"key-file"`
	TrustedCAFile string `json:"trusted-ca-file"`
	// ClientCertAuth requires a certificate of a trusted CA from every client (or peer).
	ClientCertAuth bool `json:"client-cert-auth"`
	// AllowedCNs, when set, takes only certificates with one of these common names.
	AllowedCNs []string `json:"allowed-cn,omitempty"`
	// SkipClientSANVerify turns off etcd's check that a peer's certificate names the address
	// it connects from (by IP, or by DNS lookups of its names).
	SkipClientSANVerify bool `json:"skip-client-san-verification,omitempty"`
}

// Marshal renders c as etcd's YAML configuration file.
func (c Config) Marshal() ([]byte, error) { return yaml.Marshal(c) }

// LoadConfigBytes parses an etcd YAML configuration (any option etcd's own file accepts).
func LoadConfigBytes(b []byte) (*embed.Config, error) {
	// embed only reads configuration from a path; go through a private temporary file.
	f, err := os.CreateTemp("", "steward-etcd-*.yaml")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(b); err != nil {
		f.Close()
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	return LoadConfigFile(f.Name())
}

// LoadConfigFile parses an etcd YAML configuration file.
func LoadConfigFile(path string) (*embed.Config, error) {
	cfg, err := embed.ConfigFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("etcd configuration %s: %w", path, err)
	}
	return cfg, nil
}
