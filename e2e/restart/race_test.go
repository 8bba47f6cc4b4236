//go:build race

package restart

// raceEnabled: the test binary runs with the race detector, which slows
// large copies down by an order of magnitude and takes memory of its own.
const raceEnabled = true
