package e2e

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// TestE2ESimplePresetChecks: through a real Caddy, WooCommerce's
// activation ping and Intercom's HEAD are answered 200 at the edge, reach
// no upstream and store nothing, while a request that only looks like the
// ping is refused; a Calendly delivery, whose `t=…,v1=…` header is read as
// its items, and a WooCommerce delivery keyed with an HTML-escaped secret
// pass once and are replayed after; a Calendly delivery signed two days ago
// is refused.
func TestE2ESimplePresetChecks(t *testing.T) {
	srv := testkit.StartRedis(t)
	rdb := srv.Client(t)
	up := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	route := func(path, directive string) string {
		return fmt.Sprintf("\troute %s {\n\t\t%s\n\t\treverse_proxy %s\n\t}\n", path, directive, up.Addr())
	}
	c := testkit.StartCaddy(t, fmt.Sprintf("webhook_idempotency {\n\t\tstore redis redis://%s {\n\t\t\ttimeout 5s\n\t\t}\n\t}", srv.Addr()),
		fmt.Sprintf(":%d {\n%s%s%s}", port,
			// WordPress stores a typed < as &lt;: the secret as its form shows it
			route("/woocommerce", `webhook_idempotency woocommerce secret "wc&lt;secret&amp;1"`),
			route("/intercom", "webhook_idempotency intercom secret intercom-client-secret"),
			route("/calendly", "webhook_idempotency calendly secret calendly-signing-key"),
		))
	base := testkit.SiteURL(port)

	// WC_Webhook::deliver_ping's request
	resp, body := testkit.Post(t, base+"/woocommerce", []byte("webhook_id=17"),
		"User-Agent", "WooCommerce/9.8.5 Hookshot (WordPress/6.8.1)", "Content-Type", "application/x-www-form-urlencoded")
	if resp.StatusCode != http.StatusOK || len(body) != 0 {
		t.Fatalf("woocommerce ping: %d %q", resp.StatusCode, body)
	}
	// the same without WooCommerce's User-Agent is an unsigned delivery
	resp, body = testkit.Post(t, base+"/woocommerce", []byte("webhook_id=17"), "Content-Type", "application/x-www-form-urlencoded")
	wantRejected(t, resp, body, "missing signature")
	resp, body = testkit.Do(t, http.MethodHead, base+"/intercom", nil)
	if resp.StatusCode != http.StatusOK || len(body) != 0 {
		t.Fatalf("intercom HEAD: %d %q", resp.StatusCode, body)
	}
	if n := up.Calls.Load(); n != 0 {
		t.Fatalf("upstream called %d times by the checks", n)
	}
	if n := dbSize(t, rdb); n != 0 {
		t.Fatalf("the checks left %d keys in Redis", n)
	}
	m := c.Metrics(t)
	for _, source := range []string{"woocommerce", "intercom"} {
		if v, _ := m.Value("caddy_webhook_idempotency_requests_total", "result", "handshake", "source", source); v != 1 {
			t.Errorf("%s: %v handshakes counted, want 1", source, v)
		}
	}

	// WooCommerce signs with the stored secret decoded (wp_specialchars_decode)
	order := []byte(`{"id":727,"status":"processing","date_modified":"2026-11-18T10:13:20"}`)
	mac := hmac.New(sha256.New, []byte("wc<secret&1"))
	mac.Write(order)
	wc := base64.StdEncoding.EncodeToString(mac.Sum(nil))
	calendly := []byte(`{"event":"invitee.created","created_at":"2026-11-18T10:13:20.000000Z","payload":{"uri":"https://api.calendly.com/scheduled_events/E2E/invitees/E2E"}}`)
	calendlySig := func(at time.Time) string {
		ts := strconv.FormatInt(at.Unix(), 10)
		return "t=" + ts + ",v1=" + sigtest.HMACHex("calendly-signing-key", ts, ".", string(calendly))
	}
	for i, d := range []struct {
		path   string
		body   []byte
		header []string
	}{
		{"/woocommerce", order, []string{"X-WC-Webhook-Signature", wc, "X-WC-Webhook-Topic", "order.updated"}},
		{"/calendly", calendly, []string{"Calendly-Webhook-Signature", calendlySig(time.Now())}},
	} {
		resp, body = testkit.Post(t, base+d.path, d.body, d.header...)
		if resp.StatusCode != http.StatusOK || resp.Header.Get(testkit.ReplayedHeader) != "" {
			t.Fatalf("%s: %d %s", d.path, resp.StatusCode, body)
		}
		// a retry signed again later is the same delivery
		if d.path == "/calendly" {
			d.header[1] = calendlySig(time.Now().Add(-time.Hour))
		}
		resp, _ = testkit.Post(t, base+d.path, d.body, d.header...)
		if resp.Header.Get(testkit.ReplayedHeader) != "true" {
			t.Fatalf("%s duplicate not replayed: %d", d.path, resp.StatusCode)
		}
		if n := up.Calls.Load(); n != int64(i+1) {
			t.Fatalf("%s: upstream called %d times, want %d", d.path, n, i+1)
		}
	}
	resp, body = testkit.Post(t, base+"/calendly", append(calendly, ' '), "Calendly-Webhook-Signature", calendlySig(time.Now().Add(-48*time.Hour)))
	wantRejected(t, resp, body, "timestamp outside tolerance")
	resp, body = testkit.Post(t, base+"/calendly", calendly, "Calendly-Webhook-Signature", strings.Replace(calendlySig(time.Now()), "v1=", "v0=", 1))
	wantRejected(t, resp, body, "invalid signature")
	if n := up.Calls.Load(); n != 2 {
		t.Fatalf("upstream called %d times, want 2", n)
	}
}
