package units

import (
	"encoding/json"
	"testing"
	"time"
)

// TestJSONConventions: durations and etcd IDs are written as strings ("1m30s", hex) and read
// back, also from the numbers older versions wrote; an absent time tagged omitzero is left out.
func TestJSONConventions(t *testing.T) {
	type v struct {
		D  Duration  `json:"d"`
		ID ID        `json:"id"`
		At time.Time `json:"at,omitzero"`
	}
	in := v{D: Duration(90*time.Second + 500*time.Millisecond), ID: 0x8e9e05c52164694d}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"d":"1m30.5s","id":"8e9e05c52164694d"}`; string(b) != want {
		t.Fatalf("marshalled %s, want %s", b, want)
	}
	for _, s := range []string{string(b), `{"d":90500000000,"id":10276657743932975437}`, `{"d":"1m30.5s","id":"0x8e9e05c52164694d"}`} {
		var out v
		if err := json.Unmarshal([]byte(s), &out); err != nil || out != in {
			t.Errorf("unmarshal %s = %+v, %v; want %+v", s, out, err, in)
		}
	}
	var out v
	if err := json.Unmarshal([]byte(`{"d":"soon","id":"xyz"}`), &out); err == nil {
		t.Error("unmarshal of a bad duration and ID succeeded")
	}
}
