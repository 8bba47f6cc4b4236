package cli

import (
	"fmt"
	"strings"
	"testing"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// TestSendReportsBypassed: a route that answers its result in
// Webhook-Idempotency-Result (docs/operating.md, send) lets `send` tell a
// new delivery from one passed on without deduplication while its Redis
// is down (`fail open`), and a retry that is then processed again; a route
// that does not answer it is not said to have processed anything as new.
func TestSendReportsBypassed(t *testing.T) {
	srv := testkit.StartRedis(t)
	app := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	route := func(source, header string) string {
		return fmt.Sprintf(`	handle /%[1]s {
		%[2]s
		webhook_idempotency stripe {
			source %[1]s
			secret whsec_bypass
			fail open
			store redis redis://%[3]s
		}
		reverse_proxy %[4]s
	}
`, source, header, srv.Addr(), app.Addr())
	}
	testkit.StartCaddy(t, "", fmt.Sprintf("http://127.0.0.1:%d {\n%s%s}\n", port,
		route("told", "header >Webhook-Idempotency-Result {http.webhook_idempotency.result}"), route("untold", "")))
	base := testkit.SiteURL(port)
	send := func(path string, retry bool) (string, int) {
		args := []string{"webhook-idempotency", "send", "stripe", "--url", base + path, "--secret", "whsec_bypass"}
		if retry {
			args = append(args, "--retry")
		}
		return caddyCLI(t, args...)
	}
	const (
		isNew     = "200 OK: new: processed as a new delivery"
		bypassed  = "200 OK: bypassed: passed on WITHOUT deduplication"
		notSaid   = "200 OK: not replayed: the application answered it (whether as a new delivery or passed on without deduplication, the route does not say"
		processed = "processed as a new delivery"
	)
	if out, code := send("/told", true); code != 0 || !strings.Contains(out, isNew) || !strings.Contains(out, "Webhook-Idempotency-Result: new") ||
		!strings.Contains(out, "Webhook-Idempotency-Result: replayed") {
		t.Fatalf("Redis up: exit %d\n%s", code, out)
	}
	if out, code := send("/untold", false); code != 0 || !strings.Contains(out, notSaid) || strings.Contains(out, processed) {
		t.Fatalf("Redis up, a route that does not say: exit %d\n%s", code, out)
	}
	app.WantCalls(t, 2)

	srv.Kill()
	out, code := send("/told", true)
	if code != 1 || strings.Count(out, bypassed) != 2 || strings.Contains(out, processed) ||
		!strings.Contains(out, "the retry was not replayed (answered 200 OK): the route did not deduplicate it") {
		t.Fatalf("Redis down, fail open: exit %d\n%s", code, out)
	}
	if out, code := send("/untold", false); code != 0 || !strings.Contains(out, notSaid) || strings.Contains(out, processed) {
		t.Fatalf("Redis down, a route that does not say: exit %d\n%s", code, out)
	}
	app.WantCalls(t, 5)
}
