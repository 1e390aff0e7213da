// Command coredns is a minimal CoreDNS for the e2e node (test/e2e): cluster DNS from the
// kubernetes plugin and nothing that reaches outside the machine (no forward plugin).
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

func init() {
	// Plugin order, as in CoreDNS's plugin.cfg.
	dnsserver.Directives = []string{"reload", "health", "ready", "errors", "log", "cache", "loadbalance", "kubernetes"}
}

func main() { coremain.Run() }
