package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// File names inside a token key directory: the key pair a cluster with etcd authentication
// signs its clients' tokens with (ECDSA P-256, ES256). Every member has the same pair, so a
// token one member issued is valid on all of them.
const (
	TokenKeyFile       = "token.key"
	TokenPublicKeyFile = "token.pub"
)

// NewTokenKey makes a token signing key pair: the private key (SEC 1) and its public key
// (PKIX), PEM-encoded.
func NewTokenKey() (keyPEM, pubPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	if keyPEM, err = encodeKey(key); err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, nil, err
	}
	return keyPEM, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

// CheckTokenKey checks a token signing key pair: a P-256 private key, and its own public key.
func CheckTokenKey(keyPEM, pubPEM []byte) error {
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return fmt.Errorf("%s holds no PEM private key", TokenKeyFile)
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return fmt.Errorf("%s: %w", TokenKeyFile, err)
	}
	if key.Curve != elliptic.P256() {
		return fmt.Errorf("%s is not a P-256 key (etcd signs with ES256)", TokenKeyFile)
	}
	pb, _ := pem.Decode(pubPEM)
	if pb == nil {
		return fmt.Errorf("%s holds no PEM public key", TokenPublicKeyFile)
	}
	pub, err := x509.ParsePKIXPublicKey(pb.Bytes)
	if err != nil {
		return fmt.Errorf("%s: %w", TokenPublicKeyFile, err)
	}
	if !key.PublicKey.Equal(pub) {
		return fmt.Errorf("%s is not the public key of %s", TokenPublicKeyFile, TokenKeyFile)
	}
	return nil
}

// EnsureTokenKeyDir makes a token key directory (0700, files 0600) unless it holds a good
// pair, which it keeps. created says whether it made one; a directory with only one of the
// files, or a bad pair, is an error: it is never replaced.
func EnsureTokenKeyDir(dir string) (created bool, err error) {
	keyPEM, kerr := os.ReadFile(filepath.Join(dir, TokenKeyFile))
	pubPEM, perr := os.ReadFile(filepath.Join(dir, TokenPublicKeyFile))
	switch {
	case kerr == nil && perr == nil:
		if err := CheckTokenKey(keyPEM, pubPEM); err != nil {
			return false, fmt.Errorf("the token signing key in %s: %w; put the cluster's key pair back", dir, err)
		}
		return false, nil
	case !errors.Is(kerr, os.ErrNotExist) || !errors.Is(perr, os.ErrNotExist):
		return false, fmt.Errorf("the token signing key in %s is incomplete or unreadable (%v, %v); put the cluster's key pair back", dir, kerr, perr)
	}
	if keyPEM, pubPEM, err = NewTokenKey(); err != nil {
		return false, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, err
	}
	// The public key last: a directory with both files holds a whole pair.
	if err := writeAtomic(filepath.Join(dir, TokenKeyFile), keyPEM); err != nil {
		return false, err
	}
	return true, writeAtomic(filepath.Join(dir, TokenPublicKeyFile), pubPEM)
}
