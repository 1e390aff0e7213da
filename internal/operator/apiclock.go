package operator

import (
	"net/http"
	"sync/atomic"
	"time"
)

// apiClock is the API server's clock as the operator reads it: its own clock, corrected by
// the Date of the API server's answers. The operator compares a recovery directive's issue
// time with pods' creation times, which the API server stamps: on an operator clock ahead of
// the API server's, a replacement pod would be fenced again; on one behind, a member whose pod
// was made just before the directive would count as stopped although its etcd may run.
// A Date has a second's resolution: the reading is within about half a second.
type apiClock struct {
	offset atomic.Int64 // the API server's clock minus this process's, in nanoseconds
}

// Now is the time on the API server's clock.
func (c *apiClock) Now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }

// Wrap reads the Date of every answer of the API server that passes through rt.
func (c *apiClock) Wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if err == nil {
			c.observe(resp.Header.Get("Date"), time.Now())
		}
		return resp, err
	})
}

// observe takes a Date received at local time at: the API server's clock read then lies in
// [date, date+1s), its middle is taken.
func (c *apiClock) observe(date string, at time.Time) {
	d, err := http.ParseTime(date)
	if err != nil {
		return
	}
	c.offset.Store(int64(d.Add(500 * time.Millisecond).Sub(at)))
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
