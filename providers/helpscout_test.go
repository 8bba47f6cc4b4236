package providers

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"testing"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// Help Scout's developer documentation (Mailbox API webhooks, "Verifying"):
// `base64_encode(hash_hmac('sha1', $data, WEBHOOK_SECRET_KEY, true))`
// against X-HelpScout-Signature.
func TestHelpScout(t *testing.T) {
	const secret = "helpscout-secret-key"
	rt := route{secrets: []string{secret}}
	body := []byte(`{"id":123456,"number":42,"threads":1,"type":"email","folderId":1,"status":"active","state":"published","subject":"Hello","mailboxId":85,"updatedAt":"2026-01-01T00:00:00Z"}`)
	sign := func(key string, b []byte) string {
		return base64.StdEncoding.EncodeToString(sigtest.HMAC(sha1.New, []byte(key), string(b)))
	}
	rt.check(t, "helpscout", post("X-HelpScout-Signature", sign(secret, body)), body, nil)
	rt.check(t, "helpscout", post("X-HelpScout-Signature", sign("other", body)), body, signature.ErrInvalid)
	rt.check(t, "helpscout", post("X-HelpScout-Signature", sign(secret, body)), changeByte(body), signature.ErrInvalid)
	// SHA-256 is not Help Scout's
	rt.check(t, "helpscout", post("X-HelpScout-Signature", base64.StdEncoding.EncodeToString(sigtest.HMAC(sha256.New, []byte(secret), string(body)))), body, signature.ErrInvalid)
}
