package backup

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"io"
	"math/rand"
	"strconv"
	"strings"
	"testing"
	"time"
)

const testKey = "v1/timeline/0000000001/full/00000000000000000100-1700000000.snap.zst"

func testHeader(c Compression) Header {
	return Header{
		Kind:        KindFull,
		Compression: c,
		EtcdVersion: "3.6.4",
		ClusterID:   0x0102030405060708,
		Timeline:    1,
		FirstRev:    100,
		Created:     time.Unix(0, 1_700_000_000_000_000_000).UTC(),
	}
}

// payload returns n bytes that compress somewhat, like a database.
func payload(n int, seed int64) []byte {
	r := rand.New(rand.NewSource(seed))
	b := make([]byte, n)
	words := []string{"key/", "value-", "registry/pods/", "\x00\x00\x00", "etcd"}
	for i := 0; i < n; {
		if r.Intn(3) == 0 {
			b[i] = byte(r.Intn(256))
			i++
			continue
		}
		i += copy(b[i:], words[r.Intn(len(words))])
	}
	return b
}

func writeObject(t *testing.T, hdr Header, data []byte, lastRev int64) []byte {
	t.Helper()
	var buf bytes.Buffer
	ow, err := NewObjectWriter(&buf, hdr, nil)
	if err != nil {
		t.Fatal(err)
	}
	for len(data) > 0 { // uneven writes
		n := min(len(data), 7777)
		if _, err := ow.Write(data[:n]); err != nil {
			t.Fatal(err)
		}
		data = data[n:]
	}
	ow.SetLastRev(lastRev)
	if err := ow.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// readObject reads an object and returns its payload and the first error
// that is not io.EOF; it fails the test if a read returns io.EOF before
// the trailer was verified.
func readObject(obj []byte, key string, chunk int) (Header, []byte, *ObjectReader, error) {
	hdr, or, err := NewObjectReader(bytes.NewReader(obj), key, nil)
	if err != nil {
		return Header{}, nil, nil, err
	}
	defer or.Close()
	var out []byte
	buf := make([]byte, chunk)
	for {
		n, err := or.Read(buf)
		out = append(out, buf[:n]...)
		if err == io.EOF {
			return hdr, out, or, nil
		}
		if err != nil {
			return hdr, out, or, err
		}
	}
}

func TestHeaderBytes(t *testing.T) {
	b, err := testHeader(CompressionZstd).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	// The same bytes are in docs/backup-format.md; change both together.
	got := hex.EncodeToString(b)
	const golden = "5354455742414b0a" + // magic "STEWBAK\n"
		"0002" + // format version 2
		"003e" + // header length 62 = 53 + 5 + 4
		"01" + // kind full
		"01" + // compression zstd
		"0000" + // reserved
		"0102030405060708" + // cluster ID
		"0000000000000064" + // first revision 100
		"0000000000000000" + // last revision unknown
		"17979cfe362a0000" + // created 1700000000000000000 ns
		"00000001" + // timeline 1
		"05" + "332e362e34" + // etcd version "3.6.4"
		"52767f5d" // CRC-32C
	if got != golden {
		t.Fatalf("header bytes\n got %s\nwant %s", got, golden)
	}
	h, _, err := readHeader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if h != testHeader(CompressionZstd) {
		t.Fatalf("header round trip: %+v", h)
	}
}

// TestHeaderVersion1ReadsAsTimeline1: headers written before timelines (format version 1, no
// timeline field) are still read, as timeline 1. The bytes are docs/backup-format.md's
// version 1 example.
func TestHeaderVersion1ReadsAsTimeline1(t *testing.T) {
	b, _ := hex.DecodeString("5354455742414b0a" + "0001" + "003a" + "01" + "01" + "0000" + "0102030405060708" +
		"0000000000000064" + "0000000000000000" + "17979cfe362a0000" + "05" + "332e362e34" + "e2657985")
	h, _, err := readHeader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if want := testHeader(CompressionZstd); h != want || h.Timeline != 1 {
		t.Fatalf("version 1 header = %+v, want %+v", h, want)
	}
}

func TestObjectRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    Compression
		size int
		last int64
	}{
		{"zstd empty", CompressionZstd, 0, 0},
		{"zstd small", CompressionZstd, 10, 0},
		{"zstd 3MiB with final revision", CompressionZstd, 3 << 20, 250},
		{"none empty", CompressionNone, 0, 0},
		{"none 1MiB", CompressionNone, 1 << 20, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := payload(tc.size, 1)
			obj := writeObject(t, testHeader(tc.c), data, tc.last)
			for _, chunk := range []int{1, 4096, 1 << 20} {
				if tc.size > 100_000 && chunk == 1 {
					continue
				}
				hdr, got, or, err := readObject(obj, testKey, chunk)
				if err != nil {
					t.Fatalf("chunk %d: %v", chunk, err)
				}
				if hdr != testHeader(tc.c) {
					t.Fatalf("header = %+v", hdr)
				}
				if !bytes.Equal(got, data) {
					t.Fatalf("chunk %d: payload differs (%d bytes, want %d)", chunk, len(got), len(data))
				}
				tr, ok := or.Trailer()
				if !ok || tr.RawSize != int64(tc.size) || tr.LastRev != tc.last {
					t.Fatalf("trailer = %+v, %v", tr, ok)
				}
				if tr.PayloadSize != int64(len(obj)-62-TrailerSize) {
					t.Fatalf("trailer payload size %d, object has %d payload bytes", tr.PayloadSize, len(obj)-62-TrailerSize)
				}
				if sum := sha256.Sum256(obj[62 : len(obj)-TrailerSize]); sum != tr.SHA256 {
					t.Fatal("trailer SHA-256 is not the SHA-256 of the stored payload")
				}
				wantLast := tc.last
				if wantLast == 0 {
					wantLast = hdr.LastRev
				}
				if or.LastRev() != wantLast {
					t.Fatalf("LastRev() = %d, want %d", or.LastRev(), wantLast)
				}
			}
			if tc.c == CompressionZstd && tc.size > 1<<20 && len(obj) > tc.size*3/4 {
				t.Errorf("zstd did not compress: %d bytes for %d", len(obj), tc.size)
			}
		})
	}
}

// Streaming through a pipe proves neither side needs the whole object.
func TestObjectStreamsThroughPipe(t *testing.T) {
	pr, pw := io.Pipe()
	const size = 16 << 20
	go func() {
		ow, err := NewObjectWriter(pw, testHeader(CompressionZstd), nil)
		if err != nil {
			pw.CloseWithError(err)
			return
		}
		chunk := payload(1<<20, 2)
		for i := 0; i < size/len(chunk); i++ {
			if _, err := ow.Write(chunk); err != nil {
				pw.CloseWithError(err)
				return
			}
		}
		pw.CloseWithError(ow.Close())
	}()
	_, or, err := NewObjectReader(pr, testKey, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer or.Close()
	n, err := io.Copy(io.Discard, or)
	if err != nil || n != size {
		t.Fatalf("streamed %d bytes, %v", n, err)
	}
}

func mustCorrupt(t *testing.T, err error, what string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error", what)
	}
	if err == io.EOF || errors.Is(err, io.EOF) {
		t.Fatalf("%s: got io.EOF, damage must be an error", what)
	}
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("%s: error does not wrap ErrCorrupt: %v", what, err)
	}
	if !strings.Contains(err.Error(), testKey) {
		t.Fatalf("%s: error does not name the object: %v", what, err)
	}
}

func TestEveryFlippedByteIsCaught(t *testing.T) {
	for _, c := range []Compression{CompressionZstd, CompressionNone} {
		obj := writeObject(t, testHeader(c), payload(3000, 3), 0)
		for i := range obj {
			bad := bytes.Clone(obj)
			bad[i] ^= 0x40
			_, _, _, err := readObject(bad, testKey, 512)
			mustCorrupt(t, err, c.String()+" flipped byte "+strconv.Itoa(i))
		}
	}
}

func TestEveryTruncationIsCaught(t *testing.T) {
	for _, c := range []Compression{CompressionZstd, CompressionNone} {
		obj := writeObject(t, testHeader(c), payload(3000, 4), 0)
		for n := 0; n < len(obj); n++ {
			_, _, _, err := readObject(obj[:n], testKey, 512)
			mustCorrupt(t, err, c.String()+" truncated to "+strconv.Itoa(n))
		}
		// Bytes appended after the trailer are damage too.
		_, _, _, err := readObject(append(bytes.Clone(obj), 0), testKey, 512)
		mustCorrupt(t, err, c.String()+" with a trailing byte")
	}
}

func TestTruncatedMessages(t *testing.T) {
	obj := writeObject(t, testHeader(CompressionZstd), payload(3000, 5), 0)
	for _, tc := range []struct {
		name string
		n    int
		want string
	}{
		{"empty", 0, "shorter than a header"},
		{"in header", 20, "truncated inside the header"},
		{"in version string", 50, "truncated inside the header"},
		{"in trailer", len(obj) - 10, "trailer"},
		{"no trailer", len(obj) - TrailerSize, "truncated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, _, err := readObject(obj[:tc.n], testKey, 4096)
			mustCorrupt(t, err, tc.name)
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

func TestNewerFormatVersion(t *testing.T) {
	obj := writeObject(t, testHeader(CompressionZstd), nil, 0)
	obj[9] = 4 // version 4, with its header CRC made right
	binary.BigEndian.PutUint32(obj[58:], crc32.Checksum(obj[:58], crc32.MakeTable(crc32.Castagnoli)))
	_, _, err := NewObjectReader(bytes.NewReader(obj), testKey, nil)
	if err == nil || !strings.Contains(err.Error(), "upgrade steward") || !strings.Contains(err.Error(), testKey) {
		t.Fatalf("newer version: %v", err)
	}
}

func TestNotABackup(t *testing.T) {
	_, _, err := NewObjectReader(strings.NewReader("SQLite format 3\x00 and then a lot more bytes than a header"), testKey, nil)
	mustCorrupt(t, err, "foreign file")
	if !strings.Contains(err.Error(), "no backup header") {
		t.Fatalf("foreign file: %v", err)
	}
}

func TestHeaderValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Header)
	}{
		{"unknown kind", func(h *Header) { h.Kind = 9 }},
		{"unknown compression", func(h *Header) { h.Compression = 7 }},
		{"long etcd version", func(h *Header) { h.EtcdVersion = strings.Repeat("x", 256) }},
		{"last before first", func(h *Header) { h.LastRev = 5 }},
		{"negative revision", func(h *Header) { h.FirstRev = -1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := testHeader(CompressionZstd)
			tc.mod(&h)
			if _, err := NewObjectWriter(io.Discard, h, nil); err == nil {
				t.Fatal("NewObjectWriter accepted a bad header")
			}
		})
	}
	ow, _ := NewObjectWriter(io.Discard, testHeader(CompressionZstd), nil)
	ow.SetLastRev(99) // before FirstRev 100
	if err := ow.Close(); err == nil {
		t.Fatal("Close accepted a final revision before the first")
	}
}

func TestWriterErrorsPropagate(t *testing.T) {
	fail := errors.New("disk full")
	w := &failAfter{n: 200, err: fail}
	ow, err := NewObjectWriter(w, testHeader(CompressionNone), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = ow.Write(make([]byte, 1000))
	if !errors.Is(err, fail) {
		t.Fatalf("Write = %v, want the writer's error", err)
	}
	if err := ow.Close(); !errors.Is(err, fail) {
		t.Fatalf("Close after a failed Write = %v", err)
	}
}

type failAfter struct {
	n   int
	err error
}

func (f *failAfter) Write(p []byte) (int, error) {
	if len(p) > f.n {
		n := f.n
		f.n = 0
		return n, f.err
	}
	f.n -= len(p)
	return len(p), nil
}
