package seal

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Keyring holds the keys backups are encrypted with, by ID. New objects are sealed with the
// active key; objects sealed with any key the keyring holds stay readable, so a key is rotated
// by adding the new one, making it active, and removing the old one once no backup needs it.
type Keyring struct {
	source string // where the keys came from, for errors
	keys   map[string][]byte
	active string
}

// maxKeyID bounds a key ID: it is stored in every object header.
const maxKeyID = 64

// LoadKeyring reads keys from path: a directory holding one key per file, named by its ID (a
// Kubernetes Secret mounted as a volume; names starting with "." are skipped), or a file of
// "ID KEY" lines ("#" starts a comment). A key is 32 bytes, in base64 or hex. active names
// the key new objects are sealed with; it may be empty when the keyring holds one key.
func LoadKeyring(path, active string) (*Keyring, error) {
	k := &Keyring{source: path, keys: map[string][]byte{}}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("encryption keys: %w", err)
	}
	if fi.IsDir() {
		err = k.loadDir(path)
	} else {
		err = k.loadFile(path)
	}
	if err == nil {
		err = k.activate(active)
	}
	if err != nil {
		return nil, fmt.Errorf("encryption keys %s: %w", path, err)
	}
	return k, nil
}

// KeyringFromData is LoadKeyring of a directory holding data's values under its names (a
// Kubernetes Secret's data, checked before it is mounted). source names it in errors.
func KeyringFromData(source, active string, data map[string][]byte) (*Keyring, error) {
	k := &Keyring{source: source, keys: map[string][]byte{}}
	ids := make([]string, 0, len(data))
	for id := range data {
		ids = append(ids, id)
	}
	slices.Sort(ids) // the first bad key is the same one every time
	for _, id := range ids {
		if err := k.add(id, string(bytes.TrimSpace(data[id]))); err != nil {
			return nil, fmt.Errorf("encryption keys %s: %w", source, err)
		}
	}
	if err := k.activate(active); err != nil {
		return nil, fmt.Errorf("encryption keys %s: %w", source, err)
	}
	return k, nil
}

// activate makes active the key new objects are sealed with (the only key, if active is "").
func (k *Keyring) activate(active string) error {
	switch {
	case len(k.keys) == 0:
		return fmt.Errorf("no key in it: add one (32 random bytes in base64: head -c32 /dev/urandom | base64)")
	case active != "":
		if _, ok := k.keys[active]; !ok {
			return fmt.Errorf("no key with ID %q to encrypt with (it holds %s)", active, strings.Join(k.IDs(), ", "))
		}
		k.active = active
	case len(k.keys) == 1:
		k.active = k.IDs()[0]
	default:
		return fmt.Errorf("it holds %d keys (%s): name the one new backups are encrypted with", len(k.keys), strings.Join(k.IDs(), ", "))
	}
	return nil
}

func (k *Keyring) loadDir(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		p := filepath.Join(dir, e.Name())
		fi, err := os.Stat(p) // a Secret's files are symbolic links
		if err != nil {
			return err
		}
		if fi.IsDir() {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := k.add(e.Name(), string(bytes.TrimSpace(b))); err != nil {
			return err
		}
	}
	return nil
}

func (k *Keyring) loadFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		t := strings.TrimSpace(sc.Text())
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		fields := strings.Fields(t)
		if len(fields) != 2 {
			return fmt.Errorf("line %d: want \"ID KEY\", found %d fields", line, len(fields))
		}
		if err := k.add(fields[0], fields[1]); err != nil {
			return fmt.Errorf("line %d: %w", line, err)
		}
	}
	return sc.Err()
}

// add adds key text under id; errors never hold the key's text.
func (k *Keyring) add(id, text string) error {
	if err := checkKeyID(id); err != nil {
		return err
	}
	if _, dup := k.keys[id]; dup {
		return fmt.Errorf("key ID %q appears twice", id)
	}
	key, err := decodeKey(text)
	if err != nil {
		return fmt.Errorf("key %q: %w", id, err)
	}
	k.keys[id] = key
	return nil
}

func checkKeyID(id string) error {
	if id == "" || len(id) > maxKeyID {
		return fmt.Errorf("key ID %q: 1 to %d characters", id, maxKeyID)
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.", r)) {
			return fmt.Errorf("key ID %q: only letters, digits, '-', '_' and '.'", id)
		}
	}
	return nil
}

func decodeKey(text string) ([]byte, error) {
	if b, err := hex.DecodeString(text); err == nil && len(b) == KeySize {
		return b, nil
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(text); err == nil {
			if len(b) != KeySize {
				return nil, fmt.Errorf("%d bytes, want %d (AES-256)", len(b), KeySize)
			}
			return b, nil
		}
	}
	return nil, fmt.Errorf("neither base64 nor hex of %d bytes", KeySize)
}

// NewKeyring returns a keyring of the given keys, sealing with active.
func NewKeyring(source, active string, keys map[string][]byte) (*Keyring, error) {
	k := &Keyring{source: source, keys: map[string][]byte{}, active: active}
	for id, key := range keys {
		if err := checkKeyID(id); err != nil {
			return nil, err
		}
		if len(key) != KeySize {
			return nil, fmt.Errorf("key %q: %d bytes, want %d", id, len(key), KeySize)
		}
		k.keys[id] = bytes.Clone(key)
	}
	if _, ok := k.keys[active]; !ok {
		return nil, fmt.Errorf("no key with ID %q to encrypt with", active)
	}
	return k, nil
}

// Active is the ID of the key new objects are sealed with.
func (k *Keyring) Active() string { return k.active }

// IDs lists the IDs of the keys held, sorted.
func (k *Keyring) IDs() []string {
	ids := make([]string, 0, len(k.keys))
	for id := range k.keys {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Key returns the key with the given ID, or an error that names it and says what to do.
func (k *Keyring) Key(id string) ([]byte, error) {
	if b, ok := k.keys[id]; ok {
		return b, nil
	}
	return nil, fmt.Errorf("encrypted with key %q, which the keys in %s do not hold (they hold %s): add that key", id, k.source, strings.Join(k.IDs(), ", "))
}

// String names where the keys came from and which is active, never the keys.
func (k *Keyring) String() string {
	return fmt.Sprintf("%s (active key %q)", k.source, k.active)
}
