// Command listing measures what listing a large backup store costs (issue 11, item 7:
// "Listing streams page by page. Memory stays flat at 500k objects"): peak RSS and time of
// reading the listing of -n delta objects (plus a few full snapshots), through the real S3
// wire protocol and through file://, the bounded way against main's way, in the same run.
//
//	go run ./bench/listing -n 500000 -rounds 3
//
// The store is filled once: a file:// directory of empty files named as the sidecar names
// them (the listing reads names, sizes and times only), and an S3 server (gofakes3, as the
// tests use, in a child process of its own so its memory does not count) filled in-process
// with the same keys. Each measurement is a child process that opens the store and reads the
// listing one way, then exits; its peak RSS is the kernel's (rusage maxrss):
//
//   - after: backup.ReadIndex, the bounded summary that placing a writer, `backup list`,
//     retention and restore planning read (store.Walk streams a page at a time: ListObjectsV2
//     pages of 1000 on S3, windows of sorted names on file://);
//   - before: main's way, reproduced: store.List of every key into a slice, then every key
//     parsed into a backup.Object and sorted into a Chain (backup.NewChain), all held at once;
//   - fileblob (file:// only, at -fileblob-n objects): main's file:// listing, gocloud's
//     fileblob, which walks and stats the whole tree (and opens an .attrs file per key) for
//     every page of 1000 keys: quadratic, so it is measured at a smaller size.
//
// Rounds alternate the order; ratios are medians of per-round ratios. The last line of
// output is the JSON result (see bench/internal/result).
package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/etcd-steward/steward/bench/internal/proc"
	"github.com/etcd-steward/steward/bench/internal/result"
	"github.com/etcd-steward/steward/internal/backup"
	"github.com/etcd-steward/steward/internal/store"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"gocloud.dev/blob"
	"gocloud.dev/blob/fileblob"
)

const (
	bucket = "backups"
	fulls  = 20 // full snapshots among the objects, spread over the revisions
)

func main() {
	n := flag.Int("n", 500000, "delta objects in the store")
	fileblobN := flag.Int("fileblob-n", 20000, "objects for the comparison with main's file:// listing (gocloud fileblob, quadratic); 0 skips it")
	rounds := flag.Int("rounds", 3, "rounds (alternating order)")
	dir := flag.String("dir", "", "work dir (default: a temporary one, removed at the end)")
	only := flag.String("stores", "s3,file", "stores to measure: s3, file or both")
	// Child modes.
	serveS3 := flag.Bool("serve-s3", false, "child: serve S3 holding -n objects, print the URL")
	list := flag.String("list", "", "child: read the listing of -store one way (after, before, fileblob) and print the count")
	storeURL := flag.String("store", "", "child: the store URL (fileblob: the directory)")
	flag.Parse()
	switch {
	case *serveS3:
		serve(*n)
		return
	case *list != "":
		if err := listOnce(*list, *storeURL); err != nil {
			log.Fatal(err)
		}
		return
	}
	if err := run(*n, *fileblobN, *rounds, *dir, *only); err != nil {
		log.Fatal(err)
	}
}

// keys are the names of n deltas of 10 revisions each on timeline 1, and of fulls full
// snapshots spread among them, in the sidecar's layout.
func keys(n int) []string {
	out := make([]string, 0, n+fulls)
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	for i := range fulls {
		rev := int64(1 + i*(n/fulls)*10)
		out = append(out, backup.FullKey(1, rev, start.Add(time.Duration(i)*time.Hour)))
	}
	for i := range n {
		first := int64(2 + i*10)
		out = append(out, backup.DeltaKey(1, first, first+9))
	}
	return out
}

func serve(n int) {
	be := s3mem.New()
	if err := be.CreateBucket(bucket); err != nil {
		log.Fatal(err)
	}
	for _, k := range keys(n) {
		if _, err := be.PutObject(bucket, "p/"+k, map[string]string{}, bytes.NewReader(nil), 0, nil); err != nil {
			log.Fatal(err)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("http://%s\n", l.Addr())
	log.Fatal(http.Serve(l, gofakes3.New(be).Server()))
}

// listOnce is one measurement, in a process of its own.
func listOnce(how, url string) error {
	ctx := context.Background()
	var count int
	switch how {
	case "after":
		s, err := store.Open(ctx, url, store.Options{})
		if err != nil {
			return err
		}
		ix, err := backup.ReadIndex(ctx, s)
		if err != nil {
			return err
		}
		for _, t := range ix.Timelines {
			count += t.Objects()
		}
	case "before":
		s, err := store.Open(ctx, url, store.Options{})
		if err != nil {
			return err
		}
		infos, err := s.List(ctx, backup.LayoutPrefix)
		if err != nil {
			return err
		}
		var objs []backup.Object
		for _, info := range infos {
			o, err := backup.ParseKey(info.Key)
			if err != nil {
				continue
			}
			o.Size, o.ModTime = info.Size, info.ModTime
			objs = append(objs, o)
		}
		c := backup.NewChain(objs)
		count = len(c.Fulls) + len(c.Deltas)
	case "fileblob":
		b, err := fileblob.OpenBucket(url, &fileblob.Options{Metadata: fileblob.MetadataDontWrite})
		if err != nil {
			return err
		}
		it := b.List(&blob.ListOptions{Prefix: backup.LayoutPrefix})
		var infos []store.ObjectInfo
		for {
			o, err := it.Next(ctx)
			if err == io.EOF {
				break
			}
			if err != nil {
				return err
			}
			infos = append(infos, store.ObjectInfo{Key: o.Key, Size: o.Size, ModTime: o.ModTime})
		}
		count = len(infos)
	default:
		return fmt.Errorf("unknown -list %q", how)
	}
	// The child's own high-water mark: rusage maxrss of a child also counts the parent's
	// memory at the fork (Linux carries the pre-exec mm's peak over), VmHWM is this
	// program's alone.
	hwm, _, err := proc.Memory(os.Getpid())
	if err != nil {
		return err
	}
	fmt.Println(count, hwm)
	return nil
}

type measure struct {
	rss     int64
	elapsed time.Duration
}

// child runs one measurement and checks that it saw every object.
func child(how, url string, want int) (measure, error) {
	cmd := exec.Command(os.Args[0], "-list", how, "-store", url)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return measure{}, fmt.Errorf("%s listing of %s: %v: %s", how, url, err, errb.String())
	}
	m := measure{elapsed: time.Since(start)}
	var got int
	if _, err := fmt.Sscan(out.String(), &got, &m.rss); err != nil || got != want {
		return measure{}, fmt.Errorf("%s listing of %s: output %q, want %d objects and the peak RSS (%v)", how, url, out.String(), want, err)
	}
	return m, nil
}

func fill(dir string, n int) error {
	done := filepath.Join(dir, fmt.Sprintf(".filled-%d", n))
	if _, err := os.Stat(done); err == nil {
		return nil // a kept -dir filled before
	}
	for _, k := range keys(n) {
		p := filepath.Join(dir, filepath.FromSlash(k))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			return err
		}
	}
	return os.WriteFile(done, nil, 0o600)
}

func run(n, fileblobN, rounds int, dir, only string) error {
	if dir == "" {
		d, err := os.MkdirTemp("", "steward-bench-listing-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	began := time.Now()
	want := n + fulls
	fileDir := filepath.Join(dir, "file")
	log.Printf("filling %s with %d objects", fileDir, want)
	if err := fill(fileDir, n); err != nil {
		return err
	}
	log.Printf("starting an S3 server holding %d objects", want)
	srv := exec.Command(os.Args[0], "-serve-s3", "-n", fmt.Sprint(n))
	srv.Stderr = os.Stderr
	pipe, err := srv.StdoutPipe()
	if err != nil {
		return err
	}
	if err := srv.Start(); err != nil {
		return err
	}
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	line, err := bufio.NewReader(pipe).ReadString('\n')
	if err != nil {
		return fmt.Errorf("the S3 server did not start: %w", err)
	}
	os.Setenv("AWS_ACCESS_KEY_ID", "steward")
	os.Setenv("AWS_SECRET_ACCESS_KEY", "steward-secret")
	os.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	s3URL := fmt.Sprintf("s3://%s/p?endpoint=%s&use_path_style=true&region=us-east-1", bucket, strings.TrimSpace(line))
	var stores []struct{ name, url string }
	if strings.Contains(only, "s3") {
		stores = append(stores, struct{ name, url string }{"S3", s3URL})
	}
	if strings.Contains(only, "file") {
		stores = append(stores, struct{ name, url string }{"file://", "file://" + fileDir})
	}

	res := result.Result{Benchmark: "listing", Title: fmt.Sprintf("Listing a backup store of %d objects: bounded (backup.ReadIndex) vs main's whole listing in memory", want),
		Params: map[string]any{"objects": want, "fullSnapshots": fulls, "rounds": rounds, "pageSize": store.ListPageSize}}
	for _, st := range stores {
		var rssR, timeR []float64
		var after, before []measure
		for r := range rounds {
			order := []string{"after", "before"}
			if r%2 == 1 {
				order = []string{"before", "after"}
			}
			got := map[string]measure{}
			for _, how := range order {
				m, err := child(how, st.url, want)
				if err != nil {
					return err
				}
				log.Printf("%s round %d %s: %.1f MiB peak RSS, %v", st.name, r+1, how, result.MiB(m.rss), m.elapsed.Round(time.Millisecond))
				got[how] = m
			}
			after, before = append(after, got["after"]), append(before, got["before"])
			rssR = append(rssR, float64(got["after"].rss)/float64(got["before"].rss))
			timeR = append(timeR, got["after"].elapsed.Seconds()/got["before"].elapsed.Seconds())
		}
		a, b := medianOf(after), medianOf(before)
		rs, ts := result.Summarise(rssR), result.Summarise(timeR)
		res.Rows = append(res.Rows,
			result.Compare("peak RSS listing "+st.name, "MiB", "backup.ReadIndex (streaming)", result.Round3(result.MiB(a.rss)), "main: whole listing + Chain", result.Round3(result.MiB(b.rss))).
				WithSpread("ratio %.2f–%.2f over %d rounds", rs.Min, rs.Max, rounds),
			result.Compare("time listing "+st.name, "s", "backup.ReadIndex (streaming)", result.Seconds(a.elapsed), "main: whole listing + Chain", result.Seconds(b.elapsed)).
				WithSpread("ratio %.2f–%.2f over %d rounds", ts.Min, ts.Max, rounds))
		res.Rows[len(res.Rows)-2].Ratio = rs.Median
		res.Rows[len(res.Rows)-1].Ratio = ts.Median
	}
	if fileblobN > 0 {
		small := filepath.Join(dir, "small")
		log.Printf("filling %s with %d objects", small, fileblobN+fulls)
		if err := fill(small, fileblobN); err != nil {
			return err
		}
		a, err := child("after", "file://"+small, fileblobN+fulls)
		if err != nil {
			return err
		}
		b, err := child("fileblob", small, fileblobN+fulls)
		if err != nil {
			return err
		}
		log.Printf("file:// %d objects: after %v, main's fileblob listing %v", fileblobN+fulls, a.elapsed, b.elapsed)
		res.Rows = append(res.Rows, result.Compare(fmt.Sprintf("time listing file:// (%d objects)", fileblobN+fulls), "s", "store.Walk (windows of sorted names)", result.Seconds(a.elapsed), "main: gocloud fileblob listing", result.Seconds(b.elapsed)))
	}
	res.Notes = append(res.Notes,
		fmt.Sprintf("%d deltas and %d full snapshots on one timeline, named as the sidecar names them; the file:// objects are empty files, the S3 objects empty objects in a gofakes3 server (its own process; the real S3 wire protocol through the AWS SDK).", n, fulls),
		"Each measurement is a fresh child process that opens the store, reads the listing and exits; peak RSS is its VmHWM, read by the child at its end (the Go runtime and the AWS SDK included; rusage maxrss of a child would also count the parent's memory at the fork).",
		"after: backup.ReadIndex, the bounded summary (every full snapshot; per timeline counts, ends and runs of the deltas) that placing a writer, backup list, retention and restore planning read; store.Walk holds one ListObjectsV2 page (1000 keys) on S3, a window of 65536 sorted names of one directory on file:// (read by name only, no stat; a directory of n names is read n/65536 times).",
		"before: main's way reproduced: every key in a slice (store.List), then every key parsed into a backup.Object and sorted into a Chain, all held at once.",
		"The file:// row at a smaller size compares with main's actual file:// listing, gocloud's fileblob, which walks and stats the whole tree and opens an .attrs file per key for every page of 1000 keys: quadratic in the number of objects.",
		fmt.Sprintf("Filling the stores took part of the %v run.", time.Since(began).Round(time.Second)))
	return res.Print(os.Stdout)
}

func medianOf(ms []measure) measure {
	rss := make([]int64, len(ms))
	el := make([]time.Duration, len(ms))
	for i, m := range ms {
		rss[i], el[i] = m.rss, m.elapsed
	}
	sort.Slice(rss, func(i, j int) bool { return rss[i] < rss[j] })
	sort.Slice(el, func(i, j int) bool { return el[i] < el[j] })
	return measure{rss: rss[len(rss)/2], elapsed: el[len(el)/2]}
}
