package node

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Down stops the node in dir (bin holds its binaries, as for Up) and undoes what Up changed on the machine: processes, pod
// sandboxes (through CRI, which also runs CNI DEL), iptables chains, the bridge, the node IP,
// mounts, cgroups, sysctls and the fixed paths outside dir. It goes on past errors and returns
// them all.
func Down(dir, bin string, log io.Writer) error {
	b, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("%s/state.json: %w", dir, err)
	}
	logf := func(format string, args ...any) {
		if log != nil {
			fmt.Fprintf(log, "e2e-node: "+format+"\n", args...)
		}
	}
	var errs []error
	note := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	if len(st.Workers) == 0 { // left by a run from before there were several workers
		st.Workers = workersOf(dir, 1)
	}
	// The kubelets first (a partitioned one continued, to hear it), so that they restart
	// nothing; then every pod, while containerd runs.
	for _, w := range st.Workers {
		if pid := st.PIDs[w.process("kubelet")]; pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGCONT)
			stop(pid)
		}
	}
	for _, w := range st.Workers {
		note(removeSandboxes(w.Socket()))
	}
	for _, name := range []string{"volume-owner", "kube-proxy", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"} {
		stop(st.PIDs[name])
	}
	for _, w := range st.Workers {
		stop(st.PIDs[w.process("containerd")])
		killShims(w.Socket())
	}
	if _, err := os.Stat(filepath.Join(bin, "k8s", "kube-proxy")); err == nil {
		_ = exec.Command(filepath.Join(bin, "k8s", "kube-proxy"), "--cleanup", "--proxy-mode=iptables").Run()
	}
	note(removeChains(func(chain string) bool {
		return strings.HasPrefix(chain, "KUBE-") || strings.HasPrefix(chain, "CNI-") || chain == guardChain ||
			strings.HasPrefix(chain, "STEWARD-E2E-CUT-")
	}))
	for _, w := range st.Workers {
		_ = exec.Command("ip", "link", "del", w.Bridge).Run()
		_ = exec.Command("ip", "addr", "del", w.IP+"/32", "dev", "lo").Run()
	}
	note(unmountUnder(dir))
	note(unmountUnder("/var/run/netns/cni-"))
	note(unmountUnder("/run/netns/cni-"))
	removeCgroups()
	for _, w := range st.Workers {
		removeCgroupRoot(w.CgroupRoot)
	}
	for name, value := range st.Sysctls {
		note(writeSysctl(name, value))
	}
	removeLogLinks(dir)
	for p, existed := range st.Existed {
		if !existed {
			note(os.RemoveAll(p))
		}
	}
	if existed := st.Existed["/var/run/netns"]; existed {
		matches, _ := filepath.Glob("/var/run/netns/cni-*")
		for _, m := range matches {
			_ = os.Remove(m)
		}
	}
	if len(errs) > 0 {
		// state.json stays, so that the next Down knows what to undo and tries again.
		logf("stopped the node in %s; kept its state for another try, as some of it could not be undone", dir)
		return errors.Join(errs...)
	}
	note(os.RemoveAll(dir))
	logf("stopped and removed the node in %s", dir)
	return errors.Join(errs...)
}

func stop(pid int) {
	if pid <= 0 {
		return
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		return
	}
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	_ = p.Signal(syscall.SIGTERM)
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if syscall.Kill(pid, 0) != nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
}

// removeSandboxes stops and removes every pod sandbox through CRI: the containers stop and CNI
// DEL gives back their addresses and portmap rules.
func removeSandboxes(sock string) error {
	if _, err := os.Stat(sock); err != nil {
		return nil
	}
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	list, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if status.Code(err) == codes.Unavailable {
		// containerd died with the run that left this node (a killed job, a restarted machine):
		// its pods are gone with it, and removeChains and the netns cleanup undo their network.
		return nil
	}
	if err != nil {
		return fmt.Errorf("listing pod sandboxes: %w", err)
	}
	var errs []error
	for _, sb := range list.Items {
		if _, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
			errs = append(errs, fmt.Errorf("stopping pod sandbox %s: %w", sb.Metadata.GetName(), err))
		}
		if _, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
			errs = append(errs, fmt.Errorf("removing pod sandbox %s: %w", sb.Metadata.GetName(), err))
		}
	}
	return errors.Join(errs...)
}

// killShims ends the runc shims of the containerd listening on sock, should any outlive it.
func killShims(sock string) {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(b), "containerd-shim") || !strings.Contains(string(b), "\x00"+sock+"\x00") {
			continue
		}
		var pid int
		if _, err := fmt.Sscanf(filepath.Base(filepath.Dir(p)), "%d", &pid); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// removeChains flushes and deletes the iptables chains that match, in every table, after
// deleting the rules of other chains that jump to them.
func removeChains(match func(string) bool) error {
	var errs []error
	for _, table := range []string{"filter", "nat", "mangle", "raw"} {
		out, err := exec.Command("iptables-save", "-t", table).Output()
		if err != nil {
			continue
		}
		var chains []string
		for _, line := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(line, ":") {
				if c := strings.Fields(line[1:])[0]; match(c) {
					chains = append(chains, c)
				}
			}
			if !strings.HasPrefix(line, "-A ") {
				continue
			}
			f := strings.Fields(line)
			for i := range f {
				if (f[i] == "-j" || f[i] == "-g") && i+1 < len(f) && match(f[i+1]) && !match(f[1]) {
					// Remove the jump rule by its own spec: "-A CHAIN ..." becomes "-D CHAIN ...".
					args := append([]string{"-t", table, "-D"}, splitRule(line)[1:]...)
					if err := exec.Command("iptables", args...).Run(); err != nil {
						errs = append(errs, fmt.Errorf("iptables -t %s %s: %w", table, line, err))
					}
					break
				}
			}
		}
		for _, c := range chains {
			_ = exec.Command("iptables", "-t", table, "-F", c).Run()
		}
		for _, c := range chains {
			if err := exec.Command("iptables", "-t", table, "-X", c).Run(); err != nil {
				errs = append(errs, fmt.Errorf("iptables -t %s -X %s: %w", table, c, err))
			}
		}
	}
	return errors.Join(errs...)
}

// splitRule splits an iptables-save rule into arguments, keeping quoted comments whole and
// unescaping the quotes inside them (CNI's comments read `"name: \"net\" id: \"…\""`).
func splitRule(line string) []string {
	var args []string
	var cur strings.Builder
	quoted, escaped := false, false
	for _, r := range line {
		switch {
		case escaped:
			cur.WriteRune(r)
			escaped = false
		case r == '\\' && quoted:
			escaped = true
		case r == '"':
			quoted = !quoted
		case r == ' ' && !quoted:
			if cur.Len() > 0 {
				args = append(args, cur.String())
				cur.Reset()
			}
		default:
			cur.WriteRune(r)
		}
	}
	if cur.Len() > 0 {
		args = append(args, cur.String())
	}
	return args
}

// unmountUnder unmounts every mount point whose path starts with prefix, deepest first.
func unmountUnder(prefix string) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && strings.HasPrefix(fields[4], prefix) {
			points = append(points, fields[4])
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(points)))
	var errs []error
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// removeCgroups removes the kubelet's kubepods hierarchies (cgroupfs driver), leaves first.
func removeCgroups() {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods")
	if extra, _ := filepath.Glob("/sys/fs/cgroup/kubepods"); extra != nil {
		roots = append(roots, extra...)
	}
	for _, root := range roots {
		removeCgroupTree(root)
	}
}

// removeLogLinks removes the /var/log/containers links into this node's pod logs.
func removeLogLinks(dir string) {
	links, _ := filepath.Glob("/var/log/containers/*.log")
	for _, l := range links {
		if target, err := os.Readlink(l); err == nil && strings.HasPrefix(target, dir) {
			_ = os.Remove(l)
		}
	}
}
