package providers

import (
	"crypto/sha1"
	"net/http"
	"net/http/httptest"
	"testing"
)

// Intercom: X-Hub-Signature: sha1=<hex HMAC-SHA1 of the body> under the
// app's client secret (Intercom's signed notifications); the HEAD with
// which Intercom checks an endpoint is answered 200.
func TestIntercom(t *testing.T) {
	c := bodyHMACCase{preset: "intercom", header: "X-Hub-Signature", sign: hmacOf(sha1.New, "sha1=", false)}
	body := []byte(`{"type":"notification_event","app_id":"ecahpwf5","data":{"type":"notification_event_data","item":{"type":"ping","message":"Ünïcödé ✓"}},"id":"notif_c6f44d21-8b56-4dc1-93e1-1a7a7c4f3a72","topic":"ping","delivery_attempts":1,"first_sent_at":1798761600}`)
	checkBodyHMAC(t, c, "an-intercom-client-secret", body)
	wantPreset(t, "intercom", []string{"json:id", "body"}, 0, nil)

	hs, err := NewHandshake("intercom", HandshakeConfig{Verified: true})
	if err != nil || hs == nil || hs.Signed() {
		t.Fatalf("handshake %v, %v", hs, err)
	}
	a, ok := hs.Answer(httptest.NewRequest(http.MethodHead, "/intercom", nil), nil)
	if !ok || a.Status != http.StatusOK || a.Body != "" || a.Refused {
		t.Errorf("HEAD answered %+v, %v", a, ok)
	}
	for _, m := range []string{http.MethodPost, http.MethodGet} {
		if _, ok := hs.Answer(httptest.NewRequest(m, "/intercom", nil), nil); ok {
			t.Errorf("%s taken for Intercom's check", m)
		}
	}
	// answered on a route that does not verify too (the answer gives
	// nothing away), not with handshake off; no verify_token
	if hs, _ := NewHandshake("intercom", HandshakeConfig{}); hs == nil {
		t.Error("not answered on a route that does not verify")
	}
	if hs, _ := NewHandshake("intercom", HandshakeConfig{Mode: HandshakeOff, Verified: true}); hs != nil {
		t.Error("answered with handshake off")
	}
	if err := CheckHandshakeOptions("intercom", "", "a-token"); err == nil {
		t.Error("verify_token accepted")
	}
}
