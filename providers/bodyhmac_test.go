package providers

import (
	"crypto/hmac"
	"encoding/base64"
	"encoding/hex"
	"hash"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// The presets that sign the body alone with an HMAC in one header
// (Paystack, Checkout.com, Typeform, Sentry, Lemon Squeezy, Intercom,
// Bitbucket, Vercel, WooCommerce, Coinbase Commerce) share these checks;
// each preset's test gives its provider's formula, written from the
// provider's documentation or code, or its published vectors.

// bodyHMACCase is one such preset.
type bodyHMACCase struct {
	preset, header string
	// sign is the provider's formula: the header's value for body under
	// secret.
	sign func(secret string, body []byte) string
}

// hmacOf returns a formula: prefix and the HMAC of the body under the
// secret as written, hex or base64.
func hmacOf(h func() hash.Hash, prefix string, base64Encoded bool) func(string, []byte) string {
	return func(secret string, body []byte) string {
		m := hmac.New(h, []byte(secret))
		m.Write(body)
		if base64Encoded {
			return prefix + base64.StdEncoding.EncodeToString(m.Sum(nil))
		}
		return prefix + hex.EncodeToString(m.Sum(nil))
	}
}

// checkBodyHMAC checks a preset against its provider's formula: the
// formula's signature verifies; another secret, a changed byte, a missing
// header and a signature of another body are refused; a second secret
// (rotation) verifies; the preset's signer writes the formula's value,
// and forward can re-sign it.
func checkBodyHMAC(t *testing.T, c bodyHMACCase, secret string, body []byte) {
	t.Helper()
	v := mustBuild(t, VerifyConfig{Scheme: c.preset, Secrets: []string{"an old secret", secret}})
	req := func(sig string) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/"+c.preset, nil)
		if sig != "" {
			r.Header.Set(c.header, sig)
		}
		return r
	}
	good := c.sign(secret, body)
	sigtest.WantReason(t, v.Verify(req(good), body), nil)
	sigtest.WantReason(t, v.Verify(req(c.sign("another secret", body)), body), signature.ErrInvalid)
	changed := slices.Clone(body)
	changed[len(changed)/2] ^= 1
	sigtest.WantReason(t, v.Verify(req(good), changed), signature.ErrInvalid)
	sigtest.WantReason(t, v.Verify(req(c.sign(secret, changed)), body), signature.ErrInvalid)
	sigtest.WantReason(t, v.Verify(req(""), body), signature.ErrMissing)

	s, err := NewSigner(c.preset, SignConfig{Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	r := req("")
	if _, err := s.Sign(r, body, time.Now()); err != nil {
		t.Fatal(err)
	}
	if got := r.Header.Get(c.header); got != good {
		t.Errorf("%s's signer wrote %q, the provider %q", c.preset, got, good)
	}
	if !Resigns(VerifyConfig{Scheme: c.preset, Secrets: []string{secret}}) {
		t.Errorf("%s: forward cannot re-sign an HMAC of the body", c.preset)
	}
	if headers, _ := Credentials(VerifyConfig{Scheme: c.preset}); len(headers) != 1 || http.CanonicalHeaderKey(headers[0]) != http.CanonicalHeaderKey(c.header) {
		t.Errorf("%s: credentials %q, want %s", c.preset, headers, c.header)
	}
}

// checkVectorBodyHMAC checks a published vector: it verifies, and one byte
// more does not.
func checkVectorBodyHMAC(t *testing.T, preset, header, secret, sig string, body []byte) {
	t.Helper()
	v := mustBuild(t, VerifyConfig{Scheme: preset, Secrets: []string{secret}})
	r := httptest.NewRequest(http.MethodPost, "/"+preset, nil)
	r.Header.Set(header, sig)
	sigtest.WantReason(t, v.Verify(r, body), nil)
	sigtest.WantReason(t, v.Verify(r, append(slices.Clone(body), ' ')), signature.ErrInvalid)
}

// wantPreset checks what a preset declares besides its scheme.
func wantPreset(t *testing.T, name string, key []string, ttl time.Duration, redact []string) *Preset {
	t.Helper()
	p, ok := Lookup(name)
	if !ok {
		t.Fatalf("no preset %s", name)
	}
	if !slices.Equal(p.DefaultKey, key) {
		t.Errorf("%s: key %q, want %q", name, p.DefaultKey, key)
	}
	if p.TTL != ttl {
		t.Errorf("%s: ttl %v, want %v", name, p.TTL, ttl)
	}
	if !slices.Equal(p.Redact, redact) {
		t.Errorf("%s: redact %q, want %q", name, p.Redact, redact)
	}
	return p
}

// mustRequest is a POST with one header set.
func mustRequest(header, value string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	r.Header.Set(header, value)
	return r
}
