package providers

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// zendeskSign is Zendesk's documented scheme, written out from its page
// (developer.zendesk.com, "Verifying webhook authenticity"):
// base64(HMACSHA256(TIMESTAMP + BODY)), the secret used as written.
func zendeskSign(secret, ts string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts))
	m.Write(body)
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

func TestZendesk(t *testing.T) {
	const secret = "dGhpc19zZWNyZXRfaXNfZm9yX3Rlc3Rpbmdfb25seQ=="
	v := mustBuild(t, VerifyConfig{Scheme: "zendesk", Secrets: []string{secret}})
	body := []byte(`{"type":"zen:event-type:ticket.created","id":"01GZ"}`)
	at := time.Now().UTC()
	ts := at.Format(time.RFC3339)
	req := func(sig, ts string) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/zendesk", nil)
		r.Header.Set("X-Zendesk-Webhook-Signature", sig)
		r.Header.Set("X-Zendesk-Webhook-Signature-Timestamp", ts)
		return r
	}
	if err := v.Verify(req(zendeskSign(secret, ts, body), ts), body); err != nil {
		t.Fatalf("Zendesk's scheme: %v", err)
	}
	// the older page's order (body, then timestamp) is not Zendesk's
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	m.Write([]byte(ts))
	if err := v.Verify(req(base64.StdEncoding.EncodeToString(m.Sum(nil)), ts), body); err == nil {
		t.Fatal("body-then-timestamp accepted")
	}
	if err := v.Verify(req(zendeskSign("other", ts, body), ts), body); err == nil {
		t.Fatal("another secret accepted")
	}
	old := at.Add(-10 * time.Minute).Format(time.RFC3339)
	if err := v.Verify(req(zendeskSign(secret, old, body), old), body); err != signature.ErrTimestamp {
		t.Fatalf("a stale timestamp: %v", err)
	}
	// the preset's signer signs as Zendesk does
	s, err := NewSigner("zendesk", SignConfig{Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodPost, "/zendesk", nil)
	if _, err := s.Sign(r, body, at); err != nil {
		t.Fatal(err)
	}
	if got := r.Header.Get("X-Zendesk-Webhook-Signature"); got != zendeskSign(secret, r.Header.Get("X-Zendesk-Webhook-Signature-Timestamp"), body) {
		t.Fatalf("signer wrote %q", got)
	}
	if !strings.HasSuffix(r.Header.Get("X-Zendesk-Webhook-Signature-Timestamp"), "Z") {
		t.Fatalf("timestamp %q", r.Header.Get("X-Zendesk-Webhook-Signature-Timestamp"))
	}
}

// mustBuild builds the verifier of a config whose secrets are resolved.
func mustBuild(t testing.TB, cfg VerifyConfig) signature.Verifier {
	t.Helper()
	v, err := buildVerifier(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
