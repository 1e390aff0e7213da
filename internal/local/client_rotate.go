package local

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/etcd-steward/steward/internal/units"
	"os"
	"time"

	"github.com/etcd-steward/steward/internal/pki"
)

// RotateCAOptions configure RotateCA.
type RotateCAOptions struct {
	Dir string
	// WaitTimeout bounds each wait for a member or the cluster to be healthy (default 5 minutes).
	WaitTimeout time.Duration
	// Progress receives a line whenever the rollover moves on.
	Progress func(string)
}

// RotateCAResult is the output of `steward local rotate-ca`. Other tools parse its JSON: keep names.
type RotateCAResult struct {
	// OldCA and NewCA are the SHA-256 fingerprints of the CA certificates.
	OldCA string `json:"oldCA,omitempty"`
	NewCA string `json:"newCA"`
	// Restarted lists the members in the order they restarted (twice: onto both CAs, then
	// onto the new one alone); LeaderMoves the transfers.
	Restarted   []string       `json:"restarted"`
	LeaderMoves []LeaderMove   `json:"leaderMoves"`
	Duration    units.Duration `json:"duration"`
}

// RotateCA rolls the running cluster in opts.Dir onto a new CA of its own without downtime.
// etcd reads the CAs it trusts only when it starts, so:
//
//  1. a new CA is made (DIR/pki/ca.next) and every ca.crt trusts both; the members restart
//     one at a time, the leader last after moving leadership (as Upgrade rolls them);
//  2. the new CA becomes current (the old one is kept in DIR/pki/ca.old, still trusted) and
//     every leaf is issued again by it (etcd and Steward's clients take them at the next
//     handshake);
//  3. the old CA is dropped from every ca.crt and the members restart again onto the new CA
//     alone.
//
// Each step is recorded in DIR/pki before the next: an interrupted rollover is finished by
// running RotateCA again.
func RotateCA(ctx context.Context, opts RotateCAOptions) (RotateCAResult, error) {
	start := time.Now()
	dir := Dir(opts.Dir)
	progress := opts.Progress
	if progress == nil {
		progress = func(string) {}
	}
	spec, ok, err := ReadSpec(dir)
	switch {
	case err != nil:
		return RotateCAResult{}, err
	case !ok:
		return RotateCAResult{}, fmt.Errorf("%s holds no local cluster: see `steward local up --tls --dir %s`", dir, dir)
	case !spec.TLS:
		return RotateCAResult{}, fmt.Errorf("the cluster in %s has no TLS, so no CA to rotate (TLS is chosen when a cluster is made: `steward local up --tls`)", dir)
	}
	if _, running := dir.SupervisorRunning(); !running {
		return RotateCAResult{}, fmt.Errorf("the cluster in %s is not running: a rollover restarts its members one at a time; start it with `steward local up --dir %s`", dir, dir)
	}
	logf := func(format string, args ...any) { progress(fmt.Sprintf(format, args...)) }
	ca := func(sub string) string { return dir.PKI(sub) }
	exists := func(sub string) bool { _, err := os.Stat(ca(sub)); return err == nil }
	var res RotateCAResult
	roll := func(why string) error {
		progress(why + ": restarting the members one at a time, the leader last")
		r, err := Upgrade(ctx, UpgradeOptions{Dir: opts.Dir, SkipSnapshot: true, WaitTimeout: opts.WaitTimeout, Progress: progress})
		res.Restarted, res.LeaderMoves = append(res.Restarted, r.Restarted...), append(res.LeaderMoves, r.LeaderMoves...)
		return err
	}

	if !exists(caNextDir) && !exists(caOldDir) {
		if _, err := newCA(ca(caNextDir), spec.Name, time.Now()); err != nil {
			return res, err
		}
		progress("a new CA made in " + ca(caNextDir))
	}
	if exists(caNextDir) {
		// 1. Both trusted everywhere.
		if err := ensureCerts(dir, spec, time.Now(), logf); err != nil {
			return res, err
		}
		if err := roll("every member trusts both CAs"); err != nil {
			return res, err
		}
		// 2. The new CA current, the old one kept (and trusted) until step 3.
		cur, err := pki.LoadCA(ca(caDir))
		if err != nil {
			return res, err
		}
		next, err := pki.LoadCA(ca(caNextDir))
		if err != nil {
			return res, err
		}
		if !cur.Cert.Equal(next.Cert) { // else promoted already, by an interrupted run
			if err := writeCA(ca(caOldDir), cur); err != nil {
				return res, err
			}
			if err := writeCA(ca(caDir), next); err != nil {
				return res, err
			}
		}
		if err := os.RemoveAll(ca(caNextDir)); err != nil {
			return res, err
		}
	}
	if old, err := pki.LoadCA(ca(caOldDir)); err == nil {
		res.OldCA = fingerprint(old)
	} else if !errors.Is(err, os.ErrNotExist) {
		return res, err
	}
	// Every leaf issued again by the new CA.
	if err := ensureCerts(dir, spec, time.Now(), logf); err != nil {
		return res, err
	}
	// 3. The old CA dropped.
	if err := os.RemoveAll(ca(caOldDir)); err != nil {
		return res, err
	}
	if err := ensureCerts(dir, spec, time.Now(), logf); err != nil {
		return res, err
	}
	if err := roll("every member trusts the new CA alone"); err != nil {
		return res, err
	}
	cur, err := pki.LoadCA(ca(caDir))
	if err != nil {
		return res, err
	}
	res.NewCA, res.Duration = fingerprint(cur), units.Duration(time.Since(start))
	return res, nil
}

// fingerprint is a CA certificate's SHA-256, in hex.
func fingerprint(ca pki.CA) string {
	sum := sha256.Sum256(ca.Cert.Raw)
	return hex.EncodeToString(sum[:])
}
