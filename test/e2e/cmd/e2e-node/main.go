// Command e2e-node starts and stops the single-node Kubernetes of Steward's end-to-end suite
// (test/e2e/node) for work by hand: `make e2e-up` starts it with Steward installed, then
// kubectl; `make e2e-down`.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/etcd-steward/steward/test/e2e/node"
)

func main() {
	fs := flag.NewFlagSet("e2e-node", flag.ExitOnError)
	dir := fs.String("dir", "/var/lib/steward-e2e", "work dir of the node")
	bin := fs.String("bin", "bin", "directory that `make e2e-tools` built into")
	chart := fs.String("chart", "deploy/helm/steward", "Steward's Helm chart, installed by up")
	nodes := fs.Int("nodes", 3, "how many nodes (kubelets, each with its own containerd) up starts")
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: e2e-node up|down|load|volumes [--dir DIR] [--bin BIN]\n"+
			"       e2e-node poweroff|poweron|partition|heal NODE [--dir DIR] [--bin BIN]\n")
		fs.PrintDefaults()
	}
	if len(os.Args) < 2 {
		fs.Usage()
		os.Exit(2)
	}
	args := os.Args[2:]
	var target string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		target, args = args[0], args[1:]
	}
	_ = fs.Parse(args)
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	var err error
	switch os.Args[1] {
	case "up":
		err = up(ctx, *dir, *bin, *chart, *nodes)
	case "down":
		err = node.Down(*dir, *bin, os.Stderr)
	case "load":
		err = load(*dir, *bin)
	case "volumes":
		go func() {
			if err := node.ProvisionLocalVolumes(ctx, *dir); err != nil {
				fmt.Fprintf(os.Stderr, "e2e-node volumes: %v\n", err)
			}
		}()
		err = node.OwnVolumes(ctx)
	case "poweroff", "poweron", "partition", "heal":
		err = fault(ctx, os.Args[1], target, *dir, *bin)
	default:
		fs.Usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e-node %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func up(ctx context.Context, dir, bin, chart string, nodes int) error {
	bin, err := filepath.Abs(bin)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	n, err := node.Up(ctx, node.Config{Dir: dir, Bin: bin, Self: self, Log: os.Stderr, Nodes: nodes,
		Images: []node.Image{node.StewardImage(bin), node.S3Image(bin)}})
	if err != nil {
		return err
	}
	if err := n.Install(chart); err != nil {
		return fmt.Errorf("installing Steward: %w", err)
	}
	fmt.Fprintln(os.Stderr, "e2e-node: Steward installed (namespace steward-system), an S3 store in steward-s3")
	fmt.Printf("export KUBECONFIG=%s\n", n.Admin)
	return nil
}

// load imports freshly built steward and S3 images into the running node.
func load(dir, bin string) error {
	bin, err := filepath.Abs(bin)
	if err != nil {
		return err
	}
	return node.LoadImages(dir, node.StewardImage(bin), node.S3Image(bin))
}

// fault strikes (or ends) a fault of one node of the running cluster, as the suite does.
func fault(ctx context.Context, what, name, dir, bin string) error {
	if name == "" {
		return fmt.Errorf("name the node: e2e-node %s NODE (kubectl get nodes)", what)
	}
	n, err := node.Open(dir, bin, os.Stderr)
	if err != nil {
		return err
	}
	switch what {
	case "poweroff":
		return n.PowerOff(name)
	case "poweron":
		return n.PowerOn(ctx, name)
	case "partition":
		return n.Partition(name)
	}
	return n.Heal(name)
}
