package sidecarapi

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/etcd-steward/steward/internal/pki"
)

// With TLS, one port serves both: the API over TLS, and the open endpoints (/healthz,
// /readyz, /metrics) also in plain text, for kubelet probes and Prometheus, which take no
// cluster CA. Every other endpoint refuses a plain-text request (see NewHandler).

// handshakeByte opens every TLS connection: a handshake record.
const handshakeByte = 0x16

// sniffTimeout bounds the wait for a new connection's first byte.
const sniffTimeout = 5 * time.Second

// TLSListener wraps ln: a connection that opens with a TLS handshake is served with cfg
// (net/http sees a *tls.Conn and fills Request.TLS), any other is served as it is. Each
// connection's first byte is awaited in its own goroutine, so a silent client holds up no
// other.
func TLSListener(ln net.Listener, cfg *tls.Config) net.Listener {
	l := &sniffListener{Listener: ln, cfg: cfg, conns: make(chan net.Conn), done: make(chan struct{})}
	go l.acceptLoop()
	return l
}

type sniffListener struct {
	net.Listener
	cfg   *tls.Config
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
	err   error // why it ended: set once, before done closes
}

// acceptLoop accepts until the listener is closed. Any other accept error (the process out of
// file descriptors, a connection aborted before it was accepted) passes: it is retried after a
// pause that grows to a second, as net/http's server does, so a flood that ends leaves the API
// serving again.
func (l *sniffListener) acceptLoop() {
	var pause time.Duration
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				l.end(err)
				return
			}
			pause = min(max(2*pause, 5*time.Millisecond), time.Second)
			select {
			case <-time.After(pause):
				continue
			case <-l.done:
				return
			}
		}
		pause = 0
		go l.sniff(c)
	}
}

func (l *sniffListener) sniff(c net.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(sniffTimeout))
	br := bufio.NewReaderSize(c, 1)
	first, err := br.Peek(1)
	_ = c.SetReadDeadline(time.Time{})
	if err != nil {
		_ = c.Close()
		return
	}
	var out net.Conn = &peekedConn{Conn: c, r: br}
	if first[0] == handshakeByte {
		out = tls.Server(out, l.cfg)
	}
	select {
	case l.conns <- out:
	case <-l.done:
		_ = c.Close()
	}
}

func (l *sniffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, l.err
	}
}

// end records why the listener ended, once, and wakes Accept.
func (l *sniffListener) end(err error) {
	l.once.Do(func() { l.err = err; close(l.done) })
}

func (l *sniffListener) Close() error {
	l.end(net.ErrClosed)
	return l.Listener.Close()
}

// peekedConn reads through the buffer that holds the byte already peeked.
type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *peekedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// HTTPClient is an HTTP client for sidecars that serve the API over TLS with tc (nil: plain
// text), with the given overall timeout per request (0: none). Each connection verifies the
// sidecar's certificate against the host it dials, an IP address included (pki.ForHost).
func HTTPClient(tc *tls.Config, timeout time.Duration) *http.Client {
	if tc == nil {
		return &http.Client{Timeout: timeout}
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	t.DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		raw, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		conn := tls.Client(raw, pki.ForHost(tc, host))
		// The transport's own handshake bound does not apply to a connection dialed here.
		hctx, cancel := context.WithTimeout(ctx, t.TLSHandshakeTimeout)
		defer cancel()
		if err := conn.HandshakeContext(hctx); err != nil {
			raw.Close()
			return nil, err
		}
		return conn, nil
	}
	return &http.Client{Transport: t, Timeout: timeout}
}
