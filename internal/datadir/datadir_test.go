package datadir

import "testing"

func TestInspectReportsItsDuration(t *testing.T) {
	st, err := Inspect(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if st.Took <= 0 || !st.Empty() {
		t.Fatalf("Inspect of an empty dir: %+v; want empty with a duration", st)
	}
}
