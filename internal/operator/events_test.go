package operator

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestFitNote: a note the API server would refuse (over 1024 bytes: a store's error quoted in
// a BackupStale Event was) is cut to fit on a character's boundary and says so; a note that
// fits is left as it is.
func TestFitNote(t *testing.T) {
	if got := fitNote("short"); got != "short" {
		t.Errorf("fitNote(short) = %q", got)
	}
	exact := strings.Repeat("a", maxEventNote)
	if got := fitNote(exact); got != exact {
		t.Errorf("a note of exactly %d bytes was changed", maxEventNote)
	}
	for _, long := range []string{strings.Repeat("x", 5000), strings.Repeat("é", 700), "a" + strings.Repeat("€", 400)} {
		got := fitNote(long)
		if len(got) > maxEventNote || !utf8.ValidString(got) || !strings.HasSuffix(got, " [cut]") || !strings.HasPrefix(long, strings.TrimSuffix(got, " [cut]")) {
			t.Errorf("fitNote of %d bytes: %d bytes, valid %v, %q...", len(long), len(got), utf8.ValidString(got), got[len(got)-20:])
		}
	}
}
