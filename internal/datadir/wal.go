package datadir

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/client/pkg/v3/fileutil"
	etcddatadir "go.etcd.io/etcd/server/v3/storage/datadir"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.etcd.io/etcd/server/v3/storage/wal/walpb"
	"go.uber.org/zap"
)

// ReadWALMetadata reads the member and cluster ID from the head of the newest WAL file in
// walDir: the quick check's WAL read (readWALMetadata).
func ReadWALMetadata(walDir string) (memberID, clusterID uint64, err error) {
	memberID, clusterID, _, err = readWALMetadata(walDir)
	return memberID, clusterID, err
}

// ReadWALFull reads the member and cluster ID the way etcd reads its WAL on start, decoding
// every record after the newest snapshot: the deep check's WAL read (readWALFull).
func ReadWALFull(dataDir string) (memberID, clusterID uint64, err error) {
	raw, err := readWALFull(dataDir)
	if err != nil {
		return 0, 0, err
	}
	return decodeWALMetadata(raw)
}

// readWALMetadata reads the member and cluster ID from the head of the newest WAL file in
// walDir. etcd begins every WAL file with the same two records: a CRC record carrying the
// running CRC of the previous file (0 in the first file), then the metadata record (member and
// cluster ID), whose CRC chains from it; it writes and syncs them before renaming the file
// into place. So the newest file's head holds the metadata whatever the WAL's length, and
// reading it costs two small records instead of every record after the newest snapshot.
//
// It checks that head only (record framing, the metadata record's CRC, both IDs set); the
// rest of the WAL is read by readWALFull in the deep check. The error names the file.
func readWALMetadata(walDir string) (memberID, clusterID uint64, raw []byte, err error) {
	name, err := newestWALFile(walDir)
	if err != nil {
		return 0, 0, nil, err
	}
	path := filepath.Join(walDir, name)
	raw, err = readWALHead(path)
	if err != nil {
		return 0, 0, nil, fmt.Errorf("WAL file %s: %w", path, err)
	}
	memberID, clusterID, err = decodeWALMetadata(raw)
	if err != nil {
		return 0, 0, nil, fmt.Errorf("WAL file %s: %w", path, err)
	}
	return memberID, clusterID, raw, nil
}

// newestWALFile returns the name of the WAL file with the highest sequence number. Names
// follow the wal package's %016x-%016x.wal (sequence, first raft index); anything else (the
// preallocated "0.tmp", leftovers of an interrupted cut or create) is ignored, as etcd does.
func newestWALFile(walDir string) (string, error) {
	entries, err := os.ReadDir(walDir)
	if err != nil {
		return "", err
	}
	var newest string
	var newestSeq uint64
	for _, e := range entries {
		seq, ok := parseWALName(e.Name())
		if !ok || !e.Type().IsRegular() {
			continue
		}
		if newest == "" || seq > newestSeq {
			newest, newestSeq = e.Name(), seq
		}
	}
	if newest == "" {
		return "", fmt.Errorf("no WAL file in %s", walDir)
	}
	return newest, nil
}

// parseWALName parses the wal package's file names, %016x-%016x.wal.
func parseWALName(name string) (seq uint64, ok bool) {
	if !strings.HasSuffix(name, ".wal") {
		return 0, false
	}
	var index uint64
	if _, err := fmt.Sscanf(name, "%016x-%016x.wal", &seq, &index); err != nil {
		return 0, false
	}
	return seq, true
}

// readWALHead decodes the first two records of a WAL file with etcd's decoder: the CRC
// record, then the metadata record, whose CRC is checked. It returns the metadata's bytes.
func readWALHead(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dec := wal.NewDecoder(fileutil.NewFileReader(f))
	var rec walpb.Record
	if err := dec.Decode(&rec); err != nil {
		return nil, fmt.Errorf("first record: %w", headErr(err))
	}
	if rec.Type != wal.CrcType {
		return nil, fmt.Errorf("first record has type %d, want a CRC record (%d)", rec.Type, wal.CrcType)
	}
	// The metadata record's CRC continues the previous file's, which the CRC record carries.
	dec.UpdateCRC(rec.Crc)
	if err := dec.Decode(&rec); err != nil {
		return nil, fmt.Errorf("metadata record: %w", headErr(err))
	}
	if rec.Type != wal.MetadataType {
		return nil, fmt.Errorf("second record has type %d, want the metadata record (%d)", rec.Type, wal.MetadataType)
	}
	return rec.Data, nil
}

// headErr says what an end of data at a file's head means: the file holds no records.
func headErr(err error) error {
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("no record (empty or zeroed file): %w", io.ErrUnexpectedEOF)
	}
	return err
}

func decodeWALMetadata(raw []byte) (memberID, clusterID uint64, err error) {
	var md etcdserverpb.Metadata
	if err := md.Unmarshal(raw); err != nil {
		return 0, 0, fmt.Errorf("decode WAL metadata: %w", err)
	}
	if md.NodeID == 0 || md.ClusterID == 0 {
		return 0, 0, errors.New("WAL metadata has no member or cluster ID")
	}
	return md.NodeID, md.ClusterID, nil
}

// readWALFull reads the WAL the way etcd does on start: every record after the newest
// snapshot that the snap directory still holds (wal.ReadAll), checking each record's CRC, the
// snapshot match and that every metadata record agrees. It returns the metadata. It costs a
// decode of every record from the file holding that snapshot on, and is part of the deep
// check only: after a clean shutdown etcd synced the WAL and nothing has written it since.
func readWALFull(dataDir string) ([]byte, error) {
	lg := zap.NewNop()
	walDir := etcddatadir.ToWALDir(dataDir)
	at, err := walSnapshot(lg, dataDir)
	if err != nil {
		return nil, err
	}
	w, err := wal.OpenForRead(lg, walDir, at)
	if err != nil {
		return nil, err
	}
	defer w.Close()
	raw, _, _, err := w.ReadAll()
	if err != nil {
		return nil, err
	}
	return raw, nil
}

// checkWALFull is the deep check's WAL read: readWALFull, whose metadata must be the one the
// newest file's head holds (head, from readWALMetadata).
func checkWALFull(dataDir string, head []byte) error {
	raw, err := readWALFull(dataDir)
	if err != nil {
		return fmt.Errorf("full read: %w", err)
	}
	if !bytes.Equal(raw, head) {
		return errors.New("full read: the metadata differs from the newest WAL file's head")
	}
	return nil
}
