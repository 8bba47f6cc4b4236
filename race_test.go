//go:build race

package webhookidempotency

// raceEnabled is set when the race detector is on: it makes sync.Pool
// drop items at random, so allocation counts are not measured then.
const raceEnabled = true
