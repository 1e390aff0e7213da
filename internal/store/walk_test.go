package store

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"sync/atomic"
	"testing"
)

// TestWalkStreams: Walk gives every object in key order, one page (S3) or window (file://)
// at a time, without reading the whole listing first. The proof is behavioural: an object
// written while the walk is under way, with a key that sorts after everything, is seen by
// the walk (a listing read in full before the first callback cannot hold it), and a walk
// stopped after the first object asked S3 for one page only.
func TestWalkStreams(t *testing.T) {
	const n = 2500 // S3: three pages of 1000
	var lists atomic.Int64
	endpoint, be := fakeS3Seeing(t, func(r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Query().Get("list-type") == "2" {
			lists.Add(1)
		}
	}, "bucket")
	defer func(w int) { fileWindow = w }(fileWindow)
	fileWindow = 300 // file://: nine windows of n names
	ctx := context.Background()
	dir := t.TempDir()
	for _, tc := range []struct {
		name, url string
		put       func(key string)
	}{
		{"file", "file://" + dir, func(key string) {
			p := filepath.Join(dir, "p", filepath.FromSlash(key))
			if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"s3", "s3://bucket?endpoint=" + endpoint + "&use_path_style=true&region=us-east-1", func(key string) {
			if _, err := be.PutObject("bucket", "p/"+key, map[string]string{}, bytes.NewReader([]byte("x")), 1, nil); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var want []string
			for i := range n {
				k := fmt.Sprintf("v1/d/%06d", i)
				tc.put(k)
				want = append(want, k)
			}
			tc.put("other/x")                                        // outside the prefix
			s, err := Open(ctx, urlWithPath(tc.url, "p"), Options{}) // the prefix p/ is the store's path
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()

			late := "v1/d/zzz-written-during-the-walk"
			var got []string
			lists.Store(0)
			err = s.Walk(ctx, "v1/", func(o ObjectInfo) error {
				if len(got) == 0 {
					tc.put(late)
				}
				if o.Size != 1 {
					return fmt.Errorf("%s: size %d, want 1", o.Key, o.Size)
				}
				got = append(got, o.Key)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, late)
			if !sort.StringsAreSorted(got) || len(got) != len(want) || got[0] != want[0] || got[len(got)-1] != late {
				t.Fatalf("walk gave %d keys (sorted: %v), first %q, last %q; want %d from %q to %q: a walk that read the whole listing first misses the key written during it",
					len(got), sort.StringsAreSorted(got), got[0], got[len(got)-1], len(want), want[0], late)
			}
			if tc.name == "s3" && lists.Load() != 3 {
				t.Fatalf("%d ListObjectsV2 requests for %d keys, want 3 pages of 1000", lists.Load(), len(want))
			}

			// Stopping early stops the listing.
			lists.Store(0)
			stop := fmt.Errorf("stop")
			count := 0
			err = s.Walk(ctx, "v1/", func(ObjectInfo) error {
				count++
				if count == 10 {
					return stop
				}
				return nil
			})
			if err != stop || count != 10 {
				t.Fatalf("walk stopped by its callback: %v after %d objects, want the callback's error after 10", err, count)
			}
			if tc.name == "s3" && lists.Load() != 1 {
				t.Fatalf("a walk stopped after 10 objects made %d ListObjectsV2 requests, want 1", lists.Load())
			}
		})
	}
}

func urlWithPath(u, path string) string {
	if u[:7] == "file://" {
		return u + "/" + path
	}
	// s3://bucket?query -> s3://bucket/path?query
	for i := range len(u) {
		if u[i] == '?' {
			return u[:i] + "/" + path + u[i:]
		}
	}
	return u + "/" + path
}
