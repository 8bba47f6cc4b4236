package providers

import (
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"hash/crc32"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// payPalVector is PayPal-Java-SDK's published vector
// (../signature/testdata/paypal-java-sdk.json, which says where each part
// comes from).
type payPalVector struct {
	WebhookID string            `json:"webhook_id"`
	Headers   map[string]string `json:"headers"`
	Body      string            `json:"body"`
	Cert      string            `json:"cert"`
}

func loadPayPalVector(t *testing.T) payPalVector {
	t.Helper()
	data, err := os.ReadFile("../signature/testdata/paypal-java-sdk.json")
	if err != nil {
		t.Fatal(err)
	}
	var v payPalVector
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// payPalString is PayPal's documented string to sign.
func payPalString(id, at, webhookID string, body []byte) string {
	return id + "|" + at + "|" + webhookID + "|" + strconv.FormatUint(uint64(crc32.ChecksumIEEE(body)), 10)
}

// The preset signs and checks PayPal's documented string: PayPal's own
// vector verifies over it under PayPal's certificate, and the block
// builds that very string (RSA PKCS #1 v1.5 signatures are deterministic:
// the block's signature over the vector's request equals one made over
// the string here).
func TestPayPalVector(t *testing.T) {
	vec := loadPayPalVector(t)
	body := []byte(vec.Body)
	msg := payPalString(vec.Headers["PAYPAL-TRANSMISSION-ID"], vec.Headers["PAYPAL-TRANSMISSION-TIME"], vec.WebhookID, body)
	if !strings.HasSuffix(msg, "|3494065244") {
		t.Fatalf("the vector's string %q", msg)
	}
	block, _ := pem.Decode([]byte(vec.Cert))
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	sig, _ := base64.StdEncoding.DecodeString(vec.Headers["PAYPAL-TRANSMISSION-SIG"])
	digest := sha256.Sum256([]byte(msg))
	if err := rsa.VerifyPKCS1v15(cert.PublicKey.(*rsa.PublicKey), crypto.SHA256, digest[:], sig); err != nil {
		t.Fatalf("PayPal's vector does not verify over the documented string: %v", err)
	}

	key := sigtest.RSAKey("paypal")
	decl := *presets["paypal"].decl
	decl.WebhookID = vec.WebhookID
	tc, err := decl.templateConfig()
	if err != nil {
		t.Fatal(err)
	}
	s, err := signature.NewTemplateSigner(tc, key)
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodPost, "/paypal", nil)
	for k, v := range vec.Headers {
		r.Header.Set(k, v)
	}
	if _, err := s.Sign(r, body, time.Now()); err != nil {
		t.Fatal(err)
	}
	want := base64.StdEncoding.EncodeToString(sigtest.RSASign(key, crypto.SHA256, false, []byte(msg)))
	if got := r.Header.Get("Paypal-Transmission-Sig"); got != want {
		t.Fatal("the block does not sign PayPal's documented string")
	}
}

func TestPayPal(t *testing.T) {
	hosts := providerHosts(t, "api.paypal.com", "api-m.paypal.com", "api.sandbox.paypal.com", "api-m.sandbox.paypal.com", "api.paypal.com.evil.example")
	key, other := sigtest.RSAKey("paypal"), sigtest.RSAKey("not paypal")
	now := time.Now()
	hosts.Serve("/v1/notifications/certs/CERT-360caa42-fca2a594-5edc0ebc", selfSigned(t, key, "messageverificationcerts.paypal.com", now.Add(-time.Hour), now.Add(time.Hour)))
	hosts.Serve("/v1/notifications/certs/CERT-sandbox", selfSigned(t, key, "messageverificationcerts.sandbox.paypal.com", now.Add(-time.Hour), now.Add(time.Hour)))
	hosts.Serve("/v1/notifications/certs/CERT-other-name", selfSigned(t, key, "www.paypal.com", now.Add(-time.Hour), now.Add(time.Hour)))
	hosts.Serve("/v1/notifications/certs/CERT-expired", selfSigned(t, key, "messageverificationcerts.paypal.com", now.Add(-48*time.Hour), now.Add(-time.Hour)))
	hosts.Serve("/elsewhere/CERT", selfSigned(t, key, "messageverificationcerts.paypal.com", now.Add(-time.Hour), now.Add(time.Hour)))

	const webhookID = "8PT597110X687430LKGECATA"
	v := mustBuild(t, VerifyConfig{Scheme: "paypal", WebhookID: webhookID})
	body := []byte(`{"id":"WH-58D329510W468432D-8HN650336L201105X","event_type":"PAYMENT.CAPTURE.COMPLETED","resource":{"id":"42311647XV020574X"}}`)
	deliver := func(k *rsa.PrivateKey, certURL string, edit func(h http.Header, body *[]byte)) (*http.Request, []byte) {
		r := httptest.NewRequest(http.MethodPost, "/paypal", nil)
		b := body
		id, at := "ce6a2b90-1fd1-11f0-a1b8-b1c4d1a3e1f7", now.UTC().Format(time.RFC3339)
		r.Header.Set("Paypal-Transmission-Id", id)
		r.Header.Set("Paypal-Transmission-Time", at)
		r.Header.Set("Paypal-Auth-Algo", "SHA256withRSA")
		r.Header.Set("Paypal-Cert-Url", certURL)
		r.Header.Set("Paypal-Transmission-Sig", base64.StdEncoding.EncodeToString(sigtest.RSASign(k, crypto.SHA256, false, []byte(payPalString(id, at, webhookID, b)))))
		if edit != nil {
			edit(r.Header, &b)
		}
		return r, b
	}
	live := "https://api.paypal.com/v1/notifications/certs/CERT-360caa42-fca2a594-5edc0ebc"
	for _, c := range []struct {
		name    string
		key     *rsa.PrivateKey
		certURL string
		edit    func(h http.Header, body *[]byte)
		want    *signature.Error
	}{
		{"live", key, live, nil, nil},
		{"sandbox", key, "https://api-m.sandbox.paypal.com/v1/notifications/certs/CERT-sandbox", nil, nil},
		{"a changed byte", key, live, func(_ http.Header, b *[]byte) { *b = []byte(strings.Replace(string(*b), "COMPLETED", "COMPLETEd", 1)) }, signature.ErrInvalid},
		{"another transmission id", key, live, func(h http.Header, _ *[]byte) {
			h.Set("Paypal-Transmission-Id", "ce6a2b90-1fd1-11f0-a1b8-b1c4d1a3e1f8")
		}, signature.ErrInvalid},
		{"another key", other, live, nil, signature.ErrInvalid},
		{"another algorithm", key, live, func(h http.Header, _ *[]byte) { h.Set("Paypal-Auth-Algo", "SHA1withRSA") }, signature.ErrInvalid},
		{"no algorithm", key, live, func(h http.Header, _ *[]byte) { h.Del("Paypal-Auth-Algo") }, signature.ErrMissing},
		{"no signature", key, live, func(h http.Header, _ *[]byte) { h.Del("Paypal-Transmission-Sig") }, signature.ErrMissing},
		{"a certificate of another name", key, "https://api.paypal.com/v1/notifications/certs/CERT-other-name", nil, signature.ErrInvalid},
		{"an expired certificate", key, "https://api.paypal.com/v1/notifications/certs/CERT-expired", nil, signature.ErrInvalid},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, b := deliver(c.key, c.certURL, c.edit)
			sigtest.WantReason(t, v.Verify(r, b), c.want)
		})
	}

	// a webhook id other than the one PayPal signed
	r, b := deliver(key, live, nil)
	sigtest.WantReason(t, mustBuild(t, VerifyConfig{Scheme: "paypal", WebhookID: "WEBHOOK_ID"}).Verify(r, b), signature.ErrInvalid)

	// certificate URLs off PayPal's hosts are refused before any request
	hits := hosts.Hits.Load()
	for _, u := range []string{
		"https://api.paypal.com.evil.example/v1/notifications/certs/CERT-360caa42-fca2a594-5edc0ebc",
		"http://api.paypal.com/v1/notifications/certs/CERT-360caa42-fca2a594-5edc0ebc",
		"https://api.paypal.com/elsewhere/CERT",
		"https://www.paypal.com/v1/notifications/certs/CERT-360caa42-fca2a594-5edc0ebc",
		"https://api.paypal.com:8443/v1/notifications/certs/CERT-x/../../elsewhere/CERT",
	} {
		r, b := deliver(key, u, nil)
		sigtest.WantReason(t, v.Verify(r, b), signature.ErrInvalid)
	}
	if got := hosts.Hits.Load(); got != hits {
		t.Fatalf("%d requests for certificate URLs off PayPal's hosts", got-hits)
	}

	// the webhook id is required, and only this preset takes one
	if _, err := buildVerifier(VerifyConfig{Scheme: "paypal"}); err == nil || !strings.Contains(err.Error(), "webhook_id") {
		t.Fatalf("paypal without webhook_id: %v", err)
	}
	if _, err := buildVerifier(VerifyConfig{Scheme: "sendgrid", PublicKeys: []string{sendGridKey}, WebhookID: webhookID}); err == nil {
		t.Fatal("sendgrid took a webhook_id")
	}

	// the preset's signer signs as PayPal does
	s, err := NewSigner("paypal", SignConfig{PrivateKey: string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})), WebhookID: webhookID})
	if err != nil {
		t.Fatal(err)
	}
	r = httptest.NewRequest(http.MethodPost, "/paypal", nil)
	r.Header.Set("Paypal-Cert-Url", live)
	if b, err = s.Sign(r, body, now); err != nil {
		t.Fatal(err)
	}
	sigtest.WantReason(t, v.Verify(r, b), nil)
	if _, err := NewSigner("paypal", SignConfig{PrivateKey: "x"}); err == nil || !strings.Contains(err.Error(), "--webhook-id") {
		t.Fatalf("a signer without the webhook id: %v", err)
	}
}
