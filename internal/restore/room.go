package restore

import (
	"fmt"
	"syscall"
)

// walPrealloc is the WAL segment etcdutl's snapshot restore preallocates in the member dir.
const walPrealloc = 64 << 20

// fsSpace is the free space of the file system holding dir.
type fsSpace struct {
	dir  string
	free int64
}

func statSpace(dir string) (fsSpace, error) {
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err != nil {
		return fsSpace{}, fmt.Errorf("restore: free space in %s: %w", dir, err)
	}
	return fsSpace{dir: dir, free: int64(fs.Bavail) * int64(fs.Bsize)}, nil
}

// checkRoom refuses, before anything is written, a full snapshot declaring raw bytes that would
// not fit (roomFor) in partDir.
func checkRoom(key string, raw, keepFree int64, partDir string) error {
	part, err := statSpace(partDir)
	if err != nil {
		return err
	}
	return roomFor(key, raw, keepFree, part)
}

// roomFor says whether full snapshot key, whose trailer declares raw bytes of database, fits in
// part: the restored member dir (the database and etcd's WAL), with keepFree bytes left free
// besides (a file system that may be a live member's keeps room for it to grow). The declared
// size is an upper bound: the download stops there.
func roomFor(key string, raw, keepFree int64, part fsSpace) error {
	if need := raw + walPrealloc + keepFree; part.free < need {
		return fmt.Errorf("restore: %w: %s declares a database of %d bytes, and restoring it needs %d bytes free in %s (the restored database and etcd's WAL, with %d bytes kept free besides), which has %d; nothing was written: free space there",
			ErrNoSpace, key, raw, need, part.dir, keepFree, part.free)
	}
	return nil
}
