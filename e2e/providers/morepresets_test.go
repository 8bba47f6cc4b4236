package providers_test

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// startRoutes starts Caddy with a route per path and directive, given in
// pairs, each in front of up, and returns the site's URL.
func startRoutes(t *testing.T, up *testkit.Upstream, pathsAndDirectives ...string) string {
	t.Helper()
	port := testkit.FreePort(t)
	var site strings.Builder
	fmt.Fprintf(&site, ":%d {\n", port)
	for i := 0; i+1 < len(pathsAndDirectives); i += 2 {
		fmt.Fprintf(&site, "\troute %s {\n\t\t%s\n\t\treverse_proxy %s\n\t}\n", pathsAndDirectives[i], pathsAndDirectives[i+1], up.Addr())
	}
	site.WriteString("}\n")
	testkit.StartCaddy(t, "", site.String())
	return testkit.SiteURL(port)
}

// Dropbox's and Nylas's `GET ?challenge=` is answered by Caddy with the
// challenge as text/plain, nosniff: the application is not called; a GET
// without it passes through as any GET; deliveries are verified and
// deduplicated as usual.
func TestChallengeAnsweredAtTheEdge(t *testing.T) {
	up := testkit.NewUpstream(t, nil)
	base := startRoutes(t, up,
		"/dropbox", "webhook_idempotency dropbox secret dropbox-app-secret",
		"/nylas", "webhook_idempotency nylas secret nylas-webhook-secret")
	for _, path := range []string{"/dropbox", "/nylas"} {
		resp, body := testkit.Do(t, http.MethodGet, base+path+"?challenge=Zx8%2Bq_1", nil)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/plain" ||
			resp.Header.Get("X-Content-Type-Options") != "nosniff" || string(body) != "Zx8+q_1" {
			t.Fatalf("%s: %d %q %q", path, resp.StatusCode, resp.Header, body)
		}
	}
	up.WantCalls(t, 0)
	if resp, _ := testkit.Do(t, http.MethodGet, base+"/dropbox?health=1", nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("a GET without challenge: %d", resp.StatusCode)
	}
	up.WantCalls(t, 1)

	notification := []byte(`{"list_folder": {"accounts": ["dbid:AAH4f99T0taONIb-OurWxbNQ6ywGRopQngc"]}}`)
	sig := sigtest.HMACHex("dropbox-app-secret", string(notification))
	resp, body := testkit.Post(t, base+"/dropbox", notification, "X-Dropbox-Signature", sig)
	testkit.WantNew(t, resp, body, http.StatusOK)
	resp, body = testkit.Post(t, base+"/dropbox", notification, "X-Dropbox-Signature", sig)
	testkit.WantReplay(t, resp, body, http.StatusOK, `{"call":2}`)
	resp, _ = testkit.Post(t, base+"/dropbox", notification, "X-Dropbox-Signature", sigtest.HMACHex("guess", string(notification)))
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a forged notification: %d", resp.StatusCode)
	}
	up.WantCalls(t, 2)
}

// Asana's handshake carries the secret and no signature: the route of
// docs/providers.md (Asana) sends it to the application, which echoes
// X-Hook-Secret; the preset refuses it, and verifies the events signed
// with the secret the application kept.
func TestAsanaHandshakeRoutedToTheApplication(t *testing.T) {
	const secret = "b537207f20cbfa02357cf448134da559e8bd39d61597dcd5631b8012eae53e81"
	up := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		if s := r.Header.Get("X-Hook-Secret"); s != "" {
			w.Header().Set("X-Hook-Secret", s)
			w.WriteHeader(http.StatusOK)
			return
		}
		fmt.Fprintf(w, `{"call":%d}`, call)
	})
	port := testkit.FreePort(t)
	testkit.StartCaddy(t, "", fmt.Sprintf(`:%d {
	@asana_handshake {
		path /webhooks/asana
		header X-Hook-Secret *
		not header X-Hook-Signature *
	}
	handle @asana_handshake {
		reverse_proxy %[2]s
	}
	handle /webhooks/asana {
		webhook_idempotency asana {
			secret %[3]s
		}
		reverse_proxy %[2]s
	}
}`, port, up.Addr(), secret))
	hook := testkit.SiteURL(port) + "/webhooks/asana"

	resp, _ := testkit.Post(t, hook, nil, "X-Hook-Secret", secret)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Hook-Secret") != secret {
		t.Fatalf("handshake: %d %q", resp.StatusCode, resp.Header.Get("X-Hook-Secret"))
	}
	up.WantCalls(t, 1)

	event := []byte(`{"events":[{"user":{"gid":"1516","resource_type":"user"},"created_at":"2026-01-01T00:00:00.000Z","action":"changed","resource":{"gid":"1337","resource_type":"task"}}]}`)
	sig := sigtest.HMACHex(secret, string(event))
	resp, body := testkit.Post(t, hook, event, "X-Hook-Signature", sig)
	testkit.WantNew(t, resp, body, http.StatusOK)
	resp, body = testkit.Post(t, hook, event, "X-Hook-Signature", sig)
	testkit.WantReplay(t, resp, body, http.StatusOK, `{"call":2}`)
	// a forged event with the secret's header still goes through the preset
	resp, _ = testkit.Post(t, hook, event, "X-Hook-Secret", "attacker", "X-Hook-Signature", sigtest.HMACHex("attacker", string(event)))
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a forged event: %d", resp.StatusCode)
	}
	resp, _ = testkit.Post(t, hook, event)
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("an unsigned event: %d", resp.StatusCode)
	}
	up.WantCalls(t, 2)
}

// Notion, Mux and LINE change a delivery's bytes on a retry (a new
// attempt_number; the attempts so far; isRedelivery) and keep its event
// id: the retry is answered from the store, the application gets the
// event once.
func TestRetriesWithNewBytesAreReplayed(t *testing.T) {
	up := testkit.NewUpstream(t, nil)
	base := startRoutes(t, up,
		"/notion", "webhook_idempotency notion secret secret_notion_token",
		"/mux", "webhook_idempotency mux secret mux-signing-secret",
		"/line", "webhook_idempotency line secret line-channel-secret")
	muxHeader := func(body string) string {
		ts := strconv.FormatInt(time.Now().Unix(), 10)
		return "t=" + ts + ",v1=" + sigtest.HMACHex("mux-signing-secret", ts, ".", body)
	}
	for i, c := range []struct {
		path, first, retry string
		sign               func(body string) []string
	}{
		{"/notion",
			`{"id":"367cba44-b6f3-4c92-81e7-6a2e9659efd4","type":"page.created","attempt_number":1,"entity":{"id":"153104cd","type":"page"}}`,
			`{"id":"367cba44-b6f3-4c92-81e7-6a2e9659efd4","type":"page.created","attempt_number":2,"entity":{"id":"153104cd","type":"page"}}`,
			func(b string) []string {
				return []string{"X-Notion-Signature", "sha256=" + sigtest.HMACHex("secret_notion_token", b)}
			}},
		{"/mux",
			`{"type":"video.asset.ready","id":"8d5e4b1a-2a6b-4b9a-9f1d-2b3c4d5e6f70","data":{"id":"asset_1"},"attempts":[]}`,
			`{"type":"video.asset.ready","id":"8d5e4b1a-2a6b-4b9a-9f1d-2b3c4d5e6f70","data":{"id":"asset_1"},"attempts":[{"id":"att_1","response_status_code":500}]}`,
			func(b string) []string { return []string{"Mux-Signature", muxHeader(b)} }},
		{"/line",
			`{"destination":"U1","events":[{"type":"message","webhookEventId":"01FZ74A0TDDPYRVKNK77XKC3ZR","deliveryContext":{"isRedelivery":false},"message":{"id":"1","type":"text","text":"hi"}}]}`,
			`{"destination":"U1","events":[{"type":"message","webhookEventId":"01FZ74A0TDDPYRVKNK77XKC3ZR","deliveryContext":{"isRedelivery":true},"message":{"id":"1","type":"text","text":"hi"}}]}`,
			func(b string) []string {
				return []string{"X-Line-Signature", sigtest.HMACBase64("line-channel-secret", b)}
			}},
	} {
		resp, body := testkit.Post(t, base+c.path, []byte(c.first), c.sign(c.first)...)
		testkit.WantNew(t, resp, body, http.StatusOK)
		resp, body = testkit.Post(t, base+c.path, []byte(c.retry), c.sign(c.retry)...)
		want := fmt.Sprintf(`{"call":%d}`, i+1)
		if c.path == "/line" {
			// a batch (its events): a batch of seen events gets LINE's
			// success answer, an empty 200 (docs/caddyfile.md: Batches)
			want = ""
		}
		if resp.Header.Get(testkit.ReplayedHeader) != "true" || string(body) != want {
			t.Fatalf("%s: the retry got %d %s, want the first answer replayed", c.path, resp.StatusCode, body)
		}
		up.WantCalls(t, int64(i+1))
	}
}
