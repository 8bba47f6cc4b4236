//go:build !race

package testkit

// RaceEnabled is set when the test binary runs with the race detector,
// which makes sync.Pool drop items at random (allocation counts are not
// measured then), slows large copies down by an order of magnitude and
// takes memory of its own.
const RaceEnabled = false
