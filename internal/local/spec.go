// Package local is steward's embedded default: a supervisor that runs a real multi-member
// etcd cluster on one machine (one `steward etcd` and one `steward sidecar` process per
// member) and plays the part Kubernetes plays for the operator: desired members, restarts,
// member status.
//
// The package holds both ends of a local cluster. The supervisor (Up: supervisor.go,
// process.go, prepare.go, recovery.go, restart.go, scale.go, watch.go) runs the members; the
// client side (client_*.go: Status, Scale, Upgrade, RotateCA, Down, Fault) is what `steward
// local` commands run against a running supervisor, through the files of its directory
// (package localdir: the layout and the request protocol). Both read the spec and the state
// (spec.go, state.go, tls.go, auth.go, request.go). restore.go holds both ends of a restore:
// the supervisor's answer to a request, and Restore and CancelRestore. Client files call no
// supervisor method.
package local

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/datadir"
	"github.com/etcd-steward/steward/internal/local/localdir"
	"github.com/etcd-steward/steward/internal/pki"
	"github.com/etcd-steward/steward/internal/seal"
	"github.com/etcd-steward/steward/internal/sidecarapi"
	"github.com/etcd-steward/steward/internal/store"
)

// Dir is the directory of a local cluster: every path in it is one of its methods.
type Dir = localdir.Dir

// SidecarClient calls the sidecars of the cluster in d (whose spec is spec) with its token,
// and with TLS trusting the cluster's CAs, each request within timeout (0: none). Every call
// the supervisor or the CLI makes to a sidecar goes through one.
func SidecarClient(d Dir, spec Spec, timeout time.Duration) (*sidecarapi.Client, error) {
	var tc *tls.Config
	if certs := ClientTLSDir(d, spec); certs != "" {
		var err error
		if tc, err = pki.ServerTrust(filepath.Join(certs, pki.CAFile), ""); err != nil {
			return nil, fmt.Errorf("the CAs the sidecars are trusted by: %w", err)
		}
	}
	return sidecarapi.FileClient(d.Token(), sidecarapi.HTTPClient(tc, timeout)), nil
}

// Spec is the desired cluster, kept in DIR/cluster.json. Its ports are part of each member's
// identity (peer URLs), so they are chosen once and kept.
type Spec struct {
	Name      string    `json:"name"`
	Token     string    `json:"token"`
	Host      string    `json:"host"`
	CreatedAt time.Time `json:"createdAt"`
	// Backup is the backup store URL the sidecars write to; empty: no backups.
	Backup string `json:"backup,omitempty"`
	// BackupKeys is the keyring backups are encrypted with (see package seal), relative to
	// DIR; empty: backups are not encrypted.
	BackupKeys string       `json:"backupKeys,omitempty"`
	Members    []MemberSpec `json:"members"`
	// TLS: client and peer traffic is mutual TLS of the cluster's own CA (DIR/pki). Chosen
	// when the cluster is made: the members' peer URLs carry the scheme.
	TLS bool `json:"tls,omitempty"`
	// Auth: etcd authentication is on, the root user logging in with the password of
	// DIR/auth/root-password. It can be turned on for a cluster made without it, not off.
	Auth bool `json:"auth,omitempty"`
	// Generation counts the changes `steward local upgrade` made to what the members run
	// (Binary, EtcdFlags, or a rolling restart); each member records the generation its
	// processes were started with.
	Generation int64 `json:"generation,omitempty"`
	// Binary is the steward executable the members run, relative to DIR; empty: bin/steward,
	// which `steward local up` installs from itself at every start.
	Binary string `json:"binary,omitempty"`
	// EtcdFlags are extra etcd options (etcd's flag names) every member's etcd runs with.
	EtcdFlags map[string]string `json:"etcdFlags,omitempty"`
}

// BackupKeysPath is the path of the keyring the backups of the cluster in d are encrypted
// with, "" if they are not.
func BackupKeysPath(d Dir, spec Spec) string {
	if spec.BackupKeys == "" {
		return ""
	}
	return d.Path(spec.BackupKeys)
}

// openBackupStore opens the backup store of the cluster in d, with its keys.
func openBackupStore(ctx context.Context, d Dir, spec Spec) (*store.Store, error) {
	var keys *seal.Keyring
	if p := BackupKeysPath(d, spec); p != "" {
		var err error
		if keys, err = seal.LoadKeyring(p, ""); err != nil {
			return nil, err
		}
	}
	return store.Open(ctx, spec.Backup, store.Options{Keys: keys})
}

// MemberSpec is one member's name and ports.
type MemberSpec struct {
	Name        string `json:"name"`
	ClientPort  int    `json:"clientPort"`
	PeerPort    int    `json:"peerPort"`
	SidecarPort int    `json:"sidecarPort"`
	HealthPort  int    `json:"healthPort"`
}

func (s Spec) url(port int) string { return fmt.Sprintf("http://%s:%d", s.Host, port) }

// tlsURL is a URL of etcd's or a sidecar's: https when the cluster has TLS.
func (s Spec) tlsURL(port int) string {
	if s.TLS {
		return fmt.Sprintf("https://%s:%d", s.Host, port)
	}
	return s.url(port)
}

// ClientURL is the member's etcd client URL.
func (s Spec) ClientURL(m MemberSpec) string { return s.tlsURL(m.ClientPort) }

// PeerURL is the member's etcd peer URL.
func (s Spec) PeerURL(m MemberSpec) string { return s.tlsURL(m.PeerPort) }

// SidecarURL is the member's sidecar API URL: https when the cluster has TLS (only its open
// endpoints also answer plain text).
func (s Spec) SidecarURL(m MemberSpec) string { return s.tlsURL(m.SidecarPort) }

// HealthURL is the base URL of the member's /readyz and /livez.
func (s Spec) HealthURL(m MemberSpec) string { return s.url(m.HealthPort) }

// memberNames lists every member's name.
func (s Spec) memberNames() []string {
	var out []string
	for _, m := range s.Members {
		out = append(out, m.Name)
	}
	return out
}

// ClientURLs lists every member's client URL.
func (s Spec) ClientURLs() []string {
	var out []string
	for _, m := range s.Members {
		out = append(out, s.ClientURL(m))
	}
	return out
}

// ReadSpec loads DIR/cluster.json; ok=false if DIR holds no local cluster.
func ReadSpec(d Dir) (spec Spec, ok bool, err error) {
	path := d.Spec()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return spec, false, nil
	}
	if err != nil {
		return spec, false, err
	}
	if spec, err = parseSpec(b); err != nil {
		return spec, false, fmt.Errorf("%s is damaged: %w; restore it or start in another --dir", path, err)
	}
	return spec, true, nil
}

// memberNameRE is what a member name may be: it names directories and log files under DIR,
// so it is one DNS label, never a path.
var memberNameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// hostRE is a host name or an IPv4 address (an IPv6 address is checked with net.ParseIP).
var hostRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.-]{0,252})$`)

// parseSpec decodes and checks cluster.json: the supervisor makes directories, log files,
// URLs and listeners from it, and deletes a removed member's directory.
func parseSpec(b []byte) (Spec, error) {
	var spec Spec
	if err := json.Unmarshal(b, &spec); err != nil {
		return spec, err
	}
	if len(spec.Members) == 0 {
		return spec, errors.New("it lists no members")
	}
	if spec.Token == "" || strings.ContainsFunc(spec.Token, func(r rune) bool { return r <= ' ' || r > '~' }) {
		return spec, errors.New("its token is empty or not printable ASCII")
	}
	if net.ParseIP(spec.Host) == nil && (!hostRE.MatchString(spec.Host) || strings.Contains(spec.Host, "..")) {
		return spec, fmt.Errorf("host %q is not an IP address or a host name", spec.Host)
	}
	if spec.Backup != "" {
		if u, err := url.Parse(spec.Backup); err != nil || u.Scheme == "" {
			return spec, errors.New("its backup store is not a URL with a scheme")
		}
	}
	if spec.Binary != "" && (!filepath.IsLocal(spec.Binary) || filepath.Dir(spec.Binary) != "bin") {
		return spec, fmt.Errorf("binary %q is not a file in DIR/bin", spec.Binary)
	}
	names, ports := map[string]bool{}, map[int]string{}
	for _, m := range spec.Members {
		if !memberNameRE.MatchString(m.Name) {
			return spec, fmt.Errorf("member name %q is not a DNS label (a-z, 0-9, -)", m.Name)
		}
		if names[m.Name] {
			return spec, fmt.Errorf("member %s is listed twice", m.Name)
		}
		names[m.Name] = true
		for _, p := range []int{m.ClientPort, m.PeerPort, m.SidecarPort, m.HealthPort} {
			if p < 1 || p > 65535 {
				return spec, fmt.Errorf("member %s: port %d is not in 1-65535", m.Name, p)
			}
			if other, ok := ports[p]; ok {
				return spec, fmt.Errorf("port %d is used twice (members %s and %s)", p, other, m.Name)
			}
			ports[p] = m.Name
		}
	}
	return spec, nil
}

func writeSpec(d Dir, spec Spec) error {
	b, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return err
	}
	return datadir.WriteFileAtomic(d.Spec(), b, 0o644)
}

// memberView is the desired cluster as the sidecars see it (cluster.View's spec).
func (s Spec) memberView() cluster.Spec {
	out := cluster.Spec{Name: s.Name, Token: s.Token}
	for _, m := range s.Members {
		out.Members = append(out.Members, cluster.MemberSpec{Name: m.Name, ClientURL: s.ClientURL(m), PeerURL: s.PeerURL(m), SidecarURL: s.SidecarURL(m)})
	}
	return out
}

func newToken(name string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return name + "-" + hex.EncodeToString(b)
}
