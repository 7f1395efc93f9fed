//go:build race

package server_test

// The race detector makes everything 5–10× slower: the hostile and overload
// tests use smaller sizes under it and do not judge latencies.
const raceEnabled = true
