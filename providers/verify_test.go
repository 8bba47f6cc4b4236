package providers

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// presetBuild builds the verifier of c the way Provision does: from the
// preset table, through a verify config.
func presetBuild(c sigtest.Case) sigtest.Build {
	return func(t *testing.T, tolerance time.Duration, secrets ...string) signature.Verifier {
		t.Helper()
		secrets, public := c.Keys(secrets)
		v, err := buildVerifier(VerifyConfig{
			Scheme:     c.Scheme,
			Secrets:    secrets,
			PublicKeys: public,
			Header:     c.Header,
			Algorithm:  c.Algorithm,
			Encoding:   c.Encoding,
			Padding:    c.Padding,
			Prefix:     c.Prefix,
			Tolerance:  caddy.Duration(tolerance),
			URL:        c.URL,
		})
		if err != nil {
			t.Fatalf("buildVerifier(%s): %v", c.Scheme, err)
		}
		return v
	}
}

// TestVerifyPresets runs every preset, and the generic schemes, through
// the checks of every signature scheme.
func TestVerifyPresets(t *testing.T) {
	for _, c := range sigtest.Cases() {
		t.Run(c.Label(), func(t *testing.T) { sigtest.Run(t, c, presetBuild(c)) })
	}
}

// TestVerifyPresetsCoverEveryProvider keeps sigtest's table of cases
// complete.
func TestVerifyPresetsCoverEveryProvider(t *testing.T) {
	tested := map[string]bool{}
	for _, c := range sigtest.Cases() {
		tested[c.Scheme] = true
	}
	for _, name := range Names() {
		// stone decrypts with a private key and a fetched key set, not a
		// secret: the root's stone_test.go and e2e cover it; efi's token
		// is in the URL's query, not a header: the root's efi_test.go and
		// signature's querytoken_test.go cover it
		// a preset declared as a block has its vectors in a test file of
		// its own (<name>_test.go)
		_, err := os.Stat(name + "_test.go")
		if !tested[name] && err != nil && name != "stone" && name != "efi" {
			t.Errorf("provider %s has no test case: add one to internal/sigtest, or %s_test.go with its provider's vectors", name, name)
		}
	}
}

func TestVerifyPublicURL(t *testing.T) {
	body := []byte(`{"event_id":"e1"}`)
	signFor := func(u string) string { return sigtest.HMACBase64("sq", u, string(body)) }
	v, _ := buildVerifier(VerifyConfig{Scheme: "square", Secrets: []string{"sq"}})

	request := func(trusted bool) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "http://internal:8080/square?x=1", bytes.NewReader(body))
		r.Header.Set("X-Forwarded-Proto", "https")
		r.Header.Set("X-Forwarded-Host", "shop.example.com, proxy.local")
		r = caddyhttp.PrepareRequest(r, caddy.NewReplacer(), nil, nil)
		caddyhttp.SetVar(r.Context(), caddyhttp.TrustedProxyVarKey, trusted)
		return r
	}

	t.Run("forwarded headers from a trusted proxy", func(t *testing.T) {
		r := request(true)
		r.Header.Set("x-square-hmacsha256-signature", signFor("https://shop.example.com/square?x=1"))
		sigtest.WantReason(t, v.Verify(r, body), nil)
	})
	t.Run("forwarded headers from anyone else are ignored", func(t *testing.T) {
		r := request(false)
		r.Header.Set("x-square-hmacsha256-signature", signFor("https://shop.example.com/square?x=1"))
		sigtest.WantReason(t, v.Verify(r, body), signature.ErrInvalid)
		r.Header.Set("x-square-hmacsha256-signature", signFor("http://internal:8080/square?x=1"))
		sigtest.WantReason(t, v.Verify(r, body), nil)
	})
	t.Run("configured url with a query is used as is", func(t *testing.T) {
		cv, err := buildVerifier(VerifyConfig{Scheme: "square", Secrets: []string{"sq"}, URL: "https://a.example/square?tenant=1"})
		if err != nil {
			t.Fatal(err)
		}
		r := request(false)
		r.Header.Set("x-square-hmacsha256-signature", signFor("https://a.example/square?tenant=1"))
		sigtest.WantReason(t, cv.Verify(r, body), nil)
	})
	t.Run("url placeholders are resolved at provision", func(t *testing.T) {
		t.Setenv("WEBHOOK_TEST_PUBLIC_URL", "https://env.example")
		cv, err := buildVerifier(VerifyConfig{Scheme: "square", Secrets: []string{"sq"}, URL: "{env.WEBHOOK_TEST_PUBLIC_URL}/square"})
		if err != nil {
			t.Fatal(err)
		}
		r := request(false)
		r.Header.Set("x-square-hmacsha256-signature", signFor("https://env.example/square?x=1"))
		sigtest.WantReason(t, cv.Verify(r, body), nil)
	})
}

func TestVerifyConfigErrors(t *testing.T) {
	for _, cfg := range []VerifyConfig{
		{Scheme: "hmac", Secrets: []string{"s"}},                                // no header
		{Scheme: "hmac", Secrets: []string{"s"}, Header: "X", Algorithm: "md5"}, // bad algorithm
		{Scheme: "hmac", Secrets: []string{"s"}, Header: "X", Encoding: "b32"},
		{Scheme: "token", Secrets: []string{"s"}},
		{Scheme: "evolution", Secrets: []string{"s"}, Algorithm: "sha1"},
		{Scheme: "jwt", Secrets: []string{"s"}, Encoding: "hex"},
		{Scheme: "asaas", Secrets: []string{"s"}, Header: "X-Other"},
		{Scheme: "stone", Secrets: []string{"s"}},
		{Scheme: "github", Secrets: []string{"s"}, PrivateKey: "pem"},
		{Scheme: "stripe", Secrets: []string{"s"}, Header: "X-Other"},
		{Scheme: "github", Secrets: []string{"s"}, Algorithm: "sha1"},
		{Scheme: "twilio", Secrets: []string{"s"}, URL: "ftp://x"},
		{Scheme: "nope", Secrets: []string{"s"}},
	} {
		if _, err := buildVerifier(cfg); err == nil {
			t.Errorf("%+v: accepted", cfg)
		} else if strings.Contains(err.Error(), `"s"`) {
			t.Errorf("%+v: error reveals the secret: %v", cfg, err)
		}
	}
}
