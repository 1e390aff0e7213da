package etcdproc

import (
	"io"
	"os"
	"strings"
	"testing"
)

func TestCheckFlags(t *testing.T) {
	for _, tc := range []struct {
		flags map[string]string
		err   string
	}{
		{flags: map[string]string{"snapshot-count": "5000", "quota-backend-bytes": "4294967296", "auto-compaction-mode": "periodic", "auto-compaction-retention": "1h"}},
		{flags: map[string]string{"data-dir": "/elsewhere"}, err: `"data-dir" is set by Steward`},
		{flags: map[string]string{"listen-client-urls": "http://0.0.0.0:2379"}, err: `"listen-client-urls" is set by Steward`},
		{flags: map[string]string{"auth-token": "simple"}, err: `"auth-token" is set by Steward`},
		{flags: map[string]string{"max-learners": "1"}, err: `"max-learners" is set by Steward`},
		{flags: map[string]string{"snapshot-cout": "5000"}, err: `"snapshot-cout" is not an etcd configuration option`},
		{flags: map[string]string{"snapshot-count": "many"}, err: "snapshot-count=many"},
		{flags: map[string]string{"election-timeout": "10"}, err: "at least as 5 times"},
	} {
		err := CheckFlags(tc.flags)
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("CheckFlags(%v) = %v; want an error with %q", tc.flags, err, tc.err)
		}
		if err != nil && strings.Contains(err.Error(), "/tmp/") {
			t.Errorf("the error names a temporary file: %v", err)
		}
	}
}

func TestMarshalWithTypesValuesAsEtcdDoes(t *testing.T) {
	b, err := Config{Name: "m0", SnapshotCount: 10000}.MarshalWith(map[string]string{"snapshot-count": "5000", "auto-compaction-retention": "1", "log-level": "warn"})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfigBytes(b)
	if err != nil {
		t.Fatalf("%v in\n%s", err, b)
	}
	if cfg.Name != "m0" || cfg.SnapshotCount != 5000 || cfg.AutoCompactionRetention != "1" || cfg.LogLevel != "warn" {
		t.Fatalf("name %q snapshot-count %d auto-compaction-retention %q log-level %q from\n%s", cfg.Name, cfg.SnapshotCount, cfg.AutoCompactionRetention, cfg.LogLevel, b)
	}
}

func TestParseFlags(t *testing.T) {
	got, err := ParseFlags([]string{"--cipher-suites=A,B", "initial-corrupt-check=true"})
	if err != nil || got["cipher-suites"] != "A,B" || got["initial-corrupt-check"] != "true" || len(got) != 2 {
		t.Fatalf("ParseFlags = %v, %v", got, err)
	}
	for _, bad := range [][]string{{"snapshot-count"}, {"=5"}, {"a=1", "a=2"}} {
		if _, err := ParseFlags(bad); err == nil {
			t.Errorf("ParseFlags(%q) accepted", bad)
		}
	}
}

// TestCheckFlagsIsQuiet: checking flags prints nothing (etcd's validation logs to stderr,
// which is the output of `steward local upgrade` and `rotate-ca`).
func TestCheckFlagsIsQuiet(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := os.Stderr
	os.Stderr = w
	err = CheckFlags(map[string]string{"snapshot-count": "5000"})
	os.Stderr = stderr
	w.Close()
	out, _ := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 0 {
		t.Fatalf("CheckFlags printed:\n%s", out)
	}
}
