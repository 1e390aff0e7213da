package local

import (
	"crypto/rand"
	"fmt"
	"os"
	"syscall"

	"github.com/etcd-steward/steward/internal/datadir"
)

// Faults that `steward local fault` injects.
const (
	FaultKill    = "kill"    // kill -9 the member's etcd
	FaultWipe    = "wipe"    // lose the member's data dir contents, then kill -9
	FaultCorrupt = "corrupt" // damage the member's bbolt database, then kill -9
	FaultSwap    = "swap"    // swap two members' data dirs, then kill -9 both
)

// Fault injects a fault into a running local cluster, for demos and tests. The etcd
// process is frozen (SIGSTOP) while its data is changed so it writes nothing in between,
// then killed; the supervisor restarts it and the sidecar heals it.
func Fault(dir Dir, name, kind, other string) error {
	spec, ok, err := ReadSpec(dir)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("no local cluster in %s", dir)
	}
	st, err := ReadState(dir)
	if err != nil {
		return err
	}
	pidOf := func(n string) (int, error) {
		if _, ok := spec.memberView().Member(n); !ok {
			return 0, fmt.Errorf("no member %q in %s (members: %s)", n, dir, memberList(spec))
		}
		for _, m := range st.Members {
			if m.Name == n && m.EtcdPID > 0 && ownChild(dir, m.EtcdPID) {
				return m.EtcdPID, nil
			}
		}
		return 0, fmt.Errorf("member %s has no running etcd process; is the cluster up (`steward local status --dir %s`)?", n, dir)
	}
	pid, err := pidOf(name)
	if err != nil {
		return err
	}
	switch kind {
	case FaultKill:
		return syscall.Kill(pid, syscall.SIGKILL)
	case FaultWipe:
		return frozen([]int{pid}, func() error { return datadir.Wipe(dir.MemberData(name)) })
	case FaultCorrupt:
		return frozen([]int{pid}, func() error { return corruptDB(datadir.DBPath(dir.MemberData(name))) })
	case FaultSwap:
		if other == "" || other == name {
			return fmt.Errorf("swap needs another member: steward local fault %s swap OTHER", name)
		}
		otherPID, err := pidOf(other)
		if err != nil {
			return err
		}
		return frozen([]int{pid, otherPID}, func() error {
			return swapDirs(dir.MemberData(name), dir.MemberData(other))
		})
	}
	return fmt.Errorf("unknown fault %q: use kill, wipe, corrupt or swap", kind)
}

// frozen stops the processes, runs change, and kills them.
func frozen(pids []int, change func() error) error {
	for _, p := range pids {
		if err := syscall.Kill(p, syscall.SIGSTOP); err != nil {
			return err
		}
	}
	err := change()
	for _, p := range pids {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	return err
}

// corruptDB overwrites both bbolt meta pages, so the database cannot be opened.
func corruptDB(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("corrupt %s: %w", path, err)
	}
	defer f.Close()
	junk := make([]byte, 8192)
	_, _ = rand.Read(junk)
	if _, err := f.WriteAt(junk, 0); err != nil {
		return err
	}
	return f.Sync()
}

func memberList(spec Spec) string {
	s := ""
	for i, m := range spec.Members {
		if i > 0 {
			s += ", "
		}
		s += m.Name
	}
	return s
}
