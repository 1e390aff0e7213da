package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/etcd-steward/steward/internal/units"
	"github.com/spf13/cobra"
)

// progressLines writes the progress of a long operation to stderr, a line each, with the time
// of day: every command that waits says what it waits for.
func progressLines(cmd *cobra.Command) func(string) {
	stderr := cmd.ErrOrStderr()
	return func(line string) { fmt.Fprintf(stderr, "%s  %s\n", time.Now().Format("15:04:05"), line) }
}

// progressBar draws a one-line progress bar on a terminal; elsewhere it stays silent except
// for the final line, so logs and pipes are not flooded.
type progressBar struct {
	w     io.Writer
	label string
	tty   bool
	start time.Time

	mu   sync.Mutex
	last time.Time
}

func newProgressBar(w io.Writer, label string) *progressBar {
	tty := false
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	return &progressBar{w: w, label: label, tty: tty, start: time.Now()}
}

// Update shows done of total bytes (total <= 0: unknown).
func (p *progressBar) Update(done, total int64) {
	if !p.tty {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Since(p.last) < 100*time.Millisecond && (total <= 0 || done < total) {
		return
	}
	p.last = time.Now()
	rate := float64(done) / max(time.Since(p.start).Seconds(), 1e-3)
	if total > 0 {
		frac := min(float64(done)/float64(total), 1)
		n := int(frac * 30)
		fmt.Fprintf(p.w, "\r%s [%s%s] %3.0f%% %s/%s %s/s ", p.label, strings.Repeat("=", n), strings.Repeat(" ", 30-n),
			frac*100, units.Bytes(done), units.Bytes(total), units.Bytes(int64(rate)))
	} else {
		fmt.Fprintf(p.w, "\r%s %s %s/s ", p.label, units.Bytes(done), units.Bytes(int64(rate)))
	}
}

// Done ends the bar with a summary line.
func (p *progressBar) Done(summary string) {
	if p.tty {
		fmt.Fprint(p.w, "\r\033[K")
	}
	if summary != "" {
		fmt.Fprintf(p.w, "%s %s (%s)\n", p.label, summary, time.Since(p.start).Round(time.Millisecond))
	}
}
