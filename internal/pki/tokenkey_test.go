package pki

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEnsureTokenKeyDirKeepsThePair: the pair is made once (files 0600) and kept after; a
// public key of another pair is an error, never replaced.
func TestEnsureTokenKeyDirKeepsThePair(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "token-key")
	created, err := EnsureTokenKeyDir(dir)
	if err != nil || !created {
		t.Fatalf("EnsureTokenKeyDir on nothing = %v, %v: want a new pair", created, err)
	}
	read := func(f string) []byte {
		t.Helper()
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v, %v: want a 0600 file", f, fi, err)
		}
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	key, pub := read(TokenKeyFile), read(TokenPublicKeyFile)
	if err := CheckTokenKey(key, pub); err != nil {
		t.Fatalf("the pair made: %v", err)
	}
	if created, err := EnsureTokenKeyDir(dir); err != nil || created {
		t.Fatalf("EnsureTokenKeyDir on a pair = %v, %v: want it kept", created, err)
	}
	if !bytes.Equal(read(TokenKeyFile), key) || !bytes.Equal(read(TokenPublicKeyFile), pub) {
		t.Fatal("the pair changed")
	}
	_, otherPub, err := NewTokenKey()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, TokenPublicKeyFile), otherPub, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureTokenKeyDir(dir); err == nil || !strings.Contains(err.Error(), "is not the public key of") {
		t.Fatalf("EnsureTokenKeyDir with another pair's public key = %v", err)
	}
	if !bytes.Equal(read(TokenKeyFile), key) {
		t.Fatal("the private key was replaced")
	}
}
