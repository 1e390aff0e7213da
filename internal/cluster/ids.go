package cluster

import (
	"slices"
	"strconv"

	"go.etcd.io/etcd/client/pkg/v3/types"
	"go.etcd.io/etcd/server/v3/etcdserver/api/membership"
)

// ClusterIDs are the etcd cluster IDs this cluster is known by, which the backups it wrote
// carry: the ID in the status (hex; "" when none is recorded), and every ID etcd gives a
// cluster of this spec. etcd derives a cluster's ID from its token and its first members'
// peer URLs, so a cluster that never recorded its ID (or lost its status) is still told apart
// from another cluster sharing its backup store:
//   - bootstrapped with its first k members, for every k (it may have been scaled since);
//   - restored from backup onto one member, alone (a quorum-loss recovery, bootstrap.restore).
//
// A force-new-cluster keeps the ID.
func IDs(spec Spec, statusID string) []uint64 {
	var ids []uint64
	add := func(id uint64) {
		if id != 0 && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	if id, err := strconv.ParseUint(statusID, 16, 64); err == nil {
		add(id)
	}
	boot := types.URLsMap{}
	for _, m := range spec.Members {
		urls, err := types.NewURLs([]string{m.PeerURL})
		if err != nil {
			continue
		}
		boot[m.Name] = urls
		add(clusterID(spec.Token, boot))
		add(clusterID(spec.Token, types.URLsMap{m.Name: urls}))
	}
	return ids
}

// clusterID is the ID etcd gives a new cluster of these members (0 if it refuses them).
func clusterID(token string, members types.URLsMap) uint64 {
	c, err := membership.NewClusterFromURLsMap(nil, token, members)
	if err != nil {
		return 0
	}
	return uint64(c.ID())
}
