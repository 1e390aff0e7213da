package seal

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func sealed(t *testing.T, key []byte, salt [SaltSize]byte, aad, end, plain []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	w, err := NewWriter(&out, key, salt, aad)
	if err != nil {
		t.Fatal(err)
	}
	// Odd write sizes, so segments do not line up with writes.
	for p := plain; len(p) > 0; {
		n := min(len(p), 7001)
		if _, err := w.Write(p[:n]); err != nil {
			t.Fatal(err)
		}
		p = p[n:]
	}
	if err := w.Close(end); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func open(key []byte, salt [SaltSize]byte, aad, end, b []byte) ([]byte, error) {
	r, err := NewReader(bytes.NewReader(b), key, salt, aad, func() ([]byte, error) { return end, nil })
	if err != nil {
		return nil, err
	}
	return io.ReadAll(r)
}

func random(t *testing.T, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRoundTrip(t *testing.T) {
	key, salt := random(t, KeySize), [SaltSize]byte{1}
	for _, n := range []int{0, 1, SegmentSize - 1, SegmentSize, SegmentSize + 1, 3*SegmentSize + 17} {
		plain := random(t, n)
		b := sealed(t, key, salt, []byte("header"), []byte("end"), plain)
		segs := max(1, (n+SegmentSize-1)/SegmentSize)
		if len(b) != n+segs*Overhead {
			t.Errorf("%d bytes sealed into %d, want %d", n, len(b), n+segs*Overhead)
		}
		if n > 64 && bytes.Contains(b, plain[:64]) {
			t.Errorf("%d bytes: the plaintext shows in the sealed stream", n)
		}
		got, err := open(key, salt, []byte("header"), []byte("end"), b)
		if err != nil || !bytes.Equal(got, plain) {
			t.Errorf("%d bytes: opened %d bytes, %v", n, len(got), err)
		}
	}
}

// TestTamperingIsRefused: whatever is changed about a sealed stream, or whatever it is opened
// with, it does not open; and it never returns plaintext past what authenticated.
func TestTamperingIsRefused(t *testing.T) {
	key, salt := random(t, KeySize), [SaltSize]byte{2}
	plain := random(t, 3*SegmentSize+100)
	b := sealed(t, key, salt, []byte("header"), []byte("end"), plain)
	seg := SegmentSize + Overhead
	flip := func(i int) []byte { c := bytes.Clone(b); c[i] ^= 1; return c }
	swapped := bytes.Clone(b)
	copy(swapped[:seg], b[seg:2*seg])
	copy(swapped[seg:2*seg], b[:seg])
	otherSalt := salt
	otherSalt[0]++
	for _, tc := range []struct {
		name      string
		key       []byte
		salt      [SaltSize]byte
		aad, end  []byte
		b         []byte
		wantBytes int // plaintext returned before the error
	}{
		{"wrong key", random(t, KeySize), salt, []byte("header"), []byte("end"), b, 0},
		{"other salt", key, otherSalt, []byte("header"), []byte("end"), b, 0},
		{"other header", key, salt, []byte("headex"), []byte("end"), b, 0},
		{"other end", key, salt, []byte("header"), []byte("enx"), b, 3 * SegmentSize},
		{"a byte of the first segment flipped", key, salt, []byte("header"), []byte("end"), flip(10), 0},
		{"a tag of the second segment flipped", key, salt, []byte("header"), []byte("end"), flip(2*seg - 1), SegmentSize},
		{"a byte of the last segment flipped", key, salt, []byte("header"), []byte("end"), flip(len(b) - 20), 3 * SegmentSize},
		{"cut at a segment boundary", key, salt, []byte("header"), []byte("end"), b[:2*seg], SegmentSize},
		{"cut inside the last segment", key, salt, []byte("header"), []byte("end"), b[:len(b)-1], 3 * SegmentSize},
		{"segments swapped", key, salt, []byte("header"), []byte("end"), swapped, 0},
		{"extended", key, salt, []byte("header"), []byte("end"), append(bytes.Clone(b), b[:seg]...), 3 * SegmentSize},
		{"empty", key, salt, []byte("header"), []byte("end"), nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := open(tc.key, tc.salt, tc.aad, tc.end, tc.b)
			if !errors.Is(err, ErrAuthentication) {
				t.Fatalf("opened %d bytes, err %v: want ErrAuthentication", len(got), err)
			}
			if len(got) != tc.wantBytes || !bytes.Equal(got, plain[:len(got)]) {
				t.Fatalf("%d bytes returned before the error, want the %d that authenticated", len(got), tc.wantBytes)
			}
		})
	}
}

func TestLoadKeyring(t *testing.T) {
	k1, k2 := random(t, KeySize), random(t, KeySize)
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	b64 := func(k []byte) string { return strings.TrimSpace(base64Std(k)) }
	file := write("keys", "# rotated in November\nold "+b64(k1)+"\nnew "+hexOf(k2)+"\n")
	kr, err := LoadKeyring(file, "new")
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := kr.Key("old"); !bytes.Equal(got, k1) {
		t.Fatal("key old not read from base64")
	}
	if got, _ := kr.Key("new"); !bytes.Equal(got, k2) || kr.Active() != "new" {
		t.Fatal("key new not read from hex, or not active")
	}
	if _, err := kr.Key("gone"); err == nil || !strings.Contains(err.Error(), `"gone"`) || !strings.Contains(err.Error(), file) {
		t.Fatalf("a missing key: %v", err)
	}
	if strings.Contains(kr.String(), b64(k1)) {
		t.Fatal("the keyring's String shows a key")
	}

	sdir := filepath.Join(dir, "secret")
	if err := os.MkdirAll(filepath.Join(sdir, "..data"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sdir, "k1"), []byte(b64(k1)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if kr, err := LoadKeyring(sdir, ""); err != nil || kr.Active() != "k1" {
		t.Fatalf("one key in a directory: %v, %v", kr, err)
	}

	secret := b64(random(t, 16))
	for _, tc := range []struct {
		name, text, active, want string
	}{
		{"no key", "# nothing\n", "", "no key in it"},
		{"short key", "a " + secret + "\n", "", "16 bytes, want 32"},
		{"not a key", "a " + secret + "!!\n", "", "neither base64 nor hex"},
		{"two fields wanted", "a\n", "", "line 1"},
		{"a duplicate", "a " + b64(k1) + "\na " + b64(k2) + "\n", "", `"a" appears twice`},
		{"a bad ID", "a/b " + b64(k1) + "\n", "", "only letters"},
		{"two keys, none named", "a " + b64(k1) + "\nb " + b64(k2) + "\n", "", "name the one"},
		{"the active key missing", "a " + b64(k1) + "\n", "b", `no key with ID "b"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadKeyring(write(tc.name, tc.text), tc.active)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
			if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), b64(k1)) {
				t.Fatalf("the error shows key material: %v", err)
			}
		})
	}
}

func base64Std(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
func hexOf(b []byte) string     { return hex.EncodeToString(b) }
