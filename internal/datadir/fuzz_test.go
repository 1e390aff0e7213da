package datadir

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// FuzzReadIdentity: the identity file decides whether a member may start on a data dir. A
// damaged or hostile file never panics the reader; one it accepts is written back and read
// again unchanged (the sidecar rewrites it when the cluster forms).
func FuzzReadIdentity(f *testing.F) {
	for _, s := range []string{
		`{"clusterName":"c","clusterToken":"t","clusterID":"1","memberName":"m0","memberID":"a","recoveryEpoch":3,"writtenAt":"2026-01-01T00:00:00Z"}`,
		`{}`, `null`, `[]`, `{"recoveryEpoch":-1}`, `{"writtenAt":"0000-01-01T00:00:00Z"}`, `{"writtenAt":"9999-12-31T23:59:59+23:59"}`, "\x00", `{"memberName":"\u0000"}`,
	} {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		d := filepath.Join(dir, "d")
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, identityName), b, 0o600); err != nil {
			t.Fatal(err)
		}
		id, ok, err := ReadIdentity(d)
		if err != nil || !ok {
			return
		}
		if err := WriteIdentity(d, id); err != nil {
			t.Fatalf("an identity read from %q cannot be written back: %v", b, err)
		}
		again, ok, err := ReadIdentity(d)
		if err != nil || !ok {
			t.Fatalf("identity written back is unreadable: %v", err)
		}
		if !again.WrittenAt.Equal(id.WrittenAt) {
			t.Fatalf("writtenAt %v became %v", id.WrittenAt, again.WrittenAt)
		}
		again.WrittenAt, id.WrittenAt = time.Time{}, time.Time{}
		if !reflect.DeepEqual(again, id) {
			t.Fatalf("identity %+v became %+v", id, again)
		}
	})
}
