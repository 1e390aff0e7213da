package restore

import (
	"fmt"
	"os"
	"syscall"
)

// walPrealloc is the WAL segment etcdutl's snapshot restore preallocates in the member dir.
const walPrealloc = 64 << 20

// fsSpace is the free space of the file system holding dir.
type fsSpace struct {
	dir  string
	dev  uint64
	free int64
}

func statSpace(dir string) (fsSpace, error) {
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err != nil {
		return fsSpace{}, fmt.Errorf("restore: free space in %s: %w", dir, err)
	}
	st, err := os.Stat(dir)
	if err != nil {
		return fsSpace{}, fmt.Errorf("restore: %w", err)
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return fsSpace{}, fmt.Errorf("restore: %s: no device number", dir)
	}
	return fsSpace{dir: dir, dev: uint64(sys.Dev), free: int64(fs.Bavail) * int64(fs.Bsize)}, nil
}

// checkRoom refuses, before anything is written, a full snapshot declaring raw bytes that would
// not fit (roomFor) in scratchDir and partDir.
func checkRoom(key string, raw, keepFree int64, scratchDir, partDir string) error {
	scratch, err := statSpace(scratchDir)
	if err != nil {
		return err
	}
	part, err := statSpace(partDir)
	if err != nil {
		return err
	}
	return roomFor(key, raw, keepFree, scratch, part)
}

// roomFor says whether full snapshot key, whose trailer declares raw bytes of database, fits: its
// scratch file in scratch, the restored member dir (the database and etcd's WAL) in part, and
// keepFree bytes left free besides on each file system (one that may share a live member's
// volume keeps room for it to grow). The declared size is an upper bound: the download stops
// there.
func roomFor(key string, raw, keepFree int64, scratch, part fsSpace) error {
	need := map[uint64]int64{scratch.dev: keepFree, part.dev: keepFree}
	need[scratch.dev] += raw
	need[part.dev] += raw + walPrealloc
	for _, fs := range []fsSpace{scratch, part} {
		if fs.free < need[fs.dev] {
			return fmt.Errorf("restore: %w: %s declares a database of %d bytes, and restoring it needs %d bytes free in %s (the scratch file, the restored database and etcd's WAL, with %d bytes kept free besides), which has %d; nothing was written: free space there or give a scratch dir on another disk",
				ErrNoSpace, key, raw, need[fs.dev], fs.dir, keepFree, fs.free)
		}
	}
	return nil
}
