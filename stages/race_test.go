//go:build race

package stages_test

const raceEnabled = true
