package testutil

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// S3 is an in-process server speaking the real S3 wire protocol (gofakes3), reached through
// the AWS SDK like any S3-compatible store. It can be switched off to simulate an outage.
type S3 struct {
	URL  string
	down atomic.Bool
	// corrupt, when set, is a key substring: the next upload of a matching key is stored
	// with one byte flipped.
	corrupt atomic.Pointer[string]
}

// FakeS3 starts an S3 server with the given buckets and points the AWS SDK's credentials
// at it (environment variables, inherited by child processes).
func FakeS3(t testing.TB, buckets ...string) *S3 {
	t.Helper()
	be := s3mem.New()
	for _, b := range buckets {
		if err := be.CreateBucket(b); err != nil {
			t.Fatal(err)
		}
	}
	s := &S3{}
	h := gofakes3.New(be).Server()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.down.Load() {
			http.Error(w, "<Error><Code>ServiceUnavailable</Code><Message>outage</Message></Error>", http.StatusServiceUnavailable)
			return
		}
		if m := s.corrupt.Load(); m != nil && r.Method == http.MethodPut && strings.Contains(r.URL.Path, *m) && s.corrupt.CompareAndSwap(m, nil) {
			b, err := io.ReadAll(r.Body)
			if err != nil || len(b) == 0 {
				http.Error(w, "cannot read the body", http.StatusBadRequest)
				return
			}
			b[len(b)/2] ^= 0xff
			r.Body = io.NopCloser(bytes.NewReader(b))
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	empty := filepath.Join(t.TempDir(), "empty-aws-config")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"AWS_ACCESS_KEY_ID": "steward", "AWS_SECRET_ACCESS_KEY": "steward-secret",
		"AWS_SESSION_TOKEN": "", "AWS_PROFILE": "", "AWS_CONFIG_FILE": empty, "AWS_SHARED_CREDENTIALS_FILE": empty,
		"AWS_EC2_METADATA_DISABLED": "true"} {
		t.Setenv(k, v)
	}
	return s
}

// StoreURL is a steward store URL for bucket/prefix on this server.
func (s *S3) StoreURL(bucket, prefix string) string {
	return fmt.Sprintf("s3://%s/%s?endpoint=%s&use_path_style=true&region=us-east-1", bucket, prefix, s.URL)
}

// CorruptNextUpload makes the server store the next upload of a key containing match with one
// byte flipped, as a store that damages data in transit or at rest would.
func (s *S3) CorruptNextUpload(match string) { s.corrupt.Store(&match) }

// SetDown switches the outage on or off: while down every request gets 503.
func (s *S3) SetDown(down bool) { s.down.Store(down) }
