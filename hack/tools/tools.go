//go:build tools

// Package tools pins the third-party binaries steward's tests and checks use. They are built
// from the Go module proxy by `make tools` into ./bin.
package tools

import (
	_ "go.etcd.io/etcd/etcdctl/v3"
	_ "go.etcd.io/etcd/etcdutl/v3"
	_ "honnef.co/go/tools/cmd/staticcheck"
)
