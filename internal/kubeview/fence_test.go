package kubeview_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/datadir"
	"github.com/etcd-steward/steward/internal/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestFencedMemberHeldThenBack: with the ConfigMap fencing c-2, its member started again (the
// operator deletes a fenced member's serving pod) holds its etcd stopped: its sidecar reports
// it fenced from its data dir, which records the fence, and its etcd does not answer. The
// others serve. Once the ConfigMap no longer fences it, c-2 starts on its data and serves what
// was written meanwhile.
func TestFencedMemberHeldThenBack(t *testing.T) {
	c := needAPI(t)
	ns, ms := newCluster(t, c, 3)
	for _, m := range ms {
		m.start(t, ns)
	}
	testutil.Eventually(t, 90*time.Second, "3 members serving", func() error {
		for _, m := range ms {
			if r, err := reportOf(t, c, ns, m.name); err != nil || !r.Serving {
				return fmt.Errorf("%s not serving (%v)", m.name, err)
			}
		}
		return nil
	})

	setFenced(t, c, ns, "c-2")
	ms[2].stop()
	ms[2].start(t, ns)
	testutil.Eventually(t, 60*time.Second, "c-2 held, reporting it", func() error {
		r, err := reportOf(t, c, ns, "c-2")
		if err != nil {
			return err
		}
		if !r.Fenced || r.Serving || !r.DataValid {
			return fmt.Errorf("c-2 reports fenced=%v serving=%v data valid=%v (case %s: %s)", r.Fenced, r.Serving, r.DataValid, r.Case, r.Reason)
		}
		return nil
	})
	if fenced, err := datadir.Fenced(ms[2].dataDir); err != nil || !fenced {
		t.Errorf("c-2's data dir does not record the fence (%v)", err)
	}
	if err := etcdAnswers(ms[2].client, nil); err == nil {
		t.Error("the fenced c-2's etcd answers")
	}
	if err := etcdAnswers(ms[0].client, func(cli *clientv3.Client) error {
		_, err := cli.Put(context.Background(), "while-fenced", "1")
		return err
	}); err != nil {
		t.Fatalf("c-0 does not take a write while c-2 is fenced: %v", err)
	}

	setFenced(t, c, ns)
	testutil.Eventually(t, 90*time.Second, "c-2 serving again, with the write made while it was fenced", func() error {
		return etcdAnswers(ms[2].client, func(cli *clientv3.Client) error {
			resp, err := cli.Get(context.Background(), "while-fenced", clientv3.WithSerializable())
			if err != nil || len(resp.Kvs) != 1 {
				return fmt.Errorf("c-2 lacks the key written while it was fenced (%v)", err)
			}
			return nil
		})
	})
	if fenced, err := datadir.Fenced(ms[2].dataDir); err != nil || fenced {
		t.Errorf("c-2's data dir still records the fence (%v)", err)
	}
}

// setFenced writes the members the ConfigMap of cluster c fences, as the operator does.
func setFenced(t *testing.T, c client.Client, ns string, names ...string) {
	t.Helper()
	changeConfig(t, c, ns, func(cc *v1alpha1.ClusterConfig) { cc.FencedMembers = names })
}

// etcdAnswers connects to the etcd on port and asks it for its status, then runs do (if any).
func etcdAnswers(port int, do func(*clientv3.Client) error) error {
	ep := fmt.Sprintf("http://127.0.0.1:%d", port)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := cli.Status(ctx, ep); err != nil {
		return err
	}
	if do == nil {
		return nil
	}
	return do(cli)
}
