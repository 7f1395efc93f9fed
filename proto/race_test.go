//go:build race

package proto_test

// The race detector's instrumentation turns off some allocation optimizations (such as the
// append-of-make idiom inside slices.Grow), so exact allocation counts above zero differ.
func init() { raceEnabled = true }
