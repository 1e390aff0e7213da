package maintenance

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/etcd-steward/steward/internal/testutil"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestNextCorrupt(t *testing.T) {
	healthy := func(leader uint64) []Member {
		return []Member{member("m0", 1, leader, 10, 10), member("m1", 2, leader, 10, 10), member("m2", 3, leader, 10, 10)}
	}
	with := func(ms []Member, i int, f func(*Member)) []Member { f(&ms[i]); return ms }
	corrupt := func(ids ...uint64) []Alarm {
		var as []Alarm
		for _, id := range ids {
			as = append(as, Alarm{MemberID: id, Type: "CORRUPT"})
		}
		return as
	}
	five := append(healthy(1), member("m3", 4, 1, 10, 10), member("m4", 5, 1, 10, 10))
	for _, tc := range []struct {
		name    string
		alarms  []Alarm
		members []Member
		want    StepKind
		member  string
		to      string
		reason  string
	}{
		{name: "no alarm", members: healthy(1), want: StepDone},
		{name: "only NOSPACE: not this recovery's", alarms: []Alarm{{MemberID: 2, Type: "NOSPACE"}}, members: healthy(1), want: StepDone},
		{name: "a corrupt follower is removed", alarms: corrupt(2), members: healthy(1), want: StepRemove, member: "m1", reason: "rejoins as a new learner"},
		{name: "a corrupt leader hands leadership over first", alarms: corrupt(1), members: with(healthy(1), 2, func(m *Member) { m.RaftApplied = 6000 }),
			want: StepMoveLeader, member: "m0", to: "m2"},
		{name: "the alarm of a member already removed is disarmed", alarms: corrupt(9), members: healthy(1), want: StepDisarm, member: "9"},
		{name: "two members marked: by hand", alarms: corrupt(2, 3), members: healthy(1), want: StepWait, reason: "m1, m2 are all marked CORRUPT"},
		{name: "two voters: no majority vouches", alarms: corrupt(2), members: healthy(1)[:2], want: StepWait, member: "m1", reason: "with 2 voters"},
		{name: "another voter down in a 3-member cluster: removal would lose the quorum", alarms: corrupt(2),
			members: with(healthy(1), 2, func(m *Member) { *m = Member{ID: 3, Name: "m2"} }), want: StepWait, member: "m1", reason: "only 1 of the other 2"},
		{name: "one other voter down of five: the quorum holds", alarms: corrupt(2),
			members: with(five, 4, func(m *Member) { *m = Member{ID: 5, Name: "m4"} }), want: StepRemove, member: "m1"},
		{name: "a corrupt learner is removed", alarms: corrupt(3), members: with(healthy(1), 2, func(m *Member) { m.Learner = true }),
			want: StepRemove, member: "m2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := NextCorrupt(tc.alarms, tc.members)
			if got.Kind != tc.want || got.Member.Name != tc.member || got.To.Name != tc.to || !strings.Contains(got.Reason, tc.reason) {
				t.Fatalf("got %s %q to %q (%s); want %s %q to %q (reason with %q)", got.Kind, got.Member.Name, got.To.Name, got.Reason,
					tc.want, tc.member, tc.to, tc.reason)
			}
		})
	}
}

// TestRecoverCorrupt raises CORRUPT on the leader of a real cluster, as etcd's hash check
// does: every read and write is refused. The recovery moves leadership away, removes the
// member and disarms the alarm; the other two serve every key.
func TestRecoverCorrupt(t *testing.T) {
	ms := testutil.Cluster(t, 3)
	cli := ms[0].Client
	ctx := context.Background()
	for i := range 20 {
		if _, err := cli.Put(ctx, fmt.Sprintf("k%02d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	before, err := Observe(ctx, cli)
	if err != nil {
		t.Fatal(err)
	}
	leader := leaderOf(before)
	if _, err := pb.NewMaintenanceClient(cli.ActiveConnection()).Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: leader, Alarm: pb.AlarmType_CORRUPT}); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "refused", "v"); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("a write under CORRUPT: %v; want it refused", err)
	}
	var others []string
	for _, m := range ms {
		if uint64(m.Etcd.Server.MemberID()) != leader {
			others = append(others, m.Endpoint)
		}
	}
	cli.SetEndpoints(others...)
	res, err := RecoverCorrupt(ctx, cli, func(s Step) { t.Logf("%s %s: %s", s.Kind, s.Member.Name, s.Reason) })
	if err != nil {
		t.Fatal(err)
	}
	if res.Replaced == "" || res.MovedTo == "" || !res.Disarmed {
		t.Fatalf("result %+v: want the leader replaced after moving leadership, and the alarm disarmed", res)
	}
	after, err := Observe(ctx, cli)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != 2 || nameOf(after, leader) != fmt.Sprintf("%x", leader) {
		t.Fatalf("members after: %+v; want the two others only", after)
	}
	if alarms, err := Alarms(ctx, cli); err != nil || len(alarms) != 0 {
		t.Fatalf("alarms after: %v %v", alarms, err)
	}
	if _, err := cli.Put(ctx, "after", "v"); err != nil {
		t.Fatalf("a write after the recovery: %v", err)
	}
	resp, err := cli.Get(ctx, "k", clientv3.WithPrefix())
	if err != nil || resp.Count != 20 {
		t.Fatalf("keys after: %v %v; want all 20", resp, err)
	}
}
