package seal

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzKeyringFile: whatever a keyring file holds, loading it either fails with an error that
// shows none of its keys' text, or gives keys of 32 bytes under valid IDs.
func FuzzKeyringFile(f *testing.F) {
	f.Add([]byte("k1 " + strings.Repeat("A", 43) + "=\n"))
	f.Add([]byte("# c\nold 0101010101010101010101010101010101010101010101010101010101010101\nnew AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=\n"))
	f.Add([]byte("a b c\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "keys")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		k, err := LoadKeyring(p, "")
		if err != nil {
			// The error may name any line's key ID (quoted), which may hold the text of
			// another line's key: the keys are looked for in the message without the IDs.
			var lines [][]string
			msg := err.Error()
			for _, line := range strings.Split(string(data), "\n") {
				if fs := strings.Fields(line); len(fs) == 2 {
					lines = append(lines, fs)
					msg = strings.ReplaceAll(msg, fmt.Sprintf("%q", fs[0]), "")
				}
			}
			for _, fs := range lines {
				if len(fs[1]) >= 16 && strings.Contains(msg, fs[1]) {
					t.Fatalf("the error shows a key's text: %v", err)
				}
			}
			return
		}
		for _, id := range k.IDs() {
			key, err := k.Key(id)
			if err != nil || len(key) != KeySize || checkKeyID(id) != nil {
				t.Fatalf("key %q: %d bytes, %v", id, len(key), err)
			}
		}
	})
}

// FuzzOpen: no stream opens unless it was sealed with the key: arbitrary bytes, or a sealed
// stream with bytes changed, give ErrAuthentication and never more plaintext than was sealed.
func FuzzOpen(f *testing.F) {
	key, salt := bytes.Repeat([]byte{7}, KeySize), [SaltSize]byte{3}
	var sealedSeed bytes.Buffer
	w, _ := NewWriter(&sealedSeed, key, salt, []byte("h"))
	w.Write([]byte("payload"))
	w.Close([]byte("e"))
	f.Add(sealedSeed.Bytes(), 0, byte(0))
	f.Add([]byte{}, 0, byte(1))
	f.Add(bytes.Repeat([]byte{1}, SegmentSize+Overhead+5), 3, byte(1))
	f.Fuzz(func(t *testing.T, data []byte, at int, flip byte) {
		sealed := sealedSeed.Bytes()
		tampered := bytes.Equal(data, sealed) && flip != 0
		if tampered {
			data = bytes.Clone(data)
			data[(at%len(data)+len(data))%len(data)] ^= flip
		}
		r, err := NewReader(bytes.NewReader(data), key, salt, []byte("h"), func() ([]byte, error) { return []byte("e"), nil })
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(r)
		if bytes.Equal(data, sealed) {
			if err != nil || string(got) != "payload" {
				t.Fatalf("the sealed stream opened to %q, %v", got, err)
			}
			return
		}
		if !errors.Is(err, ErrAuthentication) {
			t.Fatalf("%d bytes opened to %d bytes, err %v: want ErrAuthentication", len(data), len(got), err)
		}
	})
}
