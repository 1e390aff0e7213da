// Package node runs a real Kubernetes on this machine for Steward's end-to-end tests: etcd,
// kube-apiserver, kube-controller-manager and kube-scheduler, kube-proxy and CoreDNS, and one
// or more nodes (workers), each with its own containerd and runc, kubelet, node IP, pod CIDR
// and bridge; all as processes under one work dir, built from source into ./bin. A worker can
// be powered off, partitioned and brought back. Down leaves the machine as Up found it.
package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The first worker's fixed addresses (the others count up from them: steward-e2e-1 is
// 10.200.0.2 with pods in 10.244.1.0/24, ...): node IPs live on lo (these kernels have no
// dummy links), and nothing the node serves is reachable from outside the machine.
const (
	NodeName    = "steward-e2e"
	NodeIP      = "10.200.0.1"
	PodCIDR     = "10.244.0.0/24"
	ServiceCIDR = "10.96.0.0/16"
	DNSIP       = "10.96.0.10"
	APIServer   = "https://" + NodeIP + ":6443"
	PauseImage  = "registry.k8s.io/pause:3.10.2"
	// HostPathPV is where the kube-controller-manager's hostPath provisioner makes volumes; the
	// path is fixed in Kubernetes' code.
	HostPathPV = "/tmp/hostpath_pv"
	// VolumeOwner owns every provisioned volume: the fsGroup and user of Steward's pods.
	VolumeOwner = 65532
)

// Config says where the node lives and what it runs.
type Config struct {
	// Dir is the work dir: certificates, data, logs, sockets. Keep it short: socket paths are
	// limited to 108 bytes.
	Dir string
	// Bin holds bin/k8s (Kubernetes, etcd), coredns and pause, as `make e2e-tools` builds them.
	Bin string
	// Self is the e2e-node binary, run detached as the volume owner (see OwnVolumes).
	Self string
	// Images are imported into every worker's containerd before its kubelet starts.
	Images []Image
	// Nodes is how many workers run; 0 means 1.
	Nodes int
	Log   io.Writer
}

// state is what Down needs to undo Up, kept in Dir/state.json.
type state struct {
	PIDs    map[string]int    `json:"pids"`
	Sysctls map[string]string `json:"sysctls"`
	// Existed lists fixed paths outside Dir that were there before Up (Down keeps them).
	Existed map[string]bool `json:"existed"`
	Workers []Worker        `json:"workers"`
	// Commands holds each component's program and arguments, so that one stopped can be
	// started again as it was, by this process or a later one (Open).
	Commands map[string][]string `json:"commands"`
}

// The sysctls the kubelet, kube-proxy and the bridge plugin change.
var sysctls = []string{"net/ipv4/ip_forward", "vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops",
	"net/bridge/bridge-nf-call-iptables"}

// Paths outside Dir that containerd and the kubelet create (the kubelet listens for device plugins
// under /var/lib/kubelet whatever its --root-dir).
var fixedPaths = []string{HostPathPV, "/run/containerd", "/var/log/containers", "/var/lib/cni", "/var/run/netns", "/var/lib/kubelet"}

// Node is a running node.
type Node struct {
	cfg   Config
	st    state
	pki   *pki
	Admin string // the admin kubeconfig
}

func (n *Node) logf(format string, args ...any) {
	if n.cfg.Log != nil {
		fmt.Fprintf(n.cfg.Log, "e2e-node: "+format+"\n", args...)
	}
}

func (n *Node) path(parts ...string) string {
	return filepath.Join(append([]string{n.cfg.Dir}, parts...)...)
}

// AdminKubeconfig is where Up writes the admin kubeconfig for a node in dir.
func AdminKubeconfig(dir string) string { return filepath.Join(dir, "pki", "admin.kubeconfig") }

// Up starts a node in cfg.Dir, first stopping any node a previous run left there.
func Up(ctx context.Context, cfg Config) (*Node, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("the e2e node runs containers and changes the network: run it as root")
	}
	if err := checkTools(cfg.Bin); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(cfg.Dir, "state.json")); err == nil {
		if err := Down(cfg.Dir, cfg.Bin, cfg.Log); err != nil {
			return nil, fmt.Errorf("stopping the node left in %s: %w", cfg.Dir, err)
		}
	}
	n := &Node{cfg: cfg, st: state{PIDs: map[string]int{}, Sysctls: map[string]string{}, Existed: map[string]bool{},
		Workers: workersOf(cfg.Dir, max(cfg.Nodes, 1)), Commands: map[string][]string{}}}
	for _, s := range sysctls {
		b, err := os.ReadFile("/proc/sys/" + s)
		if err != nil {
			return nil, fmt.Errorf("reading sysctl %s: %w", s, err)
		}
		n.st.Sysctls[s] = strings.TrimSpace(string(b))
	}
	for _, p := range fixedPaths {
		_, err := os.Stat(p)
		n.st.Existed[p] = err == nil
	}
	if err := os.MkdirAll(n.path("logs"), 0o700); err != nil {
		return nil, err
	}
	if err := n.saveState(); err != nil {
		return nil, err
	}
	start := time.Now()
	for _, step := range []struct {
		name string
		run  func(context.Context) error
	}{
		{"certificates", n.certificates},
		{"network", n.network},
		{"etcd and the control plane", n.controlPlane},
		{"containerd and images", n.containerd},
		{"kubelet and kube-proxy", n.kubelet},
		{"volume owner", n.volumeOwner},
		{"cluster add-ons", n.addons},
	} {
		t := time.Now()
		if err := step.run(ctx); err != nil {
			n.logf("%s failed: %v (logs in %s)", step.name, err, n.path("logs"))
			return n, fmt.Errorf("%s: %w", step.name, err)
		}
		n.logf("%s ready in %s", step.name, time.Since(t).Round(100*time.Millisecond))
	}
	n.logf("node ready in %s", time.Since(start).Round(100*time.Millisecond))
	return n, nil
}

// Open is the node Up started in dir, for a later process: its state (processes, workers,
// how each component started) read back from dir.
func Open(dir, bin string, log io.Writer) (*Node, error) {
	b, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		return nil, fmt.Errorf("no node in %s (start one with `make e2e-up`): %w", dir, err)
	}
	n := &Node{cfg: Config{Dir: dir, Bin: bin, Log: log}, pki: &pki{dir: filepath.Join(dir, "pki")}, Admin: AdminKubeconfig(dir)}
	if err := json.Unmarshal(b, &n.st); err != nil {
		return nil, fmt.Errorf("%s/state.json: %w", dir, err)
	}
	return n, nil
}

func checkTools(bin string) error {
	var missing []string
	for _, f := range []string{"k8s/etcd", "k8s/kube-apiserver", "k8s/kube-controller-manager", "k8s/kube-scheduler",
		"k8s/kubelet", "k8s/kube-proxy", "k8s/kubectl", "coredns", "pause"} {
		if _, err := os.Stat(filepath.Join(bin, f)); err != nil {
			missing = append(missing, filepath.Join(bin, f))
		}
	}
	for _, c := range []string{"containerd", "containerd-shim-runc-v2", "ctr", "runc", "iptables", "iptables-save", "conntrack", "ip"} {
		if _, err := exec.LookPath(c); err != nil {
			missing = append(missing, c)
		}
	}
	if _, err := os.Stat("/usr/lib/cni/bridge"); err != nil {
		missing = append(missing, "/usr/lib/cni/bridge")
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing %s: run `make e2e-tools` (it builds the binaries and installs the Debian packages)", strings.Join(missing, ", "))
	}
	return nil
}

func (n *Node) saveState() error {
	b, err := json.MarshalIndent(n.st, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(n.path("state.json"), b, 0o600)
}

func (n *Node) certificates(context.Context) error {
	p, err := newPKI(n.path("pki"))
	if err != nil {
		return err
	}
	n.pki = p
	if err := p.serviceAccountKey(); err != nil {
		return err
	}
	certs := []struct {
		name, cn string
		orgs     []string
		hosts    []string
	}{
		{"apiserver", "kube-apiserver", nil, []string{NodeIP, "10.96.0.1", "127.0.0.1", "localhost", "kubernetes",
			"kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}},
		{"apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"}, nil},
		{"admin", "steward-e2e-admin", []string{"system:masters"}, nil},
		{"controller-manager", "system:kube-controller-manager", nil, nil},
		{"scheduler", "system:kube-scheduler", nil, nil},
		{"kube-proxy", "system:kube-proxy", nil, nil},
	}
	names := []string{"admin", "controller-manager", "scheduler", "kube-proxy"}
	for _, w := range n.st.Workers {
		certs = append(certs, struct {
			name, cn string
			orgs     []string
			hosts    []string
		}{w.kubeletCert(), "system:node:" + w.Name, []string{"system:nodes"}, []string{w.IP, w.Name}})
		names = append(names, w.kubeletCert())
	}
	for _, c := range certs {
		if err := p.issue(c.name, c.cn, c.orgs, c.hosts...); err != nil {
			return err
		}
	}
	for _, name := range names {
		if _, err := p.kubeconfig(name, APIServer); err != nil {
			return err
		}
	}
	n.Admin = AdminKubeconfig(n.cfg.Dir)
	return nil
}

// network puts the node IPs on lo and adds a guard that drops pod and Service traffic that
// would leave through any other link than the workers' bridges: everything the node runs
// stays on this machine.
func (n *Node) network(context.Context) error {
	for _, w := range n.st.Workers {
		if err := run("ip", "addr", "replace", w.IP+"/32", "dev", "lo"); err != nil {
			return err
		}
	}
	// In POSTROUTING, where the route is final (a Service address is rerouted to a bridge
	// only after the OUTPUT chains ran).
	for _, r := range [][]string{
		{"-N", guardChain},
		{"-A", guardChain, "-o", "lo", "-j", "RETURN"},
		{"-A", guardChain, "-o", "cni+", "-j", "RETURN"},
		{"-A", guardChain, "-d", "10.0.0.0/8", "-j", "DROP"},
		{"-I", "POSTROUTING", "-j", guardChain},
	} {
		if err := run("iptables", append([]string{"-t", "mangle"}, r...)...); err != nil {
			return err
		}
	}
	return writeSysctl("net/bridge/bridge-nf-call-iptables", "1")
}

const guardChain = "STEWARD-E2E-GUARD"

func (n *Node) controlPlane(ctx context.Context) error {
	p := n.pki.path
	if err := n.start("etcd", filepath.Join(n.cfg.Bin, "k8s", "etcd"),
		"--data-dir", n.path("etcd"), "--listen-client-urls", "http://127.0.0.1:22379",
		"--advertise-client-urls", "http://127.0.0.1:22379", "--listen-peer-urls", "http://127.0.0.1:22380",
		"--initial-advertise-peer-urls", "http://127.0.0.1:22380", "--initial-cluster", "default=http://127.0.0.1:22380",
		"--unsafe-no-fsync", "--log-level", "warn"); err != nil {
		return err
	}
	if err := n.start("kube-apiserver", filepath.Join(n.cfg.Bin, "k8s", "kube-apiserver"),
		"--etcd-servers", "http://127.0.0.1:22379",
		"--bind-address", NodeIP, "--advertise-address", NodeIP, "--secure-port", "6443",
		"--tls-cert-file", p("apiserver.crt"), "--tls-private-key-file", p("apiserver.key"),
		"--client-ca-file", p("ca.crt"),
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", p("sa.pub"), "--service-account-signing-key-file", p("sa.key"),
		"--service-cluster-ip-range", ServiceCIDR, "--authorization-mode", "Node,RBAC",
		"--kubelet-client-certificate", p("apiserver-kubelet-client.crt"), "--kubelet-client-key", p("apiserver-kubelet-client.key"),
		"--kubelet-certificate-authority", p("ca.crt"),
		"--kubelet-preferred-address-types", "InternalIP,Hostname",
		"--allow-privileged=true", "--enable-priority-and-fairness=false"); err != nil {
		return err
	}
	if err := n.waitHTTPS(ctx, APIServer+"/readyz", 2*time.Minute); err != nil {
		return fmt.Errorf("kube-apiserver: %w", err)
	}
	if err := n.start("kube-controller-manager", filepath.Join(n.cfg.Bin, "k8s", "kube-controller-manager"),
		"--kubeconfig", p("controller-manager.kubeconfig"),
		"--authentication-kubeconfig", p("controller-manager.kubeconfig"), "--authorization-kubeconfig", p("controller-manager.kubeconfig"),
		"--leader-elect=false", "--bind-address", "127.0.0.1", "--secure-port", "10257",
		"--service-account-private-key-file", p("sa.key"), "--root-ca-file", p("ca.crt"),
		"--cluster-signing-cert-file", p("ca.crt"), "--cluster-signing-key-file", p("ca.key"),
		"--use-service-account-credentials", "--enable-hostpath-provisioner=true",
		"--service-cluster-ip-range", ServiceCIDR); err != nil {
		return err
	}
	return n.start("kube-scheduler", filepath.Join(n.cfg.Bin, "k8s", "kube-scheduler"),
		"--kubeconfig", p("scheduler.kubeconfig"),
		"--authentication-kubeconfig", p("scheduler.kubeconfig"), "--authorization-kubeconfig", p("scheduler.kubeconfig"),
		"--leader-elect=false", "--bind-address", "127.0.0.1", "--secure-port", "10259")
}

// kubeletCert names the worker's kubelet certificate and kubeconfig in the PKI.
func (w Worker) kubeletCert() string {
	if w.CgroupRoot == "" {
		return "kubelet"
	}
	return "kubelet-" + w.Name
}

func (n *Node) containerd(ctx context.Context) error {
	for _, w := range n.st.Workers {
		if err := n.startContainerd(ctx, w); err != nil {
			return fmt.Errorf("node %s: %w", w.Name, err)
		}
	}
	return LoadImages(n.cfg.Dir, append([]Image{{Ref: PauseImage, Entrypoint: []string{"/pause"}, Files: map[string]string{"pause": filepath.Join(n.cfg.Bin, "pause")}},
		{Ref: "coredns:e2e", Entrypoint: []string{"/coredns"}, Files: map[string]string{"coredns": filepath.Join(n.cfg.Bin, "coredns")}}},
		n.cfg.Images...)...)
}

func (n *Node) startContainerd(ctx context.Context, w Worker) error {
	for _, d := range []string{"containerd", "cni/net.d", "cni/ipam"} {
		if err := os.MkdirAll(w.path(d), 0o700); err != nil {
			return err
		}
	}
	config := fmt.Sprintf(`version = 2
root = %q
state = %q
[grpc]
  address = %q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %q
`, w.path("containerd", "root"), w.path("containerd", "state"), w.Socket(), PauseImage, w.path("cni", "net.d"))
	if err := os.WriteFile(w.path("containerd", "config.toml"), []byte(config), 0o600); err != nil {
		return err
	}
	// No masquerading: pods on different workers see each other's own addresses, as etcd's
	// peer TLS checks them against the certificates (kube-proxy masquerades what it must).
	conflist := fmt.Sprintf(`{"cniVersion": "0.4.0", "name": "steward-e2e", "plugins": [
  {"type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}], "dataDir": %q}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
`, w.Bridge, w.PodCIDR, w.path("cni", "ipam"))
	if err := os.WriteFile(w.path("cni", "net.d", "10-steward-e2e.conflist"), []byte(conflist), 0o600); err != nil {
		return err
	}
	if err := n.start(w.process("containerd"), "containerd", "--config", w.path("containerd", "config.toml")); err != nil {
		return err
	}
	return waitContainerd(ctx, w)
}

// waitContainerd waits until the worker's containerd answers: a kubelet started before gives up.
func waitContainerd(ctx context.Context, w Worker) error {
	if err := poll(ctx, time.Minute, func() error {
		return exec.Command("ctr", "--address", w.Socket(), "version").Run()
	}); err != nil {
		return fmt.Errorf("the containerd of %s did not answer: %w", w.Name, err)
	}
	return nil
}

// LoadImages writes the images and imports them into the containerd of every worker of the
// node in dir, replacing images of the same reference (pods started after it run the new ones).
func LoadImages(dir string, images ...Image) error {
	socks, _ := filepath.Glob(filepath.Join(dir, "nodes", "*", "containerd", "containerd.sock"))
	socks = append([]string{filepath.Join(dir, "containerd", "containerd.sock")}, socks...)
	if err := os.MkdirAll(filepath.Join(dir, "images"), 0o700); err != nil {
		return err
	}
	for i, img := range images {
		tarball := filepath.Join(dir, "images", strconv.Itoa(i)+".tar")
		if err := img.WriteArchive(tarball); err != nil {
			return err
		}
		for _, sock := range socks {
			if out, err := exec.Command("ctr", "--address", sock, "-n", "k8s.io", "images", "import", tarball).CombinedOutput(); err != nil {
				return fmt.Errorf("importing %s through %s: %v: %s", img.Ref, sock, err, out)
			}
		}
		_ = os.Remove(tarball)
	}
	return nil
}

func (n *Node) kubelet(ctx context.Context) error {
	if err := os.WriteFile(n.path("resolv.conf"), []byte("nameserver 127.0.0.1\n"), 0o644); err != nil {
		return err
	}
	for _, w := range n.st.Workers {
		if err := n.startKubelet(w); err != nil {
			return fmt.Errorf("node %s: %w", w.Name, err)
		}
	}
	if err := n.start("kube-proxy", filepath.Join(n.cfg.Bin, "k8s", "kube-proxy"), "--kubeconfig", n.pki.path("kube-proxy.kubeconfig"),
		"--hostname-override", NodeName, "--proxy-mode=iptables", "--cluster-cidr=10.244.0.0/16",
		"--nodeport-addresses="+NodeIP+"/32", "--iptables-localhost-nodeports=false", "--conntrack-max-per-core=0",
		"--conntrack-tcp-timeout-established=0", "--conntrack-tcp-timeout-close-wait=0",
		"--healthz-bind-address=127.0.0.1:10256", "--metrics-bind-address=127.0.0.1:10249"); err != nil {
		return err
	}
	for _, w := range n.st.Workers {
		if err := n.waitNodeReady(ctx, w); err != nil {
			return err
		}
	}
	return nil
}

// startKubelet starts the worker's kubelet: it serves on the worker's IP, runs pods through
// the worker's containerd and keeps their cgroups under the worker's root.
func (n *Node) startKubelet(w Worker) error {
	p := n.pki.path
	if err := w.makeCgroupRoot(); err != nil {
		return err
	}
	cgroupRoot := ""
	if w.CgroupRoot != "" {
		cgroupRoot = fmt.Sprintf("cgroupRoot: %q\n", w.CgroupRoot)
	}
	config := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %q}
authorization: {mode: Webhook}
address: %s
readOnlyPort: 0
healthzBindAddress: %s
tlsCertFile: %q
tlsPrivateKeyFile: %q
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
clusterDNS: [%s]
clusterDomain: cluster.local
resolvConf: %q
containerRuntimeEndpoint: unix://%s
podLogsDir: %q
evictionHard: {memory.available: "100Mi", nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
%s`, p("ca.crt"), w.IP, w.IP, p(w.kubeletCert()+".crt"), p(w.kubeletCert()+".key"), DNSIP, n.path("resolv.conf"), w.Socket(),
		w.path("pod-logs"), cgroupRoot)
	if err := os.WriteFile(w.path("kubelet.yaml"), []byte(config), 0o600); err != nil {
		return err
	}
	return n.start(w.process("kubelet"), filepath.Join(n.cfg.Bin, "k8s", "kubelet"), "--config", w.path("kubelet.yaml"),
		"--kubeconfig", p(w.kubeletCert()+".kubeconfig"), "--node-ip", w.IP, "--hostname-override", w.Name,
		"--root-dir", w.path("kubelet"))
}

// volumeOwner starts `e2e-node volumes` detached: it gives every provisioned volume to
// VolumeOwner (see OwnVolumes) and provisions LocalClass (see ProvisionLocalVolumes).
func (n *Node) volumeOwner(context.Context) error {
	return n.start("volume-owner", n.cfg.Self, "volumes", "--dir", n.cfg.Dir)
}

func (n *Node) addons(ctx context.Context) error {
	if _, err := n.kubectlStdin(addonsYAML, "apply", "-f", "-"); err != nil {
		return err
	}
	if err := poll(ctx, 2*time.Minute, func() error {
		_, err := n.kubectl("get", "serviceaccount", "default", "-n", "default")
		return err
	}); err != nil {
		return fmt.Errorf("the default ServiceAccount: %w", err)
	}
	_, err := n.kubectl("-n", "kube-system", "rollout", "status", "deployment/coredns", "--timeout=2m")
	return err
}

// Kubectl runs kubectl with the admin kubeconfig and returns its trimmed output.
func (n *Node) kubectl(args ...string) (string, error) { return n.kubectlStdin("", args...) }

func (n *Node) kubectlStdin(stdin string, args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(n.cfg.Bin, "k8s", "kubectl"), append([]string{"--kubeconfig", n.Admin}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

// start runs a component detached (its own process group, so it outlives `e2e-node up`),
// logging to logs/<name>.log, and records its pid for Down.
func (n *Node) start(name, bin string, args ...string) error {
	logf, err := os.OpenFile(n.path("logs", name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = n.cfg.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", name, err)
	}
	n.st.PIDs[name] = cmd.Process.Pid
	n.st.Commands[name] = append([]string{bin}, args...)
	go func() { _ = cmd.Wait() }() // reap it if it dies while this process lives
	return n.saveState()
}

// StopAPIServer stops the kube-apiserver, as an outage of the control plane would: the
// kubelet, the pods and every other component keep running, unable to reach it.
func (n *Node) StopAPIServer(ctx context.Context) error {
	pid := n.st.PIDs["kube-apiserver"]
	stop(pid)
	// stop ends with a SIGKILL it does not wait for.
	if err := poll(ctx, 10*time.Second, func() error {
		if syscall.Kill(pid, 0) == nil {
			return fmt.Errorf("the kube-apiserver (pid %d) still runs", pid)
		}
		return nil
	}); err != nil {
		return err
	}
	// Down must not signal the old pid, which another process may get.
	delete(n.st.PIDs, "kube-apiserver")
	return n.saveState()
}

// StartAPIServer starts the kube-apiserver again as Up started it, and waits until it is ready.
func (n *Node) StartAPIServer(ctx context.Context) error {
	command := n.st.Commands["kube-apiserver"]
	if err := n.start("kube-apiserver", command[0], command[1:]...); err != nil {
		return err
	}
	if err := n.waitHTTPS(ctx, APIServer+"/readyz", 2*time.Minute); err != nil {
		return fmt.Errorf("kube-apiserver: %w", err)
	}
	return nil
}

func (n *Node) waitHTTPS(ctx context.Context, url string, timeout time.Duration) error {
	client, err := httpsClient(n.pki.path("ca.crt"), n.pki.path("admin.crt"), n.pki.path("admin.key"))
	if err != nil {
		return err
	}
	return poll(ctx, timeout, func() error {
		resp, err := client.Get(url)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			return fmt.Errorf("%s: %s: %s", url, resp.Status, b)
		}
		return nil
	})
}

// poll calls f until it succeeds or the timeout passes, returning f's last error.
func poll(ctx context.Context, timeout time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %s: %w", timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func run(name string, args ...string) error {
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func writeSysctl(name, value string) error {
	return os.WriteFile("/proc/sys/"+name, []byte(value), 0o644)
}
