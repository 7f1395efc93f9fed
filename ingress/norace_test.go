//go:build !race

package ingress_test

const raceEnabled = false
