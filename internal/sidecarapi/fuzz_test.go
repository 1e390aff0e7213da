package sidecarapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzDecodeBody: the POST endpoints' body decoder. Whatever the body, it never panics, a
// refusal is 400 or 413, and an accepted body is empty or exactly one JSON object with only
// known fields.
func FuzzDecodeBody(f *testing.F) {
	for _, s := range []string{"", "{}", " {} ", `{"x":1}`, "{} {}", "[]", "null", `{"a":`, strings.Repeat("[", 10000), "\x00"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		type body struct {
			Reason string `json:"reason,omitempty"`
		}
		var v body
		req := httptest.NewRequest("POST", "/v1/snapshots/full", bytes.NewReader(b))
		req.Body = http.MaxBytesReader(httptest.NewRecorder(), req.Body, MaxBody)
		err := DecodeBody(req, &v)
		if err != nil {
			var code int
			if be, ok := err.(*BodyError); ok {
				code = be.Code
			}
			if code != http.StatusBadRequest && code != http.StatusRequestEntityTooLarge {
				t.Fatalf("refusal %v with code %d", err, code)
			}
			return
		}
		trimmed := bytes.TrimSpace(b)
		if len(trimmed) == 0 {
			return
		}
		if len(b) > MaxBody || trimmed[0] != '{' && string(trimmed) != "null" || !json.Valid(trimmed) {
			t.Fatalf("accepted %q", b)
		}
	})
}

// FuzzParseTokens: a token file's parser. Accepted tokens are long enough and printable; an
// error never quotes a token line.
func FuzzParseTokens(f *testing.F) {
	tok := strings.Repeat("k", MinTokenLen)
	for _, s := range []string{tok, tok + "\n" + tok + "x", "# c\n\n" + tok, "short", tok + " " + tok, "\xff" + tok} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		toks, err := ParseTokens(b)
		if err != nil {
			for _, line := range strings.Split(string(b), "\n") {
				if l := strings.TrimSpace(line); len(l) >= 8 && strings.Contains(err.Error(), l) {
					t.Fatalf("error %q quotes a line", err)
				}
			}
			return
		}
		if len(toks) == 0 {
			t.Fatal("no tokens and no error")
		}
		for _, tk := range toks {
			if len(tk) < MinTokenLen || len(tk) > MaxTokenLen || strings.ContainsFunc(tk, func(r rune) bool { return r <= ' ' || r > '~' }) {
				t.Fatalf("accepted token of %d characters: %q", len(tk), tk)
			}
		}
	})
}

// FuzzAuthenticate: whatever the Authorization header, only the cluster's token (in a Bearer
// header) gets through, and a refusal never echoes the header.
func FuzzAuthenticate(f *testing.F) {
	valid := strings.Repeat("v", MinTokenLen)
	for _, s := range []string{"", "Bearer " + valid, "bearer " + valid, "Bearer  " + valid, "Basic " + valid, "Bearer " + valid + "x", "Bearer", "Bearer " + strings.Repeat("v", 42)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		req := httptest.NewRequest("GET", "/v1/report", nil)
		req.Header["Authorization"] = []string{h}
		p, err := Authenticate(req, Static{List: []string{valid}})
		scheme, tok, _ := strings.Cut(h, " ")
		want := strings.EqualFold(scheme, "bearer") && strings.TrimSpace(tok) == valid
		if (err == nil) != want {
			t.Fatalf("header %q: accepted %v (%v), want %v", h, err == nil, err, want)
		}
		if err == nil && !p.may(Read) {
			t.Fatalf("principal %+v", p)
		}
		if err != nil && len(h) >= 8 && strings.Contains(err.Error(), h) {
			t.Fatalf("refusal %q echoes the header", err)
		}
	})
}
