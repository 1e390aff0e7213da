package store

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/testutil"
)

// onlyKey refuses, as S3 does, every request not signed with the access key ID *allowed.
func onlyKey(allowed *atomic.Pointer[string]) func(http.Handler) http.Handler {
	credential := regexp.MustCompile(`Credential=([^/]+)/`)
	return func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			m := credential.FindStringSubmatch(r.Header.Get("Authorization"))
			if m == nil || m[1] != *allowed.Load() {
				w.Header().Set("Content-Type", "application/xml")
				w.WriteHeader(http.StatusForbidden)
				w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>`))
				return
			}
			h.ServeHTTP(w, r)
		})
	}
}

// writeFiles writes each name's value into dir, as a Secret volume holds its keys.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, value := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(value), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func tryPut(ctx context.Context, s *Store, key string) error {
	w, err := s.NewWriter(ctx, key)
	if err != nil {
		return err
	}
	if _, err := w.Write([]byte(key)); err != nil {
		w.Abort()
		return err
	}
	return w.Close()
}

// TestS3CredentialsDirRotates: an S3 store opened with a credentials directory signs with the
// keys in its files, and a rotation of the files reaches the open store: once the server
// accepts the new key only, writes succeed again without reopening the store.
func TestS3CredentialsDirRotates(t *testing.T) {
	defer func(d time.Duration) { credentialsRefresh = d }(credentialsRefresh)
	credentialsRefresh = time.Second
	allowed := &atomic.Pointer[string]{}
	allowed.Store(ptrTo("KEY-A"))
	endpoint, _ := fakeS3Wrapped(t, onlyKey(allowed), "backups") // the environment holds another key
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"AWS_ACCESS_KEY_ID": "KEY-A\n", "AWS_SECRET_ACCESS_KEY": "secret-a\n"})
	s := openWithT(t, s3URL(endpoint, "backups", "p"), Options{CredentialsDir: dir})
	put(t, s, "before", []byte("a"))

	writeFiles(t, dir, map[string]string{"AWS_ACCESS_KEY_ID": "KEY-B", "AWS_SECRET_ACCESS_KEY": "secret-b"})
	allowed.Store(ptrTo("KEY-B"))
	ctx := context.Background()
	testutil.Eventually(t, 30*time.Second, "a write signed with the rotated key", func() error { return tryPut(ctx, s, "after") })
	if got := get(t, s, "after"); string(got) != "after" {
		t.Fatalf("read back %q", got)
	}
}

// TestS3CredentialsDirOnly: with a credentials directory, the keys of the environment are
// not used, even when the directory's are refused.
func TestS3CredentialsDirOnly(t *testing.T) {
	allowed := &atomic.Pointer[string]{}
	allowed.Store(ptrTo("steward")) // the key fakeS3 puts in the environment
	endpoint, _ := fakeS3Wrapped(t, onlyKey(allowed), "backups")
	if os.Getenv("AWS_ACCESS_KEY_ID") != "steward" {
		t.Fatal("the environment does not hold the key this test refuses")
	}
	openT(t, s3URL(endpoint, "backups", "p")) // without a directory: the environment's keys

	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"AWS_ACCESS_KEY_ID": "KEY-A", "AWS_SECRET_ACCESS_KEY": "secret-a"})
	_, err := Open(context.Background(), s3URL(endpoint, "backups", "p"), Options{CredentialsDir: dir})
	if err == nil || !strings.Contains(err.Error(), "access to bucket backups at endpoint "+endpoint+" denied: check the credentials files in "+dir) {
		t.Fatalf("Open with refused keys in the directory (and accepted ones in the environment) = %v, want access denied naming the directory", err)
	}
}

// TestCredentialsDirErrors: a credentials file that is missing, empty or holds the wrong
// thing is one error naming the file and what to put in it, and never its content.
func TestCredentialsDirErrors(t *testing.T) {
	endpoint, _ := fakeS3(t, "backups")
	for _, tc := range []struct {
		name, url string
		files     map[string]string
		want      string
	}{
		{"s3 missing", s3URL(endpoint, "backups", ""), map[string]string{"AWS_ACCESS_KEY_ID": "id"},
			"AWS_SECRET_ACCESS_KEY does not exist: put the secret access key in it"},
		{"s3 empty", s3URL(endpoint, "backups", ""), map[string]string{"AWS_ACCESS_KEY_ID": " \n", "AWS_SECRET_ACCESS_KEY": "hunter2"},
			"AWS_ACCESS_KEY_ID is empty: put the access key ID in it"},
		{"s3 with a profile", s3URL(endpoint, "backups", "") + "&profile=x", map[string]string{"AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "hunter2"},
			"the query parameter profile chooses the credentials, and so does the credentials directory"},
		{"google path", "gs://bucket", map[string]string{"GOOGLE_APPLICATION_CREDENTIALS": "/var/run/hunter2.json"},
			"GOOGLE_APPLICATION_CREDENTIALS holds a file name, not a key: put the service-account key file's JSON content in it, not its path"},
		{"google not json", "gs://bucket", map[string]string{"GOOGLE_APPLICATION_CREDENTIALS": "{hunter2"},
			"GOOGLE_APPLICATION_CREDENTIALS does not hold JSON"},
		{"azure no account", "azblob://c", map[string]string{"AZURE_STORAGE_KEY": "aHVudGVyMg=="},
			"AZURE_STORAGE_ACCOUNT does not exist: put the storage account's name in it"},
		{"azure no key", "azblob://c", map[string]string{"AZURE_STORAGE_ACCOUNT": "acct"},
			"holds neither AZURE_STORAGE_KEY nor AZURE_STORAGE_SAS_TOKEN"},
		{"azure bad key", "azblob://c", map[string]string{"AZURE_STORAGE_ACCOUNT": "acct", "AZURE_STORAGE_KEY": "hunter2!"},
			"AZURE_STORAGE_KEY does not hold a shared key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFiles(t, dir, tc.files)
			_, err := Open(context.Background(), tc.url, Options{CredentialsDir: dir})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), dir) {
				t.Fatalf("Open = %v, want an error naming %s and saying %q", err, dir, tc.want)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("the error holds a credential: %v", err)
			}
		})
	}
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "AWS_ACCESS_KEY_ID"), 0o700); err != nil {
		t.Fatal(err)
	}
	_, err := Open(context.Background(), s3URL(endpoint, "backups", ""), Options{CredentialsDir: dir})
	if err == nil || !strings.Contains(err.Error(), "cannot read credentials file "+filepath.Join(dir, "AWS_ACCESS_KEY_ID")) {
		t.Fatalf("Open with an unreadable file = %v", err)
	}
}

func ptrTo[T any](v T) *T { return &v }
