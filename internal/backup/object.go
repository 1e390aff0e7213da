package backup

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/etcd-steward/steward/internal/seal"
)

// FormatVersion is the newest object format this code writes: encrypted objects are
// version 3, others version 2 (readable by Steward before encryption). It reads versions 1
// (before timelines: timeline 1), 2 and 3.
const (
	FormatVersion          = 3
	formatVersionPlaintext = 2
)

// Object byte layout (all integers big-endian; docs/backup-format.md has
// the same tables):
//
//	header  magic "STEWBAK\n" | version u16 | header length u16 | kind u8 |
//	        compression u8 | reserved u16 (0) | cluster ID u64 |
//	        first revision i64 | last revision i64 | created unix ns i64 |
//	        timeline u32 (version 2 only) |
//	        etcd version length u8 | etcd version |
//	        key ID length u8 | key ID | salt [32] (version 3 only) |
//	        CRC-32C u32 of all before
//	payload the (compressed) bytes, length known only at the end; in version 3 sealed
//	        (package seal) with the key derived from the key ID's key and the salt, the
//	        header as associated data and the trailer's last revision with the last segment
//	trailer magic "STEWEND\n" | payload length u64 | raw length u64 |
//	        last revision i64 | SHA-256 of payload [32] | CRC-32C u32 of all before
//
// The trailer is fixed-size and last, so a streaming writer needs no
// temporary file and a streaming reader finds it by holding back its size.
var (
	headerMagic  = [8]byte{'S', 'T', 'E', 'W', 'B', 'A', 'K', '\n'}
	trailerMagic = [8]byte{'S', 'T', 'E', 'W', 'E', 'N', 'D', '\n'}
	castagnoli   = crc32.MakeTable(crc32.Castagnoli)
)

const (
	headerFixedLen   = 53 // bytes before the etcd version string
	headerFixedLenV1 = 49 // the same in version 1, which has no timeline
	headerCRCLen     = 4
	// TrailerSize is the size of the trailer that ends every object.
	TrailerSize = 68
	// maxEtcdVersion bounds the one variable header field.
	maxEtcdVersion = 255
	// maxHeaderLen bounds the header of any future version, so a damaged
	// length cannot make a reader allocate much.
	maxHeaderLen = 4096
)

// ErrCorrupt is wrapped by every error that says an object's bytes are
// damaged, truncated or not a backup object. Such an object must not be
// applied.
var ErrCorrupt = errors.New("damaged")

// ErrNewerFormat is wrapped by the error for an object of a format version newer than this
// code reads.
var ErrNewerFormat = errors.New("newer format")

// Compression is how the payload is encoded.
type Compression uint8

const (
	CompressionNone Compression = 0
	CompressionZstd Compression = 1
)

func (c Compression) String() string {
	switch c {
	case CompressionNone:
		return "none"
	case CompressionZstd:
		return "zstd"
	}
	return fmt.Sprintf("compression(%d)", uint8(c))
}

// Header is what an object says about itself up front.
type Header struct {
	Kind        Kind
	Compression Compression
	EtcdVersion string // version of the etcd that produced the data, e.g. "3.6.4"
	ClusterID   uint64
	// Timeline is the history the object belongs to (see Chain); version 1 objects are
	// timeline 1.
	Timeline uint32
	// FirstRev and LastRev: see Object. For a full snapshot LastRev may be
	// 0 when the writer did not know it yet; the trailer may then carry it.
	FirstRev int64
	LastRev  int64
	Created  time.Time
	// KeyID names the keyring key the payload is encrypted with; "" if it is not. Salt
	// derives the object's own key from it.
	KeyID string
	Salt  [seal.SaltSize]byte
}

// Encrypted says whether the payload is encrypted.
func (h Header) Encrypted() bool { return h.KeyID != "" }

// Trailer is what an object says about itself at the end, once the
// payload is written.
type Trailer struct {
	PayloadSize int64 // bytes of payload as stored (compressed)
	RawSize     int64 // bytes of payload before compression
	// LastRev is the final last revision if the writer learnt it while
	// writing (full snapshots), else 0: then Header.LastRev stands.
	LastRev int64
	SHA256  [sha256.Size]byte // of the payload as stored
}

func (h Header) validate() error {
	switch {
	case h.Kind != KindFull && h.Kind != KindDelta:
		return fmt.Errorf("unknown kind %d", h.Kind)
	case h.Compression != CompressionNone && h.Compression != CompressionZstd:
		return fmt.Errorf("unknown compression %d", h.Compression)
	case h.Timeline < 1:
		return fmt.Errorf("timeline %d: timelines start at 1", h.Timeline)
	case len(h.EtcdVersion) > maxEtcdVersion:
		return fmt.Errorf("etcd version string is %d bytes, at most %d fit", len(h.EtcdVersion), maxEtcdVersion)
	case len(h.KeyID) > 255:
		return fmt.Errorf("key ID is %d bytes, at most 255 fit", len(h.KeyID))
	case h.FirstRev < 1 || h.LastRev < 0:
		return fmt.Errorf("revisions %d-%d: etcd revisions start at 1", h.FirstRev, h.LastRev)
	case h.LastRev != 0 && h.LastRev < h.FirstRev:
		return fmt.Errorf("last revision %d is before first revision %d", h.LastRev, h.FirstRev)
	case h.Kind == KindDelta && h.LastRev == 0:
		return fmt.Errorf("a delta's last revision must be known when it is written")
	}
	return nil
}

// MarshalBinary returns the header's exact bytes.
func (h Header) MarshalBinary() ([]byte, error) {
	if err := h.validate(); err != nil {
		return nil, fmt.Errorf("backup header: %w", err)
	}
	n, version := headerFixedLen+len(h.EtcdVersion)+headerCRCLen, uint16(formatVersionPlaintext)
	if h.Encrypted() {
		n, version = n+1+len(h.KeyID)+seal.SaltSize, FormatVersion
	}
	b := make([]byte, 0, n)
	b = append(b, headerMagic[:]...)
	b = binary.BigEndian.AppendUint16(b, version)
	b = binary.BigEndian.AppendUint16(b, uint16(n))
	b = append(b, byte(h.Kind), byte(h.Compression), 0, 0)
	b = binary.BigEndian.AppendUint64(b, h.ClusterID)
	b = binary.BigEndian.AppendUint64(b, uint64(h.FirstRev))
	b = binary.BigEndian.AppendUint64(b, uint64(h.LastRev))
	b = binary.BigEndian.AppendUint64(b, uint64(h.Created.UnixNano()))
	b = binary.BigEndian.AppendUint32(b, h.Timeline)
	b = append(b, byte(len(h.EtcdVersion)))
	b = append(b, h.EtcdVersion...)
	if h.Encrypted() {
		b = append(b, byte(len(h.KeyID)))
		b = append(b, h.KeyID...)
		b = append(b, h.Salt[:]...)
	}
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	return b, nil
}

// readHeader reads and checks the header at the start of r. Every format
// version starts with magic, version and header length and ends its
// header with a CRC-32C, so damage is told apart from a newer version.
func readHeader(r io.Reader) (Header, []byte, error) {
	var pre [12]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return Header{}, nil, fmt.Errorf("%w: truncated: the object is shorter than a header", ErrCorrupt)
		}
		return Header{}, nil, fmt.Errorf("read header: %w", err)
	}
	if !bytes.Equal(pre[:8], headerMagic[:]) {
		return Header{}, nil, fmt.Errorf("%w: no backup header (magic %q, want %q)", ErrCorrupt, pre[:8], headerMagic[:])
	}
	total := int(binary.BigEndian.Uint16(pre[10:]))
	if total < headerFixedLenV1+headerCRCLen || total > maxHeaderLen {
		return Header{}, nil, fmt.Errorf("%w: header length %d is impossible", ErrCorrupt, total)
	}
	b := make([]byte, total)
	copy(b, pre[:])
	if _, err := io.ReadFull(r, b[len(pre):]); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return Header{}, nil, fmt.Errorf("%w: truncated inside the header", ErrCorrupt)
		}
		return Header{}, nil, fmt.Errorf("read header: %w", err)
	}
	body := b[:total-headerCRCLen]
	if got, want := binary.BigEndian.Uint32(b[len(body):]), crc32.Checksum(body, castagnoli); got != want {
		return Header{}, nil, fmt.Errorf("%w: header checksum mismatch (stored %08x, computed %08x)", ErrCorrupt, got, want)
	}
	fixed, tl := headerFixedLen, uint32(0)
	v := binary.BigEndian.Uint16(b[8:])
	switch {
	case v == 1:
		fixed, tl = headerFixedLenV1, 1 // before timelines
	case v == formatVersionPlaintext || v == FormatVersion:
		if total < fixed+headerCRCLen {
			return Header{}, nil, fmt.Errorf("%w: header length %d is impossible", ErrCorrupt, total)
		}
		tl = binary.BigEndian.Uint32(b[48:])
	case v > FormatVersion:
		return Header{}, nil, fmt.Errorf("%w: format version %d was written by a newer steward (this one reads up to %d): upgrade steward", ErrNewerFormat, v, FormatVersion)
	default:
		return Header{}, nil, fmt.Errorf("%w: format version %d is not one steward ever wrote", ErrCorrupt, v)
	}
	vlen := int(b[fixed-1])
	rest := body[min(fixed+vlen, len(body)):] // what follows the etcd version
	var keyID string
	var salt [seal.SaltSize]byte
	if v == FormatVersion {
		if len(rest) < 1 || int(rest[0]) == 0 || len(rest) != 1+int(rest[0])+seal.SaltSize {
			return Header{}, nil, fmt.Errorf("%w: header length %d does not match its etcd version and key ID lengths", ErrCorrupt, total)
		}
		keyID = string(rest[1 : 1+rest[0]])
		copy(salt[:], rest[1+rest[0]:])
		rest = nil
	}
	if fixed+vlen > len(body) || len(rest) != 0 {
		return Header{}, nil, fmt.Errorf("%w: header length %d does not match its etcd version length %d", ErrCorrupt, total, vlen)
	}
	h := Header{
		Kind:        Kind(b[12]),
		Compression: Compression(b[13]),
		ClusterID:   binary.BigEndian.Uint64(b[16:]),
		Timeline:    tl,
		FirstRev:    int64(binary.BigEndian.Uint64(b[24:])),
		LastRev:     int64(binary.BigEndian.Uint64(b[32:])),
		Created:     time.Unix(0, int64(binary.BigEndian.Uint64(b[40:]))).UTC(),
		EtcdVersion: string(b[fixed : fixed+vlen]),
		KeyID:       keyID,
		Salt:        salt,
	}
	if err := h.validate(); err != nil {
		return Header{}, nil, fmt.Errorf("%w: header: %v", ErrCorrupt, err)
	}
	return h, b, nil
}

func (t Trailer) marshal() []byte {
	b := make([]byte, 0, TrailerSize)
	b = append(b, trailerMagic[:]...)
	b = binary.BigEndian.AppendUint64(b, uint64(t.PayloadSize))
	b = binary.BigEndian.AppendUint64(b, uint64(t.RawSize))
	b = binary.BigEndian.AppendUint64(b, uint64(t.LastRev))
	b = append(b, t.SHA256[:]...)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

func parseTrailer(b []byte) (Trailer, error) {
	if len(b) != TrailerSize || !bytes.Equal(b[:8], trailerMagic[:]) {
		return Trailer{}, fmt.Errorf("%w: trailer missing: the object is truncated or was never finished", ErrCorrupt)
	}
	if got, want := binary.BigEndian.Uint32(b[64:]), crc32.Checksum(b[:64], castagnoli); got != want {
		return Trailer{}, fmt.Errorf("%w: trailer checksum mismatch (stored %08x, computed %08x)", ErrCorrupt, got, want)
	}
	t := Trailer{
		PayloadSize: int64(binary.BigEndian.Uint64(b[8:])),
		RawSize:     int64(binary.BigEndian.Uint64(b[16:])),
		LastRev:     int64(binary.BigEndian.Uint64(b[24:])),
	}
	copy(t.SHA256[:], b[32:64])
	if t.PayloadSize < 0 || t.RawSize < 0 || t.LastRev < 0 {
		return Trailer{}, fmt.Errorf("%w: trailer has negative sizes or revision", ErrCorrupt)
	}
	return t, nil
}

// ObjectWriter writes one object: header, compressed payload, trailer.
// It does not close the writer beneath it.
type ObjectWriter struct {
	hdr     Header
	out     *hashWriter   // the stored bytes
	sealer  *seal.Writer  // nil without encryption
	payload io.Writer     // sealer or out
	enc     *zstd.Encoder // nil without compression
	raw     int64
	lastRev int64
	err     error
	closed  bool
	trailer Trailer
}

// NewObjectWriter writes hdr to w and returns a writer for the payload.
// A zero hdr.Created is set to now. With keys, the payload is encrypted with
// their active key. Close writes the trailer; an object without its trailer
// is rejected by readers, so a writer abandoned half way can never pass for
// a complete one.
func NewObjectWriter(w io.Writer, hdr Header, keys *seal.Keyring) (*ObjectWriter, error) {
	return newObjectWriter(w, hdr, keys, true)
}

// newObjectWriter is NewObjectWriter; without encode, a compressed payload comes already
// compressed, through writeEncoded.
func newObjectWriter(w io.Writer, hdr Header, keys *seal.Keyring, encode bool) (*ObjectWriter, error) {
	if hdr.Created.IsZero() {
		hdr.Created = time.Now()
	}
	var key []byte
	hdr.KeyID = ""
	if keys != nil {
		salt, err := seal.NewSalt()
		if err != nil {
			return nil, err
		}
		hdr.KeyID, hdr.Salt = keys.Active(), salt
		if key, err = keys.Key(hdr.KeyID); err != nil {
			return nil, err
		}
	}
	hb, err := hdr.MarshalBinary()
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(hb); err != nil {
		return nil, fmt.Errorf("write backup header: %w", err)
	}
	ow := &ObjectWriter{hdr: hdr, out: &hashWriter{w: w, h: sha256.New()}}
	ow.payload = ow.out
	if hdr.Encrypted() {
		if ow.sealer, err = seal.NewWriter(ow.out, key, hdr.Salt, hb); err != nil {
			return nil, err
		}
		ow.payload = ow.sealer
	}
	if hdr.Compression == CompressionZstd && encode {
		if ow.enc, err = newEncoder(ow.payload, hdr.Kind); err != nil {
			return nil, err
		}
	}
	return ow, nil
}

// newEncoder returns the zstd encoder of a payload of the given kind, writing to w.
func newEncoder(w io.Writer, kind Kind) (*zstd.Encoder, error) {
	// One goroutine: steady memory and no CPU spent handing blocks between goroutines
	// (on a node shared with etcd, CPU per byte is what limits a snapshot).
	// SpeedFastest with a 1 MiB window: several times the throughput of SpeedDefault on
	// etcd databases at about the same ratio, and bounded memory (see docs/benchmarks.md).
	// A full snapshot's frames carry no zstd content checksum (xxhash64, ~4% of the
	// encoder's CPU): its payload ends with etcd's SHA-256 of the database, which every
	// reader of a full snapshot checks, and the object's SHA-256 covers the stored bytes.
	//
	// A delta's blocks are entropy-coded even where they hold no repeats (SpeedFastest stores
	// such blocks as they are): values with few repeats between them, random tokens or
	// certificates, still take half the space, in the store and in the sidecar's buffer, for
	// little CPU at the rate deltas come.
	enc, err := zstd.NewWriter(w,
		zstd.WithEncoderConcurrency(1),
		zstd.WithEncoderLevel(zstd.SpeedFastest),
		zstd.WithWindowSize(1<<20),
		zstd.WithEncoderCRC(kind != KindFull),
		zstd.WithAllLitEntropyCompression(kind == KindDelta))
	if err != nil {
		return nil, fmt.Errorf("start zstd encoder: %w", err)
	}
	return enc, nil
}

// Header returns the header as written.
func (o *ObjectWriter) Header() Header { return o.hdr }

// Write adds p to the payload.
func (o *ObjectWriter) Write(p []byte) (int, error) {
	if o.closed {
		return 0, errors.New("backup object writer already closed")
	}
	if o.err != nil {
		return 0, o.err
	}
	var n int
	var err error
	if o.enc != nil {
		n, err = o.enc.Write(p)
	} else {
		n, err = o.payload.Write(p)
	}
	o.raw += int64(n)
	if err != nil {
		o.err = fmt.Errorf("write backup payload: %w", err)
		return n, o.err
	}
	return n, nil
}

// writeEncoded adds a payload that is already encoded as the header says, and was raw bytes
// before that.
func (o *ObjectWriter) writeEncoded(payload *chunkBuffer, raw int64) error {
	if o.closed {
		return errors.New("backup object writer already closed")
	}
	if o.err != nil {
		return o.err
	}
	if o.enc != nil {
		return errors.New("backup object writer compresses its payload itself")
	}
	err := payload.writeTo(o.payload)
	o.raw += raw
	if err != nil {
		o.err = fmt.Errorf("write backup payload: %w", err)
	}
	return o.err
}

// SetLastRev records the final last revision for the trailer, for writers
// that learn it only while writing (full snapshots).
func (o *ObjectWriter) SetLastRev(rev int64) { o.lastRev = rev }

// Close finishes the payload and writes the trailer. It does not close the
// underlying writer: commit that only if Close returned nil.
func (o *ObjectWriter) Close() error {
	if o.closed {
		return o.err
	}
	o.closed = true
	if o.enc != nil {
		if err := o.enc.Close(); err != nil && o.err == nil {
			o.err = fmt.Errorf("finish zstd stream: %w", err)
		}
	}
	if o.err != nil {
		return o.err
	}
	if o.lastRev != 0 && o.lastRev < o.hdr.FirstRev {
		o.err = fmt.Errorf("backup trailer: last revision %d is before first revision %d", o.lastRev, o.hdr.FirstRev)
		return o.err
	}
	if o.sealer != nil {
		if err := o.sealer.Close(sealedEnd(o.lastRev)); err != nil {
			o.err = fmt.Errorf("write backup payload: %w", err)
			return o.err
		}
	}
	o.trailer = Trailer{PayloadSize: o.out.n, RawSize: o.raw, LastRev: o.lastRev}
	o.out.h.Sum(o.trailer.SHA256[:0])
	if _, err := o.out.w.Write(o.trailer.marshal()); err != nil {
		o.err = fmt.Errorf("write backup trailer: %w", err)
	}
	return o.err
}

// Trailer returns the trailer written by a successful Close.
func (o *ObjectWriter) Trailer() Trailer { return o.trailer }

// sealedEnd is what the last sealed segment of an encrypted payload authenticates besides the
// header: the trailer's last revision, the one trailer field not checked against the payload.
func sealedEnd(lastRev int64) []byte {
	return binary.BigEndian.AppendUint64(nil, uint64(lastRev))
}

type hashWriter struct {
	w io.Writer
	h hash.Hash
	n int64
}

func (h *hashWriter) Write(p []byte) (int, error) {
	n, err := h.w.Write(p)
	h.h.Write(p[:n])
	h.n += int64(n)
	return n, err
}

// ObjectReader streams an object's payload, decompressed, and verifies
// the trailer (length and SHA-256) before it reports io.EOF. Any damage,
// truncation included, is an error wrapping ErrCorrupt that names the key;
// never a silent io.EOF.
type ObjectReader struct {
	key     string
	hdr     Header
	pr      *payloadReader
	plain   io.Reader // the payload decrypted: pr, or an opener of it
	dec     *zstd.Decoder
	src     io.Reader // plain or dec
	raw     int64
	maxRaw  int64 // LimitRaw's bound; -1: none
	err     error // sticky, io.EOF once verified
	closer  io.Closer
	trailer Trailer
}

// maxWindow bounds decoder memory whatever a (possibly hostile) frame asks
// for; our encoder's windows are far smaller.
const maxWindow = 64 << 20

// notEncrypted is the error for an object that is not encrypted, read with keys.
func notEncrypted(keys *seal.Keyring) error {
	return fmt.Errorf("%w: it is not encrypted, and backups with keys %s are: it was written without the keys (planted in the store, or before encryption was turned on); it is not read with keys", ErrCorrupt, keys)
}

// ErrNoKey is wrapped by the error for an encrypted object read without the key it was
// encrypted with.
var ErrNoKey = errors.New("encryption key missing")

// NewObjectReader reads the header from r and returns it with a reader of
// the payload. key names the object in errors. Close the reader when done;
// it does not close r.
//
// With keys, only encrypted objects are read: one that is not was written by someone without
// the keys (planted), or before encryption was turned on, and is refused as damaged. Without
// keys, an encrypted object is refused with ErrNoKey.
func NewObjectReader(r io.Reader, key string, keys *seal.Keyring) (Header, *ObjectReader, error) {
	hdr, hb, err := readHeader(r)
	if err != nil {
		return Header{}, nil, fmt.Errorf("backup object %s: %w", key, err)
	}
	or := &ObjectReader{key: key, hdr: hdr, pr: newPayloadReader(r), maxRaw: -1}
	or.plain = or.pr
	switch {
	case keys == nil && hdr.Encrypted():
		return Header{}, nil, fmt.Errorf("backup object %s: %w: it is encrypted with key %q: give the backups' encryption keys (--encryption-keys)", key, ErrNoKey, hdr.KeyID)
	case keys != nil && !hdr.Encrypted():
		return Header{}, nil, fmt.Errorf("backup object %s: %w", key, notEncrypted(keys))
	case keys != nil:
		k, err := keys.Key(hdr.KeyID)
		if err != nil {
			return Header{}, nil, fmt.Errorf("backup object %s: %w: %v", key, ErrNoKey, err)
		}
		pr := or.pr
		end := func() ([]byte, error) {
			if pr.err != io.EOF {
				return nil, pr.err // the trailer did not verify
			}
			return sealedEnd(pr.trailer.LastRev), nil
		}
		if or.plain, err = seal.NewReader(or.pr, k, hdr.Salt, hb, end); err != nil {
			return Header{}, nil, fmt.Errorf("backup object %s: %w", key, err)
		}
	}
	or.src = or.plain
	if hdr.Compression == CompressionZstd {
		or.dec, err = getDecoder(or.plain)
		if err != nil {
			return Header{}, nil, fmt.Errorf("backup object %s: start zstd decoder: %w", key, err)
		}
		or.src = or.dec
	}
	return hdr, or, nil
}

// Header returns the object's header.
func (o *ObjectReader) Header() Header { return o.hdr }

// Key returns the object's key, as given to NewObjectReader.
func (o *ObjectReader) Key() string { return o.key }

// LimitRaw makes Read fail, as damage, once the payload decompresses to more than n bytes:
// the raw size a trailer read ahead declared (ReadTrailer), so that no more is ever written.
func (o *ObjectReader) LimitRaw(n int64) { o.maxRaw = n }

func (o *ObjectReader) Read(p []byte) (int, error) {
	if o.err != nil {
		return 0, o.err
	}
	n, err := o.src.Read(p)
	o.raw += int64(n)
	if o.maxRaw >= 0 && o.raw > o.maxRaw {
		n -= int(o.raw - o.maxRaw)
		o.raw = o.maxRaw
		o.err = fmt.Errorf("backup object %s: %w: it decompresses to more than the %d bytes its trailer declares", o.key, ErrCorrupt, o.maxRaw)
		return n, o.err
	}
	if err == nil {
		return n, nil
	}
	switch {
	case err == io.EOF:
		err = o.finish()
	case o.pr.err != nil && o.pr.err != io.EOF:
		// The root cause is below the decoder (damage, truncation or the
		// store); report that rather than the decoder's view of it.
		err = o.pr.err
	case errors.Is(err, seal.ErrAuthentication):
		err = fmt.Errorf("%w: it does not decrypt with key %q: the key is not the one it was written with, or the object was altered or planted (%v)", ErrCorrupt, o.hdr.KeyID, err)
	case o.dec != nil && !errors.Is(err, ErrCorrupt):
		// The compressed stream itself is broken.
		err = fmt.Errorf("%w: zstd: %v", ErrCorrupt, err)
	}
	if err != io.EOF {
		err = fmt.Errorf("backup object %s: %w", o.key, err)
	}
	o.err = err
	return n, err
}

// finish runs when the decoded stream ends: it makes sure the payload was
// read to the trailer and that the trailer agrees with what was read.
func (o *ObjectReader) finish() error {
	if o.pr.err == nil {
		// The decoder may stop at the end of its last frame before it has
		// seen the end of the payload; anything left over is damage.
		var one [1]byte
		if n, err := o.plain.Read(one[:]); n > 0 {
			return fmt.Errorf("%w: bytes after the end of the zstd stream", ErrCorrupt)
		} else if err == nil {
			return fmt.Errorf("%w: payload did not end with the compressed stream", ErrCorrupt)
		}
	}
	if o.pr.err != io.EOF {
		return o.pr.err
	}
	t := o.pr.trailer
	if t.RawSize != o.raw {
		return fmt.Errorf("%w: decompressed %d bytes, the trailer says %d", ErrCorrupt, o.raw, t.RawSize)
	}
	if t.LastRev != 0 && t.LastRev < o.hdr.FirstRev {
		return fmt.Errorf("%w: trailer's last revision %d is before the header's first revision %d", ErrCorrupt, t.LastRev, o.hdr.FirstRev)
	}
	o.trailer = t
	return io.EOF
}

// Trailer returns the verified trailer; ok is false until Read has
// returned io.EOF.
func (o *ObjectReader) Trailer() (t Trailer, ok bool) {
	return o.trailer, o.err == io.EOF
}

// LastRev is the object's last revision: the trailer's if it has one,
// else the header's. Valid after Read returned io.EOF.
func (o *ObjectReader) LastRev() int64 {
	if o.trailer.LastRev != 0 {
		return o.trailer.LastRev
	}
	return o.hdr.LastRev
}

// Close releases the decoder (and, for OpenObject, the store reader).
func (o *ObjectReader) Close() error {
	if o.dec != nil {
		putDecoder(o.dec, o.err == io.EOF)
		o.dec = nil
	}
	if o.err == nil {
		o.err = fmt.Errorf("backup object %s: reader closed", o.key)
	}
	if o.closer != nil {
		c := o.closer
		o.closer = nil
		return c.Close()
	}
	return nil
}

// decoders keeps zstd decoders for the next object: a decoder's buffers are most of what
// reading an object allocates (over 1 MiB), and a restore reads an object every few thousand
// revisions, twice.
var decoders sync.Pool

func getDecoder(r io.Reader) (*zstd.Decoder, error) {
	if d, ok := decoders.Get().(*zstd.Decoder); ok {
		if err := d.Reset(r); err == nil {
			return d, nil
		}
		d.Close()
	}
	return zstd.NewReader(r,
		zstd.WithDecoderConcurrency(1),
		zstd.WithDecoderLowmem(true),
		zstd.WithDecoderMaxWindow(maxWindow))
}

// putDecoder keeps d for the next object if it read its stream to the end (ok); else, or if
// it cannot let go of its reader, it is closed.
func putDecoder(d *zstd.Decoder, ok bool) {
	if ok && d.Reset(nil) == nil {
		decoders.Put(d)
		return
	}
	d.Close()
}

// payloadReader returns the bytes between header and trailer. It holds
// back the last TrailerSize bytes it has seen; at the end of the input
// those are the trailer, which must match the length and SHA-256 of what
// was returned before it reports io.EOF.
type payloadReader struct {
	r       io.Reader
	buf     []byte
	start   int
	end     int
	eof     bool
	h       hash.Hash
	n       int64
	err     error
	trailer Trailer
}

func newPayloadReader(r io.Reader) *payloadReader {
	return &payloadReader{r: r, buf: make([]byte, 64<<10), h: sha256.New()}
}

func (p *payloadReader) Read(b []byte) (int, error) {
	if p.err != nil {
		return 0, p.err
	}
	for p.end-p.start <= TrailerSize && !p.eof {
		if p.start > 0 {
			p.end = copy(p.buf, p.buf[p.start:p.end])
			p.start = 0
		}
		n, err := p.r.Read(p.buf[p.end:])
		p.end += n
		if err == io.EOF {
			p.eof = true
		} else if err != nil {
			p.err = err
			return 0, err
		}
	}
	if avail := p.end - p.start - TrailerSize; avail > 0 {
		n := copy(b, p.buf[p.start:p.start+avail])
		p.h.Write(p.buf[p.start : p.start+n])
		p.start += n
		p.n += int64(n)
		return n, nil
	}
	// End of input: what is held back must be the trailer.
	p.err = p.verify(p.buf[p.start:p.end])
	return 0, p.err
}

func (p *payloadReader) verify(tail []byte) error {
	if len(tail) < TrailerSize {
		return fmt.Errorf("%w: truncated: the object ends %d bytes into its trailer", ErrCorrupt, len(tail))
	}
	t, err := parseTrailer(tail)
	if err != nil {
		return err
	}
	if t.PayloadSize != p.n {
		return fmt.Errorf("%w: payload is %d bytes, the trailer says %d", ErrCorrupt, p.n, t.PayloadSize)
	}
	var sum [sha256.Size]byte
	p.h.Sum(sum[:0])
	if sum != t.SHA256 {
		return fmt.Errorf("%w: payload SHA-256 mismatch (stored %x, computed %x)", ErrCorrupt, t.SHA256[:8], sum[:8])
	}
	p.trailer = t
	return io.EOF
}
