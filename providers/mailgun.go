package providers

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// Mailgun's webhooks: `signature.signature` in the body is the hex
// HMAC-SHA256 of `{signature.timestamp}{signature.token}`, keyed with the
// HTTP webhook signing key used as written. The signature does not cover
// `event-data`: a captured signature block authenticates any body, so the
// token, which Mailgun makes for one delivery, is claimed as the
// delivery's guard (Mailgun: "cache the token value locally and not honor
// any subsequent request with the same token"), and the timestamp bounds
// how long it could be replayed.
func init() {
	p := &Preset{
		Name: "mailgun",
		Docs: []string{
			"https://documentation.mailgun.com/docs/mailgun/user-manual/webhooks/securing-webhooks",
			"https://documentation.mailgun.com/docs/mailgun/user-manual/webhooks/webhook-retries",
			"https://documentation.mailgun.com/docs/mailgun/user-manual/events/event-structure",
			"https://github.com/mailgun/mailgun-go/blob/v4.23.0/webhooks.go",
		},
		// the timestamp's tolerance covers Mailgun's retries, which resend
		// the first attempt's signature block (Mailgun does not say it
		// signs them anew) over 7 h 30 min: 5, 10 and 15 minutes, then 1,
		// 2 and 4 hours (Webhook retries)
		Block: `template {
			string    "{json.signature.timestamp}{json.signature.token}"
			algorithm hmac-sha256
			signature json:signature.signature
			timestamp json:signature.timestamp
			tolerance 9h
		}`,
		// "The event ID, unique within a day" (Event structure): the
		// default ttl of a day
		DefaultKey: []string{"json:event-data.id", "body"},
		Nonce:      "json:signature.token",
		// the signature covers the timestamp and the token, not the body
		BodyUnsigned: true,
		// Mailgun counts only a 200 as delivered (Webhook retries)
		Success: &Answer{Status: http.StatusOK},
	}
	register(p)
	// the signer makes the token Mailgun would, when the body has none
	signTemplate := p.signer.build
	p.signer.build = func(cfg SignConfig) (signature.Signer, error) {
		s, err := signTemplate(cfg)
		if err != nil {
			return nil, err
		}
		return signature.SignerFunc(func(r *http.Request, body []byte, at time.Time) ([]byte, error) {
			withToken, err := mailgunToken(body)
			if err != nil {
				return nil, err
			}
			return s.Sign(r, withToken, at)
		}), nil
	}
}

// mailgunToken returns body with a `signature.token` of 50 random
// characters when it has none, as Mailgun makes one for each delivery
// ("Randomly generated string with length of 50").
func mailgunToken(body []byte) ([]byte, error) {
	var doc map[string]any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil || doc == nil {
		return nil, fmt.Errorf("a Mailgun body is a JSON object: %v", err)
	}
	sig, _ := doc["signature"].(map[string]any)
	if sig == nil {
		sig = map[string]any{}
		doc["signature"] = sig
	}
	if tok, _ := sig["token"].(string); tok != "" {
		return body, nil
	}
	var b [25]byte
	_, _ = rand.Read(b[:])
	sig["token"] = hex.EncodeToString(b[:])
	return json.Marshal(doc)
}
