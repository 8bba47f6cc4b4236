package providers

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/mailgun/mailgun-go/v4"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// mailgunOracle is mailgun-go v4.23.0's verifier of a body's signature
// block.
func mailgunOracle(t *testing.T, key string, body []byte) bool {
	t.Helper()
	var p mailgun.WebhookPayload
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatal(err)
	}
	mg := mailgun.NewMailgun("example.com", "api-key")
	mg.SetWebhookSigningKey(key)
	ok, err := mg.VerifyWebhookSignature(p.Signature)
	return err == nil && ok
}

// mailgunBody is a Mailgun delivery with a signature block.
func mailgunBody(ts, token, sig, eventID string) []byte {
	return []byte(`{"signature":{"timestamp":"` + ts + `","token":"` + token + `","signature":"` + sig + `"},` +
		`"event-data":{"id":"` + eventID + `","event":"delivered","timestamp":1767225600.123456}}`)
}

// mailgunSign is Mailgun's documented signature: hex HMAC-SHA256 of the
// timestamp and the token, keyed with the signing key as written.
func mailgunSign(key, ts, token string) string {
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte(ts + token))
	return hex.EncodeToString(m.Sum(nil))
}

func TestMailgun(t *testing.T) {
	const key = "webhook-signing-key" // mailgun-go's testWebhookSigningKey
	post := func([]byte) *http.Request { return httptest.NewRequest(http.MethodPost, "/mailgun", nil) }

	// mailgun-go's vector (webhooks_test.go, getSignatureFields): a 1973
	// timestamp, so with a tolerance of a century
	vector := mailgunBody("123456789", "token", "3ce8f010058ab80b8345d3513acc9027d34a00190ae8e4b4161e7636f68321f8", "e1")
	if !mailgunOracle(t, key, vector) || mailgunSign(key, "123456789", "token") != "3ce8f010058ab80b8345d3513acc9027d34a00190ae8e4b4161e7636f68321f8" {
		t.Fatal("mailgun-go refuses its own vector")
	}
	century := mustBuild(t, VerifyConfig{Scheme: "mailgun", Secrets: []string{key}, Tolerance: caddy.Duration(100 * 365 * 24 * time.Hour)})
	sigtest.WantReason(t, century.Verify(post(vector), vector), nil)
	bad := mailgunBody("123456789", "token", hex.EncodeToString([]byte("badsignature")), "e1")
	if mailgunOracle(t, key, bad) {
		t.Fatal("mailgun-go accepts its bad signature")
	}
	sigtest.WantReason(t, century.Verify(post(bad), bad), signature.ErrInvalid)

	v := mustBuild(t, VerifyConfig{Scheme: "mailgun", Secrets: []string{key}})
	// with the preset's tolerance, that timestamp is stale
	sigtest.WantReason(t, v.Verify(post(vector), vector), signature.ErrTimestamp)

	now := time.Now()
	at := func(d time.Duration) string { return strconv.FormatInt(now.Add(d).Unix(), 10) }
	token := strings.Repeat("a1", 25)
	for _, c := range []struct {
		name string
		body []byte
		want *signature.Error
	}{
		{"now", mailgunBody(at(0), token, mailgunSign(key, at(0), token), "e1"), nil},
		// Mailgun's last retry, 7 h 30 min after the first attempt, with
		// the first attempt's signature block
		{"the last retry", mailgunBody(at(-450*time.Minute), token, mailgunSign(key, at(-450*time.Minute), token), "e1"), nil},
		{"stale", mailgunBody(at(-10*time.Hour), token, mailgunSign(key, at(-10*time.Hour), token), "e1"), signature.ErrTimestamp},
		{"another key", mailgunBody(at(0), token, mailgunSign("other-key", at(0), token), "e1"), signature.ErrInvalid},
		{"a changed token", mailgunBody(at(0), "b"+token[1:], mailgunSign(key, at(0), token), "e1"), signature.ErrInvalid},
		{"a changed timestamp", mailgunBody(at(-time.Second), token, mailgunSign(key, at(0), token), "e1"), signature.ErrInvalid},
		{"no signature block", []byte(`{"event-data":{"id":"e1"}}`), signature.ErrMissing},
		// the signature does not cover event-data: the same block on
		// another event verifies, which is why the token is the
		// delivery's nonce
		{"another event under the same block", mailgunBody(at(0), token, mailgunSign(key, at(0), token), "e2"), nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			if mailgunOracle(t, key, c.body) != (c.want == nil || c.want == signature.ErrTimestamp) && c.want != signature.ErrMissing {
				t.Fatal("mailgun-go disagrees on the signature")
			}
			sigtest.WantReason(t, v.Verify(post(c.body), c.body), c.want)
		})
	}

	// the preset's signer makes a token and signs as Mailgun does
	s, err := NewSigner("mailgun", SignConfig{Secret: key})
	if err != nil {
		t.Fatal(err)
	}
	r := post(nil)
	out, err := s.Sign(r, []byte(`{"event-data":{"id":"e3","event":"opened"}}`), now)
	if err != nil {
		t.Fatal(err)
	}
	var p mailgun.WebhookPayload
	if err := json.Unmarshal(out, &p); err != nil {
		t.Fatal(err)
	}
	if len(p.Signature.Token) != 50 || p.Signature.TimeStamp != at(0) || !mailgunOracle(t, key, out) {
		t.Fatalf("signed %s", out)
	}
	sigtest.WantReason(t, v.Verify(r, out), nil)
	if p := presets["mailgun"]; p.Nonce != "json:signature.token" || p.Success == nil || p.Success.Status != 200 || Resigns(VerifyConfig{Scheme: "mailgun", Secrets: []string{key}}) {
		t.Fatalf("mailgun: nonce %q, success %+v", p.Nonce, p.Success)
	}
}
