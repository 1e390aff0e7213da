package local

import (
	"context"

	"github.com/etcd-steward/steward/internal/local/localdir"
)

// Both sides of the request protocol (localdir): a `steward local` command asks the running
// supervisor for a restore, its cancellation (RestoreRequest) or a member's restart
// (RestartRequest); the supervisor answers in its state (State.RestoreAnswer,
// State.RestartAnswer).

// requestHeader is what every request carries.
type requestHeader = localdir.Header

// Head is the request's header.
func (r RestoreRequest) Head() localdir.Header {
	return localdir.Header{ID: r.ID, RequestedAt: r.RequestedAt, Expires: r.Expires}
}

// ask is the client's side: it leaves the request build makes for the supervisor of d and
// waits until answered finds the supervisor's answer to it in the state.
func ask[R localdir.Request](ctx context.Context, d Dir, k localdir.Kind, build func(requestHeader) R, answered func(st State, id string) (bool, error)) error {
	return localdir.Ask(ctx, d, k, build, func(id string) (bool, error) {
		st, err := ReadState(d)
		if err != nil {
			return false, nil // being rewritten: look again
		}
		return answered(st, id)
	})
}

// takeRequest is the supervisor's side: the request of kind k that waits, if any.
func takeRequest[R localdir.Request](s *supervisor, k localdir.Kind) (R, bool) {
	req, ok, err := localdir.Take[R](s.dir, k)
	if err != nil {
		s.logf("%v", err)
	}
	return req, ok
}

// recordAnswer saves the state that holds the answer to request id of kind k (and what the
// supervisor did for it), then removes the request. A request whose answer could not be
// saved stays, to be taken up again next round (false).
func (s *supervisor) recordAnswer(k localdir.Kind, id string) bool {
	if err := s.save(); err != nil {
		s.logf("cannot record the answer to %s request %s (%v): taken up again next round", k.Name, id, err)
		return false
	}
	s.dir.Done(k)
	return true
}
