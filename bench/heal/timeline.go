package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/etcd-steward/steward/internal/local"
)

// The values of the "event" field of the log lines a heal's timeline is built from, as
// Steward's sidecar (internal/member) and `steward etcd` (internal/etcdproc) log them. The
// timeline matches on these, never on the lines' messages, which may be reworded.
const (
	evDecision         = "init-decision"        // the sidecar's initialisation decision (with its case)
	evAdded            = "added-as-learner"     // the sidecar added its member as a learner
	evPromoted         = "promoted"             // the sidecar promoted its member to voter
	evRestored         = "restored-from-backup" // the seed's sidecar restored its data (took, deltas, revision)
	evFullAfterRestore = "full-after-restore"   // the full snapshot stored after a restore
	evEtcdStarting     = "etcd-starting"        // steward etcd starts etcd
	evEtcdServing      = "etcd-serving"         // steward etcd: etcd serves
	evPublishRace      = "publish-race-restart" // steward etcd restarted a joining member caught by the publish race
)

// etcdPublishFailed is etcd's own message (its library logs it into steward etcd's log, with
// no event field) when a member's publish request times out: the publish stall of joins that
// steward etcd does not catch, and of the reference's fresh member.
const etcdPublishFailed = "failed to publish local member to cluster through raft"

// etcdSnapshotReceived is etcd's own message when a joining member has received the raft
// snapshot; a member may catch up from the log instead, so the point is optional.
const etcdSnapshotReceived = "received and saved database snapshot"

// logEvent is one JSON log line of a sidecar or etcd (zap).
type logEvent struct {
	at     time.Time
	fields struct {
		Msg   string `json:"msg"`
		TS    string `json:"ts"`
		Event string `json:"event"`
		// The others vary in type between loggers (etcd writes durations as strings):
		// decoded leniently by num.
		Case     json.RawMessage `json:"case"`
		Took     json.RawMessage `json:"took"`
		Error    json.RawMessage `json:"error"`
		Deltas   json.RawMessage `json:"deltas"`
		Revision json.RawMessage `json:"revision"`
	}
}

// num decodes a JSON number (0 if it is anything else).
func num(raw json.RawMessage) float64 {
	var f float64
	if json.Unmarshal(raw, &f) != nil {
		return 0
	}
	return f
}

// parseLog reads the JSON lines of a log with a timestamp; it skips any other line.
func parseLog(r io.Reader) []logEvent {
	var out []logEvent
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.HasPrefix(line, []byte("{")) {
			continue
		}
		var ev logEvent
		if json.Unmarshal(line, &ev.fields) != nil {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, ev.fields.TS)
		if err != nil {
			continue
		}
		ev.at = t
		out = append(out, ev)
	}
	return out
}

// readLog reads the log at path (none if it cannot be read).
func readLog(path string) []logEvent {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	return parseLog(f)
}

// logs returns the log of one process ("sidecar" or "etcd") of a member.
type logs func(member, proc string) []logEvent

// clusterLogs reads the logs of the local cluster in dir.
func clusterLogs(dir string) logs {
	return func(member, proc string) []logEvent { return readLog(local.Dir(dir).Log(member, proc)) }
}

// isEvent matches the lines with the given event field.
func isEvent(event string) func(logEvent) bool {
	return func(ev logEvent) bool { return ev.fields.Event == event }
}

// isEtcdMsg matches etcd's own lines with the given message.
func isEtcdMsg(msg string) func(logEvent) bool {
	return func(ev logEvent) bool { return ev.fields.Msg == msg }
}

// isDecision matches the initialisation decisions of the given case.
func isDecision(kase string) func(logEvent) bool {
	return func(ev logEvent) bool {
		var c string
		return ev.fields.Event == evDecision && json.Unmarshal(ev.fields.Case, &c) == nil && c == kase
	}
}

// first returns the first line at or after since that matches.
func first(evs []logEvent, since time.Time, match func(logEvent) bool) (logEvent, bool) {
	for _, ev := range evs {
		if !ev.at.Before(since) && match(ev) {
			return ev, true
		}
	}
	return logEvent{}, false
}

// last returns the last line at or after since that matches.
func last(evs []logEvent, since time.Time, match func(logEvent) bool) (logEvent, bool) {
	var found logEvent
	ok := false
	for _, ev := range evs {
		if !ev.at.Before(since) && match(ev) {
			found, ok = ev, true
		}
	}
	return found, ok
}

// publishStall finds how a join hit etcd's publish race, if it did: steward etcd's restart,
// or etcd's publish timing out (a failure for another reason, such as stopping, is neither).
func publishStall(etcd []logEvent, since time.Time) (string, logEvent, bool) {
	if ev, ok := first(etcd, since, isEvent(evPublishRace)); ok {
		return pRaceRestart, ev, true
	}
	if ev, ok := first(etcd, since, func(ev logEvent) bool {
		return ev.fields.Msg == etcdPublishFailed && strings.Contains(string(ev.fields.Error), "timed out")
	}); ok {
		return pPublishFailed, ev, true
	}
	return "", logEvent{}, false
}

// publishFailures counts etcd's "failed to publish local member" lines in a member's etcd log
// since a time, and returns the last error: how a stalled join shows.
func publishFailures(etcd []logEvent, since time.Time) (int, string) {
	n, lastErr := 0, ""
	for _, ev := range etcd {
		if !ev.at.Before(since) && ev.fields.Msg == etcdPublishFailed {
			n++
			lastErr = string(ev.fields.Error)
		}
	}
	return n, lastErr
}

// timeline is a heal's phases: named points in time after the fault.
type timeline []point

type point struct {
	name string
	at   time.Duration
}

func (t timeline) String() string {
	var parts []string
	for _, p := range t {
		parts = append(parts, fmt.Sprintf("%s +%.2fs", p.name, p.at.Seconds()))
	}
	return strings.Join(parts, ", ")
}

// at returns the time of the named point.
func (t timeline) at(name string) (time.Duration, bool) {
	for _, p := range t {
		if p.name == name {
			return p.at, true
		}
	}
	return 0, false
}

// Names of the points of a wipe's heal.
const (
	pDecided  = "sidecar decided"
	pAdded    = "added as learner"
	pStarted  = "etcd started"
	pSnapshot = "snapshot received"
	pServing  = "learner serving"
	// etcd's first attempt to publish the new member timed out (7 s): see the findings.
	pPublishFailed = "publish timed out"
	// The same race caught by steward etcd, which restarts the member at once instead.
	pRaceRestart = "publish race, etcd restarted"
	pPromoted    = "promoted"
	pHealthy     = "seen healthy"
	pSeedDecided = "seed acts on the directive"
	pRestored    = "seed restored"
	pSeedUp      = "seed serving"
	// A founder of the restored cluster (the others restore the seed's point too, and start
	// with it).
	pFounderRestored = "restored (founder)"
	pFounderUp       = "serving (founder)"
)

// builder collects a timeline's points and the phases expected but never seen.
type builder struct {
	t0      time.Time
	t       timeline
	missing []error
}

// maybe adds the point if its line was seen.
func (b *builder) maybe(name string, ev logEvent, ok bool) {
	if ok {
		b.t = append(b.t, point{name, ev.at.Sub(b.t0)})
	}
}

// need adds the point, or records that the phase was never seen: what, where and since when
// was looked for.
func (b *builder) need(name string, ev logEvent, ok bool, what, member, proc string, since time.Time) {
	if !ok {
		b.missing = append(b.missing, fmt.Errorf("phase %q never seen: no %s in %s's %s log since %s",
			name, what, member, proc, since.Format("15:04:05.000")))
		return
	}
	b.maybe(name, ev, ok)
}

// done sorts the timeline, or fails naming every phase never seen.
func (b *builder) done(what string) (timeline, error) {
	if len(b.missing) > 0 {
		return nil, fmt.Errorf("%s: %w", what, errors.Join(b.missing...))
	}
	sort.SliceStable(b.t, func(i, j int) bool { return b.t[i].at < b.t[j].at })
	return b.t, nil
}

// wipeTimeline builds the phases of the heal of member name, wiped at t0 and seen healthy
// after healed.
func wipeTimeline(lg logs, name string, t0 time.Time, healed time.Duration) (timeline, error) {
	b := &builder{t0: t0}
	sidecar, etcd := lg(name, "sidecar"), lg(name, "etcd")
	ev, ok := first(sidecar, t0, isEvent(evDecision))
	b.need(pDecided, ev, ok, "event="+evDecision, name, "sidecar", t0)
	added, ok := last(sidecar, t0, isEvent(evAdded))
	b.need(pAdded, added, ok, "event="+evAdded, name, "sidecar", t0)
	since := t0
	if ok {
		since = added.at
	}
	ev, ok = first(etcd, since, isEvent(evEtcdStarting))
	b.need(pStarted, ev, ok, "event="+evEtcdStarting, name, "etcd", since)
	ev, ok = first(etcd, since, isEtcdMsg(etcdSnapshotReceived))
	b.maybe(pSnapshot, ev, ok)
	if stall, ev, ok := publishStall(etcd, since); ok {
		b.maybe(stall, ev, ok)
	}
	ev, ok = first(etcd, since, isEvent(evEtcdServing))
	b.need(pServing, ev, ok, "event="+evEtcdServing, name, "etcd", since)
	ev, ok = first(sidecar, since, isEvent(evPromoted))
	b.need(pPromoted, ev, ok, "event="+evPromoted, name, "sidecar", since)
	b.t = append(b.t, point{pHealthy, healed})
	return b.done("the heal of " + name)
}

// quorumTimeline builds the phases of the recovery from a quorum loss at t0, led by seed, seen
// healthy after healed.
func quorumTimeline(lg logs, members []string, seed string, t0 time.Time, healed time.Duration) (timeline, error) {
	b := &builder{t0: t0}
	sidecar := lg(seed, "sidecar")
	ev, ok := first(sidecar, t0, isDecision("QuorumLossRestoreFromBackup"))
	b.need(pSeedDecided, ev, ok, "event="+evDecision+" of case QuorumLossRestoreFromBackup", seed, "sidecar", t0)
	ev, ok = first(sidecar, t0, isEvent(evRestored))
	b.need(pRestored, ev, ok, "event="+evRestored, seed, "sidecar", t0)
	ev, ok = first(lg(seed, "etcd"), t0, isEvent(evEtcdServing))
	b.need(pSeedUp, ev, ok, "event="+evEtcdServing, seed, "etcd", t0)
	for _, m := range members {
		if m == seed {
			continue
		}
		msidecar := lg(m, "sidecar")
		if _, founder := first(msidecar, t0, isDecision("QuorumLossFounderRestore")); founder {
			// A founder of the restored cluster: it restores the seed's point and starts
			// with the seed, with no membership change.
			ev, ok := last(msidecar, t0, isEvent(evRestored))
			b.need(m+" "+pFounderRestored, ev, ok, "event="+evRestored, m, "sidecar", t0)
			ev, ok = last(lg(m, "etcd"), t0, isEvent(evEtcdServing))
			b.need(m+" "+pFounderUp, ev, ok, "event="+evEtcdServing, m, "etcd", t0)
			continue
		}
		added, ok := last(msidecar, t0, isEvent(evAdded))
		b.need(m+" "+pAdded, added, ok, "event="+evAdded, m, "sidecar", t0)
		if !ok {
			continue
		}
		if stall, ev, ok := publishStall(lg(m, "etcd"), added.at); ok {
			b.maybe(m+" "+stall, ev, ok)
		}
		ev, ok := first(msidecar, added.at, isEvent(evPromoted))
		b.need(m+" "+pPromoted, ev, ok, "event="+evPromoted, m, "sidecar", added.at)
	}
	b.t = append(b.t, point{"all " + pHealthy, healed})
	// Whichever member leads the restored cluster takes its first full snapshot.
	var full logEvent
	for _, m := range members {
		if ev, ok := first(lg(m, "sidecar"), t0, isEvent(evFullAfterRestore)); ok && (full.at.IsZero() || ev.at.Before(full.at)) {
			full = ev
		}
	}
	b.maybe("full snapshot after the restore stored", full, !full.at.IsZero())
	return b.done("the recovery from the quorum loss (seed " + seed + ")")
}
