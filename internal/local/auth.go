package local

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/etcd-steward/steward/internal/datadir"
	"github.com/etcd-steward/steward/internal/etcdutil"
	"github.com/etcd-steward/steward/internal/pki"
)

// RootPasswordPath is the file holding the cluster's root password, "" without authentication.
func RootPasswordPath(d Dir, spec Spec) string {
	if !spec.Auth {
		return ""
	}
	return d.RootPassword()
}

// AppUser is the application user of a cluster with authentication ("" without): what
// applications log in as, with the password of AppPasswordPath, leaving root to Steward.
const AppUser = "app"

// AppPasswordPath is the file holding the application user's password, "" without
// authentication.
func AppPasswordPath(d Dir, spec Spec) string {
	if !spec.Auth {
		return ""
	}
	return d.AppPassword()
}

// TokenKeyPath is the directory holding the cluster's token signing key pair, "" without
// authentication.
func TokenKeyPath(d Dir, spec Spec) string {
	if !spec.Auth {
		return ""
	}
	return d.TokenKey()
}

// ensureAuth makes, for a cluster with authentication, the root password and the token
// signing key pair once, and keeps them after.
func ensureAuth(d Dir, spec Spec, logf func(string, ...any)) error {
	if err := ensurePassword(RootPasswordPath(d, spec), "etcd's root password", logf); err != nil {
		return err
	}
	if err := ensurePassword(AppPasswordPath(d, spec), "the application user's password", logf); err != nil {
		return err
	}
	p := TokenKeyPath(d, spec)
	if p == "" {
		return nil
	}
	created, err := pki.EnsureTokenKeyDir(p)
	if created {
		logf("generated the token signing key pair etcd signs its authentication tokens with in %s (mode 0600)", p)
	}
	return err
}

// ensurePassword makes a password once (256 random bits, mode 0600) in the file p, and keeps
// it after; the log names the file, never the password. Nothing is done for p "".
func ensurePassword(p, what string, logf func(string, ...any)) error {
	if p == "" {
		return nil
	}
	if _, err := etcdutil.ReadPassword(p); err == nil || !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(p), err)
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return err
	}
	if err := datadir.WriteFileAtomic(p, []byte(base64.RawURLEncoding.EncodeToString(b)+"\n"), 0o600); err != nil {
		return err
	}
	logf("generated %s in %s (mode 0600)", what, p)
	return nil
}
