package backup

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"strings"
	"testing"
)

// fullObject is the name of testHeader's full snapshot.
func fullObject(t testing.TB) Object {
	t.Helper()
	h := testHeader(CompressionZstd)
	o, err := ParseKey(FullKey(h.Timeline, h.FirstRev, h.Created))
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// rewriteHeader sets the header byte at pos to b and makes the header's CRC-32C match, as
// anyone who may write to the store can.
func rewriteHeader(obj []byte, pos int, b byte) []byte {
	obj = bytes.Clone(obj)
	n := int(binary.BigEndian.Uint16(obj[10:]))
	obj[pos%(n-4)] = b
	binary.BigEndian.PutUint32(obj[n-4:], crc32.Checksum(obj[:n-4], castagnoli))
	return obj
}

// TestVouch: a full snapshot vouches for itself when whole, of its name and, with encryption,
// written with the keys, header and all; a header altered under encryption (its checksum
// made to match), an object planted without the keys, one of another name or truncated do not.
func TestVouch(t *testing.T) {
	keys := testKeyring(t, "k1", "k1")
	o := fullObject(t)
	enc := writeEncrypted(t, testHeader(CompressionZstd), keys, payload(200<<10, 1), 250)
	plain := writeEncrypted(t, testHeader(CompressionZstd), nil, payload(200<<10, 1), 250)
	other := o
	other.FirstRev++
	for _, tc := range []struct {
		name string
		obj  []byte
		o    Object
		keys bool
		want string // "" vouches
	}{
		{"encrypted", enc, o, true, ""},
		{"plaintext, read without keys", plain, o, false, ""},
		{"encrypted, cluster ID altered", rewriteHeader(enc, 16, 0xee), o, true, "does not decrypt"},
		{"encrypted, etcd version altered", rewriteHeader(enc, 54, 'x'), o, true, "does not decrypt"},
		{"planted without the keys", plain, o, true, "not encrypted"},
		{"encrypted, read without keys", enc, o, false, "encryption key missing"},
		{"of another name", enc, other, true, "the name says"},
		{"truncated in its first segment", enc[:1000], o, true, "truncated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := keys
			if !tc.keys {
				k = nil
			}
			hdr, err := vouch(bytes.NewReader(tc.obj), tc.o, k)
			if tc.want == "" {
				if err != nil || hdr.ClusterID != testHeader(CompressionZstd).ClusterID {
					t.Fatalf("vouch: %+v, %v; want it to vouch", hdr, err)
				}
				return
			}
			if !NotVouched(err) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.o.Key) {
				t.Fatalf("vouch: %v; want it refused naming %s: %s", err, tc.o.Key, tc.want)
			}
		})
	}
}
