// Package etcdutil holds small helpers over clientv3 that the local supervisor and the
// sidecars share: making clients (Dialer), removing a member.
package etcdutil

import (
	"context"
	"errors"
	"net"
	"net/url"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// RemoveMember removes a voting member. etcd refuses ("unhealthy cluster") while the member
// handling the request has not been connected to enough of the others for 5 s, as after a
// member joined or restarted: that passes, so it is retried for a while.
func RemoveMember(ctx context.Context, cli *clientv3.Client, id uint64) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := cli.MemberRemove(rctx, id)
		cancel()
		switch {
		case err == nil || errors.Is(err, rpctypes.ErrMemberNotFound):
			return nil
		case !errors.Is(err, rpctypes.ErrUnhealthy) || time.Now().After(deadline):
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// Leads says whether the member at endpoint is the leader (false if it does not answer
// within timeout).
func Leads(ctx context.Context, cli *clientv3.Client, endpoint string, timeout time.Duration) bool {
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	st, err := cli.Status(sctx, endpoint)
	return err == nil && st.Leader != 0 && st.Leader == st.Header.MemberId
}

// Listening says whether anything accepts connections at clientURL's address. A refused
// connection is told at once, where a client's call waits for its deadline.
func Listening(clientURL string) bool {
	u, err := url.Parse(clientURL)
	if err != nil {
		return false
	}
	conn, err := net.DialTimeout("tcp", u.Host, time.Second)
	if err != nil {
		return false
	}
	_ = conn.Close()
	return true
}
