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
	"syscall"

	"github.com/etcd-steward/steward/test/e2e/node"
)

func main() {
	fs := flag.NewFlagSet("e2e-node", flag.ExitOnError)
	dir := fs.String("dir", "/var/lib/steward-e2e", "work dir of the node")
	bin := fs.String("bin", "bin", "directory that `make e2e-tools` built into")
	chart := fs.String("chart", "deploy/helm/steward", "Steward's Helm chart, installed by up")
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: e2e-node up|down|load|volumes [--dir DIR] [--bin BIN]\n")
		fs.PrintDefaults()
	}
	if len(os.Args) < 2 {
		fs.Usage()
		os.Exit(2)
	}
	_ = fs.Parse(os.Args[2:])
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	var err error
	switch os.Args[1] {
	case "up":
		err = up(ctx, *dir, *bin, *chart)
	case "down":
		err = node.Down(*dir, *bin, os.Stderr)
	case "load":
		err = load(*dir, *bin)
	case "volumes":
		err = node.OwnVolumes(ctx)
	default:
		fs.Usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e-node %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func up(ctx context.Context, dir, bin, chart string) error {
	bin, err := filepath.Abs(bin)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	n, err := node.Up(ctx, node.Config{Dir: dir, Bin: bin, Self: self, Log: os.Stderr,
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
