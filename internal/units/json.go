package units

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Steward's JSON (the output of `-o json`, and the results its processes exchange) follows
// three conventions, kept here:
//
//   - durations are Go duration strings ("1m30s"): Duration;
//   - etcd cluster and member IDs are hex strings, as etcd and etcdctl print them: ID;
//   - a time that may be absent is left out (the field tagged omitzero), never written as
//     "0001-01-01T00:00:00Z".
//
// Both types also read what older Steward versions wrote (numbers), so results exchanged
// between versions in a rolling upgrade still decode.

// Duration is a time.Duration written to JSON as a duration string.
type Duration time.Duration

// String is the duration as Go prints it.
func (d Duration) String() string { return time.Duration(d).String() }

// Round rounds the duration to a multiple of m.
func (d Duration) Round(m time.Duration) time.Duration { return time.Duration(d).Round(m) }

// MarshalJSON writes the duration as a string, e.g. "1m30.5s".
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads a duration string, or a number of nanoseconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var ns int64
		if err := json.Unmarshal(b, &ns); err != nil {
			return fmt.Errorf("a duration is a string such as \"1m30s\": %s", b)
		}
		*d = Duration(ns)
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// ID is an etcd cluster or member ID, written to JSON as a hex string.
type ID uint64

// String is the ID in hex, as etcd prints it.
func (id ID) String() string { return strconv.FormatUint(uint64(id), 16) }

// MarshalJSON writes the ID as a hex string.
func (id ID) MarshalJSON() ([]byte, error) { return json.Marshal(id.String()) }

// UnmarshalJSON reads a hex string (with or without 0x), or a number.
func (id *ID) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var n uint64
		if err := json.Unmarshal(b, &n); err != nil {
			return fmt.Errorf("an etcd ID is a hex string: %s", b)
		}
		*id = ID(n)
		return nil
	}
	n, err := ParseID(s)
	if err != nil {
		return err
	}
	*id = n
	return nil
}

// ParseID reads an etcd ID in hex, as etcd prints it (a 0x prefix is allowed).
func ParseID(s string) (ID, error) {
	n, err := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not an etcd ID in hex", s)
	}
	return ID(n), nil
}
