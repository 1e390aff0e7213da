// Command kubectl-steward is Steward's kubectl plugin: on the PATH, `kubectl steward VERB`
// operates the operator's EtcdClusters (the same verbs as `steward kubectl`).
package main

import (
	"os"

	"github.com/etcd-steward/steward/internal/cli"
)

func main() {
	os.Exit(cli.ExecuteKubectlPlugin())
}
