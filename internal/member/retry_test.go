package member

import (
	"fmt"
	"testing"
	"time"
)

// TestRetryDelay: a member waiting for another learner's turn tries again after a short, fixed
// wait, which does not count as a failure; a step that failed backs off, longer each time.
func TestRetryDelay(t *testing.T) {
	failures := 0
	for i := 0; i < 3; i++ {
		turn := fmt.Errorf("%w: another learner is joining", errTurn)
		if d := retryDelay(turn, &failures); d != turnInterval || failures != 0 {
			t.Fatalf("waiting for its turn: retry in %v after %d failures, want %v and none", d, failures, turnInterval)
		}
	}
	var last time.Duration
	for want := 1; want <= 3; want++ {
		d := retryDelay(fmt.Errorf("%w: add as learner: deadline exceeded", errTryAgain), &failures)
		if failures != want || d <= last {
			t.Fatalf("failure %d: retry in %v after %v, %d failures counted: want a longer wait each time", want, d, last, failures)
		}
		last = d
	}
}
