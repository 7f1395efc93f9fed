//go:build race

package main

// raceEnabled: the test binary runs under the race detector, so the server
// binary the tests build gets it too.
const raceEnabled = true
