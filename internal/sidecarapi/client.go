package sidecarapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Client calls sidecars with the cluster's token. Every caller of the sidecar API goes
// through one, so a new call is authenticated without further thought.
type Client struct {
	Tokens Tokens
	// HTTP carries the requests (http.DefaultClient when nil).
	HTTP *http.Client
}

// NewClient returns a client that sends the first token of tokens.
func NewClient(tokens Tokens, hc *http.Client) *Client { return &Client{Tokens: tokens, HTTP: hc} }

// FileClient returns a client that sends the first token of the token file at path.
func FileClient(path string, hc *http.Client) *Client { return NewClient(NewFile(path), hc) }

// Do sends req with the token. The response is returned as it is; Call and GetJSON turn
// answers other than 2xx into a StatusError.
func (c *Client) Do(req *http.Request) (*http.Response, error) {
	if c == nil || c.Tokens == nil {
		return nil, errors.New("no sidecar API token configured for this client (give --api-token-file)")
	}
	toks, err := c.Tokens.Tokens()
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+toks[0])
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	return hc.Do(req)
}

// Call sends a request without a body and returns the answer's body (at most 1 MiB), or a
// StatusError for an answer other than 2xx.
func (c *Client) Call(ctx context.Context, method, url string) ([]byte, error) {
	return c.call(ctx, method, url, nil)
}

// PostJSON POSTs body as JSON and decodes the JSON answer into out.
func (c *Client) PostJSON(ctx context.Context, url string, body, out any) error {
	raw, err := json.Marshal(body)
	if err != nil {
		return err
	}
	b, err := c.call(ctx, http.MethodPost, url, raw)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("POST %s: unreadable answer: %w", url, err)
	}
	return nil
}

func (c *Client) call(ctx context.Context, method, url string, body []byte) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("%s %s: reading the answer: %w", method, url, err)
	}
	if resp.StatusCode/100 != 2 {
		return nil, c.statusError(method, url, resp, b)
	}
	return b, nil
}

// GetJSON GETs url and decodes the JSON answer into v.
func (c *Client) GetJSON(ctx context.Context, url string, v any) error {
	b, err := c.Call(ctx, http.MethodGet, url)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("GET %s: unreadable answer: %w", url, err)
	}
	return nil
}

// StatusError is an answer other than 2xx.
type StatusError struct {
	Method, URL string
	Code        int
	Status      string
	Body        string
	// RetryAfter is the answer's Retry-After (429, 503), zero if none.
	RetryAfter time.Duration
	// TokenSource names where the token sent came from; set for 401 and 403.
	TokenSource string
}

func (e *StatusError) Error() string {
	msg := fmt.Sprintf("%s %s: %s", e.Method, e.URL, e.Status)
	if e.Body != "" {
		msg += ": " + e.Body
	}
	if e.TokenSource != "" {
		msg += " (the token sent is the first of " + e.TokenSource + ")"
	}
	return msg
}

// StatusCode returns the HTTP status of a StatusError in err's chain, 0 if none.
func StatusCode(err error) int {
	var se *StatusError
	if errors.As(err, &se) {
		return se.Code
	}
	return 0
}

// RetryAfter returns the Retry-After of a StatusError in err's chain.
func RetryAfter(err error) (time.Duration, bool) {
	var se *StatusError
	if errors.As(err, &se) && se.RetryAfter > 0 {
		return se.RetryAfter, true
	}
	return 0, false
}

func (c *Client) statusError(method, url string, resp *http.Response, body []byte) *StatusError {
	e := &StatusError{Method: method, URL: url, Code: resp.StatusCode, Status: resp.Status, Body: strings.TrimSpace(string(body))}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
		e.TokenSource = c.Tokens.Source()
	}
	return e
}
