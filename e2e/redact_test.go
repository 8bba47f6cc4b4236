package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// A route's redaction as an operator sees it: what the admin API shows of
// a stored event, against what the application received. The rules
// themselves are tested in internal/redact, and a route's redactor in the
// root (TestRedactorShows).

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
			timeout 10s
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
		if got := dead[0].Headers.Get(name); got != "[redacted]" {
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
