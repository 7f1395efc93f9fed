//go:build !race

package stages_test

const raceEnabled = false
