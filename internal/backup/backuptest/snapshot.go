package backuptest

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// Snapshot is what etcd's Maintenance.Snapshot sends for a bbolt database holding keys keys:
// the database as bbolt writes it (tx.WriteTo), then its SHA-256.
func Snapshot(t testing.TB, keys int) []byte {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var buf bytes.Buffer
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("key"))
		if err != nil {
			return err
		}
		for i := range keys {
			if err := b.Put(fmt.Appendf(nil, "/registry/%05d", i), bytes.Repeat([]byte{byte(i)}, 100)); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		err = db.View(func(tx *bolt.Tx) error { _, err := tx.WriteTo(&buf); return err })
	}
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(buf.Bytes())
	return append(buf.Bytes(), sum[:]...)
}
