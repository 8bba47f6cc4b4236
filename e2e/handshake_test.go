package e2e

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// caseNamed is the sigtest case with this label.
func caseNamed(t *testing.T, label string) sigtest.Case {
	t.Helper()
	for _, c := range sigtest.Cases() {
		if c.Label() == label {
			return c
		}
	}
	t.Fatalf("no case %s", label)
	return sigtest.Case{}
}

// sendSigned posts body to base+path, signed as the case signs with
// secret; extra are more headers.
func sendSigned(t *testing.T, base, path string, c sigtest.Case, secret string, body []byte, extra ...string) (*http.Response, []byte) {
	t.Helper()
	c.Body = string(body)
	c.Target = path
	d := c.Delivery(t, secret, time.Now())
	var header []string
	for name, values := range d.Req.Header {
		header = append(header, name, values[0])
	}
	return testkit.Post(t, base+path, d.Body, append(header, extra...)...)
}

// dbSize is the number of keys in the Redis database besides the lists
// of refused requests.
func dbSize(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	keys, err := rdb.Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, k := range keys {
		// the list of refused requests (docs/admin.md: Refusals) is where
		// a forged delivery is meant to leave its trace
		if !strings.Contains(k, "}:refused") {
			n++
		}
	}
	return n
}

// writeKeyFile writes a key to a file of the test's temporary directory.
func writeKeyFile(t *testing.T, name, key string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(key), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// The handlers of the handshake tests' /slack and /zoom routes: each
// verifies with the first secret of its sigtest case.
const (
	slackDirective = "webhook_idempotency slack secret 8f742231b10e8888abcd99yyyzzz85a5"
	zoomDirective  = "webhook_idempotency zoom secret zoom-secret-token-1"
)

// discordDirective is the handler of the handshake tests' /discord route:
// it verifies with the public key of the sigtest case's first secret, read
// from a key file.
func discordDirective(t *testing.T) string {
	t.Helper()
	keyFile := writeKeyFile(t, "discord.pem", sigtest.PEMPublic(sigtest.Ed25519Public("discord-app-1")))
	return "webhook_idempotency discord public_key {file." + keyFile + "}"
}

// Each preset's handshake is answered by Caddy: the upstream is never
// called and nothing reaches Redis; forged handshakes get 401; verified
// events still pass and are deduplicated.
func TestE2EHandshakesAnsweredAtTheEdge(t *testing.T) {
	srv := testkit.StartRedis(t)
	rdb := srv.Client(t)
	up := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	route := func(path, directive string) string {
		return fmt.Sprintf("\troute %s {\n\t\t%s\n\t\treverse_proxy %s\n\t}\n", path, directive, up.Addr())
	}
	c := testkit.StartCaddy(t, fmt.Sprintf("webhook_idempotency {\n\t\tstore redis redis://%s {\n\t\t\ttimeout 5s\n\t\t}\n\t}", srv.Addr()),
		fmt.Sprintf(":%d {\n%s%s%s%s%s}", port,
			route("/whatsapp", "webhook_idempotency whatsapp verify_token meta-verify-token secret meta-app-secret"),
			route("/slack", slackDirective),
			route("/zoom", zoomDirective),
			route("/discord", discordDirective(t)),
			route("/twitch", "webhook_idempotency twitch secret twitch-secret-0001"),
		))
	base := testkit.SiteURL(port)
	slack, zoom, discord, twitch := caseNamed(t, "slack"), caseNamed(t, "zoom"), caseNamed(t, "discord"), caseNamed(t, "twitch")

	// Meta's subscription check
	resp, body := testkit.Do(t, http.MethodGet, base+"/whatsapp?hub.mode=subscribe&hub.verify_token=meta-verify-token&hub.challenge=1158201444", nil)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/plain" || string(body) != "1158201444" {
		t.Fatalf("whatsapp: %d %q %q", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	resp, body = testkit.Do(t, http.MethodGet, base+"/whatsapp?hub.mode=subscribe&hub.verify_token=guess&hub.challenge=1158201444", nil)
	if resp.StatusCode != http.StatusForbidden || strings.Contains(string(body), "1158201444") {
		t.Fatalf("whatsapp, wrong token: %d %q", resp.StatusCode, body)
	}

	slackBody := []byte(`{"token":"Jhj5dZrVaK7ZwHHjRyZWjbDl","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}`)
	resp, body = sendSigned(t, base, "/slack", slack, slack.Secrets[0], slackBody)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" || string(body) != `{"challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"}` {
		t.Fatalf("slack: %d %q %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}

	zoomBody := []byte(`{"payload":{"plainToken":"qgg8vlvZRS6UYooatFL8Aw"},"event_ts":1654503849680,"event":"endpoint.url_validation"}`)
	resp, body = sendSigned(t, base, "/zoom", zoom, zoom.Secrets[0], zoomBody)
	mac := hmac.New(sha256.New, []byte(zoom.Secrets[0]))
	mac.Write([]byte("qgg8vlvZRS6UYooatFL8Aw"))
	var zoomAnswer struct{ PlainToken, EncryptedToken string }
	if err := json.Unmarshal(body, &zoomAnswer); resp.StatusCode != http.StatusOK || err != nil ||
		zoomAnswer.PlainToken != "qgg8vlvZRS6UYooatFL8Aw" || zoomAnswer.EncryptedToken != hex.EncodeToString(mac.Sum(nil)) {
		t.Fatalf("zoom: %d %s", resp.StatusCode, body)
	}

	ping := []byte(`{"application_id":"1093","id":"1106","token":"aW50","type":1,"version":1}`)
	resp, body = sendSigned(t, base, "/discord", discord, discord.Secrets[0], ping)
	if resp.StatusCode != http.StatusOK || string(body) != `{"type":1}` {
		t.Fatalf("discord: %d %s", resp.StatusCode, body)
	}

	verification := []byte(`{"challenge":"pogchamp-kappa-360noscope-vohiyo","subscription":{"id":"f1c2a387","type":"channel.follow","version":"2"}}`)
	resp, body = sendSigned(t, base, "/twitch", twitch, twitch.Secrets[0], verification, "Twitch-Eventsub-Message-Type", "webhook_callback_verification")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/plain" || string(body) != "pogchamp-kappa-360noscope-vohiyo" {
		t.Fatalf("twitch: %d %q %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}

	// forged handshakes are rejected like any delivery
	for _, f := range []struct {
		path  string
		c     sigtest.Case
		body  []byte
		extra []string
	}{
		{"/slack", slack, slackBody, nil},
		{"/zoom", zoom, zoomBody, nil},
		{"/discord", discord, ping, nil},
		{"/twitch", twitch, verification, []string{"Twitch-Eventsub-Message-Type", "webhook_callback_verification"}},
	} {
		resp, body = sendSigned(t, base, f.path, f.c, f.c.Secrets[2], f.body, f.extra...)
		wantRejected(t, resp, body, "invalid signature")
	}
	if n := up.Calls.Load(); n != 0 {
		t.Fatalf("upstream called %d times by handshakes", n)
	}
	if n := dbSize(t, rdb); n != 0 {
		t.Fatalf("handshakes left %d keys in Redis", n)
	}
	m := c.Metrics(t)
	for _, source := range []string{"whatsapp", "slack", "zoom", "discord", "twitch"} {
		if v, _ := m.Value("caddy_webhook_idempotency_requests_total", "result", "handshake", "source", source); v != 1 {
			t.Errorf("%s: %v handshakes counted, want 1", source, v)
		}
	}

	// verified events pass, once
	events := []struct {
		path  string
		c     sigtest.Case
		body  string
		extra []string
	}{
		{"/whatsapp", caseNamed(t, "whatsapp"), `{"object":"whatsapp_business_account","entry":[{"id":"e2e"}]}`, nil},
		{"/slack", slack, `{"type":"event_callback","event_id":"Ev0E2E"}`, nil},
		{"/zoom", zoom, `{"event":"meeting.started","payload":{"object":{"id":"e2e"}}}`, nil},
		{"/discord", discord, `{"id":"1107","type":2,"data":{"name":"ping"}}`, nil},
		{"/twitch", twitch, `{"subscription":{"type":"channel.follow"},"event":{"user_id":"e2e"}}`, []string{"Twitch-Eventsub-Message-Type", "notification"}},
	}
	for i, e := range events {
		secret := e.c.Secrets[0]
		if e.path == "/whatsapp" {
			secret = "meta-app-secret"
		}
		resp, body = sendSigned(t, base, e.path, e.c, secret, []byte(e.body), e.extra...)
		if resp.StatusCode != http.StatusOK || resp.Header.Get(testkit.ReplayedHeader) != "" {
			t.Fatalf("%s event: %d %s", e.path, resp.StatusCode, body)
		}
		resp, _ = sendSigned(t, base, e.path, e.c, secret, []byte(e.body), e.extra...)
		if resp.Header.Get(testkit.ReplayedHeader) != "true" {
			t.Fatalf("%s duplicate not replayed: %d", e.path, resp.StatusCode)
		}
		if n := up.Calls.Load(); n != int64(i+1) {
			t.Fatalf("%s: upstream called %d times, want %d", e.path, n, i+1)
		}
	}
	if n := dbSize(t, rdb); n != int64(len(events)) {
		t.Fatalf("%d keys in Redis, want %d", n, len(events))
	}
}

// The presets verified with public keys, and the new HMAC presets, through
// a real Caddy: verified deliveries pass once, forged ones get 401 and
// never touch the store.
func TestE2ENewPresetsVerifyBeforeTheStore(t *testing.T) {
	srv := testkit.StartRedis(t)
	rdb := srv.Client(t)
	up := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	rsaFile := writeKeyFile(t, "rsa.pem", sigtest.PEMPublic(&sigtest.RSAKey("rsa-1").PublicKey))
	edFile := writeKeyFile(t, "ed.pem", sigtest.PEMPublic(sigtest.Ed25519Public("ed-1")))
	type route struct {
		path, directive string
		c               sigtest.Case
	}
	routes := []route{
		{"/woovi", "webhook_idempotency woovi public_key {file." + rsaFile + "}", caseNamed(t, "woovi")},
		{"/hubspot", "webhook_idempotency hubspot {\n\t\t\tverify {\n\t\t\t\tsecret yyyyyyyy-yyyy-yyyy-yyyy-yyyyyyyyyyy1\n\t\t\t\turl https://hooks.example.com/hubspot\n\t\t\t}\n\t\t}", caseNamed(t, "hubspot")},
		{"/linear", "webhook_idempotency linear secret lin_wh_secret_1", caseNamed(t, "linear")},
		{"/razorpay", "webhook_idempotency razorpay secret rzp-webhook-secret-1", caseNamed(t, "razorpay")},
		{"/standard", "webhook_idempotency standard public_key " + sigtest.WHPK(sigtest.Ed25519Public("std-ed-1")), caseNamed(t, "standard v1a")},
		{"/rsa", "webhook_idempotency {\n\t\t\tsource acme-rsa\n\t\t\tverify rsa {\n\t\t\t\theader X-Signature\n\t\t\t\talgorithm sha512\n\t\t\t\tpadding pss\n\t\t\t\tencoding hex\n\t\t\t\tpublic_key {file." + rsaFile + "}\n\t\t\t}\n\t\t}", caseNamed(t, "rsa")},
		{"/ed25519", "webhook_idempotency {\n\t\t\tsource acme-ed\n\t\t\tverify ed25519 {\n\t\t\t\theader X-Signature\n\t\t\t\tprefix ed25519=\n\t\t\t\tencoding base64\n\t\t\t\tpublic_key {file." + edFile + "}\n\t\t\t}\n\t\t}", caseNamed(t, "ed25519")},
	}
	var sites strings.Builder
	fmt.Fprintf(&sites, ":%d {\n", port)
	for _, r := range routes {
		fmt.Fprintf(&sites, "\troute %s {\n\t\t%s\n\t\treverse_proxy %s\n\t}\n", r.path, r.directive, up.Addr())
	}
	sites.WriteString("}")
	testkit.StartCaddy(t, fmt.Sprintf("webhook_idempotency {\n\t\tstore redis redis://%s {\n\t\t\ttimeout 5s\n\t\t}\n\t}", srv.Addr()), sites.String())
	base := testkit.SiteURL(port)

	for _, r := range routes {
		target := r.path
		if q, ok := strings.CutPrefix(r.c.Target, r.path); ok {
			target += q // hubspot's query is signed
		}
		body := []byte(r.c.Body)
		resp, rb := sendSigned(t, base, target, r.c, r.c.Secrets[2], body)
		wantRejected(t, resp, rb, "invalid signature")
		if n := dbSize(t, rdb); n != 0 || up.Calls.Load() != 0 {
			t.Fatalf("%s: forged delivery left %d keys, %d upstream calls", r.path, n, up.Calls.Load())
		}
	}
	for i, r := range routes {
		target := r.path
		if q, ok := strings.CutPrefix(r.c.Target, r.path); ok {
			target += q
		}
		resp, rb := sendSigned(t, base, target, r.c, r.c.Secrets[0], []byte(r.c.Body))
		if resp.StatusCode != http.StatusOK || resp.Header.Get(testkit.ReplayedHeader) != "" {
			t.Fatalf("%s: %d %s", r.path, resp.StatusCode, rb)
		}
		// a retry of the same event is replayed
		resp, _ = sendSigned(t, base, target, r.c, r.c.Secrets[0], []byte(r.c.Body))
		if resp.Header.Get(testkit.ReplayedHeader) != "true" {
			t.Fatalf("%s: duplicate not replayed: %d", r.path, resp.StatusCode)
		}
		if n := up.Calls.Load(); n != int64(i+1) {
			t.Fatalf("%s: upstream called %d times, want %d", r.path, n, i+1)
		}
	}
}

// A handshake is answered before any key is resolved, so a route whose key
// is guarded (a header the scheme does not sign) claims nothing for it,
// guard included; the same route's events are claimed with their guard.
func TestE2EHandshakesClaimNoGuard(t *testing.T) {
	srv := testkit.StartRedis(t)
	rdb := srv.Client(t)
	up := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	route := func(path, directive string) string {
		return fmt.Sprintf("\troute %s {\n\t\t%s {\n\t\t\tkey header:X-Event-Id body\n\t\t\tstore redis redis://%s\n\t\t}\n\t\treverse_proxy %s\n\t}\n",
			path, directive, srv.Addr(), up.Addr())
	}
	testkit.StartCaddy(t, "", fmt.Sprintf(":%d {\n%s%s%s}", port,
		route("/slack", slackDirective),
		route("/zoom", zoomDirective),
		route("/discord", discordDirective(t)),
	))
	base := testkit.SiteURL(port)
	slack, zoom, discord := caseNamed(t, "slack"), caseNamed(t, "zoom"), caseNamed(t, "discord")
	for _, h := range []struct {
		path string
		c    sigtest.Case
		body string
	}{
		{"/slack", slack, `{"token":"Jhj5","challenge":"c1","type":"url_verification"}`},
		{"/zoom", zoom, `{"payload":{"plainToken":"qgg8"},"event_ts":1654503849680,"event":"endpoint.url_validation"}`},
		{"/discord", discord, `{"application_id":"1093","id":"1106","token":"aW50","type":1,"version":1}`},
	} {
		resp, body := sendSigned(t, base, h.path, h.c, h.c.Secrets[0], []byte(h.body), "X-Event-Id", "hs_1")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s handshake: %d %s", h.path, resp.StatusCode, body)
		}
	}
	if n := dbSize(t, rdb); n != 0 || up.Calls.Load() != 0 {
		t.Fatalf("handshakes on guarded routes left %d keys in Redis and called the upstream %d times", n, up.Calls.Load())
	}
	resp, body := sendSigned(t, base, "/slack", slack, slack.Secrets[0], []byte(`{"type":"event_callback","event_id":"Ev0G"}`), "X-Event-Id", "ev_1")
	if resp.StatusCode != http.StatusOK || up.Calls.Load() != 1 {
		t.Fatalf("slack event: %d %s", resp.StatusCode, body)
	}
	if n := dbSize(t, rdb); n != 2 {
		t.Fatalf("a guarded event left %d keys in Redis, want its key and its guard", n)
	}
}
