package restore

import (
	"bytes"
	"crypto/sha256"
	"math/rand/v2"
	"testing"
)

// FuzzEtcdHash: however a snapshot stream is cut into writes (pieces shorter and longer than
// the 32-byte hash, or one piece), etcdHash passes it through unchanged, and its verdict is
// the whole stream's: a stream of whole pages plus 32 bytes passes only if those 32 bytes are
// the SHA-256 of the rest; any other size is not etcd's to check.
func FuzzEtcdHash(f *testing.F) {
	db := bytes.Repeat([]byte("page"), 128) // 512 bytes: one page
	sum := sha256.Sum256(db)
	f.Add(append(append([]byte(nil), db...), sum[:]...), uint64(1))
	f.Add(append(append([]byte(nil), db...), sum[:]...), uint64(3))
	bad := append(append([]byte(nil), db...), sum[:]...)
	bad[100] ^= 1
	f.Add(bad, uint64(7))
	f.Add(sum[:], uint64(2))
	f.Add([]byte("short"), uint64(5))
	f.Fuzz(func(t *testing.T, stream []byte, seed uint64) {
		var out bytes.Buffer
		e := newEtcdHash(&out)
		rnd := rand.New(rand.NewPCG(seed, seed>>32))
		for rest := stream; len(rest) > 0; {
			n := len(rest)
			if seed%3 != 0 {
				n = min(n, 1+rnd.IntN(2*sha256.Size+8))
			}
			if _, err := e.Write(rest[:n]); err != nil {
				t.Fatal(err)
			}
			rest = rest[n:]
		}
		if !bytes.Equal(out.Bytes(), stream) {
			t.Fatalf("passed %d bytes through, got %d", len(stream), out.Len())
		}
		err := e.verify()
		want := true
		if len(stream)%512 == sha256.Size {
			s := sha256.Sum256(stream[:len(stream)-sha256.Size])
			want = bytes.Equal(s[:], stream[len(stream)-sha256.Size:])
		}
		if (err == nil) != want {
			t.Fatalf("a %d-byte stream: verify says %v; the whole stream says it is good: %v", len(stream), err, want)
		}
	})
}
