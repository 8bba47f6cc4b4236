package webhookidempotency

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/redact"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/providers"
)

// A route's redaction as the handler wires it: the secret headers of its
// verify scheme, the key sources it keeps, and what the admin API shows.
// The rules themselves are tested in internal/redact.

// TestRedactorShows: a route's redactor replaces the values of the
// credential headers (named, the route's token header, or with a name
// that looks like a credential's) and of the secret-looking query
// parameters; signature headers and the route's key sources are kept.
func TestRedactorShows(t *testing.T) {
	t.Parallel()
	keys, err := parseKeySources([]string{"header:I-Twilio-Idempotency-Token", "query:session_id", "body"})
	if err != nil {
		t.Fatal(err)
	}
	h := &Handler{Verify: &providers.VerifyConfig{Scheme: "token", Header: "x-hook-auth"}, keys: keys}
	rd, err := h.redactor(nil)
	if err != nil {
		t.Fatal(err)
	}
	header := http.Header{
		"Authorization":              {"Bearer s1"},
		"Proxy-Authorization":        {"Basic s2"},
		"Cookie":                     {"session=s3", "b=s4"},
		"X-Api-Key":                  {"s5"},
		"X-Gitlab-Token":             {"s6"},
		"Asaas-Access-Token":         {"s7"},
		"X-Hook-Auth":                {"s8"}, // the route's verify token header
		"Content-Type":               {"application/json"},
		"X-Github-Delivery":          {"d1"},
		"Idempotency-Key":            {"k1"},
		"X-Hub-Signature-256":        {"sha256=ab"},
		"I-Twilio-Idempotency-Token": {"k2"}, // the route's key
	}
	uri := rd.URI("/in?api_key=s9&x=1&Token=s10&a%2Ekey=s11&hub.verify_token=s12&data.id=7&password&id=2&sig=s13&session_id=k3#frag")
	if want := "/in?api_key=[redacted]&x=1&Token=[redacted]&a%2Ekey=s11&hub.verify_token=[redacted]&data.id=7&password&id=2&sig=[redacted]&session_id=k3#frag"; uri != want {
		t.Errorf("uri:\n%s\nwant\n%s", uri, want)
	}
	got := rd.Header(header)
	kept := map[string]bool{"Content-Type": true, "X-Github-Delivery": true, "Idempotency-Key": true, "X-Hub-Signature-256": true, "I-Twilio-Idempotency-Token": true}
	for name, values := range got {
		for i, v := range values {
			if !kept[name] && v != redact.Value {
				t.Errorf("%s: %q not redacted", name, v)
			}
			if kept[name] && v != header[name][i] {
				t.Errorf("%s: %q changed to %q", name, header[name][i], v)
			}
		}
	}
	if len(got["Cookie"]) != 2 || header.Get("Authorization") != "Bearer s1" {
		t.Errorf("values counted wrong, or the original modified: %v / %v", got, header)
	}
	if uri := rd.URI("/plain"); uri != "/plain" {
		t.Errorf("nothing to redact: %q", uri)
	}
	var nilRedactor *redact.Redactor
	if uri := nilRedactor.URI("/in?token=t"); uri != "/in?token=t" {
		t.Errorf("a nil redactor redacts %q", uri)
	}
}

// The admin API never shows a secret that a stored event carries (the URI's
// secret query parameters, secret headers, the route's verify token), while
// the inbox still delivers the request whole.
func TestAdminDeadLettersAreRedacted(t *testing.T) {
	const source = "admin_redact"
	srv := testkit.StartRedis(t)
	// the application refuses every delivery: the inbox dead-letters it
	// after one attempt
	app := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		w.WriteHeader(http.StatusBadRequest)
	})
	port := testkit.FreePort(t)
	c := testkit.StartCaddy(t, "", fmt.Sprintf(`
http://127.0.0.1:%d {
	webhook_idempotency {
		source %s
		verify token {
			header X-Hook-Auth
			secret tokensecret-1
		}
		store redis redis://%s
		inbox {
			deliver_to %s/hook
			retries 1m
			timeout 1s
		}
	}
}`, port, source, srv.Addr(), app.URL))

	secrets := []string{"tokensecret-1", "querysecret-2", "querysecret-3", "bearersecret-4", "cookiesecret-5", "apikeysecret-6"}
	resp, b := testkit.Post(t, testkit.SiteURL(port)+"/in?api_key=querysecret-2&id=7&access_token=querysecret-3", []byte(`{"id":"evt_r"}`),
		"X-Hook-Auth", "tokensecret-1", "Authorization", "Bearer bearersecret-4",
		"Cookie", "sid=cookiesecret-5", "X-Api-Key", "apikeysecret-6", "Content-Type", "application/json")
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("accept: %s: %s", resp.Status, b)
	}
	var raw []byte
	testkit.Eventually(t, 10*time.Second, "the event to be dead-lettered", func() bool {
		_, raw = testkit.Do(t, http.MethodGet, c.AdminURL("/webhook_idempotency/"+source+"/dead"), nil)
		return strings.HasPrefix(strings.TrimSpace(string(raw)), `[{`)
	})
	for _, s := range secrets {
		if strings.Contains(string(raw), s) {
			t.Errorf("the admin API shows the secret %q: %s", s, raw)
		}
	}
	var dead []struct {
		URI     string      `json:"uri"`
		Headers http.Header `json:"headers"`
	}
	if err := json.Unmarshal(raw, &dead); err != nil || len(dead) != 1 {
		t.Fatalf("dead list %s: %v", raw, err)
	}
	if want := "/in?api_key=[redacted]&id=7&access_token=[redacted]"; dead[0].URI != want {
		t.Errorf("uri %q, want %q", dead[0].URI, want)
	}
	for _, name := range []string{"X-Hook-Auth", "Authorization", "Cookie", "X-Api-Key"} {
		if got := dead[0].Headers.Get(name); got != redact.Value {
			t.Errorf("header %s shown as %q", name, got)
		}
	}
	if got := dead[0].Headers.Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type shown as %q", got)
	}
	// what is stored is what was delivered: the application got it whole
	got := app.Requests()[0]
	if got.Header.Get("Authorization") != "Bearer bearersecret-4" || got.Header.Get("X-Hook-Auth") != "tokensecret-1" {
		t.Errorf("the delivery lost its headers: %v", got.Header)
	}
}
