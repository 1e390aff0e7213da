package retention

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/backup"
	"github.com/etcd-steward/steward/internal/backup/backuptest"
	"github.com/etcd-steward/steward/internal/store"
)

// now is a Tuesday (ISO week 24 of 2025).
var now = time.Date(2025, 6, 10, 12, 30, 0, 0, time.UTC)

type f struct {
	rev int64
	age time.Duration
}

const (
	m = time.Minute
	h = time.Hour
	d = 24 * time.Hour
)

func chain(fulls []f, deltas [][2]int64) backup.Chain {
	var objs []backup.Object
	for _, x := range fulls {
		o, err := backup.ParseKey(backup.FullKey(1, x.rev, now.Add(-x.age)))
		if err != nil {
			panic(err)
		}
		objs = append(objs, o)
	}
	for _, r := range deltas {
		o, err := backup.ParseKey(backup.DeltaKey(1, r[0], r[1]))
		if err != nil {
			panic(err)
		}
		objs = append(objs, o)
	}
	return backup.NewChain(objs)
}

func names(objs []backup.Object) string {
	var parts []string
	for _, o := range objs {
		if o.Kind == backup.KindFull {
			parts = append(parts, fmt.Sprintf("F%d", o.FirstRev))
		} else {
			parts = append(parts, fmt.Sprintf("D%d-%d", o.FirstRev, o.LastRev))
		}
	}
	return strings.Join(parts, " ")
}

// every returns one full snapshot per step for span, newest first, with
// revisions growing with time.
func every(step, span time.Duration) []f {
	var out []f
	n := int64(span / step)
	for i := int64(0); i <= n; i++ {
		out = append(out, f{rev: 100000 - i, age: time.Duration(i) * step})
	}
	return out
}

func TestPlan(t *testing.T) {
	exp := Policy{Name: Exponential}
	for _, tc := range []struct {
		name   string
		policy Policy
		fulls  []f
		deltas [][2]int64
		want   string // deleted, oldest first
	}{
		{
			name: "exponential: everything of the last hour stays", policy: exp,
			fulls: []f{{1, 59 * m}, {2, 30 * m}, {3, 20 * m}, {4, 5 * m}},
			want:  "",
		},
		{
			// Every 15 minutes for 3 hours: the last hour whole, then the newest
			// of each clock hour (11:45 keeps hour 11, 10:45 hour 10, 9:45 hour 9).
			name: "exponential: newest per hour for a day", policy: exp,
			fulls: every(15*m, 3*h),
			want:  "F99988 F99990 F99991 F99992 F99994 F99995 F99996",
		},
		{
			// 10m (06-10), 25h and 30h (06-09), 49h and 50h (06-08), 6d1h (06-04),
			// 8d (06-02, week 23, whose newest is 06-08).
			name: "exponential: newest per day for a week", policy: exp,
			fulls: []f{{10, 8 * d}, {20, 6*d + h}, {30, 50 * h}, {40, 49 * h}, {50, 30 * h}, {60, 25 * h}, {70, 10 * m}},
			want:  "F10 F30 F50",
		},
		{
			// 8d = Mon 06-02 (week 23), 15d = Mon 05-26 (22), 16d = Sun 05-25 (21),
			// 22d = Mon 05-19 (21), 27d = Wed 05-14 (20), 29d and 60d are too old.
			name: "exponential: newest per week for four weeks", policy: exp,
			fulls: []f{{1, 60 * d}, {2, 29 * d}, {3, 27 * d}, {4, 22 * d}, {5, 16 * d}, {6, 15 * d}, {7, 8 * d}, {8, m}},
			want:  "F1 F2 F4",
		},
		{
			name: "exponential: the newest full snapshot stays however old", policy: exp,
			fulls:  []f{{1, 100 * d}, {2, 90 * d}},
			deltas: [][2]int64{{1, 2}, {2, 9}},
			want:   "F1 D1-2",
		},
		{
			name: "exponential: snapshots from the future stay", policy: exp,
			fulls: []f{{1, 40 * d}, {2, -h}},
			want:  "F1",
		},
		{
			// Full 100 goes; deltas wholly at or below 200 (the oldest kept) go;
			// the delta straddling 200 and all later ones stay.
			name: "deltas: kept from the oldest kept full snapshot on", policy: exp,
			fulls:  []f{{100, 40 * d}, {200, 2 * d}, {300, m}},
			deltas: [][2]int64{{50, 99}, {101, 150}, {151, 189}, {190, 200}, {195, 210}, {211, 300}, {301, 400}},
			want:   "D50-99 F100 D101-150 D151-189 D190-200",
		},
		{
			name: "deltas between kept full snapshots stay", policy: Policy{Name: Limit, Limit: 3},
			fulls:  []f{{100, 3 * d}, {200, 2 * d}, {300, d}},
			deltas: [][2]int64{{101, 200}, {201, 300}, {301, 310}},
			want:   "",
		},
		{
			name: "limit: the N newest full snapshots stay", policy: Policy{Name: Limit, Limit: 2},
			fulls:  []f{{100, 4 * m}, {200, 3 * m}, {300, 2 * m}, {400, m}},
			deltas: [][2]int64{{101, 200}, {201, 300}, {301, 400}, {401, 500}},
			want:   "F100 D101-200 F200 D201-300",
		},
		{
			name: "limit: fewer snapshots than the limit", policy: Policy{Name: Limit, Limit: 10},
			fulls:  []f{{100, 400 * d}, {200, 300 * d}},
			deltas: [][2]int64{{1, 99}, {101, 200}},
			want:   "D1-99",
		},
		{
			name: "limit 1: only the newest and what follows it", policy: Policy{Name: Limit, Limit: 1},
			fulls:  []f{{100, h}, {200, m}},
			deltas: [][2]int64{{101, 200}, {201, 250}},
			want:   "F100 D101-200",
		},
		{
			name: "limit ranks by revision, not by time", policy: Policy{Name: Limit, Limit: 1},
			fulls: []f{{100, m}, {200, h}},
			want:  "F100",
		},
		{
			// A restore to 30 days ago starts from F200, made 31 days ago.
			name: "age: every full snapshot within the age stays, and the newest made before it", policy: Policy{Name: Age, Age: 30 * d},
			fulls:  []f{{100, 40 * d}, {200, 31 * d}, {300, 29 * d}, {400, 2 * d}, {500, m}},
			deltas: [][2]int64{{50, 99}, {101, 200}, {201, 300}, {301, 400}, {401, 500}, {501, 600}},
			want:   "D50-99 F100 D101-200",
		},
		{
			// F200's name says 30 days ago to the second: it proves its revision from the
			// end of that second only, so a restore to 30 days ago starts from F100.
			name: "age: a full snapshot counts from the end of the second its name records", policy: Policy{Name: Age, Age: 30 * d},
			fulls:  []f{{100, 31 * d}, {200, 30 * d}},
			deltas: [][2]int64{{101, 200}},
			want:   "",
		},
		{
			name: "age: the newest full snapshot stays however old", policy: Policy{Name: Age, Age: h},
			fulls:  []f{{1, 100 * d}, {2, 90 * d}},
			deltas: [][2]int64{{1, 2}, {2, 9}},
			want:   "F1 D1-2",
		},
		{
			name: "keep: nothing is deleted", policy: Policy{Name: Keep},
			fulls:  []f{{100, 400 * d}, {200, 300 * d}},
			deltas: [][2]int64{{1, 99}, {101, 200}},
			want:   "",
		},
		{
			name: "no full snapshot: nothing is deleted", policy: Policy{Name: Limit, Limit: 1},
			deltas: [][2]int64{{1, 10}, {11, 20}},
			want:   "",
		},
		{
			name: "empty store", policy: exp,
			want: "",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := chain(tc.fulls, tc.deltas)
			del, err := Plan(c, tc.policy, now)
			if err != nil {
				t.Fatal(err)
			}
			if got := names(del); got != tc.want {
				t.Fatalf("Plan deletes\n got %q\nwant %q", got, tc.want)
			}
			// Whatever the policy: the newest full snapshot and all deltas
			// after it survive.
			if newest, ok := c.Newest(); ok {
				for _, o := range del {
					if o.Key == newest.Key || (o.Kind == backup.KindDelta && o.LastRev > newest.FirstRev) {
						t.Fatalf("Plan deletes %s", o)
					}
				}
			}
			// Pure: the same answer again.
			again, _ := Plan(c, tc.policy, now)
			if names(again) != names(del) {
				t.Fatal("Plan is not deterministic")
			}
		})
	}
}

func TestPlanKeepsRestorability(t *testing.T) {
	// Every revision from the oldest kept full snapshot on stays restorable.
	c := chain(every(20*m, 40*d), nil)
	var deltas []backup.Object
	for r := 100000 - int64(40*d/(20*m)); r < 100000; r++ {
		o, _ := backup.ParseKey(backup.DeltaKey(1, r+1, r+1))
		deltas = append(deltas, o)
	}
	c = backup.NewChain(append(c.Objects(), deltas...))
	kept := keptBy(t, c, Policy{Name: Exponential})
	// 3 in the last hour, then about one per hour, per day, per week.
	if n := len(kept.Fulls); n < 3+23 || n > 3+24+7+5 {
		t.Fatalf("kept %d full snapshots", n)
	}
	// By age: every point in time within the age, and nothing older than it needs.
	kept = keptBy(t, c, Policy{Name: Age, Age: 7 * d})
	if first := kept.Fulls[0].ProvenAt(); first.After(now.Add(-7*d)) || first.Before(now.Add(-7*d-20*m)) {
		t.Fatalf("the oldest full snapshot kept is proven at %s: want the newest by %s", first, now.Add(-7*d))
	}
}

// keptBy is chain c after retention under policy p, checked to restore every revision from
// its oldest full snapshot on.
func keptBy(t *testing.T, c backup.Chain, p Policy) backup.Chain {
	t.Helper()
	del, err := Plan(c, p, now)
	if err != nil {
		t.Fatal(err)
	}
	gone := map[string]bool{}
	for _, o := range del {
		gone[o.Key] = true
	}
	kept := c.Without(gone)
	cov := kept.Coverage()
	if len(cov) != 1 || cov[0].To != 100000 || cov[0].From != kept.Fulls[0].FirstRev {
		t.Fatalf("after retention the chain covers %v, want one range from %d to 100000", cov, kept.Fulls[0].FirstRev)
	}
	for _, i := range kept.Check() {
		if i.Severity != backup.Info {
			t.Fatalf("retention left an issue: %v", i)
		}
	}
	return kept
}

func TestParsePolicy(t *testing.T) {
	for _, tc := range []struct {
		in, want, err string
	}{
		{"exponential", "exponential", ""},
		{"keep", "keep", ""},
		{"limit:5", "limit:5", ""},
		{"limit:999999", "limit:999999", ""},
		{"age:30d", "age:30d", ""},
		{"age:14d", "age:2w", ""},
		{"age:36h", "age:36h", ""},
		{"age:9999w", "age:9999w", ""},
		{" limit:5 ", "", "unknown retention policy"},
		{"limit=3", "", "unknown retention policy"},
		{"limit", "", "write limit:N"},
		{"limit:0", "", "N from 1 to 999999"},
		{"limit:+3", "", "no sign or leading zero"},
		{"limit:03", "", "no sign or leading zero"},
		{"limit:1000000", "", "N from 1 to 999999"},
		{"limit:x", "", "write limit:N"},
		{"age", "", "write age:N followed by h, d or w"},
		{"age:30", "", "write age:N followed by h, d or w"},
		{"age:0d", "", "write age:N"},
		{"age:30m", "", "write age:N"},
		{"age:1.5d", "", "write age:N"},
		{"age:10000w", "", "N from 1 to 9999"},
		{"exponential:2", "", "takes no argument"},
		{"keep:1", "", "takes no argument"},
		{"Keep", "", "unknown retention policy"},
		{"forever", "", `unknown retention policy "forever": use exponential, limit:N, age:N[h|d|w] (e.g. age:30d) or keep`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			p, err := ParsePolicy(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ParsePolicy(%q) = %v, %v; want error %q", tc.in, p, err, tc.err)
				}
				return
			}
			if err != nil || p.String() != tc.want {
				t.Fatalf("ParsePolicy(%q) = %v, %v", tc.in, p, err)
			}
		})
		// The API server checks spec.backup.retention against PolicyPattern: it must accept
		// exactly what ParsePolicy does.
		if _, err := ParsePolicy(tc.in); (err == nil) != policyPattern.MatchString(tc.in) {
			t.Errorf("ParsePolicy(%q): %v, but PolicyPattern matches: %t", tc.in, err, policyPattern.MatchString(tc.in))
		}
	}
	if _, err := Plan(chain([]f{{1, 0}}, nil), Policy{Name: "nope"}, now); err == nil {
		t.Fatal("Plan accepted an unknown policy")
	}
	if _, err := Plan(chain([]f{{1, 0}}, nil), Policy{Name: Limit}, now); err == nil {
		t.Fatal("Plan accepted limit 0")
	}
}

// putFull stores a full snapshot of cluster on timeline tl, of a small database.
func putFull(t *testing.T, s *store.Store, tl uint32, cluster uint64, rev int64, at time.Time) string {
	t.Helper()
	db := backuptest.Snapshot(t, int(rev))
	key := backup.FullKey(tl, rev, at)
	hdr := backup.Header{Kind: backup.KindFull, Timeline: tl, Compression: backup.CompressionZstd, EtcdVersion: "3.6.4", ClusterID: cluster, FirstRev: rev, Created: at}
	if _, err := backup.WriteObject(context.Background(), s, key, hdr, func(w *backup.ObjectWriter) error {
		w.SetLastRev(rev)
		_, err := w.Write(db)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return key
}

// TestCollectKeepsToItsCluster: a sidecar's retention deletes from its own cluster's
// timelines only, not from another cluster's that shares the prefix.
func TestCollectKeepsToItsCluster(t *testing.T) {
	ctx := context.Background()
	s, err := store.Open(ctx, "mem://"+t.Name(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	old1 := putFull(t, s, 1, 42, 100, now.Add(-2*h))
	putFull(t, s, 1, 42, 200, now.Add(-h))
	putFull(t, s, 2, 43, 10, now.Add(-2*h))
	putFull(t, s, 2, 43, 20, now.Add(-h))
	old3 := putFull(t, s, 3, 42, 50, now.Add(-2*h))
	putFull(t, s, 3, 42, 60, now.Add(-h))
	doomed, err := Doomed(ctx, s, Policy{Name: Limit, Limit: 1}, now, 42)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(keysOf(doomed)); got != fmt.Sprint([]string{old1, old3}) {
		t.Fatalf("doomed %s, want the older full snapshots of cluster 42's timelines 1 and 3", got)
	}
	n, err := Collect(ctx, s, Policy{Name: Limit, Limit: 1}, now, 42, nil)
	if err != nil || n != 2 {
		t.Fatalf("Collect deleted %d objects, err %v; want 2", n, err)
	}
	if left, _ := Doomed(ctx, s, Policy{Name: Limit, Limit: 1}, now, 42); len(left) != 0 {
		t.Fatalf("after Collect, still doomed: %v", keysOf(left))
	}
}

func keysOf(objs []backup.Object) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.Key)
	}
	return out
}

// Retention deletes nothing while the newest full snapshot does not read back.
func TestCollectReadsTheNewestFullBack(t *testing.T) {
	ctx := context.Background()
	s, err := store.Open(ctx, "mem://", store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	full := func(rev int64, at time.Time) string { return putFull(t, s, 1, 42, rev, at) }
	old := full(100, now.Add(-2*h))
	newest := full(200, now.Add(-h))
	keys := func() string {
		objs, _ := s.List(ctx, "")
		var out []string
		for _, o := range objs {
			out = append(out, o.Key)
		}
		return strings.Join(out, " ")
	}
	// Damage the newest: retention must keep the older one.
	r, _ := s.NewReader(ctx, newest)
	b, _ := io.ReadAll(r)
	r.Close()
	b[len(b)/2] ^= 0xff
	w, _ := s.NewWriter(ctx, newest)
	w.Write(b)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if del, err := Doomed(ctx, s, Policy{Name: Limit, Limit: 1}, now, 0); err == nil || !strings.Contains(err.Error(), newest) || len(del) != 0 {
		t.Fatalf("Doomed over a damaged newest full: %v, err %v; want nothing, and the error naming %s", del, err, newest)
	}
	del, err := Collect(ctx, s, Policy{Name: Limit, Limit: 1}, now, 0, nil)
	if err == nil || !strings.Contains(err.Error(), newest) || del != 0 || !strings.Contains(keys(), old) {
		t.Fatalf("Collect over a damaged newest full: deleted %v, err %v; left %s", del, err, keys())
	}
	newest = full(300, now)
	del, err = Collect(ctx, s, Policy{Name: Limit, Limit: 1}, now, 0, nil)
	if err != nil || del != 2 || keys() != newest {
		t.Fatalf("Collect: deleted %v, err %v; left %s, want only %s", del, err, keys(), newest)
	}
}

func TestApply(t *testing.T) {
	ctx := context.Background()
	s, err := store.Open(ctx, "mem://", store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	keys := []string{
		backup.FullKey(1, 100, now.Add(-2*h)), backup.DeltaKey(1, 101, 200),
		backup.FullKey(1, 200, now.Add(-h)), backup.DeltaKey(1, 201, 300),
		"v1/full/not-a-backup",
	}
	for _, k := range keys {
		w, err := s.NewWriter(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte("x"))
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	c, err := backup.ListChain(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	del, err := Plan(c, Policy{Name: Limit, Limit: 1}, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := Apply(ctx, s, del); err != nil {
		t.Fatal(err)
	}
	if err := Apply(ctx, s, del); err != nil {
		t.Fatalf("applying again: %v", err)
	}
	left, _ := s.List(ctx, "")
	var got []string
	for _, o := range left {
		got = append(got, o.Key)
	}
	want := []string{"v1/full/not-a-backup", backup.DeltaKey(1, 201, 300), backup.FullKey(1, 200, now.Add(-h))}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("left %v, want %v", got, want)
	}
}

// TestPlanPerTimeline: each timeline keeps its newest full snapshot and the deltas after it.
// As one history, timeline 2's full snapshot at revision 50 would be the oldest, and limit:1
// would keep only timeline 1's newest.
func TestPlanPerTimeline(t *testing.T) {
	var objs []backup.Object
	for _, k := range []string{
		backup.FullKey(1, 100, now.Add(-3*d)), backup.DeltaKey(1, 101, 200), backup.FullKey(1, 200, now.Add(-2*d)), backup.DeltaKey(1, 201, 300),
		backup.FullKey(2, 50, now.Add(-d)), backup.DeltaKey(2, 51, 60), backup.FullKey(2, 60, now.Add(-h)), backup.DeltaKey(2, 61, 70),
	} {
		o, err := backup.ParseKey(k)
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, o)
	}
	del, err := Plan(backup.NewChain(objs), Policy{Name: Limit, Limit: 1}, now)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range del {
		got = append(got, fmt.Sprintf("%d:%s", o.Timeline, names([]backup.Object{o})))
	}
	if s := strings.Join(got, " "); s != "1:F100 1:D101-200 2:F50 2:D51-60" {
		t.Fatalf("deleted %s", s)
	}
}
