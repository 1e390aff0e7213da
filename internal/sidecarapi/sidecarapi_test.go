package sidecarapi

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/testutil"
)

func TestGenerateTokenIs256Bits(t *testing.T) {
	a, err := GenerateToken()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := GenerateToken()
	if a == b || len(a) != 43 {
		t.Fatalf("tokens %d characters, equal %v", len(a), a == b)
	}
	if _, err := ParseTokens([]byte(a)); err != nil {
		t.Fatalf("a generated token is refused: %v", err)
	}
}

func TestParseTokens(t *testing.T) {
	good := strings.Repeat("a", MinTokenLen)
	other := strings.Repeat("b", MinTokenLen)
	toks, err := ParseTokens([]byte("# rotation: new first\n\n " + good + " \n" + other + "\n"))
	if err != nil || len(toks) != 2 || toks[0] != good || toks[1] != other {
		t.Fatalf("%v %v", toks, err)
	}
	for name, in := range map[string]string{
		"empty":     "",
		"comments":  "# nothing\n",
		"too short": strings.Repeat("a", MinTokenLen-1),
		"a space":   strings.Repeat("a", 20) + " " + strings.Repeat("a", 30),
		"non-ASCII": strings.Repeat("ä", MinTokenLen),
		"too long":  strings.Repeat("a", MaxTokenLen+1),
	} {
		_, err := ParseTokens([]byte(in))
		if err == nil {
			t.Errorf("%s: accepted", name)
		} else if len(in) > 10 && strings.Contains(err.Error(), in[:10]) {
			t.Errorf("%s: the error %q quotes the token", name, err)
		}
	}
}

// TestEnsureTokenFile: made once with mode 0600, kept after (a wider mode is narrowed), and a
// damaged file is refused rather than silently replaced.
func TestEnsureTokenFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run", "api-token")
	created, err := EnsureTokenFile(path)
	if err != nil || !created {
		t.Fatalf("created %v, %v", created, err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, %v", fi.Mode(), err)
	}
	first, _ := os.ReadFile(path)
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if created, err := EnsureTokenFile(path); err != nil || created {
		t.Fatalf("second call: created %v, %v", created, err)
	}
	again, _ := os.ReadFile(path)
	fi, _ = os.Stat(path)
	if string(again) != string(first) || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the token changed or the mode stayed %v", fi.Mode())
	}
	if err := os.WriteFile(path, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureTokenFile(path); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("damaged token file: %v", err)
	}
}

// TestRotationWithoutRefusals walks the documented rotation: old; old+new (servers accept
// both, clients still send old); new+old (clients send new); new. Servers and clients see each
// step at different times (a Secret reaches pods within a minute or so), so at every step every
// mix of a client and a server on either side of it must agree. At the end the old token is
// refused.
func TestRotationWithoutRefusals(t *testing.T) {
	old, _ := GenerateToken()
	neu, _ := GenerateToken()
	steps := [][]string{{old}, {old, neu}, {neu, old}, {neu}}
	routes := []Route{{Method: "GET", Path: "/x", Access: Read, Handler: func(w http.ResponseWriter, _ *http.Request) {}}}
	for i := 1; i < len(steps); i++ {
		for _, server := range steps[i-1 : i+1] {
			srv := httptest.NewServer(NewHandler(routes, Static{List: server}, false))
			for _, client := range steps[i-1 : i+1] {
				if _, err := NewClient(Static{List: client}, nil).Call(context.Background(), "GET", srv.URL+"/x"); err != nil {
					t.Errorf("step %d: a client on %d tokens, a server on %d: %v", i, len(client), len(server), err)
				}
			}
			srv.Close()
		}
	}
	srv := httptest.NewServer(NewHandler(routes, Static{List: []string{neu}}, false))
	defer srv.Close()
	_, err := NewClient(Static{List: []string{old}, From: "the old token"}, nil).Call(context.Background(), "GET", srv.URL+"/x")
	if StatusCode(err) != http.StatusUnauthorized || !strings.Contains(err.Error(), "the old token") {
		t.Fatalf("the old token after the rotation: %v", err)
	}
}

// TestFileReloads: a token file replaced as a Secret volume replaces it (a rename) is read
// again without a restart.
func TestFileReloads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "api-token")
	old, _ := GenerateToken()
	neu, _ := GenerateToken()
	write := func(lines ...string) {
		t.Helper()
		if err := os.WriteFile(path+".tmp", []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			t.Fatal(err)
		}
	}
	write(old)
	f := NewFile(path)
	if toks, err := f.Tokens(); err != nil || len(toks) != 1 || toks[0] != old {
		t.Fatalf("%d tokens, %v", len(toks), err)
	}
	write(neu, old)
	testutil.Eventually(t, 10*time.Second, "the new file is read", func() error {
		toks, err := f.Tokens()
		if err != nil {
			return err
		}
		if len(toks) != 2 || toks[0] != neu {
			return errors.New("still the old file")
		}
		return nil
	})
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "a removed file is an error", func() error {
		if _, err := f.Tokens(); err == nil {
			return errors.New("tokens still served")
		}
		return nil
	})
}

// TestClientErrorNamesTheTokenFile: a refused token's error says which file the token came
// from, and never holds the token.
func TestClientErrorNamesTheTokenFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "api-token")
	if _, err := EnsureTokenFile(path); err != nil {
		t.Fatal(err)
	}
	toks, _ := ReadTokenFile(path)
	other, _ := GenerateToken()
	routes := []Route{{Method: "POST", Path: "/v1/snapshots/full", Access: Control, Handler: func(w http.ResponseWriter, _ *http.Request) {}}}
	srv := httptest.NewServer(NewHandler(routes, Static{List: []string{other}}, false))
	defer srv.Close()
	_, err := FileClient(path, nil).Call(context.Background(), "POST", srv.URL+"/v1/snapshots/full")
	if StatusCode(err) != http.StatusUnauthorized || !strings.Contains(err.Error(), "token file "+path) || strings.Contains(err.Error(), toks[0]) {
		t.Fatalf("error %v", err)
	}
	// A missing token file is an error before anything is sent.
	_, err = FileClient(path+".missing", nil).Call(context.Background(), "POST", srv.URL+"/v1/snapshots/full")
	if err == nil || !strings.Contains(err.Error(), path+".missing") {
		t.Fatalf("missing token file: %v", err)
	}
}

func TestMatch(t *testing.T) {
	a := strings.Repeat("a", 43)
	if !Match(a, []string{"x", a}) || Match(a[:42], []string{a}) || Match("", []string{""}) || Match(a, nil) {
		t.Fatal("Match")
	}
}
