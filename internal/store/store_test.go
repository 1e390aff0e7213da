package store

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// fakeS3 serves the S3 wire protocol in-process and returns its endpoint
// and backend. The test AWS credentials come from the environment, the way
// a real deployment gets them.
func fakeS3(t *testing.T, buckets ...string) (string, *s3mem.Backend) {
	t.Helper()
	return fakeS3Seeing(t, nil, buckets...)
}

// fakeS3Seeing is fakeS3 with every request shown to see first (nil: none).
func fakeS3Seeing(t *testing.T, see func(*http.Request), buckets ...string) (string, *s3mem.Backend) {
	t.Helper()
	return fakeS3Wrapped(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if see != nil {
				see(r)
			}
			h.ServeHTTP(w, r)
		})
	}, buckets...)
}

// fakeS3Wrapped is fakeS3 serving through the handler wrap makes of it.
func fakeS3Wrapped(t *testing.T, wrap func(http.Handler) http.Handler, buckets ...string) (string, *s3mem.Backend) {
	t.Helper()
	be := s3mem.New()
	for _, b := range buckets {
		if err := be.CreateBucket(b); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(wrap(gofakes3.New(be).Server()))
	t.Cleanup(srv.Close)
	t.Setenv("AWS_ACCESS_KEY_ID", "steward")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "steward-secret")
	t.Setenv("AWS_SESSION_TOKEN", "")
	t.Setenv("AWS_PROFILE", "")
	// Keep the developer's ~/.aws out of the test.
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_CONFIG_FILE", empty)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", empty)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	return srv.URL, be
}

func s3URL(endpoint, bucket, prefix string) string {
	return "s3://" + bucket + "/" + prefix + "?endpoint=" + endpoint + "&use_path_style=true&region=us-east-1"
}

func openT(t *testing.T, u string) *Store {
	t.Helper()
	return openWithT(t, u, Options{})
}

func openWithT(t *testing.T, u string, o Options) *Store {
	t.Helper()
	s, err := Open(context.Background(), u, o)
	if err != nil {
		t.Fatalf("Open(%s): %v", u, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func put(t *testing.T, s *Store, key string, data []byte) {
	t.Helper()
	w, err := s.NewWriter(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	// Write in uneven pieces: the store must not depend on one big Write.
	for len(data) > 0 {
		n := min(len(data), 100_003)
		if _, err := w.Write(data[:n]); err != nil {
			t.Fatal(err)
		}
		data = data[n:]
	}
	if err := w.Close(); err != nil {
		t.Fatalf("close %s: %v", key, err)
	}
}

func get(t *testing.T, s *Store, key string) []byte {
	t.Helper()
	r, err := s.NewReader(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if r.Size() != int64(len(b)) {
		t.Errorf("Size() = %d, read %d bytes", r.Size(), len(b))
	}
	return b
}

func keys(t *testing.T, s *Store, prefix string) []string {
	t.Helper()
	objs, err := s.List(context.Background(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, o := range objs {
		out = append(out, o.Key)
	}
	return out
}

// exercise runs the behaviour every backend must share.
func exercise(t *testing.T, s *Store, bigSize int) {
	ctx := context.Background()
	big := make([]byte, bigSize)
	rand.Read(big)

	put(t, s, "v1/full/b", big)
	put(t, s, "v1/full/a", []byte("hello"))
	put(t, s, "v1/delta/c", nil) // empty objects are objects too
	put(t, s, "other", []byte("x"))

	if got := get(t, s, "v1/full/b"); !bytes.Equal(got, big) {
		t.Fatalf("round trip of %d bytes returned %d different bytes", len(big), len(got))
	}
	if got := get(t, s, "v1/delta/c"); len(got) != 0 {
		t.Fatalf("empty object read back %d bytes", len(got))
	}

	objs, err := s.List(ctx, "v1/")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"v1/delta/c", "v1/full/a", "v1/full/b"}
	if len(objs) != len(want) {
		t.Fatalf("List(v1/) = %v, want %v", objs, want)
	}
	for i, o := range objs {
		if o.Key != want[i] {
			t.Fatalf("List(v1/)[%d] = %s, want %s", i, o.Key, want[i])
		}
		if o.ModTime.IsZero() {
			t.Errorf("%s has no ModTime", o.Key)
		}
	}
	if objs[1].Size != 5 || objs[2].Size != int64(len(big)) {
		t.Errorf("sizes = %d, %d; want 5, %d", objs[1].Size, objs[2].Size, len(big))
	}
	if st, err := s.Stat(ctx, "v1/full/a"); err != nil || st.Size != 5 {
		t.Errorf("Stat = %+v, %v", st, err)
	}

	// Aborted and failed writes leave nothing, also not over an old object.
	w, err := s.NewWriter(ctx, "v1/full/aborted")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(big); err != nil {
		t.Fatal(err)
	}
	w.Abort()
	cctx, cancel := context.WithCancel(ctx)
	w, err = s.NewWriter(cctx, "v1/full/a")
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("replacement that never lands"))
	cancel()
	if err := w.Close(); err == nil {
		t.Fatal("Close after the context was cancelled returned nil")
	}
	if got := keys(t, s, "v1/"); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("after aborted writes List = %v, want %v", got, want)
	}
	if got := get(t, s, "v1/full/a"); string(got) != "hello" {
		t.Fatalf("aborted overwrite changed the object to %q", got)
	}

	// Missing objects are ErrNotFound and the error names the key.
	_, err = s.NewReader(ctx, "v1/full/missing")
	if !errors.Is(err, ErrNotFound) || !IsNotFound(err) || !strings.Contains(err.Error(), "v1/full/missing") {
		t.Fatalf("NewReader(missing) = %v, want ErrNotFound naming the key", err)
	}

	if err := s.Delete(ctx, "v1/full/a"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "v1/full/a"); err != nil {
		t.Fatalf("second Delete of the same key: %v", err)
	}
	if got := keys(t, s, ""); strings.Join(got, ",") != "other,v1/delta/c,v1/full/b" {
		t.Fatalf("after Delete List = %v", got)
	}

	for _, bad := range []string{"", "/abs", "a//b", "a/../b", "dir/"} {
		if _, err := s.NewWriter(ctx, bad); err == nil {
			t.Errorf("NewWriter(%q) accepted a bad key", bad)
		}
	}
}

func TestFileStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "does", "not", "exist", "yet")
	s := openWithT(t, "file://"+dir, Options{Create: true})
	exercise(t, s, 1<<20)

	// Keys are plain files, no side files, no temporaries left behind.
	var files []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if strings.Join(files, ",") != "other,v1/delta/c,v1/full/b" {
		t.Fatalf("files on disk = %v", files)
	}
	// Only this user can read a backup, whatever the umask.
	for path, want := range map[string]os.FileMode{dir: 0o700, filepath.Join(dir, "v1"): 0o700, filepath.Join(dir, "v1", "full"): 0o700,
		filepath.Join(dir, "v1", "full", "b"): 0o600, filepath.Join(dir, "other"): 0o600} {
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != want {
			t.Fatalf("%s: mode %v (%v), want %v", path, fi.Mode().Perm(), err, want)
		}
	}

	// A second Open sees the same data.
	s2 := openT(t, "file://"+dir)
	if got := get(t, s2, "other"); string(got) != "x" {
		t.Fatalf("second Open read %q", got)
	}
}

// TestFileStoreOnlyWritersCreate: opening a file:// store whose directory does not exist fails
// with what to do, and creates nothing, unless the opener writes backups (Options.Create).
func TestFileStoreOnlyWritersCreate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "mistyped", "dir")
	_, err := Open(context.Background(), "file://"+dir, Options{})
	if want := "directory " + dir + " does not exist at this machine: create it or fix --store"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Open of a missing directory = %v, want an error saying %q", err, want)
	}
	if _, err := os.Stat(filepath.Dir(dir)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a reader's Open created %s (%v)", filepath.Dir(dir), err)
	}
	openWithT(t, "file://"+dir, Options{Create: true})
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		t.Fatalf("a writer's Open did not create the directory: %v", err)
	}
}

func TestFileStoreHidesInFlightTemporaries(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, "file://"+dir)
	w, err := s.NewWriter(context.Background(), "v1/full/x")
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("partial"))
	if got := keys(t, s, ""); len(got) != 0 {
		t.Fatalf("an unfinished write is listed: %v", got)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if got := keys(t, s, ""); len(got) != 1 || got[0] != "v1/full/x" {
		t.Fatalf("after Close List = %v", got)
	}
}

func TestFileStoreRelative(t *testing.T) {
	t.Chdir(t.TempDir())
	s := openWithT(t, "file://./rel/dir", Options{Create: true})
	put(t, s, "k", []byte("v"))
	if b, err := os.ReadFile(filepath.Join("rel", "dir", "k")); err != nil || string(b) != "v" {
		t.Fatalf("relative store wrote elsewhere: %q, %v", b, err)
	}
}

func TestMemStore(t *testing.T) {
	exercise(t, openT(t, "mem://"), 1<<20)
}

func TestMemStoreSharedByName(t *testing.T) {
	a := openT(t, "mem://shared-test/cluster-a")
	put(t, a, "k", []byte("a"))
	a.Close()

	again := openT(t, "mem://shared-test/cluster-a")
	if got := get(t, again, "k"); string(got) != "a" {
		t.Fatalf("reopened mem store read %q", got)
	}
	root := openT(t, "mem://shared-test")
	if got := keys(t, root, ""); len(got) != 1 || got[0] != "cluster-a/k" {
		t.Fatalf("the bucket root lists %v, want [cluster-a/k]", got)
	}
	if got := keys(t, openT(t, "mem://shared-test/cluster-b"), ""); len(got) != 0 {
		t.Fatalf("another prefix sees %v", got)
	}
	if got := keys(t, openT(t, "mem://"), ""); len(got) != 0 {
		t.Fatalf("a private mem store sees %v", got)
	}
}

func TestS3Store(t *testing.T) {
	endpoint, be := fakeS3(t, "backups")
	// 20 MiB crosses the uploader's part size, so this covers multipart too.
	s := openT(t, s3URL(endpoint, "backups", "clusters/prod"))
	exercise(t, s, 20<<20)

	// The URL path is a key prefix in the real bucket.
	list, err := be.ListBucket("backups", &gofakes3.Prefix{}, gofakes3.ListBucketPage{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range list.Contents {
		got = append(got, c.Key)
	}
	if strings.Join(got, ",") != "clusters/prod/other,clusters/prod/v1/delta/c,clusters/prod/v1/full/b" {
		t.Fatalf("bucket holds %v", got)
	}
	if len(list.CommonPrefixes) != 0 {
		t.Fatalf("unexpected prefixes %v", list.CommonPrefixes)
	}
}

// TestS3UploadsCarryChecksums: every upload request (a whole object or a part of one) to an
// S3-compatible endpoint carries a checksum of its body, which the store accepts.
func TestS3UploadsCarryChecksums(t *testing.T) {
	var mu sync.Mutex
	uploads, without := 0, []string{}
	endpoint, _ := fakeS3Seeing(t, func(r *http.Request) {
		if r.Method != http.MethodPut {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		uploads++
		if r.Header.Get("X-Amz-Checksum-Crc32") == "" && r.Header.Get("X-Amz-Trailer") == "" {
			without = append(without, r.URL.String())
		}
	}, "backups")
	s := openT(t, s3URL(endpoint, "backups", "p"))
	exercise(t, s, 20<<20) // multipart too
	mu.Lock()
	defer mu.Unlock()
	if uploads == 0 || len(without) > 0 {
		t.Fatalf("%d uploads; without a checksum: %v", uploads, without)
	}
}

func TestS3MissingBucket(t *testing.T) {
	endpoint, _ := fakeS3(t, "backups")
	_, err := Open(context.Background(), s3URL(endpoint, "nosuch", "p"), Options{})
	if err == nil {
		t.Fatal("Open of a missing bucket succeeded")
	}
	want := "bucket nosuch does not exist at endpoint " + endpoint + ": create it or fix --store"
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not say %q", err, want)
	}
}

func TestS3UnknownParameter(t *testing.T) {
	endpoint, _ := fakeS3(t, "backups")
	_, err := Open(context.Background(), s3URL(endpoint, "backups", "")+"&bogus=1", Options{})
	if err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Fatalf("Open with an unknown parameter: %v", err)
	}
}

func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name, url, want string
	}{
		{"unknown scheme", "ftp://host/x", `unknown scheme "ftp": use one of file://, mem://, s3://, gs://, azblob://`},
		{"no scheme", "/var/backups", "has no scheme: use one of file://, mem://, s3://, gs://, azblob://, e.g. file:///var/backups"},
		{"file with host", "file://host/dir", "file URLs take a path, not a host"},
		{"file without dir", "file://", "names no directory"},
		{"s3 without bucket", "s3:///prefix", "names no bucket"},
		{"prefix as parameter", "s3://b?prefix=x", "put the key prefix in the path"},
		{"mem parameter", "mem://x?nomd5", "take no query parameters"},
		{"secret in error", "ftp://user:hunter2@host/x?token=hunter2", "ftp://host/x?token=REDACTED"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Open(ctx, tc.url, Options{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Open(%s) = %v, want an error containing %q", tc.url, err, tc.want)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("error leaks a secret: %v", err)
			}
		})
	}
}

func TestFileStoreUnwritableDir(t *testing.T) {
	if os.Geteuid() == 0 {
		// root ignores permissions; use a file where the directory should be.
		f := filepath.Join(t.TempDir(), "file")
		os.WriteFile(f, nil, 0o600)
		_, err := Open(context.Background(), "file://"+f+"/sub", Options{Create: true})
		if err == nil || !strings.Contains(err.Error(), "cannot create directory") {
			t.Fatalf("Open under a file: %v", err)
		}
		return
	}
	d := t.TempDir()
	os.Chmod(d, 0o500)
	_, err := Open(context.Background(), "file://"+d+"/sub", Options{Create: true})
	if err == nil || !strings.Contains(err.Error(), "cannot create directory") {
		t.Fatalf("Open in a read-only dir: %v", err)
	}
}

func TestString(t *testing.T) {
	s := openT(t, "mem://str-test/p")
	if s.String() != "mem://str-test/p" {
		t.Errorf("String() = %q", s.String())
	}
	u := "s3://user:pw@bkt/p?endpoint=http://x&secret_access_key=pw&region=r"
	got := redactRaw(u)
	if strings.Contains(got, "pw") || !strings.Contains(got, "bkt/p") || !strings.Contains(got, "region=r") {
		t.Errorf("redact(%s) = %s", u, got)
	}
}

// TestRedactMalformedQuery: secrets in URLs the standard parser half-understands stay out of
// errors: a pair url.ParseQuery drops for a bad escape, a parameter glued to what precedes
// it, a "?" inside the password of an unparseable URL, and a scheme in upper case.
func TestRedactMalformedQuery(t *testing.T) {
	for _, tc := range []struct{ raw, secret string }{
		{"aZblob://:p@container?sig=%0XSECRETVALUE", "SECRETVALUE"},
		{"ftp://h/x?a=%zz&sig=SECRETVALUE", "SECRETVALUE"},
		{"ftp://h?://0?sig=SECRETVALUE", "SECRETVALUE"},
		{"ftp://h/x?%zz=SECRETVALUE", "SECRETVALUE"},
		{"s3://u:pa?ss=SECRETVALUE@b%zz", "SECRETVALUE"},
		{"FTP://u:SECRETVALUE@h/x", "SECRETVALUE"},
	} {
		_, err := Open(context.Background(), tc.raw, Options{})
		if err == nil {
			t.Fatalf("Open(%q) succeeded", tc.raw)
		}
		if strings.Contains(err.Error(), tc.secret) {
			t.Errorf("Open(%q) error holds the secret: %v", tc.raw, err)
		}
	}
}
