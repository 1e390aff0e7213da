package member

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/etcd-steward/steward/internal/datadir"
)

// inspect inspects the data dir, reusing the previous result while no file in it changed: a
// waiting initialisation observes every second, and the deep check of a large database after
// an unclean stop takes seconds.
func (s *Sidecar) inspect() (datadir.State, error) {
	return s.inspectAt(fingerprint(s.cfg.DataDir))
}

// inspectAt is inspect for a fingerprint of the data dir taken by the caller.
func (s *Sidecar) inspectAt(print string, fpErr error) (datadir.State, error) {
	return reuse(&s.lastInspect, print, fpErr, func() (datadir.State, bool, error) {
		data, err := datadir.Inspect(s.cfg.DataDir)
		if err != nil {
			return data, false, err
		}
		s.metrics.validationSeconds.Observe(data.Took.Seconds())
		// A database locked by a running etcd says nothing about its contents: not reused.
		return data, !data.InUse, nil
	})
}

// raftLogAt reads the data dir's raft log, reusing the last read while no file changed.
func (s *Sidecar) raftLogAt(print string, fpErr error) (datadir.RaftLog, error) {
	return reuse(&s.lastRaftLog, print, fpErr, func() (datadir.RaftLog, bool, error) {
		log, err := datadir.ReadRaftLog(s.cfg.DataDir)
		return log, err == nil, err
	})
}

// fromDataDir is a result read from the data dir and the fingerprint of the dir it was read
// from.
type fromDataDir[T any] struct {
	fingerprint string
	value       T
}

// reuse returns the result in last if it was read from a data dir with this fingerprint,
// else reads it again and keeps it when read says it may be reused.
func reuse[T any](last *atomic.Pointer[fromDataDir[T]], print string, fpErr error, read func() (T, bool, error)) (T, error) {
	if prev := last.Load(); fpErr == nil && prev != nil && prev.fingerprint == print {
		return prev.value, nil
	}
	v, keep, err := read()
	if err == nil && keep && fpErr == nil {
		last.Store(&fromDataDir[T]{fingerprint: print, value: v})
	}
	return v, err
}

// fingerprint names every file in the data dir (and an unfinished restore beside it) with its
// size, modification time and inode: what changes when anything in it is written, replaced
// or moved.
func fingerprint(dataDir string) (string, error) {
	var b strings.Builder
	for _, root := range []string{dataDir, datadir.PartDir(dataDir)} {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				if os.IsNotExist(err) && path == root {
					return filepath.SkipDir
				}
				return err
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			var ino uint64
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				ino = st.Ino
			}
			fmt.Fprintf(&b, "%s|%d|%d|%d|%s\n", path, info.Size(), info.ModTime().UnixNano(), ino, info.Mode())
			return nil
		})
		if err != nil {
			return "", err
		}
	}
	return b.String(), nil
}
