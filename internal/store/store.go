// Package store is Steward's object store: one small interface over
// gocloud.dev/blob URLs, used by backups and restores.
//
// Supported URLs (the path after the bucket is a key prefix):
//
//	file:///var/backups/etcd          a local directory (created if missing only by writers: Options.Create)
//	file://./relative/dir             a directory relative to the working directory
//	mem://name/prefix                 in-process memory, shared by every Open of "mem://name"
//	                                  for the life of the process ("mem://" alone is private)
//	s3://bucket/prefix?region=eu-west-1
//	s3://bucket/prefix?endpoint=http://127.0.0.1:9000&use_path_style=true&region=us-east-1
//	gs://bucket/prefix
//	azblob://container/prefix
//
// Credentials come the standard way for each cloud (gocloud's defaults):
// AWS environment variables, shared config/credentials files and instance
// roles; Google application default credentials; the AZURE_STORAGE_*
// environment variables or Azure default credentials. Or, with
// Options.CredentialsDir, from a directory of files named like the variables (a mounted
// Secret), and from nowhere else:
//
//	s3://      AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, optional AWS_SESSION_TOKEN and
//	           AWS_REGION or AWS_DEFAULT_REGION (the URL's region= comes first)
//	azblob://  AZURE_STORAGE_ACCOUNT (or the URL's storage_account=), with AZURE_STORAGE_KEY
//	           (a shared key) or AZURE_STORAGE_SAS_TOKEN
//	gs://      GOOGLE_APPLICATION_CREDENTIALS, holding the service-account key file's JSON
//
// The files are read again while the store is open (S3 keys every 30 s, the others at every
// request), so rotated credentials reach an open store without reopening it.
//
// Writes are atomic: an object becomes visible only when Writer.Close
// succeeds, and an aborted or failed write leaves nothing behind.
package store

import (
	"bufio"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/azureblob" // registers azblob://
	"gocloud.dev/blob/fileblob"
	_ "gocloud.dev/blob/gcsblob" // registers gs://
	"gocloud.dev/blob/memblob"
	_ "gocloud.dev/blob/s3blob" // registers s3://
	"gocloud.dev/gcerrors"

	"github.com/etcd-steward/steward/internal/seal"
)

// ErrNotFound is wrapped by errors for objects that do not exist.
var ErrNotFound = errors.New("object not found")

// Schemes lists the URL schemes Open understands.
var Schemes = []string{"file", "mem", "s3", "gs", "azblob"}

// ObjectInfo describes one stored object. Key is relative to the store's prefix.
type ObjectInfo struct {
	Key     string
	Size    int64
	ModTime time.Time
}

// Store is an open object store. It is safe for concurrent use.
type Store struct {
	bucket  *blob.Bucket
	scheme  string
	display string // URL without secrets
	what    string // "bucket X", for error messages
	where   string // "endpoint Y", for error messages
	dir     string // file:// only: the directory, for fsync
	creds   credentialsDir
	keys    atomic.Pointer[seal.Keyring]
}

// Options are how Open opens a store.
type Options struct {
	// Keys encrypt the store's backup objects (nil: not encrypted; see SetKeys).
	Keys *seal.Keyring
	// CredentialsDir, if set, holds a cloud store's credentials (see the package comment): no
	// other credentials are used. Empty: the cloud's default credentials.
	CredentialsDir string
	// Create makes a file:// store's directory when it is missing. Only writers of backups
	// set it: a reader of a store that does not exist (a mistyped URL) gets an error, and
	// leaves no directory behind.
	Create bool
}

// SetKeys makes backup objects written to s from now on encrypted with keys, and objects read
// from it decrypted with them (see backup.NewObjectReader).
func (s *Store) SetKeys(keys *seal.Keyring) { s.keys.Store(keys) }

// Keys returns the keys set with SetKeys, or nil: objects are not encrypted.
func (s *Store) Keys() *seal.Keyring { return s.keys.Load() }

// Open opens the store at rawURL. It checks that the bucket (or directory)
// is reachable, so a wrong URL or missing credentials fail here rather than
// at the first backup.
func Open(ctx context.Context, rawURL string, o Options) (*Store, error) {
	u, err := checkURL(rawURL)
	if err != nil {
		return nil, err
	}
	s := &Store{scheme: u.Scheme, display: redact(u)}
	switch u.Scheme {
	case "file":
		err = s.openFile(u, o.Create)
	case "mem":
		err = s.openMem(u)
	default: // s3, gs, azblob
		err = s.openCloud(ctx, u, credentialsDir(o.CredentialsDir))
	}
	if err != nil {
		return nil, err
	}
	if err := s.probe(ctx); err != nil {
		s.Close()
		return nil, err
	}
	s.SetKeys(o.Keys)
	return s, nil
}

// CheckURL says why rawURL is not a store URL Open understands (not a URL, or a scheme not
// of Schemes), or nil. It opens nothing: the store may still be unreachable.
func CheckURL(rawURL string) error {
	_, err := checkURL(rawURL)
	return err
}

func checkURL(rawURL string) (*url.URL, error) {
	u, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	if u.Scheme == "" {
		return nil, fmt.Errorf("store URL %q has no scheme: use one of %s, e.g. file://%s", redactRaw(rawURL), schemeList(), absHint(rawURL))
	}
	if !slices.Contains(Schemes, u.Scheme) {
		return nil, fmt.Errorf("store URL %s: unknown scheme %q: use one of %s", redact(u), u.Scheme, schemeList())
	}
	return u, nil
}

// parseURL parses a store URL. Its error never holds the URL's credentials: url.Parse's own
// error quotes the whole URL, so only its reason is kept.
func parseURL(rawURL string) (*url.URL, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("store URL %q is not a valid URL: %w", redactRaw(rawURL), err)
	}
	return u, nil
}

func (s *Store) openFile(u *url.URL, create bool) error {
	if u.Host != "" && u.Host != "." && u.Host != "localhost" {
		return fmt.Errorf("store URL %s: file URLs take a path, not a host %q: write file:///abs/dir or file://./rel/dir", s.display, u.Host)
	}
	if len(u.Query()) > 0 {
		return fmt.Errorf("store URL %s: file URLs take no query parameters: remove them", s.display)
	}
	dir := u.Path
	if u.Host == "." {
		dir = "./" + strings.TrimPrefix(dir, "/")
	}
	if dir == "" {
		return fmt.Errorf("store URL %s names no directory: write file:///abs/dir or file://./rel/dir", s.display)
	}
	dir = filepath.FromSlash(dir)
	s.what, s.where = "directory "+dir, "this machine"
	if !create {
		if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
			return s.missing(err)
		}
	}
	// A full snapshot holds every key (for a Kubernetes control plane, every Secret): only
	// this user may read the store. Existing directories keep the mode they have.
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("store URL %s: cannot create directory %s: %w: fix its permissions or choose another --store", s.display, dir, err)
	}
	b, err := fileblob.OpenBucket(dir, &fileblob.Options{
		// Temporary files next to the target, so the final rename never
		// crosses file systems; no .attrs side files, we keep no metadata.
		NoTempDir:   true,
		Metadata:    fileblob.MetadataDontWrite,
		DirFileMode: 0o700,
	})
	if err != nil {
		return fmt.Errorf("store URL %s: cannot open directory %s: %w", s.display, dir, err)
	}
	s.bucket, s.dir = b, dir
	return nil
}

var (
	memMu      sync.Mutex
	memBuckets = map[string]*blob.Bucket{}
)

func (s *Store) openMem(u *url.URL) error {
	if len(u.Query()) > 0 {
		return fmt.Errorf("store URL %s: mem URLs take no query parameters: remove them", s.display)
	}
	s.what, s.where = "in-memory store "+s.display, "this process"
	prefix := keyPrefix(u.Path)
	if u.Host == "" {
		b := memblob.OpenBucket(nil)
		if prefix != "" {
			b = blob.PrefixedBucket(b, prefix)
		}
		s.bucket = b
		return nil
	}
	memMu.Lock()
	defer memMu.Unlock()
	base, ok := memBuckets[u.Host]
	if !ok {
		base = memblob.OpenBucket(nil)
		memBuckets[u.Host] = base
	}
	// PrefixedBucket makes a new handle over the same data; the shared base
	// handle is never used directly, so marking it closed does no harm.
	s.bucket = blob.PrefixedBucket(base, prefix)
	return nil
}

func (s *Store) openCloud(ctx context.Context, u *url.URL, creds credentialsDir) error {
	if u.Host == "" {
		return fmt.Errorf("store URL %s names no bucket: write %s://BUCKET/optional/prefix", s.display, u.Scheme)
	}
	q := u.Query()
	if q.Get("prefix") != "" {
		return fmt.Errorf("store URL %s: put the key prefix in the path (%s://%s/PREFIX), not in ?prefix=", s.display, u.Scheme, u.Host)
	}
	if creds != "" {
		if err := creds.settings(u.Scheme, q); err != nil {
			return fmt.Errorf("store URL %s: %w", s.display, err)
		}
	}
	s.creds = creds
	s.what, s.where = describeBucket(u, q)
	if u.Scheme == "s3" && q.Get("endpoint") != "" && q.Get("region") == "" &&
		os.Getenv("AWS_REGION") == "" && os.Getenv("AWS_DEFAULT_REGION") == "" {
		// S3-compatible stores still need a signing region; almost all accept this one.
		q.Set("region", "us-east-1")
	}
	if u.Scheme == "s3" && q.Get("endpoint") != "" && q.Get("response_checksum_validation") == "" {
		// Uploads carry the SDK's checksum (CRC-32 of every part; request_checksum_calculation
		// stays when_supported), so the store refuses an upload damaged on the way. Many
		// S3-compatible stores omit checksums in their responses, and the SDK then logs on
		// every read: objects carry their own SHA-256, checked on every read, so responses are
		// checked only where S3 requires it.
		q.Set("response_checksum_validation", "when_required")
	}
	bu := &url.URL{Scheme: u.Scheme, Host: u.Host, RawQuery: q.Encode()}
	var b *blob.Bucket
	var err error
	if creds != "" {
		b, err = openCloudWithCredentials(ctx, bu, creds)
	} else {
		b, err = blob.OpenBucket(ctx, bu.String())
	}
	if err != nil {
		// The driver's error quotes the URL it was given, secrets and all.
		return fmt.Errorf("store URL %s: cannot open %s at %s: %w: %s", s.display, s.what, s.where, redactedError(err, bu), s.credentialHint())
	}
	if p := keyPrefix(u.Path); p != "" {
		b = blob.PrefixedBucket(b, p)
	}
	s.bucket = b
	return nil
}

// probe lists one object so that a missing bucket or bad credentials are
// reported at Open, with what to do about them.
func (s *Store) probe(ctx context.Context) error {
	var err error
	code := gcerrors.Unknown
	if s.dir != "" {
		code, err = probeDir(s.dir)
	} else if _, _, err = s.bucket.ListPage(ctx, blob.FirstPageToken, 1, nil); err != nil {
		code = gcerrors.Code(err)
	}
	if err == nil {
		return nil
	}
	switch code {
	case gcerrors.NotFound:
		return s.missing(err)
	case gcerrors.PermissionDenied:
		return fmt.Errorf("access to %s at %s denied: %s (%s): %w", s.what, s.where, s.credentialHint(), s.display, err)
	}
	return fmt.Errorf("cannot reach %s at %s (%s): check the URL, the network and %s: %w", s.what, s.where, s.display, s.credentialHint(), err)
}

// missing is the error for a store whose bucket or directory does not exist.
func (s *Store) missing(err error) error {
	return fmt.Errorf("%s does not exist at %s: create it or fix --store (%s): %w", s.what, s.where, s.display, err)
}

// probeDir reads one name of a file:// store's directory. (A listing of one key through the
// bucket would not do: fileblob walks and stats the whole tree, and holds every name, before
// it returns the first.) It says what kind of error it met as a bucket would.
func probeDir(dir string) (gcerrors.ErrorCode, error) {
	f, err := os.Open(dir)
	if err == nil {
		_, err = f.ReadDir(1)
		f.Close()
		if errors.Is(err, io.EOF) {
			err = nil
		}
	}
	switch {
	case err == nil:
		return gcerrors.OK, nil
	case errors.Is(err, fs.ErrNotExist):
		return gcerrors.NotFound, err
	case errors.Is(err, fs.ErrPermission):
		return gcerrors.PermissionDenied, err
	}
	return gcerrors.Unknown, err
}

// String returns the store URL without credentials.
func (s *Store) String() string { return s.display }

// Close releases the store's resources. Open writers and readers must be
// closed first.
func (s *Store) Close() error {
	if s.bucket == nil {
		return nil
	}
	err := s.bucket.Close()
	s.bucket = nil
	if err != nil {
		return fmt.Errorf("close store %s: %w", s.display, err)
	}
	return nil
}

// Writer streams one object into the store. Nothing is visible under the
// key until Close returns nil; Abort (or any failed Write) discards it.
type Writer struct {
	s      *Store
	key    string
	w      *blob.Writer
	cancel context.CancelFunc
	file   *os.File      // file:// only: synced before the rename
	buf    *bufio.Writer // file:// only: gathers small writes into large ones
	err    error         // first write error; Close then aborts
	done   bool
}

// fileWriteBuffer is the write size into a file:// store. Backup objects arrive in
// compressed blocks of tens of KiB; each write(2) to a file costs a fixed amount besides
// the copy (locks, timestamps), so fewer, larger writes spend less of the node's CPU.
const fileWriteBuffer = 256 << 10

// NewWriter starts writing the object at key. The caller must call Close
// (to commit) or Abort (to discard). Cancelling ctx also aborts the write.
func (s *Store) NewWriter(ctx context.Context, key string) (*Writer, error) {
	if err := checkKey(key); err != nil {
		return nil, fmt.Errorf("write to %s: %w", s.display, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &Writer{s: s, key: key, cancel: cancel}
	opts := &blob.WriterOptions{
		// A fixed content type skips content sniffing (which buffers) and
		// makes the driver writer exist before the first byte.
		ContentType: "application/octet-stream",
		// Two parts in flight bound upload memory (S3: 8 MiB parts, up to an
		// 80 GiB object) while keeping the pipe busy.
		MaxConcurrency: 2,
	}
	if s.dir != "" {
		opts.BeforeWrite = func(as func(any) bool) error {
			var f *os.File
			if as(&f) {
				w.file = f
				// fileblob creates the file 0666 (less the umask); nothing is in it yet.
				if err := f.Chmod(0o600); err != nil {
					return fmt.Errorf("restrict the permissions of %s: %w", f.Name(), err)
				}
			}
			return nil
		}
	}
	bw, err := s.bucket.NewWriter(ctx, key, opts)
	if err != nil {
		cancel()
		return nil, s.opError("start writing", key, err)
	}
	w.w = bw
	if s.dir != "" {
		w.buf = bufio.NewWriterSize(bw, fileWriteBuffer)
	}
	return w, nil
}

// Write writes p to the object.
func (w *Writer) Write(p []byte) (int, error) {
	if w.done {
		return 0, fmt.Errorf("write %s in %s: writer already closed", w.key, w.s.display)
	}
	if w.err != nil {
		return 0, w.err
	}
	var n int
	var err error
	if w.buf != nil {
		n, err = w.buf.Write(p)
	} else {
		n, err = w.w.Write(p)
	}
	if err != nil {
		w.err = w.s.opError("write", w.key, err)
		return n, w.err
	}
	return n, nil
}

// Close commits the object. If any Write failed, Close discards the object
// and returns that error.
func (w *Writer) Close() error {
	if w.done {
		return nil
	}
	if w.err != nil {
		w.Abort()
		return w.err
	}
	w.done = true
	defer w.cancel()
	if w.buf != nil {
		if err := w.buf.Flush(); err != nil {
			w.cancel()
			_ = w.w.Close()
			return w.s.opError("write", w.key, err)
		}
	}
	if w.file != nil {
		// fileblob renames without fsync; a backup that vanishes on power
		// loss is not a backup.
		if err := w.file.Sync(); err != nil {
			w.cancel()
			_ = w.w.Close()
			return fmt.Errorf("write %s in %s: fsync: %w: check the disk", w.key, w.s.display, err)
		}
	}
	if err := w.w.Close(); err != nil {
		return w.s.opError("finish writing", w.key, err)
	}
	if w.s.dir != "" {
		syncDir(filepath.Dir(filepath.Join(w.s.dir, filepath.FromSlash(w.key))))
	}
	return nil
}

// Abort discards the object. It is safe to call after Close (then it does
// nothing) and more than once.
func (w *Writer) Abort() {
	if w.done {
		return
	}
	w.done = true
	w.cancel() // a cancelled context makes every driver drop the upload
	_ = w.w.Close()
}

// Reader streams one object out of the store.
type Reader struct {
	r   *blob.Reader
	key string
	s   *Store
}

// NewReader opens the object at key. A missing object gives an error that
// wraps ErrNotFound.
func (s *Store) NewReader(ctx context.Context, key string) (*Reader, error) {
	return s.NewRangeReader(ctx, key, 0, -1)
}

// NewRangeReader opens length bytes of the object at key from offset on (length < 0: to the
// end).
func (s *Store) NewRangeReader(ctx context.Context, key string, offset, length int64) (*Reader, error) {
	if err := checkKey(key); err != nil {
		return nil, fmt.Errorf("read from %s: %w", s.display, err)
	}
	r, err := s.bucket.NewRangeReader(ctx, key, offset, length, nil)
	if err != nil {
		return nil, s.opError("open", key, err)
	}
	return &Reader{r: r, key: key, s: s}, nil
}

func (r *Reader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		err = r.s.opError("read", r.key, err)
	}
	return n, err
}

// Close releases the reader.
func (r *Reader) Close() error { return r.r.Close() }

// Size is the object's size in bytes.
func (r *Reader) Size() int64 { return r.r.Size() }

// ModTime is when the object was last written.
func (r *Reader) ModTime() time.Time { return r.r.ModTime() }

// List returns every object whose key starts with prefix, sorted by key. It holds the whole
// listing: for listings that may be large (a backup store holds one delta per few seconds),
// use Walk or All, which stream.
func (s *Store) List(ctx context.Context, prefix string) ([]ObjectInfo, error) {
	var out []ObjectInfo
	err := s.Walk(ctx, prefix, func(o ObjectInfo) error {
		out = append(out, o)
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// ListPageSize is how many keys one listing request asks for: S3's ListObjectsV2 returns at
// most 1000 a page, and Walk holds no more than one page.
const ListPageSize = 1000

// Walk calls fn for every object whose key starts with prefix, in key order, and stops at
// fn's first error, which it returns. It streams: memory holds one page of the listing
// (ListPageSize keys; for file:// stores a window of fileWindow names of one directory), never
// the whole of it, however many objects the store holds.
//
// The order is the store's: byte order of the keys for object stores; for file:// stores the
// order of a walk of the directories with each directory's names in byte order, which is key
// order unless a file's name sorts between a directory's name and that name plus "/" (no key
// Steward writes does).
func (s *Store) Walk(ctx context.Context, prefix string, fn func(ObjectInfo) error) error {
	for o, err := range s.All(ctx, prefix) {
		if err != nil {
			return err
		}
		if err := fn(o); err != nil {
			return err
		}
	}
	return nil
}

// All is Walk as an iterator: each object whose key starts with prefix, or a final error.
func (s *Store) All(ctx context.Context, prefix string) iter.Seq2[ObjectInfo, error] {
	return func(yield func(ObjectInfo, error) bool) {
		var err error
		if s.dir != "" {
			_, err = s.walkFileDir(ctx, dirOf(prefix), prefix, func(o ObjectInfo) bool { return yield(o, nil) })
		} else {
			err = s.walkPages(ctx, prefix, func(o ObjectInfo) bool { return yield(o, nil) })
		}
		if err != nil {
			yield(ObjectInfo{}, err)
		}
	}
}

// walkPages lists an object store page by page (S3: one ListObjectsV2 request a page).
func (s *Store) walkPages(ctx context.Context, prefix string, yield func(ObjectInfo) bool) error {
	token := blob.FirstPageToken
	for {
		page, next, err := s.bucket.ListPage(ctx, token, ListPageSize, &blob.ListOptions{Prefix: prefix})
		if err != nil {
			return s.opError("list", prefix+"*", err)
		}
		for _, o := range page {
			if o.IsDir {
				continue
			}
			if !yield(ObjectInfo{Key: o.Key, Size: o.Size, ModTime: o.ModTime}) {
				return nil
			}
		}
		if len(next) == 0 {
			return nil
		}
		token = next
	}
}

// dirOf is the directory part of a key prefix: "v1/timeline/" for "v1/timeline/00", "" for "v1".
func dirOf(prefix string) string {
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		return prefix[:i+1]
	}
	return ""
}

// fileWindow is how many names of one directory a file:// listing holds at a time. A
// directory's entries come from the kernel in no order; a walk reads the directory once per
// window and keeps the fileWindow smallest names after the last one it gave out, so a
// directory of n names costs n/fileWindow reads of its names (no stat: names only) and memory
// for fileWindow names (a few MiB), whatever n is.
var fileWindow = 1 << 16

// walkFileDir lists the objects of a file:// store under the directory of key dirKey ("" is
// the root, else it ends in "/") whose keys start with prefix, in name order, window by
// window. fileblob's own listing reads and stats every file of the tree for each page of
// 1000, which at 500k objects is hours; this reads each directory's names once per window
// and stats only what it gives out. cont is false when yield asked to stop.
func (s *Store) walkFileDir(ctx context.Context, dirKey, prefix string, yield func(ObjectInfo) bool) (cont bool, err error) {
	path := filepath.Join(s.dir, filepath.FromSlash(dirKey))
	after, first := "", true
	for {
		if err := ctx.Err(); err != nil {
			return false, s.opError("list", prefix+"*", err)
		}
		names, more, err := sortedWindow(path, after, first, fileWindow)
		if err != nil {
			return false, s.opError("list", prefix+"*", err)
		}
		for _, name := range names {
			key := dirKey + name
			// Names that cannot lead to the prefix need no stat.
			if !strings.HasPrefix(key, prefix) && !strings.HasPrefix(prefix, key+"/") && !strings.HasPrefix(key+"/", prefix) {
				continue
			}
			fi, err := os.Lstat(filepath.Join(path, name))
			if errors.Is(err, fs.ErrNotExist) {
				continue // deleted since the directory was read
			}
			if err != nil {
				return false, s.opError("list", key, err)
			}
			if fi.IsDir() {
				if cont, err := s.walkFileDir(ctx, key+"/", prefix, yield); !cont || err != nil {
					return cont, err
				}
				continue
			}
			if !strings.HasPrefix(key, prefix) || fileTempRE.MatchString(key) || strings.HasSuffix(key, ".attrs") || !fi.Mode().IsRegular() {
				continue
			}
			if !yield(ObjectInfo{Key: key, Size: fi.Size(), ModTime: fi.ModTime()}) {
				return false, nil
			}
		}
		if !more {
			return true, nil
		}
		after, first = names[len(names)-1], false
	}
}

// sortedWindow reads the names in directory path and returns, in byte order, its (at most) n
// smallest names after after (all names if first), and whether more follow. A missing
// directory holds no names.
func sortedWindow(path, after string, first bool, n int) (names []string, more bool, err error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	h := &nameHeap{}
	for {
		batch, err := f.Readdirnames(1024)
		for _, name := range batch {
			if !first && name <= after {
				continue
			}
			if h.Len() == n {
				more = true
				if name >= (*h)[0] {
					continue
				}
				// A copy: the names of one read may share one allocation, which a name kept
				// from each read would pin, the whole directory's names in the end.
				(*h)[0] = strings.Clone(name)
				heap.Fix(h, 0)
				continue
			}
			heap.Push(h, strings.Clone(name))
		}
		if err == io.EOF || (err == nil && len(batch) == 0) {
			break
		}
		if err != nil {
			return nil, false, err
		}
	}
	names = []string(*h)
	sort.Strings(names)
	return names, more, nil
}

// nameHeap is a max-heap of names: the window's largest is at the top, to be replaced by a
// smaller one.
type nameHeap []string

func (h nameHeap) Len() int           { return len(h) }
func (h nameHeap) Less(i, j int) bool { return h[i] > h[j] }
func (h nameHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *nameHeap) Push(x any)        { *h = append(*h, x.(string)) }
func (h *nameHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// fileTempRE matches fileblob's in-flight temporary files ("<key>.<hex nanos>.tmp").
var fileTempRE = regexp.MustCompile(`\.[0-9a-f]+\.tmp$`)

// Stat returns the object's size and modification time.
func (s *Store) Stat(ctx context.Context, key string) (ObjectInfo, error) {
	a, err := s.bucket.Attributes(ctx, key)
	if err != nil {
		return ObjectInfo{}, s.opError("stat", key, err)
	}
	return ObjectInfo{Key: key, Size: a.Size, ModTime: a.ModTime}, nil
}

// Delete removes the object at key. Deleting a missing object is not an
// error, so retries and concurrent garbage collection are harmless.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := checkKey(key); err != nil {
		return fmt.Errorf("delete from %s: %w", s.display, err)
	}
	err := s.bucket.Delete(ctx, key)
	if err == nil || gcerrors.Code(err) == gcerrors.NotFound {
		return nil
	}
	return s.opError("delete", key, err)
}

// IsNotFound reports whether err says an object does not exist.
func IsNotFound(err error) bool {
	return errors.Is(err, ErrNotFound) || gcerrors.Code(err) == gcerrors.NotFound
}

func (s *Store) opError(op, key string, err error) error {
	switch gcerrors.Code(err) {
	case gcerrors.NotFound:
		return fmt.Errorf("%s object %s in %s: %w (%w)", op, key, s.display, ErrNotFound, err)
	case gcerrors.PermissionDenied:
		return fmt.Errorf("%s object %s in %s: access denied: %s: %w", op, key, s.display, s.credentialHint(), err)
	case gcerrors.Canceled, gcerrors.DeadlineExceeded:
		return fmt.Errorf("%s object %s in %s: %w", op, key, s.display, err)
	}
	return fmt.Errorf("%s object %s in %s: %w", op, key, s.display, err)
}

func checkKey(key string) error {
	switch {
	case key == "":
		return errors.New("empty object key")
	case !utf8.ValidString(key):
		return fmt.Errorf("object key %q is not valid UTF-8", key)
	case strings.HasPrefix(key, "/") || strings.HasSuffix(key, "/"):
		return fmt.Errorf("object key %q must not start or end with /", key)
	}
	for _, part := range strings.Split(key, "/") {
		if part == "" || part == "." || part == ".." {
			return fmt.Errorf("object key %q has an empty, . or .. path element", key)
		}
	}
	return nil
}

// keyPrefix turns a URL path into a key prefix ending in "/".
func keyPrefix(p string) string {
	p = strings.Trim(p, "/")
	if p == "" {
		return ""
	}
	return p + "/"
}

// describeBucket names the bucket and where it lives, for error messages.
// q is the URL's query as it is opened.
func describeBucket(u *url.URL, q url.Values) (what, where string) {
	switch u.Scheme {
	case "s3":
		what = "bucket " + u.Host
		if ep := q.Get("endpoint"); ep != "" {
			return what, "endpoint " + ep
		}
		if r := q.Get("region"); r != "" {
			return what, "AWS S3 (region " + r + ")"
		}
		return what, "AWS S3"
	case "gs":
		return "bucket " + u.Host, "Google Cloud Storage"
	case "azblob":
		acct := q.Get("storage_account")
		if acct == "" {
			acct = os.Getenv("AZURE_STORAGE_ACCOUNT")
		}
		if acct != "" {
			return "container " + u.Host, "Azure storage account " + acct
		}
		return "container " + u.Host, "Azure Blob Storage"
	}
	return "bucket " + u.Host, u.Scheme
}

func (s *Store) credentialHint() string {
	if s.creds != "" {
		return "check the credentials files in " + string(s.creds) + " and the bucket's permissions"
	}
	switch s.scheme {
	case "s3":
		return "check the AWS credentials (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, ~/.aws/credentials or the instance role) and the bucket policy"
	case "gs":
		return "check the Google credentials (GOOGLE_APPLICATION_CREDENTIALS or workload identity) and the bucket's IAM"
	case "azblob":
		return "check AZURE_STORAGE_ACCOUNT and AZURE_STORAGE_KEY, AZURE_STORAGE_SAS_TOKEN, AZURE_STORAGE_CONNECTION_STRING or the Azure identity"
	case "file":
		return "check the directory's permissions"
	}
	return "check the store URL"
}

var secretParam = regexp.MustCompile(`(?i)secret|token|password|passwd|signature|credential|^sig$|^sas|key$|access_?key`)

// redact renders u without user info and with secret-looking query values hidden.
func redact(u *url.URL) string {
	c := *u
	c.User = nil
	c.RawQuery = redactQuery(c.RawQuery)
	c.Fragment, c.RawFragment = "", "" // a store has no use for one; a "#" in user info starts it
	r := c.String()
	// User info that url.Parse did not take as such (a "/" in it) is left in the path: show
	// nothing before the last "@".
	if i := strings.LastIndex(r, "@"); i >= 0 {
		return c.Scheme + "://…" + r[i:]
	}
	return r
}

// redactQuery hides the value of every secret-looking parameter of a raw query, pair by
// pair: url.ParseQuery drops a pair it cannot unescape, so a key it cannot unescape is
// hidden too, and so is a key any word of which looks secret ("x?sig" glued to what
// precedes it).
func redactQuery(raw string) string {
	if raw == "" {
		return ""
	}
	pairs := strings.Split(raw, "&")
	for i, pair := range pairs {
		k, _, hasValue := strings.Cut(pair, "=")
		if !hasValue {
			continue
		}
		if key, err := url.QueryUnescape(k); err != nil || secretKey(key) {
			pairs[i] = k + "=REDACTED"
		}
	}
	return strings.Join(pairs, "&")
}

func secretKey(key string) bool {
	if secretParam.MatchString(key) {
		return true
	}
	words := strings.FieldsFunc(key, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_')
	})
	for _, w := range words {
		if secretParam.MatchString(w) {
			return true
		}
	}
	return false
}

// redactedError is err with the value of every secret-looking query parameter of u hidden
// wherever its message quotes it, as it is or escaped. It wraps err, so errors.Is and
// gcerrors.Code still see it.
func redactedError(err error, u *url.URL) error {
	msg := err.Error()
	for pair := range strings.SplitSeq(u.RawQuery, "&") {
		k, v, ok := strings.Cut(pair, "=")
		key, kerr := url.QueryUnescape(k)
		if !ok || v == "" || (kerr == nil && !secretKey(key)) {
			continue
		}
		plain, perr := url.QueryUnescape(v)
		if perr != nil {
			plain = v
		}
		for _, form := range []string{v, plain, url.QueryEscape(plain), url.PathEscape(plain)} {
			if form != "" {
				msg = strings.ReplaceAll(msg, form, "REDACTED")
			}
		}
	}
	if msg == err.Error() {
		return err
	}
	return &redacted{msg: msg, err: err}
}

type redacted struct {
	msg string
	err error
}

func (r *redacted) Error() string { return r.msg }
func (r *redacted) Unwrap() error { return r.err }

// Redact renders a store URL for errors, logs and status: no user info, and no value of a
// secret-looking query parameter.
func Redact(raw string) string { return redactRaw(raw) }

func redactRaw(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return redact(u)
	}
	// Unparseable: the user info ends at the last "@" (a password may hold one, and a "?"),
	// and no query is shown (its parameters cannot be told apart).
	prefix := ""
	if i := strings.LastIndex(raw, "@"); i >= 0 {
		prefix, raw = "…", raw[i:]
	}
	if i := strings.IndexByte(raw, '?'); i >= 0 {
		raw = raw[:i] + "?…"
	}
	return prefix + raw
}

// absHint is the example path for a store URL without a scheme: the path given, when it is
// a plain absolute path (nothing that could be user info).
func absHint(raw string) string {
	if strings.HasPrefix(raw, "/") && !strings.ContainsAny(raw, "@:?#") {
		return raw
	}
	return "/abs/dir"
}

func schemeList() string {
	parts := make([]string, len(Schemes))
	for i, s := range Schemes {
		parts[i] = s + "://"
	}
	return strings.Join(parts, ", ")
}

// syncDir makes a rename durable. Best effort: some file systems refuse.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
}
