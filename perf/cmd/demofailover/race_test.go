//go:build race

package main

// raceEnabled: the tests run under the race detector, so the server binary
// they build gets it too.
const raceEnabled = true
