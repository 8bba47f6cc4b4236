package webhookidempotency

import (
	"testing"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// TestMain gives the package's tests a data directory of their own, so the
// default store never opens a file outside the test run.
func TestMain(m *testing.M) { testkit.Main(m) }
