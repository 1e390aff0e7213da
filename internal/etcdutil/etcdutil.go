// Package etcdutil holds small helpers over clientv3 that the local supervisor and the
// sidecars share: moving leadership, removing a member.
package etcdutil

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// MoveLeaderAway hands leadership from the leader (reached through leaderCli) to the
// healthy voting member furthest along in the log.
func MoveLeaderAway(ctx context.Context, leaderCli, cli *clientv3.Client, leader uint64) error {
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	list, err := cli.MemberList(lctx)
	if err != nil {
		return err
	}
	var best uint64
	var bestIndex uint64
	for _, m := range list.Members {
		if m.ID == leader || m.IsLearner || m.Name == "" || len(m.ClientURLs) == 0 {
			continue
		}
		st, err := cli.Status(lctx, m.ClientURLs[0])
		if err != nil {
			continue // not healthy: never hand leadership to it
		}
		if best == 0 || st.RaftIndex > bestIndex {
			best, bestIndex = m.ID, st.RaftIndex
		}
	}
	if best == 0 {
		return errors.New("no other healthy voting member to take over")
	}
	_, err = leaderCli.MoveLeader(lctx, best)
	return err
}

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
