// Package localdir is the cluster directory of a local cluster (`steward local`): where each
// of its files lives, and the file protocol through which the CLI asks the running supervisor
// for work. Both the supervisor (package local) and its clients use it; it knows neither.
package localdir

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// Dir is the directory of one local cluster (`--dir`). Every path of the cluster's files is
// one of its methods: nothing else joins names onto it.
type Dir string

// String is the directory itself.
func (d Dir) String() string { return string(d) }

// Path is a path given relative to the directory (as cluster.json records the members'
// binary and the backup keyring); an absolute path is kept.
func (d Dir) Path(rel string) string {
	if filepath.IsAbs(rel) {
		return rel
	}
	return filepath.Join(string(d), rel)
}

// Spec is cluster.json, the desired cluster.
func (d Dir) Spec() string { return d.Path("cluster.json") }

// Run holds what the supervisor and the members keep while the cluster runs.
func (d Dir) Run() string { return d.Path("run") }

// State is run/state.json, the supervisor's record of the cluster.
func (d Dir) State() string { return d.Path("run/state.json") }

// Lock is the supervisor's lock file (it holds the supervisor's pid).
func (d Dir) Lock() string { return d.Path("run/supervisor.lock") }

// Token is the cluster's sidecar API token file (mode 0600): every sidecar accepts its
// token, and every local caller of a sidecar (etcd, the supervisor, the CLI) sends it.
func (d Dir) Token() string { return d.Path("run/api-token") }

// Reports holds the members' reports, one file per member (Report).
func (d Dir) Reports() string { return d.Path("run/reports") }

// Report is the file member name's sidecar writes its report to.
func (d Dir) Report(name string) string { return filepath.Join(d.Reports(), name+".json") }

// Acks holds the seeds' acknowledgements of directives, one file per member (Ack).
func (d Dir) Acks() string { return d.Path("run/acks") }

// Ack is the file member name's sidecar acknowledges directives in.
func (d Dir) Ack(name string) string { return filepath.Join(d.Acks(), name+".json") }

// BinaryRel is the steward executable `steward local up` installs for the members, relative
// to the directory.
const BinaryRel = "bin/steward"

// Bin holds the steward executables the members run.
func (d Dir) Bin() string { return d.Path("bin") }

// Binary is the steward executable the members run: rel (relative to the directory), or
// BinaryRel when rel is empty.
func (d Dir) Binary(rel string) string {
	if rel == "" {
		rel = BinaryRel
	}
	return d.Path(rel)
}

// Members holds one directory per member (Member).
func (d Dir) Members() string { return d.Path("members") }

// Member is everything member name keeps; its data dir is inside.
func (d Dir) Member(name string) string { return filepath.Join(d.Members(), name) }

// MemberData is where member name keeps its etcd data.
func (d Dir) MemberData(name string) string { return filepath.Join(d.Member(name), "data") }

// Logs holds the log files of the members' processes and of a detached supervisor.
func (d Dir) Logs() string { return d.Path("logs") }

// Log is the log file of a member's process (kind "etcd" or "sidecar").
func (d Dir) Log(name, kind string) string { return filepath.Join(d.Logs(), name+"-"+kind+".log") }

// SupervisorLog is the log of a supervisor started with `steward local up --detach`.
func (d Dir) SupervisorLog() string { return filepath.Join(d.Logs(), "supervisor.log") }

// PKI holds the cluster's own CAs and certificates (`steward local up --tls`): sub is "ca"
// (and "ca.next", "ca.old" during a rollover), a member's name, or "client".
func (d Dir) PKI(sub string) string { return filepath.Join(d.Path("pki"), sub) }

// RootPassword holds the root password of a cluster with etcd authentication.
func (d Dir) RootPassword() string { return d.Path("auth/root-password") }

// AppPassword holds the application user's password of a cluster with etcd authentication.
func (d Dir) AppPassword() string { return d.Path("auth/app-password") }

// TokenKey holds the token signing key pair of a cluster with etcd authentication.
func (d Dir) TokenKey() string { return d.Path("auth/token-key") }

// BackupKeysRel is where `steward local up --encrypt-backups` keeps the backup keys, relative
// to the directory (as cluster.json records it).
const BackupKeysRel = "backup-keys"

// BackupKeys is the directory of the backup keys `--encrypt-backups` generates.
func (d Dir) BackupKeys() string { return d.Path(BackupKeysRel) }

// BackupRecord is where the backup leader's sidecar records the newest revision it stored: the
// backup revision the cluster itself vouches for. It is beside the run directory's watched
// files, not among them: the sidecars do not wake for it.
func (d Dir) BackupRecord() string { return d.Path("run/backup/stored.json") }

// Backups is the default backup store of a new cluster (a file:// store).
func (d Dir) Backups() string { return d.Path("backups") }

// SupervisorRunning reports whether a supervisor holds the directory's lock, and its pid.
func (d Dir) SupervisorRunning() (pid int, running bool) {
	f, err := os.OpenFile(d.Lock(), os.O_RDWR, 0)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		return 0, false
	}
	_, _ = fmt.Fscan(f, &pid)
	return pid, true
}

// Wake has the running supervisor look at the directory at once (SIGHUP): at the spec, and at
// the requests left for it (it also looks every second).
func (d Dir) Wake() error {
	pid, running := d.SupervisorRunning()
	if !running {
		return fmt.Errorf("the cluster in %s is not running", d)
	}
	if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
		return fmt.Errorf("signal the supervisor (pid %d): %w", pid, err)
	}
	return nil
}

// GenerationBinaryRel is where `steward local upgrade` installs the steward executable of
// spec generation gen, relative to the directory.
func GenerationBinaryRel(gen int64) string { return fmt.Sprintf("bin/steward-g%d", gen) }

// GenerationBinaries lists the executables GenerationBinaryRel named, relative to the directory.
func (d Dir) GenerationBinaries() ([]string, error) {
	paths, err := filepath.Glob(filepath.Join(d.Bin(), "steward-g*"))
	var out []string
	for _, p := range paths {
		if rel, err := filepath.Rel(string(d), p); err == nil {
			out = append(out, rel)
		}
	}
	return out, err
}
