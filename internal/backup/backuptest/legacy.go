// Package backuptest makes what tests of backups need: etcd snapshots of real bbolt databases,
// and backup objects in the formats Steward wrote before, for tests that prove they are still
// read.
package backuptest

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strings"

	"github.com/etcd-steward/steward/internal/backup"
)

// Version1 rewrites an unencrypted object of timeline 1 (format version 2) as format
// version 1 wrote it: the header without its timeline field. Payload and trailer do not change (the trailer does not cover
// the header).
func Version1(obj []byte) ([]byte, error) {
	if len(obj) < 12 || binary.BigEndian.Uint16(obj[8:]) != 2 {
		return nil, fmt.Errorf("not an unencrypted object of format version 2")
	}
	total := int(binary.BigEndian.Uint16(obj[10:]))
	if total < 57 || len(obj) < total || binary.BigEndian.Uint32(obj[48:]) != 1 {
		return nil, fmt.Errorf("not an object of timeline 1 with a valid header")
	}
	h := append([]byte(nil), obj[:48]...)                // up to and with the creation time
	h = append(h, obj[52:total-4]...)                    // etcd version length and string
	binary.BigEndian.PutUint16(h[8:], 1)                 // version 1
	binary.BigEndian.PutUint16(h[10:], uint16(len(h)+4)) // header length
	h = binary.BigEndian.AppendUint32(h, crc32.Checksum(h, crc32.MakeTable(crc32.Castagnoli)))
	return append(h, obj[total:]...), nil
}

// Version1Key is the name format version 1 gave an object of timeline 1:
// v1/full/... or v1/delta/..., without the timeline directory.
func Version1Key(key string) (string, error) {
	rest, ok := strings.CutPrefix(key, backup.TimelineDir(1))
	if !ok {
		return "", fmt.Errorf("%s is not an object of timeline 1", key)
	}
	return backup.LayoutPrefix + rest, nil
}
