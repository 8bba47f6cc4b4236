package providers

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// TestTelnyxSDKVectors: the preset accepts exactly what telnyx 7.24.0's
// TelnyxWebhook.verify accepts, its 5-minute window held against the
// clock it judged at.
func TestTelnyxSDKVectors(t *testing.T) {
	vecs := loadSDKVectors(t, "telnyx-7.24.0.json")
	v := mustBuild(t, VerifyConfig{Scheme: "telnyx", PublicKeys: []string{vecs.PublicKey}, Tolerance: caddy.Duration(sinceClock(vecs.Clock, 5*time.Minute))})
	stale := 0
	for _, vec := range vecs.Vectors {
		r := httptest.NewRequest(http.MethodPost, "/telnyx", nil)
		for k, val := range vec.Headers {
			r.Header.Set(k, val)
		}
		var want *signature.Error
		switch {
		case vec.Valid:
		case strings.Contains(vec.SDKError, "too old"):
			want, stale = signature.ErrTimestamp, stale+1
		default:
			want = signature.ErrInvalid
		}
		t.Run(vec.Name, func(t *testing.T) { sigtest.WantReason(t, v.Verify(r, []byte(vec.Body)), want) })
	}
	if stale == 0 {
		t.Fatal("no stale vector")
	}
}

// TestTelnyx: Ed25519 over `{telnyx-timestamp}|{body}`, base64, with the
// account's public key as Mission Control shows it (base64 of 32 bytes);
// a key that is not Ed25519 is a configuration error; the signer signs
// with the private key and forward cannot re-sign.
func TestTelnyx(t *testing.T) {
	seed := sha256.Sum256([]byte("telnyx test key"))
	priv := ed25519.NewKeyFromSeed(seed[:])
	pub := base64.StdEncoding.EncodeToString(priv.Public().(ed25519.PublicKey))
	other := ed25519.NewKeyFromSeed(make([]byte, 32))
	body := []byte(`{"data":{"event_type":"message.received","id":"0ccc7b54-4df3-4bca-a65a-3da1ecc777f0","payload":{"text":"Ünïcödé"},"record_type":"event"},"meta":{"attempt":1}}`)
	v := mustBuild(t, VerifyConfig{Scheme: "telnyx", PublicKeys: []string{pub}})
	req := func(key ed25519.PrivateKey, at time.Time, signed []byte) *http.Request {
		ts := strconv.FormatInt(at.Unix(), 10)
		r := httptest.NewRequest(http.MethodPost, "/telnyx", nil)
		r.Header.Set("Telnyx-Timestamp", ts)
		r.Header.Set("Telnyx-Signature-Ed25519", base64.StdEncoding.EncodeToString(ed25519.Sign(key, append([]byte(ts+"|"), signed...))))
		return r
	}
	now := time.Now()
	sigtest.WantReason(t, v.Verify(req(priv, now, body), body), nil)
	sigtest.WantReason(t, v.Verify(req(other, now, body), body), signature.ErrInvalid)
	sigtest.WantReason(t, v.Verify(req(priv, now, body), append(body, ' ')), signature.ErrInvalid)
	sigtest.WantReason(t, v.Verify(req(priv, now.Add(-6*time.Minute), body), body), signature.ErrTimestamp)
	sigtest.WantReason(t, v.Verify(req(priv, now.Add(6*time.Minute), body), body), signature.ErrTimestamp)
	r := req(priv, now, body)
	r.Header.Del("Telnyx-Signature-Ed25519")
	sigtest.WantReason(t, v.Verify(r, body), signature.ErrMissing)

	if _, err := buildVerifier(VerifyConfig{Scheme: "telnyx", Secrets: []string{"a secret"}}); err == nil {
		t.Error("a secret taken for Telnyx's public key")
	}
	// a key written in the Caddyfile is checked as the block's algorithm
	// takes it (Ed25519), and a generic template's when it is built
	if err := CheckPublicKey("telnyx", "bm90IGEga2V5"); err == nil {
		t.Error("a public key that is no Ed25519 key accepted")
	}
	var cfg VerifyConfig
	if err := cfg.SetOption("public_key", pub, []string{pub}, "telnyx"); err != nil {
		t.Errorf("Telnyx's public key refused: %v", err)
	}
	if err := cfg.SetOption("public_key", pub, []string{pub}, "template"); err != nil {
		t.Errorf("a template's public key refused before its algorithm is known: %v", err)
	}
	s, err := NewSigner("telnyx", SignConfig{PrivateKey: base64.StdEncoding.EncodeToString(seed[:])})
	if err != nil {
		t.Fatal(err)
	}
	r = httptest.NewRequest(http.MethodPost, "/telnyx", nil)
	if _, err := s.Sign(r, body, now); err != nil {
		t.Fatal(err)
	}
	sigtest.WantReason(t, v.Verify(r, body), nil)
	if Resigns(VerifyConfig{Scheme: "telnyx", PublicKeys: []string{pub}}) {
		t.Error("forward claims to re-sign with Telnyx's private key")
	}
	wantPreset(t, "telnyx", []string{"json:data.id", "body"}, 0, nil)
}
