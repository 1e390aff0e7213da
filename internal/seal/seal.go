// Package seal encrypts backup payloads: AES-256-GCM over fixed-size segments, with a key
// derived per object (HKDF-SHA256 of a keyring key and a random salt), so a counter is a safe
// nonce. Every segment is authenticated with the caller's associated data (the object's
// header), and the last one is marked and authenticated with more (what the object says
// about itself at its end): a reordered, cut, extended or planted stream does not open.
package seal

import (
	"bufio"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

const (
	// KeySize is the size of a keyring key and of the key derived for each object.
	KeySize = 32
	// SaltSize is the size of the random salt each object's key is derived with.
	SaltSize = 32
	// SegmentSize is the plaintext of one sealed segment; the last may be shorter.
	SegmentSize = 64 << 10
	// Overhead is what sealing adds to each segment (the GCM tag).
	Overhead = 16
)

// ErrAuthentication is returned when a segment does not open: the key is wrong, or the bytes
// were altered, cut, reordered or written without the key.
var ErrAuthentication = errors.New("does not authenticate")

// NewSalt returns a random salt for a new object.
func NewSalt() ([SaltSize]byte, error) {
	var s [SaltSize]byte
	if _, err := rand.Read(s[:]); err != nil {
		return s, fmt.Errorf("random salt: %w", err)
	}
	return s, nil
}

// objectAEAD derives the object's key from a keyring key and the object's salt.
func objectAEAD(key []byte, salt [SaltSize]byte) (cipher.AEAD, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("encryption key is %d bytes, want %d", len(key), KeySize)
	}
	k, err := hkdf.Key(sha256.New, key, salt[:], "steward backup object", KeySize)
	if err != nil {
		return nil, err
	}
	b, err := aes.NewCipher(k)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

// nonce is segment n's nonce: its number, and whether it is the last.
func nonce(n uint64, last bool) []byte {
	b := make([]byte, 12)
	binary.BigEndian.PutUint64(b, n)
	if last {
		b[11] = 1
	}
	return b
}

// lastAAD is the associated data of the last segment: the object's, then what its end says.
func lastAAD(aad, end []byte) []byte {
	out := make([]byte, 0, len(aad)+1+len(end))
	out = append(out, aad...)
	out = append(out, 0xff)
	return append(out, end...)
}

// Writer seals what is written to it, segment by segment, into the writer beneath.
type Writer struct {
	w    io.Writer
	aead cipher.AEAD
	aad  []byte
	buf  []byte // plaintext of the segment being filled
	out  []byte
	n    uint64 // segments written
	err  error
}

// NewWriter returns a writer that seals into w with key and salt, authenticating aad with
// every segment. Close seals the last segment.
func NewWriter(w io.Writer, key []byte, salt [SaltSize]byte, aad []byte) (*Writer, error) {
	a, err := objectAEAD(key, salt)
	if err != nil {
		return nil, err
	}
	return &Writer{w: w, aead: a, aad: append([]byte(nil), aad...), buf: make([]byte, 0, SegmentSize)}, nil
}

func (s *Writer) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		if s.err != nil {
			return n, s.err
		}
		// A full segment is sealed only once more follows: the last one is sealed by Close.
		if len(s.buf) == SegmentSize {
			s.seal(false, nil)
			continue
		}
		m := min(len(p), SegmentSize-len(s.buf))
		s.buf = append(s.buf, p[:m]...)
		p, n = p[m:], n+m
	}
	return n, s.err
}

func (s *Writer) seal(last bool, end []byte) {
	aad := s.aad
	if last {
		aad = lastAAD(s.aad, end)
	}
	s.out = s.aead.Seal(s.out[:0], nonce(s.n, last), s.buf, aad)
	s.n++
	s.buf = s.buf[:0]
	if _, err := s.w.Write(s.out); err != nil {
		s.err = err
	}
}

// Close seals the last segment (empty if nothing is pending), authenticating end with it. It
// does not close the writer beneath.
func (s *Writer) Close(end []byte) error {
	if s.err != nil {
		return s.err
	}
	s.seal(true, end)
	return s.err
}

// Reader opens a stream a Writer sealed.
type Reader struct {
	r    *bufio.Reader
	aead cipher.AEAD
	aad  []byte
	end  func() ([]byte, error)
	in   []byte
	buf  []byte // opened plaintext not yet read
	n    uint64
	done bool
	err  error
}

// NewReader opens what r holds with key and salt. end is called once the last segment has
// been read (its bytes are the last of r) and returns what Close was given, as the reader
// knows it.
func NewReader(r io.Reader, key []byte, salt [SaltSize]byte, aad []byte, end func() ([]byte, error)) (*Reader, error) {
	a, err := objectAEAD(key, salt)
	if err != nil {
		return nil, err
	}
	return &Reader{r: bufio.NewReaderSize(r, SegmentSize+Overhead), aead: a, aad: append([]byte(nil), aad...), end: end, in: make([]byte, SegmentSize+Overhead)}, nil
}

func (s *Reader) Read(p []byte) (int, error) {
	for len(s.buf) == 0 {
		if s.err != nil {
			return 0, s.err
		}
		if s.done {
			s.err = io.EOF
			return 0, s.err
		}
		s.err = s.next()
	}
	n := copy(p, s.buf)
	s.buf = s.buf[n:]
	return n, nil
}

// next reads and opens one segment.
func (s *Reader) next() error {
	k, err := io.ReadFull(s.r, s.in)
	switch {
	case err == io.ErrUnexpectedEOF || err == io.EOF:
	case err != nil:
		return err
	default:
		if _, perr := s.r.Peek(1); perr == io.EOF {
			err = io.EOF
		} else if perr != nil {
			return perr
		}
	}
	last := err != nil
	if k < Overhead {
		return fmt.Errorf("segment %d: %w: %d bytes, shorter than a sealed segment", s.n, ErrAuthentication, k)
	}
	aad := s.aad
	if last {
		end, err := s.end()
		if err != nil {
			return err
		}
		aad = lastAAD(s.aad, end)
	}
	s.buf, err = s.aead.Open(s.in[:0], nonce(s.n, last), s.in[:k], aad)
	if err != nil {
		return fmt.Errorf("segment %d: %w", s.n, ErrAuthentication)
	}
	s.n++
	s.done = last
	return nil
}
