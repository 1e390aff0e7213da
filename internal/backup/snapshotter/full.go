// Package snapshotter captures backups from a live etcd member: full snapshots streamed from
// Maintenance.Snapshot, and deltas from a watch. It writes objects in the backup format of
// package backup; deciding when to run (leadership, schedules) is the sidecar's job.
package snapshotter

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"github.com/etcd-steward/steward/internal/units"
	"hash"
	"io"
	"time"

	"github.com/etcd-steward/steward/internal/backup"
	"github.com/etcd-steward/steward/internal/store"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Member is the etcd member a snapshotter reads from: a client and that member's endpoint.
// The client must talk to that one member (Snapshot goes to the client's endpoint).
type Member struct {
	Client   *clientv3.Client
	Endpoint string
}

// FullResult describes a stored full snapshot.
type FullResult struct {
	Key      string `json:"key"`
	Timeline uint32 `json:"timeline"`
	// Revision is the member's revision when the snapshot started: a lower bound of the
	// revision inside it (restore reads the true one from the database).
	Revision  int64    `json:"revision"`
	ClusterID units.ID `json:"clusterID"`
	// Size is the stored (compressed) size; DBSize the size of the database stream.
	Size     int64          `json:"size"`
	DBSize   int64          `json:"dbSize"`
	Duration units.Duration `json:"duration"`
	Created  time.Time      `json:"created"`
}

// Full streams a snapshot of the member into s as one full-snapshot object of timeline tl: no
// temporary file, memory independent of the database size. It checks the SHA-256 that etcd
// appends to the stream and discards the object if it does not match. A member of another
// cluster than tl's is refused (ErrHistoryRestarted). progress, if set, gets the number of
// database bytes read so far.
func Full(ctx context.Context, m Member, s *store.Store, tl Timeline, progress func(read int64)) (FullResult, error) {
	start := time.Now()
	status, err := m.Client.Status(ctx, m.Endpoint)
	if err != nil {
		return FullResult{}, fmt.Errorf("full snapshot: status of %s: %w", m.Endpoint, err)
	}
	if status.Header.ClusterId != tl.ClusterID {
		return FullResult{}, fmt.Errorf("full snapshot: %w: %s is a member of cluster %x, timeline %d holds cluster %x's history",
			ErrHistoryRestarted, m.Endpoint, status.Header.ClusterId, tl.ID, tl.ClusterID)
	}
	res := FullResult{Timeline: tl.ID, Revision: status.Header.Revision, ClusterID: units.ID(status.Header.ClusterId), Created: start.UTC()}
	res.Key = backup.FullKey(tl.ID, res.Revision, res.Created)
	hdr := backup.Header{Kind: backup.KindFull, Timeline: tl.ID, Compression: backup.CompressionZstd, EtcdVersion: status.Version,
		ClusterID: uint64(res.ClusterID), FirstRev: res.Revision, LastRev: res.Revision, Created: res.Created}

	snapCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := openSnapshotStream(snapCtx, m)
	if err != nil {
		return FullResult{}, fmt.Errorf("full snapshot of %s: %w", m.Endpoint, err)
	}
	defer stream.close()

	trailer, err := backup.WriteObject(ctx, s, res.Key, hdr, func(w *backup.ObjectWriter) error {
		v := newTrailerVerifier(w, progress)
		if err := stream.copyTo(v); err != nil {
			return fmt.Errorf("read snapshot stream from %s: %w", m.Endpoint, err)
		}
		if err := v.verify(); err != nil {
			return err
		}
		res.DBSize = v.n
		return nil
	})
	if err != nil {
		return FullResult{}, err
	}
	res.Size = trailer.PayloadSize
	res.Duration = units.Duration(time.Since(start))
	return res, nil
}

// trailerVerifier passes the snapshot stream through while hashing all but its last 32
// bytes, which are etcd's SHA-256 of the database.
type trailerVerifier struct {
	w        io.Writer
	h        hash.Hash
	tail     []byte // last up-to-32 bytes seen, not hashed yet
	n        int64
	progress func(int64)
}

func newTrailerVerifier(w io.Writer, progress func(int64)) *trailerVerifier {
	return &trailerVerifier{w: w, h: sha256.New(), tail: make([]byte, 0, sha256.Size), progress: progress}
}

func (v *trailerVerifier) Write(p []byte) (int, error) {
	if _, err := v.w.Write(p); err != nil {
		return 0, err
	}
	v.n += int64(len(p))
	if len(p) >= sha256.Size {
		// The held-back tail and all of p but its last 32 bytes are database bytes.
		v.h.Write(v.tail)
		v.h.Write(p[:len(p)-sha256.Size])
		v.tail = append(v.tail[:0], p[len(p)-sha256.Size:]...)
	} else {
		// Short write: keep the last 32 bytes of tail+p, hash what falls out in front.
		buf := append(v.tail, p...)
		cut := max(len(buf)-sha256.Size, 0)
		v.h.Write(buf[:cut])
		v.tail = append(v.tail[:0], buf[cut:]...)
	}
	if v.progress != nil {
		v.progress(v.n)
	}
	return len(p), nil
}

var errSnapshotHash = errors.New("snapshot stream does not end with a matching SHA-256")

func (v *trailerVerifier) verify() error {
	if len(v.tail) != sha256.Size {
		return fmt.Errorf("%w: stream of %d bytes is too short", errSnapshotHash, v.n)
	}
	if !bytes.Equal(v.h.Sum(nil), v.tail) {
		return fmt.Errorf("%w: the database is damaged in transit; retry", errSnapshotHash)
	}
	v.n -= sha256.Size
	return nil
}
