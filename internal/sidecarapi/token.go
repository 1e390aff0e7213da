// Package sidecarapi protects the sidecar's HTTP API and is the one client every caller of
// it uses (the etcd process, other sidecars, the local supervisor and CLI, the operator).
//
// The API is authenticated with a per-cluster bearer token: 32 random bytes (256 bits),
// base64url, kept in a file (`--api-token-file`; `steward local`: DIR/run/api-token, mode
// 0600; Kubernetes: the Secret <cluster>-sidecar-token mounted into the member pods). A
// token file holds one or more tokens, one per line: the server accepts any of them, clients
// send the first. That makes rotation possible without refusing a call: add the new token
// second, then move it first, then remove the old one (docs/architecture.md).
//
// Every route declares its access (Open, Read, Control). A token grants both Read and
// Control: the components of one cluster trust each other. Mutual TLS can later map client
// certificates to these scopes without changing the routes.
package sidecarapi

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// TokenBytes is the size of a generated token's random part.
const TokenBytes = 32

// MinTokenLen is the shortest token a token file may hold: 256 bits in base64url.
const MinTokenLen = 43

// MaxTokenLen bounds a token (and with it, what an Authorization header may carry).
const MaxTokenLen = 512

// maxTokenFile bounds a token file.
const maxTokenFile = 16 << 10

// GenerateToken returns a new random token (256 bits, base64url without padding).
func GenerateToken() (string, error) {
	b := make([]byte, TokenBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generating a sidecar API token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// ParseTokens reads a token file's content: one token per line, blank lines and lines that
// start with # ignored. The first token is the one clients send. Errors never quote a token.
func ParseTokens(b []byte) ([]string, error) {
	if len(b) > maxTokenFile {
		return nil, fmt.Errorf("holds %d bytes; a token file holds a few tokens of %d to %d characters, one per line", len(b), MinTokenLen, MaxTokenLen)
	}
	var out []string
	for i, line := range bytes.Split(b, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		if len(line) < MinTokenLen || len(line) > MaxTokenLen {
			return nil, fmt.Errorf("line %d: a token has %d to %d characters (this one has %d); generate one with `head -c 32 /dev/urandom | base64 | tr '+/' '-_' | tr -d '='`", i+1, MinTokenLen, MaxTokenLen, len(line))
		}
		for _, c := range line {
			if c <= ' ' || c > '~' {
				return nil, fmt.Errorf("line %d: a token is printable ASCII without spaces", i+1)
			}
		}
		out = append(out, string(line))
	}
	if len(out) == 0 {
		return nil, errors.New("holds no token")
	}
	return out, nil
}

// ReadTokenFile reads and parses the token file at path.
func ReadTokenFile(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("sidecar API token file: %w", err)
	}
	toks, err := ParseTokens(b)
	if err != nil {
		return nil, fmt.Errorf("sidecar API token file %s %w", path, err)
	}
	return toks, nil
}

// EnsureTokenFile makes sure path holds a valid token file, mode 0600: an existing one is
// kept (its mode narrowed to 0600), a missing one is created with a new token. created says
// which. The token is never logged.
func EnsureTokenFile(path string) (created bool, err error) {
	if _, err := os.Stat(path); err == nil {
		if _, err := ReadTokenFile(path); err != nil {
			return false, fmt.Errorf("%w; replace it with a valid token, or delete it to have a new one generated (every member restarts with it)", err)
		}
		return false, os.Chmod(path, 0o600)
	} else if !errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("sidecar API token file: %w", err)
	}
	tok, err := GenerateToken()
	if err != nil {
		return false, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return false, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return false, fmt.Errorf("creating the sidecar API token file: %w", err)
	}
	if _, err := f.WriteString(tok + "\n"); err != nil {
		f.Close()
		os.Remove(path)
		return false, fmt.Errorf("writing the sidecar API token file %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return false, err
	}
	return true, f.Close()
}

// Tokens is where a server finds the tokens it accepts and a client the one it sends.
type Tokens interface {
	// Tokens returns the valid tokens, the one clients send first.
	Tokens() ([]string, error)
	// Source names where the tokens come from (a path, a Secret), for error messages.
	Source() string
}

// Static is a fixed set of tokens (the operator's, read from a Secret).
type Static struct {
	List []string
	From string
}

// Tokens implements Tokens.
func (s Static) Tokens() ([]string, error) {
	if len(s.List) == 0 {
		return nil, fmt.Errorf("no sidecar API token in %s", s.From)
	}
	return s.List, nil
}

// Source implements Tokens.
func (s Static) Source() string { return s.From }

// File is a token file, read again whenever it changes (a rotated Secret is seen without a
// restart). It is safe for concurrent use.
type File struct {
	path string

	mu      sync.Mutex
	checked time.Time
	stamp   fileStamp
	tokens  []string
	err     error
}

type fileStamp struct {
	modTime time.Time
	size    int64
}

// recheck is how often a File looks at its file again.
const recheck = time.Second

// NewFile returns the token file at path. It is read on first use.
func NewFile(path string) *File { return &File{path: path} }

// Path returns the file's path.
func (f *File) Path() string { return f.path }

// Source implements Tokens.
func (f *File) Source() string { return "token file " + f.path }

// Tokens implements Tokens: the file's tokens, read again when its modification time or size
// changed (checked at most once a second).
func (f *File) Tokens() ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	if !f.checked.IsZero() && now.Sub(f.checked) < recheck {
		return f.tokens, f.err
	}
	f.checked = now
	fi, err := os.Stat(f.path)
	if err != nil {
		f.tokens, f.err, f.stamp = nil, fmt.Errorf("sidecar API token file: %w", err), fileStamp{}
		return nil, f.err
	}
	st := fileStamp{modTime: fi.ModTime(), size: fi.Size()}
	if f.tokens != nil && st.modTime.Equal(f.stamp.modTime) && st.size == f.stamp.size {
		return f.tokens, nil
	}
	f.tokens, f.err = ReadTokenFile(f.path)
	f.stamp = st
	return f.tokens, f.err
}
