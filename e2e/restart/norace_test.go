//go:build !race

package restart

const raceEnabled = false
