package providers

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/query"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// WhatsApp (Meta's Graph API webhooks): `X-Hub-Signature-256: sha256=<hex>`,
// HMAC-SHA256 of the body with the app secret; Meta batches, so the body
// is the key (docs/providers.md: WhatsApp); the subscription check is a GET
// answered at the edge.
func init() {
	register(&Preset{
		Name: "whatsapp",
		Docs: []string{
			"https://developers.facebook.com/docs/graph-api/webhooks/getting-started",
			"https://developers.facebook.com/docs/whatsapp/cloud-api/guides/set-up-webhooks",
		},
		DefaultKey:  []string{"body"},
		scheme:      bodyHMAC("X-Hub-Signature-256", "sha256=", signature.Hex),
		TTL:         7 * day, // Meta retries for up to 7 days
		Handshake:   &metaSubscription,
		Credentials: []string{"X-Hub-Signature-256", "X-Hub-Signature"},
		resigns:     always,
		signer:      bodyHMACSigner("X-Hub-Signature-256", "sha256="),
	})
}

// metaSubscription is Meta's "Verification Requests":
// `GET ?hub.mode=subscribe&hub.verify_token=…&hub.challenge=…`, answered
// with the challenge when the token is the one configured.
var metaSubscription = Handshake{answer: answerMetaSubscription}

// msgVerifyToken is the error of a Meta subscription check whose token is
// not the configured one.
const msgVerifyToken = "invalid verify token"

func answerMetaSubscription(hs *HandshakeState, r *http.Request, _ []byte) (HandshakeAnswer, bool) {
	if r.Method != http.MethodGet || query.Value(r.URL.RawQuery, "hub.mode") != "subscribe" {
		return HandshakeAnswer{}, false
	}
	token := sha256.Sum256([]byte(query.Value(r.URL.RawQuery, "hub.verify_token")))
	if subtle.ConstantTimeCompare(token[:], hs.verifyToken[:]) != 1 {
		return HandshakeAnswer{Status: http.StatusForbidden, Body: msgVerifyToken, Refused: true}, true
	}
	return plainText(query.Value(r.URL.RawQuery, "hub.challenge")), true
}
