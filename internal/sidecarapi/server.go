package sidecarapi

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Access is what a route needs from its caller.
type Access int

const (
	// Open routes answer anyone: /healthz, /readyz, /metrics.
	Open Access = iota
	// Read routes show member data: reports, the generated configuration, backup status.
	Read
	// Control routes change state: initialise the member, take a full snapshot (which runs
	// retention).
	Control
)

func (a Access) String() string {
	switch a {
	case Open:
		return "open"
	case Read:
		return "read"
	case Control:
		return "control"
	}
	return fmt.Sprintf("access(%d)", int(a))
}

// Defaults of the server's limits.
const (
	// MaxBody bounds every request body. The API's POST bodies are small JSON objects.
	MaxBody = 64 << 10
	// DefaultTimeout bounds writing a route's answer unless the route says otherwise.
	DefaultTimeout = 30 * time.Second
)

// Route is one endpoint of the API. The server and its tests use the same list of routes, so
// no endpoint can be added without saying who may call it.
type Route struct {
	Method, Path string
	Access       Access
	// MinInterval admits at most one (authenticated) request per interval; others get 429
	// with Retry-After. Zero: no limit.
	MinInterval time.Duration
	// Timeout bounds the time to write the answer (DefaultTimeout when zero).
	Timeout time.Duration
	// Body, set on a route that takes a body, makes a new value of what it decodes into
	// (DecodeBody's rules; NoBody for none). The body is checked before the route's rate
	// limit: a malformed request is refused with 400 or 413 and spends no request's turn. The
	// handler decodes it again from the same bytes.
	Body    func() any
	Handler http.HandlerFunc
}

// Pattern is the route's http.ServeMux pattern.
func (r Route) Pattern() string { return r.Method + " " + r.Path }

// Principal is an authenticated caller and what it may do.
type Principal struct {
	Name   string
	Grants []Access
}

func (p Principal) may(a Access) bool {
	for _, g := range p.Grants {
		if g == a {
			return true
		}
	}
	return false
}

// clusterToken is whoever holds the cluster's token: the cluster's own components, which
// may read and control. (Mutual TLS would map certificates to narrower principals.)
var clusterToken = Principal{Name: "cluster token", Grants: []Access{Read, Control}}

// AuthError is a refused authentication: Code 401 (missing or wrong credentials) or 503 (the
// server cannot read its own tokens). Its message never holds a token.
type AuthError struct {
	Code int
	Msg  string
}

func (e *AuthError) Error() string { return e.Msg }

// Authenticate checks r's bearer token against tokens, in constant time.
func Authenticate(r *http.Request, tokens Tokens) (Principal, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return Principal{}, &AuthError{http.StatusUnauthorized, "missing credentials: this endpoint needs the header `Authorization: Bearer <token>` with the cluster's sidecar API token " +
			"(steward local: DIR/run/api-token; Kubernetes: the Secret <cluster>-sidecar-token)"}
	}
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return Principal{}, &AuthError{http.StatusUnauthorized, "the Authorization header is not a bearer token: send `Authorization: Bearer <token>` with the cluster's sidecar API token"}
	}
	tok = strings.TrimSpace(tok)
	if tokens == nil {
		return Principal{}, &AuthError{http.StatusServiceUnavailable, "this sidecar has no API token configured (--api-token-file): it refuses every request that needs one"}
	}
	valid, err := tokens.Tokens()
	if err != nil {
		return Principal{}, &AuthError{http.StatusServiceUnavailable, "this sidecar cannot read its API tokens: " + err.Error()}
	}
	if !Match(tok, valid) {
		return Principal{}, &AuthError{http.StatusUnauthorized, "the bearer token is not this cluster's sidecar API token (another cluster's, or one replaced by a rotation)"}
	}
	return clusterToken, nil
}

// Match reports whether tok is one of valid, comparing every token in constant time
// (hashes first, so neither the content nor the length of a valid token leaks).
func Match(tok string, valid []string) bool {
	h := sha256.Sum256([]byte(tok))
	match := 0
	for _, v := range valid {
		hv := sha256.Sum256([]byte(v))
		match |= subtle.ConstantTimeCompare(h[:], hv[:])
	}
	return match == 1 && len(tok) > 0
}

// NewHandler serves routes: every request body is limited to MaxBody, every route but the
// Open ones needs a valid token, a route's body is checked (Route.Body), then rate-limited
// routes answer 429 with Retry-After, and each
// answer must be written within the route's timeout. With tlsOnly, a route that is not Open
// refuses a request that did not come over TLS, before its token is looked at.
func NewHandler(routes []Route, tokens Tokens, tlsOnly bool) http.Handler {
	m := http.NewServeMux()
	for _, rt := range routes {
		m.Handle(rt.Pattern(), guard(rt, tokens, tlsOnly))
	}
	return m
}

func guard(rt Route, tokens Tokens, tlsOnly bool) http.Handler {
	var lim *limiter
	if rt.MinInterval > 0 {
		lim = &limiter{interval: rt.MinInterval}
	}
	timeout := rt.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, MaxBody)
		if rt.Access != Open && tlsOnly && r.TLS == nil {
			msg := fmt.Sprintf("%s %s is served over TLS only: call https://%s%s, trusting the cluster's CA (ca.crt)", rt.Method, rt.Path, r.Host, rt.Path)
			if r.Header.Get("Authorization") != "" {
				msg += "; the token this request sent in plain text may have been seen by others: rotate it"
			}
			http.Error(w, msg, http.StatusForbidden)
			return
		}
		if rt.Access != Open {
			p, err := Authenticate(r, tokens)
			if err != nil {
				var ae *AuthError
				errors.As(err, &ae)
				if ae.Code == http.StatusUnauthorized {
					w.Header().Set("WWW-Authenticate", `Bearer realm="steward-sidecar"`)
				}
				http.Error(w, ae.Msg, ae.Code)
				return
			}
			if !p.may(rt.Access) {
				http.Error(w, fmt.Sprintf("%s may not %s %s (it needs %s access)", p.Name, rt.Method, rt.Path, rt.Access), http.StatusForbidden)
				return
			}
		}
		if rt.Body != nil {
			b, err := readBody(r)
			if err == nil {
				err = decodeJSON(b, rt.Body())
			}
			if err != nil {
				WriteBodyError(w, err)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(b))
		}
		if lim != nil {
			if wait, ok := lim.allow(time.Now()); !ok {
				secs := int(math.Ceil(wait.Seconds()))
				w.Header().Set("Retry-After", strconv.Itoa(secs))
				http.Error(w, fmt.Sprintf("%s %s is limited to one request every %s; retry in %d s", rt.Method, rt.Path, rt.MinInterval, secs), http.StatusTooManyRequests)
				return
			}
		}
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(timeout))
		rt.Handler(w, r)
	})
}

// limiter admits one request per interval.
type limiter struct {
	interval time.Duration
	mu       sync.Mutex
	next     time.Time
}

func (l *limiter) allow(now time.Time) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Before(l.next) {
		return l.next.Sub(now), false
	}
	l.next = now.Add(l.interval)
	return 0, true
}

// NewServer returns an http.Server for h with the API's timeouts: headers within 5 s, a
// whole request within 30 s, idle connections closed after 2 min. Answers are bounded per
// route (Route.Timeout).
func NewServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second,
		IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 16 << 10}
}

// BodyError is a request body that DecodeBody refused; Code is 400 or 413.
type BodyError struct {
	Code int
	Err  error
}

func (e *BodyError) Error() string { return e.Err.Error() }

// DecodeBody decodes r's optional JSON body into v, strictly: an empty body leaves v as it
// is; otherwise exactly one JSON object with no unknown fields, within MaxBody.
func DecodeBody(r *http.Request, v any) error {
	b, err := readBody(r)
	if err != nil {
		return err
	}
	return decodeJSON(b, v)
}

// readBody reads r's body whole, within MaxBody when the handler's guard limits it.
func readBody(r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, &BodyError{http.StatusRequestEntityTooLarge, fmt.Errorf("request body over %d bytes", mbe.Limit)}
		}
		return nil, &BodyError{http.StatusBadRequest, fmt.Errorf("reading the request body: %w", err)}
	}
	return b, nil
}

func decodeJSON(b []byte, v any) error {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	if len(b) > MaxBody {
		return &BodyError{http.StatusRequestEntityTooLarge, fmt.Errorf("request body over %d bytes", MaxBody)}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return &BodyError{http.StatusBadRequest, fmt.Errorf("request body: %w", err)}
	}
	if _, err := dec.Token(); err != io.EOF {
		return &BodyError{http.StatusBadRequest, errors.New("request body: more than one JSON value")}
	}
	return nil
}

// WriteBodyError answers a refused body.
func WriteBodyError(w http.ResponseWriter, err error) {
	code := http.StatusBadRequest
	var be *BodyError
	if errors.As(err, &be) {
		code = be.Code
	}
	http.Error(w, err.Error(), code)
}

// NoBody is the body the POST endpoints take today: nothing, or an empty JSON object.
// Anything else is refused, so a future field is never silently ignored by an old sidecar.
type NoBody struct{}

// WriteJSON answers code with v as JSON.
func WriteJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
