// Command steward runs self-healing etcd clusters with continuous backups.
package main

import (
	"os"

	"github.com/etcd-steward/steward/internal/cli"
)

func main() {
	os.Exit(cli.Execute())
}
