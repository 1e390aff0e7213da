package datadir

import (
	"os"
	"path/filepath"
	"testing"
)

func TestInspectReportsItsDuration(t *testing.T) {
	st, err := Inspect(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if st.Took <= 0 || !st.Empty() {
		t.Fatalf("Inspect of an empty dir: %+v; want empty with a duration", st)
	}
}

// The superseded record is kept inside the data dir it marks: Inspect reads it, and it marks
// the data only while the dir holds some and did not carry the restore out since.
func TestSupersededRecord(t *testing.T) {
	dir := t.TempDir()
	if epoch, err := ReadSuperseded(dir); err != nil || epoch != 0 {
		t.Fatalf("ReadSuperseded of a dir without a record = %d, %v; want 0", epoch, err)
	}
	if err := WriteSuperseded(dir, 4); err != nil {
		t.Fatal(err)
	}
	st, err := Inspect(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.SupersededBy != 4 || st.Superseded() {
		t.Fatalf("a record in an empty dir: %+v; want it read, marking nothing", st)
	}
	if err := os.MkdirAll(filepath.Dir(DBPath(dir)), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(DBPath(dir), []byte("not a database"), 0o600); err != nil {
		t.Fatal(err)
	}
	if st, err = Inspect(dir); err != nil || st.SupersededBy != 4 || !st.Superseded() {
		t.Fatalf("a record beside data: %+v (%v); want the data superseded by 4", st, err)
	}
	if err := WriteIdentity(dir, Identity{ClusterToken: "tok", MemberName: "m0", RecoveryEpoch: 4}); err != nil {
		t.Fatal(err)
	}
	if st, err = Inspect(dir); err != nil || st.Superseded() {
		t.Fatalf("a record the data carried out since: %+v (%v); want it to mark nothing", st, err)
	}
	if err := ClearSuperseded(dir); err != nil {
		t.Fatal(err)
	}
	if err := ClearSuperseded(dir); err != nil {
		t.Fatalf("clearing a record that is not there: %v", err)
	}
	if epoch, err := ReadSuperseded(dir); err != nil || epoch != 0 {
		t.Fatalf("after ClearSuperseded: %d, %v; want no record", epoch, err)
	}
	// A record that cannot be read may say the data is superseded: it counts as doing so.
	if err := os.WriteFile(filepath.Join(dir, supersededName), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if st, err = Inspect(dir); err != nil || !st.Superseded() || len(st.Problems) == 0 {
		t.Fatalf("a damaged record: %+v (%v); want the data superseded and the damage named", st, err)
	}
}
