package local

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestCrashRestartBackoff: a member's process that crashes after a stable run is restarted at
// once (a wiped member heals sooner); one that keeps crashing waits longer each time.
func TestCrashRestartBackoff(t *testing.T) {
	var mu sync.Mutex
	var waits []string
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := &process{member: "m0", kind: "etcd", bin: "/bin/sh", args: []string{"-c", "exit 3"},
		log: filepath.Join(t.TempDir(), "m0.log"), stopGrace: time.Second,
		logf: func(format string, args ...any) {
			line := fmt.Sprintf(format, args...)
			if _, wait, ok := strings.Cut(line, "restarting in "); ok {
				mu.Lock()
				waits = append(waits, strings.Fields(wait)[0])
				if len(waits) == 4 {
					cancel()
				}
				mu.Unlock()
			}
		}}
	done := make(chan struct{})
	go func() { p.run(ctx); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the process loop did not restart its crashing process 4 times within a minute")
	}
	if got, want := strings.Join(waits, " "), "0s 500ms 1s 2s"; got != want {
		t.Fatalf("waits before the restarts of a crashing process: %s, want %s", got, want)
	}
}
