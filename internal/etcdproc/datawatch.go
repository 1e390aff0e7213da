package etcdproc

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// watchDataRemoved tells, once, that what a running etcd keeps in dataDir was removed or moved
// away: the dir itself, member/, member/wal/, member/snap/, or the database member/snap/db.
// etcd goes on running on files that are gone (its WAL and database stay open), acknowledging
// writes that no restart will find; so the member stops, and its sidecar decides again at the
// next start. What etcd itself does there (a snapshot's database renamed into place, old
// snapshots and WAL files purged, a defragmentation's temporary file) is not a removal. It
// watches with inotify, from the moment it returns until ctx ends.
func watchDataRemoved(ctx context.Context, dataDir string) (<-chan string, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	f := os.NewFile(uintptr(fd), "inotify")
	member := filepath.Join(dataDir, "member")
	snap := filepath.Join(member, "snap")
	paths := map[int32]string{}
	for _, p := range []string{dataDir, member, filepath.Join(member, "wal"), snap} {
		mask := uint32(unix.IN_DELETE_SELF | unix.IN_MOVE_SELF)
		if p == snap {
			mask |= unix.IN_DELETE | unix.IN_MOVED_FROM
		}
		wd, err := unix.InotifyAddWatch(fd, p, mask)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("watch %s: %w", p, err)
		}
		paths[int32(wd)] = p
	}
	removed := make(chan string, 1)
	go func() {
		<-ctx.Done()
		f.Close() // ends the blocked read
	}()
	go func() {
		buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
		for {
			n, err := f.Read(buf)
			if err != nil {
				return
			}
			for off := 0; off+unix.SizeofInotifyEvent <= n; {
				ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
				start := off + unix.SizeofInotifyEvent
				off = start + int(ev.Len)
				name := strings.TrimRight(string(buf[start:min(off, n)]), "\x00")
				var what string
				switch p := paths[ev.Wd]; {
				case ev.Mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0:
					what = p
				case ev.Mask&(unix.IN_DELETE|unix.IN_MOVED_FROM) != 0 && name == "db":
					what = filepath.Join(p, name)
				default:
					continue
				}
				removed <- what + " was removed or moved away"
				f.Close()
				return
			}
		}
	}()
	return removed, nil
}
