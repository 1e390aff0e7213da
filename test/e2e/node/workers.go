package node

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Worker is one node of the cluster: its own kubelet and containerd (own root, state and
// socket), node IP, pod CIDR on its own bridge and kubelet cgroup root. The first worker also
// holds the control plane, as the machine's single node did before there were several.
type Worker struct {
	Name    string `json:"name"`
	IP      string `json:"ip"`
	PodCIDR string `json:"podCIDR"`
	// Dir holds its containerd, kubelet root, CNI configuration and pod logs.
	Dir string `json:"dir"`
	// Bridge is the link its pods attach to; traffic between workers is routed by the machine,
	// as between machines on one network.
	Bridge string `json:"bridge"`
	// CgroupRoot is the kubelet's cgroup root ("" for the machine's): each kubelet manages
	// only its own pods' cgroups, and a power-off kills exactly what it holds.
	CgroupRoot string `json:"cgroupRoot,omitempty"`
}

// workersOf lays out count workers of the node in dir.
func workersOf(dir string, count int) []Worker {
	ws := []Worker{{Name: NodeName, IP: NodeIP, PodCIDR: PodCIDR, Dir: dir, Bridge: "cni0"}}
	for i := 1; i < count; i++ {
		name := fmt.Sprintf("%s-%d", NodeName, i)
		ws = append(ws, Worker{Name: name, IP: fmt.Sprintf("10.200.0.%d", i+1), PodCIDR: fmt.Sprintf("10.244.%d.0/24", i),
			Dir: filepath.Join(dir, "nodes", name), Bridge: fmt.Sprintf("cni%d", i), CgroupRoot: "/" + name})
	}
	return ws
}

func (w Worker) path(parts ...string) string {
	return filepath.Join(append([]string{w.Dir}, parts...)...)
}

// Socket is its containerd's socket.
func (w Worker) Socket() string { return w.path("containerd", "containerd.sock") }

// process names the worker's component in the state's pids ("kubelet" for the first worker).
func (w Worker) process(component string) string {
	if w.CgroupRoot == "" {
		return component
	}
	return component + "-" + w.Name
}

// Workers are the node's workers, the first holding the control plane.
func (n *Node) Workers() []Worker { return n.st.Workers }

// Worker is the worker of that name.
func (n *Node) Worker(name string) (Worker, error) {
	for _, w := range n.st.Workers {
		if w.Name == name {
			return w, nil
		}
	}
	return Worker{}, fmt.Errorf("no node %q: the nodes are %s", name, n.workerNames())
}

func (n *Node) workerNames() string {
	var names []string
	for _, w := range n.st.Workers {
		names = append(names, w.Name)
	}
	return strings.Join(names, ", ")
}

// cgroupHierarchies are the mounted cgroup v1 hierarchies (or the v2 root).
func cgroupHierarchies() []string {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return []string{"/sys/fs/cgroup"}
	}
	var hs []string
	entries, _ := os.ReadDir("/sys/fs/cgroup")
	for _, e := range entries {
		if p := filepath.Join("/sys/fs/cgroup", e.Name()); e.IsDir() && e.Name() != "unified" {
			if _, err := os.Stat(filepath.Join(p, "cgroup.procs")); err == nil {
				hs = append(hs, p)
			}
		}
	}
	return hs
}

// makeCgroupRoot creates the worker's cgroup root in every hierarchy (the kubelet refuses a
// root that does not exist); a cpuset gets its parent's CPUs and memory nodes.
func (w Worker) makeCgroupRoot() error {
	if w.CgroupRoot == "" {
		return nil
	}
	for _, h := range cgroupHierarchies() {
		p := filepath.Join(h, w.CgroupRoot)
		if err := os.MkdirAll(p, 0o755); err != nil {
			return err
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if b, err := os.ReadFile(filepath.Join(h, f)); err == nil {
				if err := os.WriteFile(filepath.Join(p, f), b, 0o644); err != nil {
					return fmt.Errorf("%s: %w", filepath.Join(p, f), err)
				}
			}
		}
	}
	return nil
}

// killCgroup kills every process in the worker's pods' cgroups: its containers, as a power
// loss ends them. The freezer holds them still first, so none forks past the kill.
func (w Worker) killCgroup() error {
	root := filepath.Join(w.CgroupRoot, "kubepods")
	freezer := filepath.Join("/sys/fs/cgroup/freezer", root)
	frozen := os.WriteFile(filepath.Join(freezer, "freezer.state"), []byte("FROZEN"), 0o644) == nil
	var pids []int
	for _, h := range cgroupHierarchies() {
		_ = filepath.WalkDir(filepath.Join(h, root), func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			f, err := os.Open(p)
			if err != nil {
				return nil
			}
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				if pid, err := strconv.Atoi(strings.TrimSpace(sc.Text())); err == nil {
					pids = append(pids, pid)
				}
			}
			f.Close()
			return nil
		})
		if len(pids) > 0 {
			break // every hierarchy holds the same processes
		}
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if frozen {
		return os.WriteFile(filepath.Join(freezer, "freezer.state"), []byte("THAWED"), 0o644)
	}
	return nil
}

// removeCgroupRoot removes the worker's cgroup root, leaves first.
func removeCgroupRoot(root string) {
	if root == "" {
		return
	}
	// In a hybrid layout runc also makes the root in the unified hierarchy, which the
	// kubelet does not manage.
	for _, h := range append(cgroupHierarchies(), "/sys/fs/cgroup/unified") {
		removeCgroupTree(filepath.Join(h, root))
	}
}

func removeCgroupTree(root string) {
	var dirs []string
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		_ = syscall.Rmdir(dirs[i])
	}
}

// partitionChain holds the rules that cut a worker off.
func (w Worker) partitionChain() string {
	return "STEWARD-E2E-CUT-" + strings.TrimPrefix(w.IP, "10.200.0.")
}

// cut drops every packet between the worker's pods and anything outside them: other workers'
// pods, the control plane, Services. Its own pods still reach each other.
func (w Worker) cut() error {
	chain := w.partitionChain()
	rules := [][]string{
		{"-N", chain},
		{"-A", chain, "-s", w.PodCIDR, "!", "-d", w.PodCIDR, "-j", "DROP"},
		{"-A", chain, "-d", w.PodCIDR, "!", "-s", w.PodCIDR, "-j", "DROP"},
	}
	// First in each chain, before kube-proxy's rules accept established connections.
	for _, builtin := range []string{"FORWARD", "INPUT", "OUTPUT"} {
		rules = append(rules, []string{"-I", builtin, "1", "-j", chain})
	}
	for _, r := range rules {
		if err := run("iptables", append([]string{"-t", "filter"}, r...)...); err != nil {
			return err
		}
	}
	// Connections tracked as established would otherwise outlive the cut in other tables.
	_ = exec.Command("conntrack", "-D", "-s", w.PodCIDR).Run()
	_ = exec.Command("conntrack", "-D", "-d", w.PodCIDR).Run()
	return nil
}

// uncut removes what cut added; nothing to remove is no error.
func (w Worker) uncut() error {
	chain := w.partitionChain()
	return removeChains(func(c string) bool { return c == chain })
}

// cutOff drops the traffic of worker name's pods (see cut), the first step of a fault (what,
// to say so). The worker holding the control plane is refused: the suite needs it.
func (n *Node) cutOff(name, what string) (Worker, error) {
	w, err := n.Worker(name)
	if err != nil {
		return Worker{}, err
	}
	if w.CgroupRoot == "" {
		return Worker{}, fmt.Errorf("node %s holds the control plane: %s another (%s)", name, what, n.workerNames())
	}
	return w, w.cut()
}

// PowerOff stops the worker as a power loss would: its kubelet, containerd and every
// container are killed at once, and its pods' addresses fall silent (packets dropped, not
// refused). The Node object stays; the control plane sees it stop reporting.
func (n *Node) PowerOff(name string) error {
	w, err := n.cutOff(name, "power off")
	if err != nil {
		return err
	}
	for _, c := range []string{"kubelet", "containerd"} {
		if pid := n.st.PIDs[w.process(c)]; pid > 0 {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			_ = syscall.Kill(pid, syscall.SIGKILL)
			delete(n.st.PIDs, w.process(c))
		}
	}
	killShims(w.Socket())
	if err := w.killCgroup(); err != nil {
		return err
	}
	n.logf("powered off node %s", name)
	return n.saveState()
}

// PowerOn starts a worker PowerOff stopped: containerd, then the kubelet, as at boot; what
// already runs is left alone.
func (n *Node) PowerOn(ctx context.Context, name string) error {
	w, err := n.Worker(name)
	if err != nil {
		return err
	}
	if err := w.uncut(); err != nil {
		return err
	}
	for _, c := range []string{"containerd", "kubelet"} {
		if pid := n.st.PIDs[w.process(c)]; pid > 0 && syscall.Kill(pid, 0) == nil {
			continue // runs: a second PowerOn starts no second one
		}
		command := n.st.Commands[w.process(c)]
		if len(command) == 0 {
			return fmt.Errorf("node %s: no record of how its %s started", name, c)
		}
		if err := n.start(w.process(c), command[0], command[1:]...); err != nil {
			return err
		}
		if c == "containerd" {
			if err := waitContainerd(ctx, w); err != nil {
				return err
			}
		}
	}
	n.logf("powered on node %s", name)
	return n.waitNodeReady(ctx, w)
}

// Partition cuts a worker off the network while it keeps running: its pods' traffic with the
// rest is dropped, and its kubelet is stopped (SIGSTOP) as one that cannot reach the API
// server; the containers run on.
func (n *Node) Partition(name string) error {
	w, err := n.cutOff(name, "partition")
	if err != nil {
		return err
	}
	if pid := n.st.PIDs[w.process("kubelet")]; pid > 0 {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			return fmt.Errorf("stopping the kubelet of %s: %w", name, err)
		}
	}
	n.logf("partitioned node %s", name)
	return nil
}

// Heal ends a Partition: the traffic flows again and the kubelet continues.
func (n *Node) Heal(name string) error {
	w, err := n.Worker(name)
	if err != nil {
		return err
	}
	if pid := n.st.PIDs[w.process("kubelet")]; pid > 0 {
		_ = syscall.Kill(pid, syscall.SIGCONT)
	}
	if err := w.uncut(); err != nil {
		return err
	}
	n.logf("healed node %s", name)
	return nil
}

// KillContainer kills a container on whichever worker runs it, as a crash would.
func (n *Node) KillContainer(containerID string) error {
	id := strings.TrimPrefix(containerID, "containerd://")
	var errs []error
	for _, w := range n.st.Workers {
		out, err := exec.Command("ctr", "--address", w.Socket(), "-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", id).CombinedOutput()
		if err == nil {
			return nil
		}
		errs = append(errs, fmt.Errorf("%s: %v: %s", w.Name, err, strings.TrimSpace(string(out))))
	}
	return fmt.Errorf("killing container %s: %w", id, errors.Join(errs...))
}

func (n *Node) waitNodeReady(ctx context.Context, w Worker) error {
	return poll(ctx, 2*time.Minute, func() error {
		out, err := n.kubectl("get", "node", w.Name, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		if err != nil {
			return err
		}
		if out != "True" {
			return fmt.Errorf("node %s Ready=%q", w.Name, out)
		}
		return nil
	})
}
