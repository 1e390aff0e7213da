//go:build tools

// Package promtool pins Prometheus' promtool, which the monitoring tests use to check and
// unit-test deploy/monitoring's alerting rules. It lives in its own module so that Prometheus'
// dependency graph does not move the versions of the etcd tools in hack/tools.
package promtool

import (
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
