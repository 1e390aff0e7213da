//go:build !linux

package datadir

// mmapPopulate is Linux-only; elsewhere the deep check faults pages in as it walks them.
const mmapPopulate = 0
