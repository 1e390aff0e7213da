// Package local is steward's embedded default: a supervisor that runs a real multi-member
// etcd cluster on one machine (one `steward etcd` and one `steward sidecar` process per
// member) and plays the part Kubernetes plays for the operator: desired members, restarts,
// member status.
package local

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/etcd-steward/steward/internal/datadir"
	"github.com/etcd-steward/steward/internal/member"
)

// Layout of a local directory.
const (
	specFile  = "cluster.json"
	stateFile = "run/state.json"
	lockFile  = "run/supervisor.lock"
	binFile   = "bin/steward"
)

// Spec is the desired cluster, kept in DIR/cluster.json. Its ports are part of each member's
// identity (peer URLs), so they are chosen once and kept.
type Spec struct {
	Name      string    `json:"name"`
	Token     string    `json:"token"`
	Host      string    `json:"host"`
	CreatedAt time.Time `json:"createdAt"`
	// Backup is the backup store URL the sidecars write to; empty: no backups.
	Backup  string       `json:"backup,omitempty"`
	Members []MemberSpec `json:"members"`
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

// ClientURL is the member's etcd client URL.
func (s Spec) ClientURL(m MemberSpec) string { return s.url(m.ClientPort) }

// PeerURL is the member's etcd peer URL.
func (s Spec) PeerURL(m MemberSpec) string { return s.url(m.PeerPort) }

// SidecarURL is the member's sidecar API URL.
func (s Spec) SidecarURL(m MemberSpec) string { return s.url(m.SidecarPort) }

// HealthURL is the base URL of the member's /readyz and /livez.
func (s Spec) HealthURL(m MemberSpec) string { return s.url(m.HealthPort) }

// ClientURLs lists every member's client URL.
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

// MemberDataDir is where member name keeps its etcd data.
func MemberDataDir(dir, name string) string { return filepath.Join(dir, "members", name, "data") }

// LogPath is the log file of a member's process ("etcd" or "sidecar").
func LogPath(dir, name, kind string) string {
	return filepath.Join(dir, "logs", name+"-"+kind+".log")
}

// ReadSpec loads DIR/cluster.json; ok=false if DIR holds no local cluster.
func ReadSpec(dir string) (spec Spec, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, specFile))
	if errors.Is(err, os.ErrNotExist) {
		return spec, false, nil
	}
	if err != nil {
		return spec, false, err
	}
	if err := json.Unmarshal(b, &spec); err != nil {
		return spec, false, fmt.Errorf("%s is damaged: %w; restore it or start in another --dir", filepath.Join(dir, specFile), err)
	}
	if len(spec.Members) == 0 {
		return spec, false, fmt.Errorf("%s lists no members; restore it or start in another --dir", filepath.Join(dir, specFile))
	}
	return spec, true, nil
}

func writeSpec(dir string, spec Spec) error {
	b, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return err
	}
	return datadir.WriteFileAtomic(filepath.Join(dir, specFile), b, 0o644)
}

// memberSpec converts to the sidecar's view of the desired cluster.
func (s Spec) memberView() member.ClusterSpec {
	out := member.ClusterSpec{Name: s.Name, Token: s.Token}
	for _, m := range s.Members {
		out.Members = append(out.Members, member.MemberSpec{Name: m.Name, ClientURL: s.ClientURL(m), PeerURL: s.PeerURL(m), SidecarURL: s.SidecarURL(m)})
	}
	return out
}

func newToken(name string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return name + "-" + hex.EncodeToString(b)
}
