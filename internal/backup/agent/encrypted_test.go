package agent

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/etcd-steward/steward/internal/backup"
	"github.com/etcd-steward/steward/internal/restore"
	"github.com/etcd-steward/steward/internal/seal"
	"github.com/etcd-steward/steward/internal/store"
	"github.com/etcd-steward/steward/internal/testutil"
)

// keyDir writes keys as a mounted Secret holds them (one file per key ID) and loads them,
// active the given one.
func keyDir(t *testing.T, active string, keys map[string][]byte) *seal.Keyring {
	t.Helper()
	dir := t.TempDir()
	for id, k := range keys {
		if err := os.WriteFile(filepath.Join(dir, id), []byte(base64.StdEncoding.EncodeToString(k)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	kr, err := seal.LoadKeyring(dir, active)
	if err != nil {
		t.Fatal(err)
	}
	return kr
}

// storeWith opens another handle on s's objects with keys.
func storeWith(t *testing.T, s *store.Store, keys *seal.Keyring) *store.Store {
	t.Helper()
	o, err := store.Open(context.Background(), s.String(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.Close() })
	o.SetKeys(keys)
	return o
}

// TestEncryptedBackups: with keys, a member's backups are encrypted (no value it holds is in
// the store), restore with the keys to the member's exact state, are refused with the wrong
// keys or none (naming the key), survive a key rotation, and an object planted without the
// keys is never restored.
func TestEncryptedBackups(t *testing.T) {
	ctx := context.Background()
	k1, k2 := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	s := storeWith(t, openTestStore(t), keyDir(t, "", map[string][]byte{"k1": k1}))
	_, cli, ep := testutil.EmbeddedEtcd(t)
	a, stop := startBackups(t, s, ep)
	testutil.Write(t, cli, "confidential", 30)
	waitStored(t, a, cli, ep, 1)
	stop()
	want, rev := testutil.State(t, cli)

	dir := strings.TrimPrefix(s.String(), "file://")
	var objects int
	if err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		objects++
		if bytes.Contains(b, []byte("confidential")) {
			t.Errorf("%s holds a value in the clear", p)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, o := range checkTimelines(t, s, 1).Objects() {
		if h, err := backup.ReadHeader(ctx, s, o.Key); err != nil || h.KeyID != "k1" {
			t.Fatalf("%s: key %q, %v: want encrypted with k1", o.Key, h.KeyID, err)
		}
	}
	if objects < 2 {
		t.Fatalf("%d objects stored, want a full snapshot and deltas", objects)
	}

	got, gotRev, _ := restored(t, restore.Options{Store: s})
	if gotRev != rev {
		t.Fatalf("restored revision %d, want %d", gotRev, rev)
	}
	testutil.SameState(t, "restore with the keys", got, want)
	for _, tc := range []struct {
		name string
		keys *seal.Keyring
		is   error
	}{
		{"no keys", nil, backup.ErrNoKey},
		{"another key ID", keyDir(t, "", map[string][]byte{"k2": k2}), backup.ErrNoKey},
		{"another key under the same ID", keyDir(t, "", map[string][]byte{"k1": k2}), backup.ErrCorrupt},
	} {
		dataDir := filepath.Join(t.TempDir(), "r")
		_, err := restore.Restore(ctx, restore.Options{Store: storeWith(t, s, tc.keys), DataDir: dataDir, Name: "r", InitialCluster: "r=http://127.0.0.1:1", PeerURLs: []string{"http://127.0.0.1:1"}})
		if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), `"k1"`) {
			t.Fatalf("restore with %s: %v, want %v naming key k1", tc.name, err, tc.is)
		}
		for _, d := range []string{dataDir, dataDir + ".part"} {
			if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("restore with %s left %s behind (%v)", tc.name, d, err)
			}
		}
	}

	// Rotation: k2 encrypts what follows, k1 still reads what came before.
	rotated := storeWith(t, s, keyDir(t, "k2", map[string][]byte{"k1": k1, "k2": k2}))
	a, stop = startBackups(t, rotated, ep)
	testutil.Write(t, cli, "after-rotation", 30)
	waitStored(t, a, cli, ep, 1)
	stop()
	want, rev = testutil.State(t, cli)
	c := checkTimelines(t, rotated, 1)
	newest := c.Deltas[len(c.Deltas)-1]
	nh, err := backup.ReadHeader(ctx, rotated, newest.Key)
	if err != nil || nh.KeyID != "k2" {
		t.Fatalf("%s after the rotation: key %q, %v: want k2", newest.Key, nh.KeyID, err)
	}
	got, gotRev, _ = restored(t, restore.Options{Store: rotated})
	if gotRev != rev {
		t.Fatalf("restored revision %d after the rotation, want %d", gotRev, rev)
	}
	testutil.SameState(t, "restore across the rotation", got, want)

	// A delta planted by someone without the keys, continuing the chain, is refused.
	plain := storeWith(t, s, nil)
	hdr := backup.Header{Kind: backup.KindDelta, Timeline: 1, Compression: backup.CompressionZstd, ClusterID: nh.ClusterID, FirstRev: rev + 1, LastRev: rev + 1}
	if _, err := backup.WriteObject(ctx, plain, backup.DeltaKey(1, rev+1, rev+1), hdr, func(w *backup.ObjectWriter) error {
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	_, err = restore.Restore(ctx, restore.Options{Store: rotated, ToRevision: rev + 1, DataDir: filepath.Join(t.TempDir(), "r"), Name: "r", InitialCluster: "r=http://127.0.0.1:1", PeerURLs: []string{"http://127.0.0.1:1"}})
	if !errors.Is(err, backup.ErrCorrupt) || !strings.Contains(err.Error(), "not encrypted") {
		t.Fatalf("restore onto the planted delta: %v, want it refused as not encrypted", err)
	}
}

// TestEncryptionTurnedOnStartsATimeline: backups that were not encrypted are not continued by
// encrypted ones (a restore with keys reads encrypted objects only): turning encryption on
// starts a new timeline with a full snapshot, and the old one stays readable without keys.
func TestEncryptionTurnedOnStartsATimeline(t *testing.T) {
	plain := openTestStore(t)
	_, cli, ep := testutil.EmbeddedEtcd(t)
	a, stop := startBackups(t, plain, ep)
	testutil.Write(t, cli, "before", 20)
	waitStored(t, a, cli, ep, 1)
	stop()
	before, beforeRev := testutil.State(t, cli)

	s := storeWith(t, plain, keyDir(t, "", map[string][]byte{"k1": bytes.Repeat([]byte{1}, 32)}))
	a, _ = startBackups(t, s, ep)
	testutil.Write(t, cli, "after", 20)
	waitStored(t, a, cli, ep, 2)
	if st := a.Status(); !strings.Contains(st.TimelineReason, "not encrypted") {
		t.Fatalf("timeline 2 started because %q, want because timeline 1 is not encrypted", st.TimelineReason)
	}
	want, rev := testutil.State(t, cli)
	got, gotRev, _ := restored(t, restore.Options{Store: s})
	if gotRev != rev {
		t.Fatalf("restored revision %d, want %d", gotRev, rev)
	}
	testutil.SameState(t, "restore of the encrypted timeline", got, want)
	got, gotRev, _ = restored(t, restore.Options{Store: plain, Timeline: 1})
	if gotRev != beforeRev {
		t.Fatalf("restored revision %d of timeline 1, want %d", gotRev, beforeRev)
	}
	testutil.SameState(t, "restore of the timeline before encryption, without keys", got, before)
}

// TestRotationMissedByAMemberThatLeadsAgain: a sidecar started before a key was added (its
// keys a mounted Secret's directory) leads again after another member wrote the timeline's
// newest objects with the new key: it reads its keys again when its session starts, so it
// continues the timeline instead of starting a new one.
func TestRotationMissedByAMemberThatLeadsAgain(t *testing.T) {
	k1, k2 := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	dir := t.TempDir()
	writeKey := func(id string, k []byte) {
		if err := os.WriteFile(filepath.Join(dir, id), []byte(base64.StdEncoding.EncodeToString(k)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeKey("k1", k1)
	oldKeys, err := seal.LoadKeyring(dir, "k1")
	if err != nil {
		t.Fatal(err)
	}
	base := openTestStore(t)
	_, cli, ep := testutil.EmbeddedEtcd(t)
	old := storeWith(t, base, oldKeys)
	a, stop := startBackupsWith(t, Config{Keys: oldKeys, KeysPath: dir, KeyID: "k1"}, old, ep)
	testutil.Write(t, cli, "before", 20)
	waitStored(t, a, cli, ep, 1)
	stop()

	// Another member, rolled with the new key active, leads meanwhile.
	rotated := storeWith(t, base, keyDir(t, "k2", map[string][]byte{"k1": k1, "k2": k2}))
	b, stop := startBackups(t, rotated, ep)
	testutil.Write(t, cli, "rotated", 20)
	waitStored(t, b, cli, ep, 1)
	stop()

	// The Secret now holds k2 too; the first member leads again, k1 still its active key.
	writeKey("k2", k2)
	a, _ = startBackupsWith(t, Config{Keys: oldKeys, KeysPath: dir, KeyID: "k1"}, old, ep)
	testutil.Write(t, cli, "after", 20)
	waitStored(t, a, cli, ep, 1)
	if st := a.Status(); st.Timeline != 1 {
		t.Fatalf("timeline %d (%s): the member that missed the rotation did not continue timeline 1", st.Timeline, st.TimelineReason)
	}
	want, rev := testutil.State(t, cli)
	got, gotRev, _ := restored(t, restore.Options{Store: rotated})
	if gotRev != rev {
		t.Fatalf("restored revision %d, want %d", gotRev, rev)
	}
	testutil.SameState(t, "restore across both keys", got, want)
}
