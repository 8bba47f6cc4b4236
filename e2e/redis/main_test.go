// Package redise2e holds the black-box end-to-end tests of
// webhook_idempotency on real Redis servers (standalone, Cluster and
// Sentinel) and of its reliability under hostile clients and failures: a
// real Caddy built with the module runs in the test process (and, for a
// second instance, as a child process) in front of a real upstream
// (internal/testkit). The tests see what a provider, an application and an
// operator see: HTTP answers, what the application received, the admin
// endpoint's metrics, Caddy's logs, and Redis itself. Tests that start
// Caddy do not run in parallel (Caddy runs one configuration per process).
package redise2e

import (
	"fmt"
	"testing"
	"time"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/webhookguard/caddy-webhook-idempotency"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

func TestMain(m *testing.M) { testkit.RunAsCaddy(); testkit.Main(m) }

// redisChaosSite is a site whose handler uses srv with a 500ms timeout
// and the fail policy fail.
func redisChaosSite(port int, srv *testkit.Redis, fail, upstream string) string {
	return fmt.Sprintf(`:%d {
	webhook_idempotency {
		source chaos
		fail %s
		store redis redis://%s {
			timeout 500ms
		}
	}
	reverse_proxy %s
}`, port, fail, srv.Addr(), upstream)
}

// waitForDedup posts a fresh key twice until the second is a replay.
func waitForDedup(t *testing.T, url string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for i := 0; ; i++ {
		key := fmt.Sprintf("evt_resume_%d_%d", time.Now().UnixNano(), i)
		testkit.Post(t, url, []byte(key), "Idempotency-Key", key)
		resp, _ := testkit.Post(t, url, []byte(key), "Idempotency-Key", key)
		if resp.Header.Get(testkit.ReplayedHeader) == "true" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("deduplication did not resume within %v", within)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
