package member

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/etcd-steward/steward/internal/datadir"
)

// inspect inspects the data dir, reusing the previous result while no file in it changed: a
// waiting initialisation observes every second, and the deep check of a large database after
// an unclean stop takes seconds.
func (s *Sidecar) inspect() (datadir.State, error) {
	print, fpErr := fingerprint(s.cfg.DataDir)
	if prev := s.lastInspect.Load(); fpErr == nil && prev != nil && prev.fingerprint == print {
		return prev.state, nil
	}
	data, err := datadir.Inspect(s.cfg.DataDir)
	if err != nil {
		return data, err
	}
	s.metrics.validationSeconds.Observe(data.Took.Seconds())
	// A database locked by a running etcd says nothing about its contents: not reused.
	if fpErr == nil && !slices.ContainsFunc(data.Problems, func(p string) bool { return strings.Contains(p, "is locked") }) {
		s.lastInspect.Store(&inspection{fingerprint: print, state: data})
	}
	return data, nil
}

// inspection is a data dir's inspection and the fingerprint of the files it read.
type inspection struct {
	fingerprint string
	state       datadir.State
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
