package local

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/datadir"
	"github.com/etcd-steward/steward/internal/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// running is a local cluster started in-process by a test; its members are real
// `steward etcd` and `steward sidecar` processes.
type running struct {
	t      *testing.T
	dir    string
	spec   Spec
	cancel context.CancelFunc
	done   chan error
}

func startCluster(t *testing.T, dir string, members, basePort int) *running {
	return startClusterWith(t, UpOptions{Dir: dir, Members: members, BasePort: basePort, Backup: "none"})
}

func startClusterWith(t *testing.T, opts UpOptions) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan Spec, 1)
	r := &running{t: t, dir: opts.Dir, cancel: cancel, done: make(chan error, 1)}
	opts.Binary = testutil.StewardBinary(t)
	logf := opts.Logf
	opts.ReadyTimeout, opts.StopGrace = 90*time.Second, 20*time.Second
	opts.Logf = func(format string, args ...any) {
		t.Logf(format, args...)
		if logf != nil {
			logf(format, args...)
		}
	}
	opts.OnReady = func(s Spec) { ready <- s }
	go func() { r.done <- Up(ctx, opts) }()
	select {
	case r.spec = <-ready:
	case err := <-r.done:
		cancel()
		t.Fatalf("local cluster did not start: %v", err)
	}
	t.Cleanup(func() { r.stop() })
	return r
}

// stop cancels the supervisor and waits for a graceful stop.
func (r *running) stop() {
	r.t.Helper()
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	if err := <-r.done; err != nil {
		r.t.Errorf("supervisor ended with error: %v", err)
	}
}

func (r *running) client(member int) *clientv3.Client {
	r.t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{r.spec.ClientURL(r.spec.Members[member])},
		DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { c.Close() })
	return c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestBootstrapSingleMember(t *testing.T) {
	dir := t.TempDir()
	r := startCluster(t, dir, 1, 21000)
	ctx := ctxT(t)
	c := r.client(0)
	if _, err := c.Put(ctx, "/single", "v"); err != nil {
		t.Fatal(err)
	}
	rep, err := Status(ctx, Dir(dir))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Cluster.Size != 1 || len(rep.Members) != 1 || rep.Members[0].Role != "leader" || !rep.Members[0].Healthy {
		t.Fatalf("status of a 1-member cluster: %+v", rep)
	}
	if rep.Cluster.Leader != "m0" || rep.Members[0].Revision < 2 {
		t.Fatalf("leader %q revision %d; want m0 and >= 2", rep.Cluster.Leader, rep.Members[0].Revision)
	}
}

func TestThreeMemberLifecycle(t *testing.T) {
	t.Parallel() // its own directory and ports
	dir := t.TempDir()
	r := startCluster(t, dir, 3, 21100)
	ctx := ctxT(t)
	c0, c2 := r.client(0), r.client(2)

	t.Run("a put through one member is read through another", func(t *testing.T) {
		if _, err := c0.Put(ctx, "/k", "through-m0"); err != nil {
			t.Fatal(err)
		}
		resp, err := c2.Get(ctx, "/k")
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "through-m0" {
			t.Fatalf("read through m2: %v", resp.Kvs)
		}
	})

	var ids map[string]string
	t.Run("status agrees with etcd's member list and status", func(t *testing.T) {
		rep, err := Status(ctx, Dir(dir))
		if err != nil {
			t.Fatal(err)
		}
		list, err := c0.MemberList(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Cluster.ClusterID != fmt.Sprintf("%x", list.Header.ClusterId) || rep.Cluster.Size != len(list.Members) {
			t.Fatalf("cluster %+v; etcd says id %x size %d", rep.Cluster, list.Header.ClusterId, len(list.Members))
		}
		ids = map[string]string{}
		for _, m := range list.Members {
			ids[m.Name] = fmt.Sprintf("%x", m.ID)
		}
		leaders := 0
		for _, m := range rep.Members {
			if m.ID != ids[m.Name] || m.ID == "" {
				t.Errorf("member %s: status id %q, member list id %q", m.Name, m.ID, ids[m.Name])
			}
			st, err := c0.Status(ctx, m.ClientURL)
			if err != nil {
				t.Fatal(err)
			}
			wantRole := "follower"
			if st.Leader == st.Header.MemberId {
				wantRole = "leader"
				leaders++
				if rep.Cluster.Leader != m.Name {
					t.Errorf("cluster leader %q, etcd says %s", rep.Cluster.Leader, m.Name)
				}
			}
			if m.Role != wantRole || !m.Healthy || m.Revision > st.Header.Revision || m.Revision < 2 || m.DBSize <= 0 {
				t.Errorf("member %s: %+v; etcd says role %s revision %d", m.Name, m, wantRole, st.Header.Revision)
			}
			if m.EtcdPID <= 0 || m.SidecarPID <= 0 || m.DataDir != Dir(dir).MemberData(m.Name) {
				t.Errorf("member %s: pids/dataDir not reported: %+v", m.Name, m)
			}
		}
		if leaders != 1 {
			t.Errorf("%d leaders", leaders)
		}
	})

	t.Run("a second up on the running dir is refused", func(t *testing.T) {
		err := Up(ctx, UpOptions{Dir: dir, Binary: testutil.StewardBinary(t)})
		if err == nil || !strings.Contains(err.Error(), "already running") {
			t.Fatalf("second up: %v", err)
		}
	})

	t.Run("kill -9 of an etcd process: restarted, rejoins with the same member ID", func(t *testing.T) {
		st, err := ReadState(Dir(dir))
		if err != nil {
			t.Fatal(err)
		}
		old := st.Members[1]
		if err := syscall.Kill(old.EtcdPID, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 60*time.Second, "m1 restarted and healthy", func() error {
			st, err := ReadState(Dir(dir))
			if err != nil {
				return err
			}
			m := st.Members[1]
			if m.EtcdPID == old.EtcdPID || m.EtcdPID == 0 || !m.Ready || m.EtcdRestarts < 1 {
				return fmt.Errorf("m1: %+v", m)
			}
			return nil
		})
		if _, err := c0.Put(ctx, "/after-kill", "x"); err != nil {
			t.Fatal(err)
		}
		c1 := r.client(1)
		testutil.Eventually(t, 10*time.Second, "m1 serves its own data", func() error {
			resp, err := c1.Get(ctx, "/after-kill", clientv3.WithSerializable())
			if err != nil || len(resp.Kvs) != 1 {
				return fmt.Errorf("get: %v %v", resp, err)
			}
			if got := fmt.Sprintf("%x", resp.Header.MemberId); got != ids["m1"] {
				return fmt.Errorf("m1 answers as %s, was %s", got, ids["m1"])
			}
			return nil
		})
	})

	t.Run("down then up keeps data and member IDs", func(t *testing.T) {
		r.stop()
		for _, m := range r.spec.Members {
			if _, clean, err := datadir.ReadShutdown(Dir(dir).MemberData(m.Name)); err != nil || !clean {
				t.Errorf("member %s: no clean-shutdown marker after a graceful stop (%v)", m.Name, err)
			}
		}
		r2 := startCluster(t, dir, 0, 0)
		if r2.spec.Members[0].ClientPort != r.spec.Members[0].ClientPort {
			t.Fatalf("ports changed across restart: %+v vs %+v", r2.spec.Members, r.spec.Members)
		}
		c := r2.client(2)
		resp, err := c.Get(ctx, "/k")
		if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "through-m0" {
			t.Fatalf("data after restart: %v %v", resp, err)
		}
		list, err := c.MemberList(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range list.Members {
			if got := fmt.Sprintf("%x", m.ID); got != ids[m.Name] {
				t.Errorf("member %s ID %s after restart, was %s", m.Name, got, ids[m.Name])
			}
		}
		r2.stop()
	})
}

func TestUpRefusesBadInput(t *testing.T) {
	bin := testutil.StewardBinary(t)
	ctx := ctxT(t)

	t.Run("a non-empty dir that holds no cluster", func(t *testing.T) {
		dir := t.TempDir()
		precious := filepath.Join(dir, "precious.txt")
		if err := os.WriteFile(precious, []byte("keep me"), 0o600); err != nil {
			t.Fatal(err)
		}
		err := Up(ctx, UpOptions{Dir: dir, Members: 1, Binary: bin})
		if err == nil || !strings.Contains(err.Error(), "holds no steward cluster") {
			t.Fatalf("up on a foreign dir: %v", err)
		}
		if b, err := os.ReadFile(precious); err != nil || string(b) != "keep me" {
			t.Fatalf("foreign file touched: %q %v", b, err)
		}
	})

	t.Run("a different size than the cluster in the dir", func(t *testing.T) {
		dir := t.TempDir()
		if _, err := Prepare(UpOptions{Dir: dir, Members: 3, BasePort: 21300}); err != nil {
			t.Fatal(err)
		}
		err := Up(ctx, UpOptions{Dir: dir, Members: 5, Binary: bin})
		if err == nil || !strings.Contains(err.Error(), "holds the 3-member cluster") {
			t.Fatalf("up with another size: %v", err)
		}
	})

	t.Run("a port of the existing cluster is in use", func(t *testing.T) {
		dir := t.TempDir()
		spec, err := Prepare(UpOptions{Dir: dir, Members: 1, BasePort: 21400})
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", spec.Members[0].PeerPort))
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		err = Up(ctx, UpOptions{Dir: dir, Binary: bin})
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("port %d (member m0 peer port) is in use", spec.Members[0].PeerPort)) {
			t.Fatalf("up with a port in use: %v", err)
		}
		if _, ok, err := ReadSpec(Dir(dir)); !ok || err != nil {
			t.Fatalf("cluster.json lost after a refused up: %v", err)
		}
	})

	t.Run("a process that cannot start", func(t *testing.T) {
		dir := t.TempDir()
		notSteward := filepath.Join(t.TempDir(), "false")
		if err := os.WriteFile(notSteward, []byte("#!/bin/sh\necho cannot run >&2\nexit 3\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		err := Up(ctx, UpOptions{Dir: dir, Members: 1, BasePort: 21500, Binary: notSteward, ReadyTimeout: time.Minute})
		if err == nil || !strings.Contains(err.Error(), "keeps failing to start") || !strings.Contains(err.Error(), "cannot run") {
			t.Fatalf("up with a broken binary: %v", err)
		}
		if _, ok, _ := ReadSpec(Dir(dir)); !ok {
			t.Fatal("cluster.json removed after a failed start")
		}
		if _, running := Dir(dir).SupervisorRunning(); running {
			t.Fatal("lock still held after a failed up")
		}
	})
}

// TestPrepareRefusesBadFlags: a size, a first port or a backup store that cannot make a
// cluster is refused at once, naming its flag, before anything is written: nothing in a new
// directory, the cluster.json of an existing cluster unchanged.
func TestPrepareRefusesBadFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts UpOptions
		want string
	}{
		{"too many members", UpOptions{Members: 11}, "--members 11: a local cluster has 1 to 9 members"},
		{"a negative size", UpOptions{Members: -1}, "--members -1: a local cluster has 1 to 9 members"},
		{"a negative first port", UpOptions{Members: 1, BasePort: -5}, "--base-port -5: ports are 1 to 65535"},
		{"a first port above the last", UpOptions{Members: 1, BasePort: 70000}, "--base-port 70000: ports are 1 to 65535"},
		{"a store scheme of none", UpOptions{Members: 1, BasePort: 24100, Backup: "ftp://host/backups"}, `--backup: store URL ftp://host/backups: unknown scheme "ftp"`},
		{"a store URL without a scheme", UpOptions{Members: 1, BasePort: 24100, Backup: "/var/backups"}, "--backup: store URL \"/var/backups\" has no scheme"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.Dir = filepath.Join(t.TempDir(), "cluster")
			if _, err := Prepare(tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Prepare: %v; want an error with %q", err, tc.want)
			}
			if _, err := os.Stat(tc.opts.Dir); !os.IsNotExist(err) {
				t.Fatalf("%s was written (%v)", tc.opts.Dir, err)
			}
		})
	}
	t.Run("an existing cluster", func(t *testing.T) {
		dir := t.TempDir()
		if _, err := Prepare(UpOptions{Dir: dir, Members: 1, BasePort: 24100, Backup: "none"}); err != nil {
			t.Fatal(err)
		}
		before, err := os.ReadFile(Dir(dir).Spec())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Prepare(UpOptions{Dir: dir, Backup: "ftp://host/backups"}); err == nil || !strings.Contains(err.Error(), "--backup") {
			t.Fatalf("Prepare with an unknown store scheme: %v; want an error naming --backup", err)
		}
		if after, err := os.ReadFile(Dir(dir).Spec()); err != nil || string(after) != string(before) {
			t.Fatalf("cluster.json changed by a refused up (%v):\n%s", err, after)
		}
	})
}

func TestDownWithoutCluster(t *testing.T) {
	err := Down(context.Background(), DownOptions{Dir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "no local cluster") {
		t.Fatalf("down on an empty dir: %v", err)
	}
}

// TestStillLocked: a supervisor notices when its lock file is no longer the one it holds (the
// directory removed, or removed and made again, under it), so that it stops its members
// before a second supervisor could take the new lock.
func TestStillLocked(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "run"), 0o700); err != nil {
		t.Fatal(err)
	}
	held, err := lock(Dir(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := stillLocked(Dir(dir), held); err != nil {
		t.Fatalf("the lock just taken: %v", err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "run")); err != nil {
		t.Fatal(err)
	}
	if err := stillLocked(Dir(dir), held); err == nil || !strings.Contains(err.Error(), "removed or replaced") {
		t.Fatalf("after the directory was removed: %v", err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "run"), 0o700); err != nil {
		t.Fatal(err)
	}
	second, err := lock(Dir(dir))
	if err != nil {
		t.Fatalf("a second supervisor on the new directory: %v", err)
	}
	defer second.Close()
	if err := stillLocked(Dir(dir), held); err == nil {
		t.Fatal("the first supervisor still thinks it holds the lock of the new directory")
	}
	if err := stillLocked(Dir(dir), second); err != nil {
		t.Fatalf("the second supervisor: %v", err)
	}
}
