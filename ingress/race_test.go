//go:build race

package ingress_test

// The race detector makes sync.Pool drop pooled buffers at random, so
// bytebufferpool allocates; allocation counts are checked without it.
const raceEnabled = true
