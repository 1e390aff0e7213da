package local

import (
	"context"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// watchFiles notifies on every file written, renamed or removed in dirs (not recursively),
// coalescing bursts into one value. The channel closes when ctx ends.
func watchFiles(ctx context.Context, dirs ...string) (<-chan struct{}, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	f := os.NewFile(uintptr(fd), "inotify")
	for _, d := range dirs {
		if _, err := unix.InotifyAddWatch(fd, d, unix.IN_CLOSE_WRITE|unix.IN_MOVED_TO|unix.IN_DELETE|unix.IN_CREATE); err != nil {
			f.Close()
			return nil, fmt.Errorf("watch %s: %w", d, err)
		}
	}
	out := make(chan struct{}, 1)
	go func() {
		<-ctx.Done()
		f.Close() // ends the blocked read
	}()
	go func() {
		defer close(out)
		buf := make([]byte, 4096)
		for {
			if _, err := f.Read(buf); err != nil {
				return
			}
			select {
			case out <- struct{}{}:
			default: // a notification is already pending
			}
		}
	}()
	return out, nil
}
