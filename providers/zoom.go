package providers

import (
	"time"

	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"

	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// Zoom: `x-zm-signature: v0=<hex>` over `v0:{ts}:{body}` with
// `x-zm-request-timestamp`; the endpoint URL validation is answered at the
// edge with the secret token.
func init() {
	register(&Preset{
		Name:    "zoom",
		Timeout: 3 * time.Second,
		Docs: []string{
			"https://developers.zoom.us/docs/api/webhooks/",
		},
		DefaultKey: []string{"body"},
		scheme:     withTolerance(signature.NewZoom),
		Volatile:   []string{"x-zm-signature", "x-zm-request-timestamp"},
		Handshake:  &zoomURLValidation,
		// recording.completed's download_token, valid for 24 hours
		Redact:      []string{"json:download_token"},
		Credentials: []string{"x-zm-signature", "x-zm-request-timestamp"},
		resigns:     always,
		signer:      secretSigner(signature.NewZoomSigner),
	})
}

// zoomURLValidation is Zoom's `endpoint.url_validation` event, answered
// with the plain token and its HMAC-SHA256 under the secret token (Zoom,
// "Using webhooks": validate your webhook endpoint).
var zoomURLValidation = Handshake{signed: true, keyed: true, answer: answerZoomURLValidation}

func answerZoomURLValidation(hs *HandshakeState, _ *http.Request, body []byte) (HandshakeAnswer, bool) {
	plain, ok := eventString(body, "url_validation", "event", "endpoint.url_validation", "payload.plainToken")
	if !ok {
		return HandshakeAnswer{}, false
	}
	mac := hmac.New(sha256.New, hs.secret)
	mac.Write([]byte(plain))
	return jsonAnswer(struct {
		PlainToken     string `json:"plainToken"`
		EncryptedToken string `json:"encryptedToken"`
	}{plain, hex.EncodeToString(mac.Sum(nil))})
}
