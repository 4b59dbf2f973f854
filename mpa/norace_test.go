//go:build !race

package mpa

const raceEnabled = false
