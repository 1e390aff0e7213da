package restore

import (
	"fmt"
	"slices"
	"testing"
)

// TestLiveKeys: the index tells keys apart (by 128 bits of seeded hashes), whatever their
// length, and forgets a deleted key; its leases are those of the live keys.
func TestLiveKeys(t *testing.T) {
	l := newLiveKeys()
	keys := [][]byte{nil, {}, []byte("a"), []byte("a\x00"), []byte("/registry/pods/default/x"), make([]byte, 1<<20)}
	for i := 0; i < 100_000; i++ {
		keys = append(keys, fmt.Appendf(nil, "/registry/k/%d", i))
	}
	for i, k := range keys[1:] { // nil and empty are one key
		l.m[l.id(k)] = keyState{create: int64(i + 1), version: 1, lease: int64(i % 3)}
	}
	if len(l.m) != len(keys)-1 {
		t.Fatalf("%d entries for %d keys", len(l.m), len(keys)-1)
	}
	for i, k := range keys[1:] {
		if st := l.m[l.id(k)]; st.create != int64(i+1) {
			t.Fatalf("key %.20q: state %+v, want create %d", k, st, i+1)
		}
	}
	delete(l.m, l.id([]byte("a")))
	if _, ok := l.m[l.id([]byte("a"))]; ok {
		t.Fatal("a deleted key is still live")
	}
	if _, ok := l.m[l.id([]byte("a\x00"))]; !ok {
		t.Fatal("deleting a key deleted another")
	}
	var leases []int64
	seen := map[int64]bool{}
	l.leases(func(id int64) {
		if !seen[id] {
			seen[id] = true
			leases = append(leases, id)
		}
	})
	slices.Sort(leases)
	if !slices.Equal(leases, []int64{1, 2}) {
		t.Fatalf("leases %v, want [1 2]", leases)
	}
}
