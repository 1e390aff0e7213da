package backup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"io"
	"strings"
	"testing"

	"github.com/etcd-steward/steward/internal/seal"
)

func testKeyring(t testing.TB, active string, ids ...string) *seal.Keyring {
	t.Helper()
	keys := map[string][]byte{}
	for _, id := range ids {
		keys[id] = bytes.Repeat([]byte(id[:1]), seal.KeySize)
	}
	k, err := seal.NewKeyring("test keys", active, keys)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func writeEncrypted(t *testing.T, hdr Header, keys *seal.Keyring, data []byte, lastRev int64) []byte {
	t.Helper()
	var buf bytes.Buffer
	ow, err := NewObjectWriter(&buf, hdr, keys)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ow.Write(data); err != nil {
		t.Fatal(err)
	}
	ow.SetLastRev(lastRev)
	if err := ow.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func readWith(obj []byte, keys *seal.Keyring) (Header, []byte, *ObjectReader, error) {
	hdr, or, err := NewObjectReader(bytes.NewReader(obj), testKey, keys)
	if err != nil {
		return hdr, nil, nil, err
	}
	defer or.Close()
	b, err := io.ReadAll(or)
	return hdr, b, or, err
}

func TestEncryptedHeaderBytes(t *testing.T) {
	h := testHeader(CompressionZstd)
	h.KeyID, h.Salt = "k1", [32]byte{0xaa, 31: 0xbb}
	b, err := h.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	// The same bytes are in docs/backup-format.md; change both together.
	golden := "5354455742414b0a" + // magic "STEWBAK\n"
		"0003" + // format version 3: encrypted
		"0061" + // header length 97 = 53 + 5 + 1 + 2 + 32 + 4
		"0101" + "0000" + "0102030405060708" + "0000000000000064" + "0000000000000000" + "17979cfe362a0000" + "00000001" +
		"05" + "332e362e34" + // etcd version "3.6.4"
		"02" + "6b31" + // key ID "k1"
		"aa" + strings.Repeat("00", 30) + "bb" // salt
	if got := hex.EncodeToString(b); got[:len(got)-8] != golden {
		t.Fatalf("header bytes\n got %s\nwant %s........", got, golden)
	}
	got, _, err := readHeader(bytes.NewReader(b))
	if err != nil || got.KeyID != "k1" || got.Salt != h.Salt || got.FirstRev != 100 {
		t.Fatalf("read back %+v, %v", got, err)
	}
}

// TestEncryptedObjects: an object written with keys is encrypted with the active key, reads
// back with any keyring that holds that key, and never shows its payload.
func TestEncryptedObjects(t *testing.T) {
	data := payload(300_000, 7)
	for _, c := range []Compression{CompressionZstd, CompressionNone} {
		old := testKeyring(t, "old", "old")
		obj := writeEncrypted(t, testHeader(c), old, data, 123)
		if bytes.Contains(obj, data[1000:1064]) || bytes.Contains(obj, []byte("registry/pods/")) {
			t.Fatalf("%s: the payload shows in the stored object", c)
		}
		rotated := testKeyring(t, "new", "new", "old")
		hdr, got, or, err := readWith(obj, rotated)
		if err != nil || !bytes.Equal(got, data) || hdr.KeyID != "old" || or.LastRev() != 123 {
			t.Fatalf("%s: read with the rotated keyring: %d bytes, key %q, last revision %d, %v", c, len(got), hdr.KeyID, or.LastRev(), err)
		}
		if h, _, _, err := readWith(writeEncrypted(t, testHeader(c), rotated, data, 0), rotated); err != nil || h.KeyID != "new" {
			t.Fatalf("%s: a new object after the rotation is encrypted with %q (%v), want the active key", c, h.KeyID, err)
		}
	}
}

// TestEncryptedObjectsRefused: every way an encrypted object can fail to be the one written
// with the key is refused, and the error says which key, or that it is damaged.
func TestEncryptedObjectsRefused(t *testing.T) {
	keys := testKeyring(t, "k1", "k1")
	data := payload(200_000, 8)
	obj := writeEncrypted(t, testHeader(CompressionZstd), keys, data, 150)
	hlen := int(binary.BigEndian.Uint16(obj[10:]))
	fixCRC := func(b []byte, from, to int) {
		binary.BigEndian.PutUint32(b[to:], crc32.Checksum(b[from:to], castagnoli))
	}
	// The header's first revision changed, with the header's checksum made right.
	firstRev := bytes.Clone(obj)
	binary.BigEndian.PutUint64(firstRev[24:], 101)
	fixCRC(firstRev, 0, hlen-4)
	// The trailer's last revision changed, with the trailer's checksum made right.
	lastRev := bytes.Clone(obj)
	tr := len(lastRev) - TrailerSize
	binary.BigEndian.PutUint64(lastRev[tr+24:], 999)
	fixCRC(lastRev, tr, tr+64)
	// A payload byte flipped, with the trailer's SHA-256 and checksum made right.
	flipped := bytes.Clone(obj)
	flipped[hlen+100] ^= 1
	sum := sha256Of(flipped[hlen:tr])
	copy(flipped[tr+32:], sum[:])
	fixCRC(flipped, tr, tr+64)
	wrong, _ := seal.NewKeyring("other keys", "k1", map[string][]byte{"k1": bytes.Repeat([]byte{9}, 32)})
	for _, tc := range []struct {
		name    string
		obj     []byte
		keys    *seal.Keyring
		is      error
		want    string
		partial bool // some plaintext may come before the error (what authenticated)
	}{
		{"planted: written without the keys", writeObject(t, testHeader(CompressionZstd), data, 0), keys, ErrCorrupt, "not encrypted", false},
		{"read without keys", obj, nil, ErrNoKey, `encrypted with key "k1"`, false},
		{"a key ID the keyring does not hold", obj, testKeyring(t, "k2", "k2"), ErrNoKey, `key "k1"`, false},
		{"the wrong key under the right ID", obj, wrong, ErrCorrupt, `does not decrypt with key "k1"`, false},
		{"the header altered", firstRev, keys, ErrCorrupt, "does not decrypt", false},
		{"the trailer's last revision altered", lastRev, keys, ErrCorrupt, "does not decrypt", true},
		{"the payload altered", flipped, keys, ErrCorrupt, "does not decrypt", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, got, _, err := readWith(tc.obj, tc.keys)
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), testKey) {
				t.Fatalf("err %v: want %v saying %q and naming the object", err, tc.is, tc.want)
			}
			if !tc.partial && len(got) > 0 {
				t.Fatalf("%d bytes of payload read before the error", len(got))
			}
		})
	}
}

// TestEncryptedBufferedObject: a delta buffered ahead of its header is encrypted as it is
// stored, and a store with keys reads its objects back with them.
func TestEncryptedBufferedObject(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, "mem://")
	s.SetKeys(testKeyring(t, "k1", "k1"))
	p, err := NewPayloadBuffer(KindDelta)
	if err != nil {
		t.Fatal(err)
	}
	data := payload(100_000, 9)
	if _, err := p.Write(data); err != nil {
		t.Fatal(err)
	}
	key := DeltaKey(1, 10, 20)
	hdr := Header{Kind: KindDelta, Compression: CompressionZstd, Timeline: 1, FirstRev: 10, LastRev: 20}
	if _, err := WriteBufferedObject(ctx, s, key, hdr, p); err != nil {
		t.Fatal(err)
	}
	h, or, err := OpenObject(ctx, s, key)
	if err != nil {
		t.Fatal(err)
	}
	defer or.Close()
	got, err := io.ReadAll(or)
	if err != nil || !bytes.Equal(got, data) || h.KeyID != "k1" {
		t.Fatalf("read back %d bytes with key %q: %v", len(got), h.KeyID, err)
	}
}

func sha256Of(b []byte) [32]byte { return sha256.Sum256(b) }
