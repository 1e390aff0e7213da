package main

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// line is one zap JSON log line at t0+at, with extra fields (JSON members, without braces).
func line(t0 time.Time, at time.Duration, msg, fields string) string {
	s := fmt.Sprintf(`{"level":"info","ts":%q,"msg":%q`, t0.Add(at).Format(time.RFC3339Nano), msg)
	if fields != "" {
		s += "," + fields
	}
	return s + "}"
}

// sampleLogs serves logs given as text, by "member/proc".
func sampleLogs(texts map[string][]string) logs {
	return func(member, proc string) []logEvent {
		return parseLog(strings.NewReader(strings.Join(texts[member+"/"+proc], "\n")))
	}
}

var t0 = time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)

// wipeLogs are the logs of member m1 healing from a wipe at t0; the messages are not the ones
// Steward logs, to show that the timeline reads the event field alone.
func wipeLogs() map[string][]string {
	ms := time.Millisecond
	return map[string][]string{
		"m1/sidecar": {
			line(t0, -5*time.Second, "an old decision", `"event":"init-decision","case":"Restart"`),
			"not JSON: a line of a panic",
			line(t0, 640*ms, "decided (reworded)", `"event":"init-decision","case":"Replace"`),
			line(t0, 645*ms, "learner added (reworded)", `"event":"added-as-learner","id":"ab","took":0.01`),
			line(t0, 650*ms, "added as learner", ``), // the old text without the field: not a phase
			line(t0, 1700*ms, "voter now (reworded)", `"event":"promoted","id":"ab"`),
		},
		"m1/etcd": {
			line(t0, 840*ms, "etcd starting (reworded)", `"event":"etcd-starting","name":"m1"`),
			line(t0, 1060*ms, etcdSnapshotReceived, `"snapshot-size":"20 MB"`),
			line(t0, 1450*ms, "race (reworded)", `"event":"publish-race-restart"`),
			line(t0, 2560*ms, "serving (reworded)", `"event":"etcd-serving","member-id":"ab"`),
		},
	}
}

func TestWipeTimelineFromEventFields(t *testing.T) {
	got, err := wipeTimeline(sampleLogs(wipeLogs()), "m1", t0, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	want := "sidecar decided +0.64s, added as learner +0.65s, etcd started +0.84s, snapshot received +1.06s, " +
		"publish race, etcd restarted +1.45s, promoted +1.70s, learner serving +2.56s, seen healthy +3.00s"
	if got.String() != want {
		t.Fatalf("timeline:\n got %s\nwant %s", got, want)
	}
	if at, ok := got.at(pAdded); !ok || at != 645*time.Millisecond {
		t.Fatalf("added as learner at %v, %t; want the line with the event field, +645ms", at, ok)
	}
}

func TestWipeTimelineOptionalPhases(t *testing.T) {
	l := wipeLogs()
	l["m1/etcd"] = []string{l["m1/etcd"][0], l["m1/etcd"][3]} // caught up from the log, no publish race
	got, err := wipeTimeline(sampleLogs(l), "m1", t0, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got.at(pSnapshot); ok {
		t.Fatalf("a snapshot point without its line: %s", got)
	}
	if len(got) != 6 {
		t.Fatalf("timeline %s: want the 6 points that are always there", got)
	}
}

func TestWipeTimelineMissingPhaseFails(t *testing.T) {
	l := wipeLogs()
	var kept []string
	for _, s := range l["m1/sidecar"] {
		if !strings.Contains(s, `"event":"promoted"`) {
			kept = append(kept, s)
		}
	}
	l["m1/sidecar"] = kept
	_, err := wipeTimeline(sampleLogs(l), "m1", t0, 3*time.Second)
	if err == nil || !strings.Contains(err.Error(), `phase "promoted" never seen`) || !strings.Contains(err.Error(), "event=promoted") {
		t.Fatalf("error %v; want one naming the phase promoted and the event looked for", err)
	}
	// No logs at all: every phase expected is named.
	_, err = wipeTimeline(sampleLogs(nil), "m1", t0, 3*time.Second)
	for _, p := range []string{pDecided, pAdded, pStarted, pServing, pPromoted} {
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("phase %q never seen", p)) {
			t.Errorf("error %v; want it to name the phase %q", err, p)
		}
	}
}

func TestQuorumTimeline(t *testing.T) {
	s := time.Second
	l := map[string][]string{
		"m0/sidecar": {
			line(t0, 7490*time.Millisecond, "decision", `"event":"init-decision","case":"QuorumLossRestoreFromBackup","seed":"m0"`),
			line(t0, 8260*time.Millisecond, "restored", `"event":"restored-from-backup","revision":117680,"deltas":12,"took":0.77`),
			line(t0, 10130*time.Millisecond, "full stored", `"event":"full-after-restore","key":"k"`),
		},
		"m0/etcd": {line(t0, 9270*time.Millisecond, "serving", `"event":"etcd-serving"`)},
		"m1/sidecar": {
			line(t0, 9280*time.Millisecond, "added", `"event":"added-as-learner"`),
			line(t0, 10610*time.Millisecond, "promoted", `"event":"promoted"`),
		},
		"m1/etcd": {line(t0, 10060*time.Millisecond, "race", `"event":"publish-race-restart"`)},
		"m2/sidecar": {
			line(t0, 15360*time.Millisecond, "added", `"event":"added-as-learner"`),
			line(t0, 16610*time.Millisecond, "promoted", `"event":"promoted"`),
		},
		"m2/etcd": {line(t0, 16*s, etcdPublishFailed, `"error":"etcdserver: request timed out"`)},
	}
	got, err := quorumTimeline(sampleLogs(l), []string{"m0", "m1", "m2"}, "m0", t0, 16620*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	want := "seed acts on the directive +7.49s, seed restored +8.26s, seed serving +9.27s, m1 added as learner +9.28s, " +
		"m1 publish race, etcd restarted +10.06s, full snapshot after the restore stored +10.13s, m1 promoted +10.61s, " +
		"m2 added as learner +15.36s, m2 publish timed out +16.00s, m2 promoted +16.61s, all seen healthy +16.62s"
	if got.String() != want {
		t.Fatalf("timeline:\n got %s\nwant %s", got, want)
	}
	ev, ok := first(sampleLogs(l)("m0", "sidecar"), t0, isEvent(evRestored))
	if !ok || num(ev.fields.Took) != 0.77 || num(ev.fields.Deltas) != 12 || num(ev.fields.Revision) != 117680 {
		t.Fatalf("the restore's line: %t %+v", ok, ev.fields)
	}

	delete(l, "m2/sidecar")
	_, err = quorumTimeline(sampleLogs(l), []string{"m0", "m1", "m2"}, "m0", t0, 16620*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), `phase "m2 added as learner" never seen`) {
		t.Fatalf("error %v; want one naming the phase m2 added as learner", err)
	}
}

func TestPublishFailures(t *testing.T) {
	evs := parseLog(strings.NewReader(strings.Join([]string{
		line(t0, -time.Second, etcdPublishFailed, `"error":"before"`),
		line(t0, time.Second, etcdPublishFailed, `"error":"etcdserver: request timed out"`),
		line(t0, 2*time.Second, etcdPublishFailed, `"error":"etcdserver: server stopped"`),
	}, "\n")))
	if n, last := publishFailures(evs, t0); n != 2 || last != `"etcdserver: server stopped"` {
		t.Fatalf("publishFailures: %d, %s", n, last)
	}
}

// With founders, the others restore the seed's point and start with it: no learner joins,
// and whichever member leads takes the full snapshot after the restore.
func TestQuorumTimelineWithFounders(t *testing.T) {
	ms := time.Millisecond
	founder := func(restored time.Duration) []string {
		return []string{
			line(t0, 2000*ms, "decision", `"event":"init-decision","case":"QuorumLossFounderRestore"`),
			line(t0, restored, "restored", `"event":"restored-from-backup","revision":117387`),
		}
	}
	l := map[string][]string{
		"m0/sidecar": {
			line(t0, 1710*ms, "decision", `"event":"init-decision","case":"QuorumLossRestoreFromBackup"`),
			line(t0, 2420*ms, "restored", `"event":"restored-from-backup","revision":117387`),
		},
		"m0/etcd":    {line(t0, 4240*ms, "serving", `"event":"etcd-serving"`)},
		"m1/sidecar": founder(3610 * ms),
		"m1/etcd":    {line(t0, 4250*ms, "serving", `"event":"etcd-serving"`)},
		"m2/sidecar": append(founder(3620*ms), line(t0, 5000*ms, "full stored", `"event":"full-after-restore","key":"k"`)),
		"m2/etcd":    {line(t0, 4260*ms, "serving", `"event":"etcd-serving"`)},
	}
	got, err := quorumTimeline(sampleLogs(l), []string{"m0", "m1", "m2"}, "m0", t0, 4360*ms)
	if err != nil {
		t.Fatal(err)
	}
	want := "seed acts on the directive +1.71s, seed restored +2.42s, m1 restored (founder) +3.61s, m2 restored (founder) +3.62s, " +
		"seed serving +4.24s, m1 serving (founder) +4.25s, m2 serving (founder) +4.26s, all seen healthy +4.36s, full snapshot after the restore stored +5.00s"
	if got.String() != want {
		t.Fatalf("timeline:\n got %s\nwant %s", got, want)
	}
}
