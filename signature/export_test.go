package signature

import (
	"testing"
	"time"
)

// MaxHeaderItems is maxHeaderItems, for the external tests.
const MaxHeaderItems = maxHeaderItems

// SetClock sets the clock of timestamp checks for one test.
func SetClock(t testing.TB, at time.Time) {
	t.Helper()
	old := now
	now = func() time.Time { return at }
	t.Cleanup(func() { now = old })
}

// CertWaiters is the number of requests of a template verifier waiting on
// a certificate's fetch.
func CertWaiters(v Verifier) int {
	return int(v.(*templateVerifier).certs.waiting.Load())
}
