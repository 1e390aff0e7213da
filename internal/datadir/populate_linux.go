//go:build linux

package datadir

import "syscall"

// mmapPopulate makes the deep check's mapping read the whole file up front (see CheckDB).
const mmapPopulate = syscall.MAP_POPULATE
