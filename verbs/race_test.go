//go:build race

package verbs

// raceEnabled: the race detector allocates on its own, so allocation
// counts are not checked under it.
const raceEnabled = true
