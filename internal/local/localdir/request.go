package localdir

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/etcd-steward/steward/internal/datadir"
)

// The request protocol. A client (a `steward local` command) asks the running supervisor
// for work by leaving one request of a kind in run/ (written atomically, carrying a Header),
// and waking it. The supervisor takes the request up (Take), records its answer in its state
// in the same write as what it did, and only then removes the request (Done): a supervisor
// that dies in between takes the request up again when it starts. The client waits for the
// answer (Ask), within a deadline a little past the request's expiry; a supervisor that finds
// a request after it expired refuses it, as the client has been told it failed.

// RequestTTL is how long a request waits for the supervisor to take it up.
const RequestTTL = 30 * time.Second

// Kind is a kind of request: at most one of each waits at a time, in its own file.
type Kind struct {
	Name string // in messages: "a restore request"
	file string // relative to the directory
}

// The kinds of request.
var (
	// RestoreKind asks for a restore of the running cluster, or withdraws one
	// (`steward local restore`).
	RestoreKind = Kind{Name: "restore", file: "run/restore-request.json"}
	// RestartKind asks for one member to restart on the current spec (`steward local
	// upgrade`, `steward local rotate-ca`).
	RestartKind = Kind{Name: "restart", file: "run/restart-request.json"}
)

// Request is the file where a request of kind k waits for the supervisor.
func (d Dir) Request(k Kind) string { return d.Path(k.file) }

// Header is what every request carries.
type Header struct {
	ID          string    `json:"id"`
	RequestedAt time.Time `json:"requestedAt"`
	Expires     time.Time `json:"expires"`
}

// Head is the request's header (a request type embeds Header, or builds it from its fields).
func (h Header) Head() Header { return h }

// Expired: the supervisor found the request too late; it refuses it.
func (h Header) Expired(now time.Time) bool { return now.After(h.Expires) }

// Request is a request of some kind: its own fields and a Header.
type Request interface{ Head() Header }

func newHeader(now time.Time) Header {
	id := make([]byte, 8)
	_, _ = rand.Read(id)
	h := Header{ID: hex.EncodeToString(id), RequestedAt: now.UTC()}
	h.Expires = h.RequestedAt.Add(RequestTTL)
	return h
}

// Ask leaves the request build makes (from its Header) for the supervisor of d, wakes it,
// and waits until answered finds the supervisor's answer to the request's ID. It refuses
// while another request of the kind waits; a request not taken up in time is withdrawn.
func Ask[R Request](ctx context.Context, d Dir, k Kind, build func(Header) R, answered func(id string) (bool, error)) error {
	path := d.Request(k)
	if other, err := read[Header](path); err == nil && !other.Expired(time.Now()) {
		return fmt.Errorf("another %s request (%s, made at %s) waits for the supervisor of %s; try again after %s; nothing was changed",
			k.Name, other.ID, other.RequestedAt.Format(time.RFC3339), d, other.Expires.Format(time.RFC3339))
	}
	h := newHeader(time.Now())
	b, err := json.Marshal(build(h))
	if err != nil {
		return err
	}
	if err := datadir.WriteFileAtomic(path, b, 0o600); err != nil {
		return fmt.Errorf("leave the %s request in %s: %w", k.Name, path, err)
	}
	_ = d.Wake() // at once; it also looks every second
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	// A little past the expiry: a supervisor that has not answered by then refuses it.
	deadline := time.NewTimer(time.Until(h.Expires) + 2*time.Second)
	defer deadline.Stop()
	for {
		if done, err := answered(h.ID); done {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("interrupted while the supervisor had not answered; the %s request expires at %s unless it is taken up before: see `steward local status --dir %s`", k.Name, h.Expires.Format(time.RFC3339), d)
		case <-deadline.C:
			d.Done(k)
			return fmt.Errorf("the supervisor of %s did not take up the %s request within %s (is it stuck? see %s); nothing was changed", d, k.Name, RequestTTL, d.SupervisorLog())
		case <-tick.C:
		}
	}
}

// Pending says whether a request of kind k waits.
func (d Dir) Pending(k Kind) bool {
	_, err := os.Stat(d.Request(k))
	return err == nil
}

// Take reads the request of kind k that waits, if any (ok=false: none). An unreadable one
// (or one without an ID) is removed, and err says why.
func Take[R Request](d Dir, k Kind) (req R, ok bool, err error) {
	path := d.Request(k)
	b, err := os.ReadFile(path)
	if err != nil {
		return req, false, nil
	}
	if err := json.Unmarshal(b, &req); err != nil || req.Head().ID == "" {
		_ = os.Remove(path)
		return req, false, fmt.Errorf("%s request %s is unreadable (%v): removed", k.Name, path, err)
	}
	return req, true, nil
}

func read[R any](path string) (req R, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return req, err
	}
	return req, json.Unmarshal(b, &req)
}

// Done removes the request of kind k once its answer is recorded.
func (d Dir) Done(k Kind) { _ = os.Remove(d.Request(k)) }
