package providers

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// Dropbox publishes no verifier for Go; its sample app (dropbox/mdwebhook,
// app.py) checks `hmac.new(APP_SECRET, request.data, sha256).hexdigest()`
// against X-Dropbox-Signature, which sigtest.HMACHex computes here.
func TestDropbox(t *testing.T) {
	rt := route{secrets: []string{"dropbox-app-secret"}}
	body := []byte(`{"list_folder": {"accounts": ["dbid:AAH4f99T0taONIb-OurWxbNQ6ywGRopQngc", "dbid:AAA-ZBK1gA-Yr1pUB3Twqe4jDXq4QzHi9zQ"]}, "delta": {"users": [12345678, 23456789]}}`)
	sig := sigtest.HMACHex("dropbox-app-secret", string(body))
	rt.check(t, "dropbox", post("X-Dropbox-Signature", sig), body, nil)
	rt.check(t, "dropbox", post("X-Dropbox-Signature", sigtest.HMACHex("another-secret", string(body))), body, signature.ErrInvalid)
	rt.check(t, "dropbox", post("X-Dropbox-Signature", sig), changeByte(body), signature.ErrInvalid)
	rt.check(t, "dropbox", post(), body, signature.ErrMissing)
}

// Dropbox's verification request, `GET ?challenge=<c>`, is answered with
// the challenge in a text/plain body (Dropbox's webhooks reference: "echo
// back the challenge parameter", with Content-Type text/plain and
// X-Content-Type-Options nosniff, which the handler adds to every
// handshake). Nylas checks an endpoint the same way.
func TestChallengeEcho(t *testing.T) {
	for _, preset := range []string{"dropbox", "nylas"} {
		t.Run(preset, func(t *testing.T) {
			hs, err := NewHandshake(preset, HandshakeConfig{Verified: true})
			if err != nil || hs == nil {
				t.Fatalf("handshake: %v %v", hs, err)
			}
			if hs.Signed() {
				t.Fatal("the challenge is answered before the body is read")
			}
			a, ok := hs.Answer(httptest.NewRequest(http.MethodGet, "/hook?challenge=Tg%2B9x_7&other=1", nil), nil)
			if !ok || a.Status != http.StatusOK || a.ContentType != "text/plain" || a.Body != "Tg+9x_7" {
				t.Fatalf("answer %+v %v", a, ok)
			}
			for _, r := range []*http.Request{
				httptest.NewRequest(http.MethodGet, "/hook", nil),
				httptest.NewRequest(http.MethodGet, "/hook?challenge=", nil),
				httptest.NewRequest(http.MethodPost, "/hook?challenge=abc", nil),
			} {
				if a, ok := hs.Answer(r, nil); ok {
					t.Errorf("%s %s answered %+v", r.Method, r.URL, a)
				}
			}
			// no token to give, and it can be turned off
			if _, err := NewHandshake(preset, HandshakeConfig{VerifyToken: "t"}); err == nil {
				t.Error("verify_token accepted")
			}
			if hs, err := NewHandshake(preset, HandshakeConfig{Mode: HandshakeOff}); hs != nil || err != nil {
				t.Errorf("handshake off: %v %v", hs, err)
			}
		})
	}
}
