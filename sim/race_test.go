//go:build race

package sim

// raceEnabled: the simulation runs on one goroutine, so the detector finds
// nothing in it and only slows it down twelvefold: fewer seeds under -race.
const raceEnabled = true
