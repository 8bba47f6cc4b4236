package providers

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sendgrid/sendgrid-go/helpers/eventwebhook"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// The vector of sendgrid-go v3.16.1, helpers/eventwebhook/
// eventwebhook_test.go: its key, signature and timestamp, over the 327
// bytes its generateTestPayload makes (the event as Go's encoder writes
// it, then CRLF).
const (
	sendGridKey       = "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE83T4O/n84iotIvIW4mdBgQ/7dAfSmpqIM8kF9mN1flpVKS3GRqe62gw+2fNNRaINXvVpiglSI8eNEc6wEA3F+g=="
	sendGridSignature = "MEUCIGHQVtGj+Y3LkG9fLcxf3qfI10QysgDWmMOVmxG0u6ZUAiEAyBiXDWzM+uOe5W0JuG+luQAbPIqHh89M15TluLtEZtM="
	sendGridTimestamp = "1600112502"
	sendGridPayload   = `[{"email":"hello@world.com","event":"dropped","reason":"Bounced Address","sg_event_id":"ZHJvcC0xMDk5NDkxOS1MUnpYbF9OSFN0T0doUTRrb2ZTbV9BLTA","sg_message_id":"LRzXl_NHStOGhQ4kofSm_A.filterdrecv-p3mdw1-756b745b58-kmzbl-18-5F5FC76C-9.0","smtp-id":"<LRzXl_NHStOGhQ4kofSm_A@ismtpd0039p1iad1.sendgrid.net>","timestamp":1600112492}]` + "\r\n"
)

// sendGridOracle is sendgrid-go's verifier.
func sendGridOracle(t *testing.T, key string, body []byte, sig, ts string) bool {
	t.Helper()
	pub, err := eventwebhook.ConvertPublicKeyBase64ToECDSA(key)
	if err != nil {
		t.Fatal(err)
	}
	ok, err := eventwebhook.VerifySignature(pub, body, sig, ts)
	return err == nil && ok
}

func sendGridRequest(sig, ts string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/sendgrid", nil)
	r.Header.Set(eventwebhook.VerificationHTTPHeader, sig)
	r.Header.Set(eventwebhook.TimestampHTTPHeader, ts)
	return r
}

func TestSendGrid(t *testing.T) {
	body := []byte(sendGridPayload)
	if len(body) != 327 || !sendGridOracle(t, sendGridKey, body, sendGridSignature, sendGridTimestamp) {
		t.Fatal("sendgrid-go refuses its own vector: the payload is not the one it signed")
	}
	v := mustBuild(t, VerifyConfig{Scheme: "sendgrid", PublicKeys: []string{sendGridKey}})
	sigtest.WantReason(t, v.Verify(sendGridRequest(sendGridSignature, sendGridTimestamp), body), nil)

	// forgeries, each refused by sendgrid-go too
	changed := bytes.Replace(body, []byte("dropped"), []byte("droppeD"), 1)
	other, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKIXPublicKey(&other.PublicKey)
	otherKey := base64.StdEncoding.EncodeToString(der)
	for _, f := range []struct {
		name     string
		key      string
		body     []byte
		sig, ts  string
		want     *signature.Error
		refusing bool // sendgrid-go refuses it as well
	}{
		{"a changed byte", sendGridKey, changed, sendGridSignature, sendGridTimestamp, signature.ErrInvalid, true},
		{"another timestamp", sendGridKey, body, sendGridSignature, "1600112503", signature.ErrInvalid, true},
		{"another key", otherKey, body, sendGridSignature, sendGridTimestamp, signature.ErrInvalid, true},
		{"no signature", sendGridKey, body, "", sendGridTimestamp, signature.ErrMissing, true},
	} {
		t.Run(f.name, func(t *testing.T) {
			if sendGridOracle(t, f.key, f.body, f.sig, f.ts) != !f.refusing {
				t.Fatal("sendgrid-go disagrees")
			}
			v := mustBuild(t, VerifyConfig{Scheme: "sendgrid", PublicKeys: []string{f.key}})
			sigtest.WantReason(t, v.Verify(sendGridRequest(f.sig, f.ts), f.body), f.want)
		})
	}
	// SendGrid documents no freshness window: the 2020 vector still
	// verifies, as sendgrid-go's verifier accepts it

	// the preset's signer signs as SendGrid does: sendgrid-go accepts it
	priv, err := x509.MarshalECPrivateKey(other)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSigner("sendgrid", SignConfig{PrivateKey: string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: priv}))})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodPost, "/sendgrid", nil)
	out, err := s.Sign(r, body, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if !sendGridOracle(t, otherKey, out, r.Header.Get(eventwebhook.VerificationHTTPHeader), r.Header.Get(eventwebhook.TimestampHTTPHeader)) {
		t.Fatal("sendgrid-go refuses what the preset's signer signs")
	}
	sigtest.WantReason(t, mustBuild(t, VerifyConfig{Scheme: "sendgrid", PublicKeys: []string{otherKey}}).Verify(r, out), nil)
	sigtest.WantReason(t, mustBuild(t, VerifyConfig{Scheme: "sendgrid", PublicKeys: []string{sendGridKey}}).Verify(r, out), signature.ErrInvalid)

	if _, err := buildVerifier(VerifyConfig{Scheme: "sendgrid", Secrets: []string{"s"}}); err == nil {
		t.Fatal("a secret for SendGrid's public key accepted")
	}
}

// SendGrid's key, written in a Caddyfile, is checked as it is parsed: an
// ECDSA key, not anything else.
func TestSendGridKeyInTheCaddyfile(t *testing.T) {
	if err := CheckPublicKey("sendgrid", sendGridKey); err != nil {
		t.Fatalf("SendGrid's key: %v", err)
	}
	if err := CheckPublicKey("sendgrid", sigtest.PEMPublic(&sigtest.RSAKey("x").PublicKey)); err == nil {
		t.Fatal("an RSA key taken for SendGrid's")
	}
}
