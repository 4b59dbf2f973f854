//go:build race

package mpa

// raceEnabled: the race detector makes the long differential tests ten
// times slower; they run fewer rounds under it.
const raceEnabled = true
