package member

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
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

// TestAddRefused: etcd's answers that make a joining member wait for a turn (one learner at a
// time; the leader connected to every voter for 5 s; a change dropped while another was
// pending) are turns; anything else is a failure that backs off.
func TestAddRefused(t *testing.T) {
	for _, tc := range []struct {
		etcd error
		turn bool
	}{
		{rpctypes.ErrTooManyLearners, true},
		{rpctypes.ErrUnhealthy, true},
		{fmt.Errorf("add: %w", context.DeadlineExceeded), true},
		{rpctypes.ErrPermissionDenied, false},
		{rpctypes.ErrNoLeader, false},
	} {
		err := addRefused(tc.etcd)
		if !errors.Is(err, errTryAgain) || errors.Is(err, errTurn) != tc.turn {
			t.Errorf("etcd answered %v: step error %v; a turn: %t, want %t", tc.etcd, err, errors.Is(err, errTurn), tc.turn)
		}
	}
}
