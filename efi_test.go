package webhookidempotency

import (
	"crypto/x509/pkix"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/redact"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/results"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/providers"
)

// efiPix is a Pix received callback as Efí documents it
// (dev.efipay.com.br, API Pix, Webhooks: Recebendo callbacks).
const efiPix = `{"pix":[{"endToEndId":"E1803615022211340s08793XPJ","txid":"fc9a43k6ff384ryP5f41719","chave":"2c3c7441-b91e-4982-3c25-6105581e18ae","valor":"0.01","horario":"2020-12-21T13:40:34.000Z","infoPagador":"pagando o pix"}]}`

// efiRefund is the callback of that Pix's refund: the same endToEndId.
const efiRefund = `{"pix":[{"endToEndId":"E1803615022211340s08793XPJ","txid":"fc9a43k6ff384ryP5f41719","chave":"2c3c7441-b91e-4982-3c25-6105581e18ae","valor":"0.01","horario":"2020-12-21T13:40:34.000Z","devolucoes":[{"id":"123ABC","rtrId":"D12345678202009091221abcdf098765","valor":"0.01","horario":{"solicitacao":"2020-12-21T14:00:00.000Z"},"status":"DEVOLVIDO"}]}]}`

func TestEfiPresetNeedsItsCertificateOrTheFallback(t *testing.T) {
	ca := testkit.NewCA(t, "Efí test root")
	for _, tc := range []struct {
		name string
		h    Handler
		want string // "" for a configuration that provisions
	}{
		{"nothing", Handler{Provider: "efi"}, "the efi preset needs client_cert { ca <Efí's CA chain from https://certificados.efipay.com.br/webhooks/certificate-chain-prod.crt> }"},
		{"a certificate without ca", Handler{Provider: "efi", ClientCert: &ClientCertConfig{}}, "the efi preset needs client_cert's ca"},
		{"the token alone", Handler{Provider: "efi", Verify: &providers.VerifyConfig{Secrets: []string{"tok"}}}, "both a secret, the token of the URL's hmac parameter, and allow_ips"},
		{"the addresses alone", Handler{Provider: "efi", AllowIPs: &AllowIPsConfig{Ranges: []string{"34.193.116.226"}}}, "both a secret"},
		{"verify off", Handler{Provider: "efi", Verify: &providers.VerifyConfig{Scheme: "off"}, AllowIPs: &AllowIPsConfig{Ranges: []string{"34.193.116.226"}}}, "`verify off` leaves it with neither"},
		{"mutual TLS", Handler{Provider: "efi", ClientCert: &ClientCertConfig{CA: []string{ca.PEMFile}}}, ""},
		{"mutual TLS and the token", Handler{Provider: "efi", Verify: &providers.VerifyConfig{Secrets: []string{"tok"}}, ClientCert: &ClientCertConfig{CA: []string{ca.PEMFile}}}, ""},
		{"the fallback", Handler{Provider: "efi", Verify: &providers.VerifyConfig{Secrets: []string{"tok"}}, AllowIPs: &AllowIPsConfig{Ranges: []string{"34.193.116.226"}}}, ""},
	} {
		ctx, cancel := testkit.NewContext(t)
		h := tc.h
		h.Source = "efi-" + strings.ReplaceAll(tc.name, " ", "-")
		err := h.Provision(ctx)
		if err == nil {
			_ = h.Cleanup()
		}
		cancel()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestEfiPresetDefaults(t *testing.T) {
	ca := testkit.NewCA(t, "Efí test root")
	h := newTestHandler(t, &Handler{Provider: "efi", ClientCert: &ClientCertConfig{CA: []string{ca.PEMFile}}})
	if h.Source != "efi" || strings.Join(h.Key, " ") != "body" || time.Duration(h.TTL) != 4*24*time.Hour {
		t.Fatalf("source %q key %v ttl %s", h.Source, h.Key, time.Duration(h.TTL))
	}
	if h.verification != nil {
		t.Fatal("without a secret, the certificate is the only check: no verifier")
	}
	leaf := ca.Client(t, pkix.Name{CommonName: "efi"}).Leaf
	var calls atomic.Int64
	post := func(body string, withCert bool) served {
		r := httptest.NewRequest(http.MethodPost, "/webhook/pix", strings.NewReader(body))
		if withCert {
			r.TLS = ca.Verified(leaf)
		}
		return serveReq(h, r, countingNext(&calls))
	}
	// Efí's first request, without a certificate, must be refused
	if s := post(`{"evento":"teste_webhook"}`, false); s.w.Code != 403 || calls.Load() != 0 {
		t.Fatalf("the probe: %d", s.w.Code)
	}
	first, again, refund := post(efiPix, true), post(efiPix, true), post(efiRefund, true)
	if first.w.Code != 200 || first.result != results.New || again.result != results.Replayed || refund.result != results.New {
		t.Fatalf("pix %d %q, again %q, refund %q", first.w.Code, first.result, again.result, refund.result)
	}
	if calls.Load() != 2 {
		t.Fatalf("the application got %d callbacks, want the pix and its refund", calls.Load())
	}
}

// TestEfiFallbackToken: without mutual TLS, a callback needs both Efí's
// address and the token in its URL's hmac parameter.
func TestEfiFallbackToken(t *testing.T) {
	t.Setenv("EFI_TEST_HMAC", "xyz-registered-with-the-url")
	h := newTestHandler(t, &Handler{Provider: "efi", Source: "efi-fallback", Verify: &providers.VerifyConfig{Secrets: []string{"{env.EFI_TEST_HMAC}"}},
		AllowIPs: &AllowIPsConfig{Ranges: []string{"34.193.116.226"}}})
	var calls atomic.Int64
	for _, tc := range []struct {
		from, target string
		want         int
	}{
		{"34.193.116.226", "/webhook/pix?hmac=xyz-registered-with-the-url&ignorar=", 200},
		{"34.193.116.226", "/webhook?hmac=wrong&ignorar=", 401},
		{"34.193.116.226", "/webhook/pix", 401},
		{"198.51.100.7", "/webhook/pix?hmac=xyz-registered-with-the-url", 403},
	} {
		r := httptest.NewRequest(http.MethodPost, tc.target, strings.NewReader(efiPix))
		if s := serveFrom(h, tc.from, r, countingNext(&calls)); s.w.Code != tc.want {
			t.Errorf("%s %s: %d %s, want %d", tc.from, tc.target, s.w.Code, s.w.Body, tc.want)
		}
	}
	if calls.Load() != 1 {
		t.Fatalf("the application got %d callbacks, want 1", calls.Load())
	}
}

// TestEfiHMACNeverArchived: the hmac query parameter is the URL's
// credential, redacted wherever the URI is kept.
func TestEfiHMACNeverArchived(t *testing.T) {
	rd, err := redact.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := rd.URI("/webhook/pix?hmac=s3cr3t&ignorar="); got != "/webhook/pix?hmac=[redacted]&ignorar=" {
		t.Fatalf("URI %s", got)
	}
}
