// Package providers_test checks the presets end to end against what the
// providers' own libraries send and accept: a real Caddy built with the
// module runs in the test process in front of a real upstream
// (internal/testkit), and deliveries are signed, or were signed and
// judged, by the providers' code (internal/sigtest/testdata, testdata/).
// Tests that start Caddy do not run in parallel (Caddy runs one
// configuration per process).
package providers_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/webhookguard/caddy-webhook-idempotency"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// proxy starts Caddy with directive in front of up and returns Caddy and
// the site's URL.
func proxy(t *testing.T, directive string, up *testkit.Upstream) (*testkit.Caddy, string) {
	t.Helper()
	port := testkit.FreePort(t)
	c := testkit.StartCaddy(t, "", testkit.ProxySite(port, directive, up))
	return c, testkit.SiteURL(port)
}

// signed posts body to url, signed now as the sigtest case of label signs
// with secret, with extra headers as name, value pairs.
func signed(t *testing.T, url, label, secret string, body []byte, extra ...string) (*http.Response, []byte) {
	t.Helper()
	var c sigtest.Case
	for _, k := range sigtest.Cases() {
		if k.Label() == label {
			c = k
		}
	}
	if c.Sign == nil {
		t.Fatalf("no sigtest case %s", label)
	}
	d := sigtest.NewDelivery("/", body, time.Now())
	c.Sign(t, secret, d)
	var header []string
	for name, values := range d.Req.Header {
		header = append(header, name, values[0])
	}
	return testkit.Post(t, url, body, append(header, extra...)...)
}

// wantMetric fails unless the series has the value.
func wantMetric(t *testing.T, c *testkit.Caddy, want float64, name string, labels ...string) {
	t.Helper()
	if got, _ := c.Metrics(t).Value(name, labels...); got != want {
		t.Fatalf("%s%v = %v, want %v", name, labels, got, want)
	}
}

// headerPairs turns a header map into name, value pairs.
func headerPairs(h map[string]string, extra ...string) []string {
	var pairs []string
	for k, v := range h {
		pairs = append(pairs, k, v)
	}
	return append(pairs, extra...)
}

// quote is a Caddyfile token for s.
func quote(s string) string { return fmt.Sprintf("%q", s) }
