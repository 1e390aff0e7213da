package local

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/etcd-steward/steward/internal/datadir"
	"github.com/etcd-steward/steward/internal/seal"
	"github.com/etcd-steward/steward/internal/sidecarapi"
	"github.com/etcd-steward/steward/internal/store"
)

// UpOptions configure Up.
type UpOptions struct {
	Dir string
	// Name names a new cluster; ignored for an existing one.
	Name string
	// Members is the size of a new cluster. For an existing cluster it must be 0 or equal
	// to the existing size.
	Members int
	// Backup is the backup store URL: "" keeps the cluster's setting (file://DIR/backups for a
	// new cluster), "none" turns backups off.
	Backup string
	// EncryptBackups encrypts the cluster's backups from now on, with a key generated into
	// DIR/backup-keys (kept once made).
	EncryptBackups bool
	// TLS makes a new cluster's client and peer traffic mutual TLS of its own CA (DIR/pki).
	TLS bool
	// Auth turns etcd authentication on (Spec.Auth), for a new cluster or an existing one.
	Auth bool
	// BasePort is where the search for free ports starts for a new cluster.
	BasePort int
	// Binary is the steward executable the members run; default: this process's own.
	Binary string
	// ReadyTimeout bounds the wait for all members to become healthy.
	ReadyTimeout time.Duration
	// QuorumLossGrace is how long a quorum must be lost before it is recovered automatically
	// (from the member with the newest data, else from backup).
	QuorumLossGrace time.Duration
	// StopGrace bounds how long each process may take to stop before it is killed.
	StopGrace time.Duration
	// Logf receives the supervisor's log lines.
	Logf func(format string, args ...any)
	// SidecarArgs are extra flags for every sidecar (e.g. --delta-period 1s, --defrag-schedule off).
	SidecarArgs []string
	// OnReady is called once, when every member is healthy.
	OnReady func(spec Spec)
}

func (o *UpOptions) defaults() {
	if o.Name == "" {
		o.Name = "steward"
	}
	if o.BasePort == 0 {
		o.BasePort = 2379
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = 2 * time.Minute
	}
	if o.QuorumLossGrace == 0 {
		o.QuorumLossGrace = 30 * time.Second
	}
	if o.StopGrace == 0 {
		o.StopGrace = 30 * time.Second
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
}

// Prepare checks that Up can run in opts.Dir and returns the cluster it would start: the
// existing one, or a new one with freshly chosen ports (written to DIR/cluster.json). It
// never removes anything from DIR.
func Prepare(opts UpOptions) (Spec, error) {
	opts.defaults()
	if err := opts.check(); err != nil {
		return Spec{}, err
	}
	dir := Dir(opts.Dir)
	if pid, running := dir.SupervisorRunning(); running {
		return Spec{}, fmt.Errorf("the cluster in %s is already running (supervisor pid %d): see `steward local status --dir %s`, or stop it with `steward local down --dir %s`", dir, pid, dir, dir)
	}
	spec, ok, err := ReadSpec(dir)
	if err != nil {
		return Spec{}, err
	}
	if ok {
		if opts.TLS && !spec.TLS {
			return Spec{}, fmt.Errorf("--tls: the cluster in %s was made without TLS, and its members' peer URLs say so; TLS is chosen when a cluster is made (`steward local up --tls --dir NEWDIR` makes a new one); run `steward local up --dir %s` without --tls to start this one", dir, dir)
		}
		if opts.Members != 0 && opts.Members != len(spec.Members) {
			return Spec{}, fmt.Errorf("%s holds the %d-member cluster %q; run `steward local up` without --members to start it, or use another --dir for a %d-member cluster", dir, len(spec.Members), spec.Name, opts.Members)
		}
		for _, m := range spec.Members {
			for _, port := range []struct {
				what string
				n    int
			}{{"client", m.ClientPort}, {"peer", m.PeerPort}, {"sidecar", m.SidecarPort}, {"health", m.HealthPort}} {
				if !portFree(spec.Host, port.n) {
					return Spec{}, fmt.Errorf("port %d (member %s %s port) is in use by another process; the cluster in %s keeps its ports, so stop whatever uses port %d and run `steward local up --dir %s` again", port.n, m.Name, port.what, dir, port.n, dir)
				}
			}
		}
		changed := false
		if opts.Backup != "" && backupURL(dir, opts.Backup) != spec.Backup {
			spec.Backup, changed = backupURL(dir, opts.Backup), true
		}
		if opts.Auth && !spec.Auth {
			spec.Auth, changed = true, true
		}
		if opts.EncryptBackups && spec.BackupKeys == "" {
			if spec.BackupKeys, err = ensureBackupKey(dir, opts.Logf); err != nil {
				return Spec{}, err
			}
			changed = true
		}
		if changed {
			if err := writeSpec(dir, spec); err != nil {
				return Spec{}, err
			}
		}
		if err := ensureCerts(dir, spec, time.Now(), opts.Logf); err != nil {
			return Spec{}, err
		}
		if err := ensureAuth(dir, spec, opts.Logf); err != nil {
			return Spec{}, err
		}
		// A cluster made by an older steward has no token yet: it gets one now.
		return spec, ensureToken(dir, opts.Logf)
	}
	if err := checkForeignDir(dir); err != nil {
		return Spec{}, err
	}
	if opts.Members == 0 {
		opts.Members = 3
	}
	spec = Spec{Name: opts.Name, Token: newToken(opts.Name), Host: "127.0.0.1", CreatedAt: time.Now().UTC(), Backup: backupURL(dir, opts.Backup), TLS: opts.TLS, Auth: opts.Auth}
	if opts.EncryptBackups {
		if spec.BackupKeys, err = ensureBackupKey(dir, opts.Logf); err != nil {
			return Spec{}, err
		}
	}
	ports, err := freePorts(spec.Host, opts.BasePort, 4*opts.Members)
	if err != nil {
		return Spec{}, err
	}
	// Client and peer ports first (2379, 2380, 2381, ... by default), then sidecar and health.
	for i := 0; i < opts.Members; i++ {
		spec.Members = append(spec.Members, MemberSpec{
			Name:        fmt.Sprintf("m%d", i),
			ClientPort:  ports[2*i],
			PeerPort:    ports[2*i+1],
			SidecarPort: ports[2*opts.Members+2*i],
			HealthPort:  ports[2*opts.Members+2*i+1],
		})
	}
	for _, sub := range []string{dir.Run(), dir.Logs(), dir.Bin(), dir.Members()} {
		if err := os.MkdirAll(sub, 0o755); err != nil {
			return Spec{}, fmt.Errorf("create %s: %w", sub, err)
		}
	}
	if err := ensureCerts(dir, spec, time.Now(), opts.Logf); err != nil {
		return Spec{}, err
	}
	if err := ensureAuth(dir, spec, opts.Logf); err != nil {
		return Spec{}, err
	}
	if err := writeSpec(dir, spec); err != nil {
		return Spec{}, fmt.Errorf("write %s: %w", dir.Spec(), err)
	}
	return spec, ensureToken(dir, opts.Logf)
}

// check says, naming the flag, why opts cannot start a cluster, before anything is written.
func (o UpOptions) check() error {
	if o.Members != 0 {
		if err := CheckSize(o.Members); err != nil {
			return fmt.Errorf("--members %d: %w", o.Members, err)
		}
	}
	if o.BasePort < 1 || o.BasePort > maxPort {
		return fmt.Errorf("--base-port %d: ports are 1 to %d; give the first port to try (members take the first free ones from there up)", o.BasePort, maxPort)
	}
	if o.Backup != "" && o.Backup != "none" {
		if err := store.CheckURL(o.Backup); err != nil {
			return fmt.Errorf("--backup: %w; or \"none\" for no backups", err)
		}
	}
	return nil
}

// CheckSize says why n members cannot make a local cluster, or nil.
func CheckSize(n int) error {
	if n < 1 || n > 9 {
		return errors.New("a local cluster has 1 to 9 members (odd sizes keep a majority: 1, 3 or 5)")
	}
	return nil
}

// maxPort is the highest TCP port.
const maxPort = 65535

// ensureToken makes the cluster's sidecar API token once (256 random bits, mode 0600) and
// keeps it after; the log names the file, never the token.
func ensureToken(dir Dir, logf func(string, ...any)) error {
	created, err := sidecarapi.EnsureTokenFile(dir.Token())
	if err != nil {
		return err
	}
	if created {
		logf("generated the sidecar API token in %s (mode 0600)", dir.Token())
	}
	return nil
}

// backupKeysDir is where `steward local up --encrypt-backups` keeps the backup keys, in DIR.
const backupKeysDir = "backup-keys"

// ensureBackupKey makes the cluster's backup key once (32 random bytes, base64, mode 0600 in
// a 0700 directory, as a mounted Secret holds one: the file's name is the key ID) and keeps it
// after. It returns the keyring's path relative to dir; the log names the file, never the key.
func ensureBackupKey(dir Dir, logf func(string, ...any)) (string, error) {
	kd := dir.BackupKeys()
	if ents, err := os.ReadDir(kd); err == nil && len(ents) > 0 {
		return backupKeysDir, nil
	}
	if err := os.MkdirAll(kd, 0o700); err != nil {
		return "", fmt.Errorf("create %s: %w", kd, err)
	}
	key := make([]byte, seal.KeySize)
	if _, err := rand.Read(key); err != nil {
		return "", err
	}
	p := filepath.Join(kd, "k1")
	if err := datadir.WriteFileAtomic(p, []byte(base64.StdEncoding.EncodeToString(key)+"\n"), 0o600); err != nil {
		return "", err
	}
	logf("generated the backup encryption key in %s (mode 0600): keep a copy elsewhere, backups cannot be restored without it", p)
	return backupKeysDir, nil
}

// backupURL resolves the --backup flag: default file://DIR/backups, "none" for no backups.
func backupURL(dir Dir, flag string) string {
	switch flag {
	case "":
		return "file://" + dir.Backups()
	case "none":
		return ""
	}
	return flag
}

// checkForeignDir refuses a non-empty directory that is not a steward local directory.
func checkForeignDir(dir Dir) error {
	entries, err := os.ReadDir(dir.String())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read --dir %s: %w", dir, err)
	}
	for _, e := range entries {
		switch e.Name() {
		case "run", "logs", "bin", "members", "backups", backupKeysDir:
			continue // left by an `up` that failed before it wrote cluster.json
		}
		return fmt.Errorf("%s is not empty and holds no steward cluster (found %q); choose an empty or new --dir", dir, e.Name())
	}
	if _, err := os.Stat(dir.Members()); err == nil {
		if sub, _ := os.ReadDir(dir.Members()); len(sub) > 0 {
			return fmt.Errorf("%s has member data but no cluster.json; restore cluster.json or choose another --dir (nothing was changed)", dir)
		}
	}
	return nil
}

func portFree(host string, port int) bool {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, fmt.Sprint(port)))
	if err != nil {
		return false
	}
	ln.Close()
	return true
}

func freePorts(host string, from, n int) ([]int, error) {
	var out []int
	for p := from; p <= maxPort && len(out) < n; p++ {
		if portFree(host, p) {
			out = append(out, p)
		}
	}
	if len(out) < n {
		return nil, fmt.Errorf("found only %d free ports from %d up, need %d; pass a lower --base-port", len(out), from, n)
	}
	return out, nil
}

// lock takes the supervisor lock of dir; it is released when the process exits.
func lock(dir Dir) (*os.File, error) {
	path := dir.Lock()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		pid, _ := dir.SupervisorRunning()
		return nil, fmt.Errorf("the cluster in %s is already running (supervisor pid %d): see `steward local status --dir %s`, or stop it with `steward local down --dir %s`", dir, pid, dir, dir)
	}
	_ = f.Truncate(0)
	_, _ = fmt.Fprintf(f, "%d\n", os.Getpid())
	return f, nil
}

// stillLocked fails when dir's lock file is no longer the one this supervisor holds: the
// directory was removed or replaced under it, and another supervisor could take the new
// lock and run a second cluster of the same members.
func stillLocked(dir Dir, held *os.File) error {
	mine, err := held.Stat()
	if err != nil {
		return err
	}
	now, err := os.Stat(dir.Lock())
	if err != nil || !os.SameFile(mine, now) {
		return fmt.Errorf("%s was removed or replaced while this supervisor ran it: stopping its members, so that no second supervisor runs them beside it; start the cluster again with `steward local up --dir %s`", dir.Lock(), dir)
	}
	return nil
}

// installBinary copies a steward executable to dst in DIR/bin, so members keep a binary to
// restart from even when the original goes away (e.g. `go run`'s temporary build).
func installBinary(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("read steward executable %s: %w", src, err)
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".steward-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return fmt.Errorf("copy steward executable to %s: %w", dst, err)
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}
