package providers

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// wooCommerceSign is WC_Webhook::generate_signature:
// base64_encode(hash_hmac('sha256', $payload, wp_specialchars_decode($secret,
// ENT_QUOTES), true)), with the key given decoded.
func wooCommerceSign(key string, body []byte) string {
	m := hmac.New(sha256.New, []byte(key))
	m.Write(body)
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// TestWooCommerce: X-WC-Webhook-Signature, the HMAC-SHA256 base64 of the
// body; the secret as WooCommerce stores it (`&lt;` for a typed `<`, as
// sanitize_text_field writes it) is decoded as WordPress decodes it, so
// the secret copied from the webhook's form and the one typed both verify.
func TestWooCommerce(t *testing.T) {
	body := []byte(`{"id":727,"status":"processing","currency":"EUR","date_modified":"2027-01-01T00:00:00","billing":{"first_name":"Zoë"},"line_items":[{"name":"Crème brûlée","quantity":1}]}`)
	// a secret of wp_generate_password(50, true, true)'s alphabet
	const key = `k&9<x>"q'Z%^(T)[w]{b}~` + "`" + `+=,.;:/?|r!@#$*-_ 7`
	stored := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&#039;").Replace(key)
	for _, secret := range []string{key, stored} {
		c := bodyHMACCase{preset: "woocommerce", header: "X-WC-Webhook-Signature", sign: func(_ string, body []byte) string {
			return wooCommerceSign(key, body)
		}}
		v := mustBuild(t, VerifyConfig{Scheme: "woocommerce", Secrets: []string{secret}})
		r := httptest.NewRequest(http.MethodPost, "/woocommerce", nil)
		r.Header.Set("X-WC-Webhook-Signature", c.sign(secret, body))
		sigtest.WantReason(t, v.Verify(r, body), nil)
		sigtest.WantReason(t, v.Verify(r, append(body, ' ')), signature.ErrInvalid)
	}
	// a secret without references: the common checks
	c := bodyHMACCase{preset: "woocommerce", header: "X-WC-Webhook-Signature", sign: wooCommerceSign}
	checkBodyHMAC(t, c, "ck_plain_secret", body)
	wantPreset(t, "woocommerce", []string{"body"}, 0, nil)
}

// TestWooCommercePing: WC_Webhook::deliver_ping's request (a POST of
// `webhook_id=<id>`, unsigned, WooCommerce's User-Agent, no X-WC-Webhook
// headers) is answered 200 before its body is read; a delivery, another
// client's POST or a longer body is not taken for it.
func TestWooCommercePing(t *testing.T) {
	hs, err := NewHandshake("woocommerce", HandshakeConfig{Verified: true})
	if err != nil || hs == nil || hs.Signed() {
		t.Fatalf("handshake %v, %v", hs, err)
	}
	ping := func(body string, edit func(r *http.Request)) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/woocommerce", strings.NewReader(body))
		r.Header.Set("User-Agent", "WooCommerce/9.8.5 Hookshot (WordPress/6.8.1)")
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if edit != nil {
			edit(r)
		}
		return r
	}
	for _, id := range []string{"1", "42", "18446744073709551615"} {
		a, ok := hs.Answer(ping("webhook_id="+id, nil), nil)
		if !ok || a.Status != http.StatusOK || a.Body != "" {
			t.Errorf("ping %s answered %+v, %v", id, a, ok)
		}
	}
	for name, r := range map[string]*http.Request{
		"a delivery": ping("webhook_id=1", func(r *http.Request) {
			r.Header.Set("X-WC-Webhook-Signature", "c2lnbmF0dXJl")
			r.Header.Set("X-WC-Webhook-Topic", "order.created")
		}),
		"a topic without a signature": ping("webhook_id=1", func(r *http.Request) { r.Header.Set("X-WC-Webhook-Topic", "order.created") }),
		"another client":              ping("webhook_id=1", func(r *http.Request) { r.Header.Set("User-Agent", "curl/8.0") }),
		"a longer body":               ping("webhook_id="+strings.Repeat("1", 21), nil),
		"an empty body":               ping("", nil),
		"a GET":                       httptest.NewRequest(http.MethodGet, "/woocommerce", nil),
		"a chunked body": ping("webhook_id=1", func(r *http.Request) {
			r.ContentLength = -1
			r.Header.Del("Content-Length")
		}),
	} {
		if a, ok := hs.Answer(r, nil); ok {
			t.Errorf("%s answered %+v", name, a)
		}
	}
	// unsigned and carrying nothing: answered whether or not the route
	// verifies, passed on with handshake off
	if hs, _ := NewHandshake("woocommerce", HandshakeConfig{}); hs == nil {
		t.Error("not answered on a route that does not verify")
	}
	if hs, _ := NewHandshake("woocommerce", HandshakeConfig{Mode: HandshakeOff, Verified: true}); hs != nil {
		t.Error("answered with handshake off")
	}
	if got := strconv.Itoa(wooCommercePingMax); got != "31" {
		t.Errorf("longest ping %s", got)
	}
}
