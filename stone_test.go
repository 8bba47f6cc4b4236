package webhookidempotency

import (
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/providers"
)

func TestProvisionStoneErrors(t *testing.T) {
	keyFile := sigtest.PartnerKeyFile(t)
	srv := sigtest.NewJWKSServer(t, map[string]*rsa.PrivateKey{"k1": sigtest.RSAKey("stone-signer")})
	t.Setenv("WEBHOOK_TEST_STONE_KEY", "not a pem")
	for _, c := range []struct {
		name string
		v    providers.VerifyConfig
		want string
	}{
		{"no private key", providers.VerifyConfig{JWKSURL: srv.URL}, "needs private_key"},
		{"not a PEM", providers.VerifyConfig{PrivateKey: "{env.WEBHOOK_TEST_STONE_KEY}", JWKSURL: srv.URL}, "invalid private_key: no PEM block"},
		{"a secret", providers.VerifyConfig{PrivateKey: "{file." + keyFile + "}", Secrets: []string{"s"}}, "no secret"},
		{"both key sets", providers.VerifyConfig{PrivateKey: "{file." + keyFile + "}", JWKSURL: srv.URL, JWKSFile: keyFile}, "use one"},
		{"key set file is a PEM", providers.VerifyConfig{PrivateKey: "{file." + keyFile + "}", JWKSFile: keyFile}, "jwks_file: not a JWK set"},
		{"bad url", providers.VerifyConfig{PrivateKey: "{file." + keyFile + "}", JWKSURL: "ftp://x"}, "invalid jwks_url"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := testkit.NewContext(t)
			defer cancel()
			h := &Handler{Provider: "stone", Verify: &c.v}
			err := h.Provision(ctx)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
			if strings.Contains(err.Error(), "not a pem") || strings.Contains(err.Error(), "MII") {
				t.Fatalf("the error quotes the key: %v", err)
			}
			_ = h.Cleanup()
		})
	}
	t.Run("stone options on another scheme", func(t *testing.T) {
		ctx, cancel := testkit.NewContext(t)
		defer cancel()
		h := &Handler{Provider: "github", Verify: &providers.VerifyConfig{Secrets: []string{"s"}, Decrypt: true}}
		if err := h.Provision(ctx); err == nil || !strings.Contains(err.Error(), "only the stone scheme takes decrypt") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("PKCS #1 key and a key set file", func(t *testing.T) {
		dir := t.TempDir()
		pkcs1 := filepath.Join(dir, "rsa.pem")
		_ = os.WriteFile(pkcs1, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(sigtest.RSAKey("stone-partner"))}), 0o600)
		jwks := filepath.Join(dir, "jwks.json")
		_ = os.WriteFile(jwks, sigtest.StoneKeySet(t, map[string]*rsa.PrivateKey{"k1": sigtest.RSAKey("stone-signer")}), 0o600)
		ctx, cancel := testkit.NewContext(t)
		defer cancel()
		h := &Handler{Provider: "stone", Verify: &providers.VerifyConfig{PrivateKey: "{file." + pkcs1 + "}", JWKSFile: jwks}}
		if err := h.Provision(ctx); err != nil {
			t.Fatal(err)
		}
		if !h.verification.Sealed() || h.verification.Decrypt() {
			t.Fatalf("sealed %v decrypt %v", h.verification.Sealed(), h.verification.Decrypt())
		}
		_ = h.Cleanup()
	})
}

// Presets whose provider retries for longer than a day keep keys longer;
// an explicit ttl wins.
func TestPresetDefaults(t *testing.T) {
	for _, c := range []struct {
		h        Handler
		ttl      time.Duration
		inFlight string
	}{
		{Handler{Provider: "stripe"}, 72 * time.Hour, "conflict"},
		{Handler{Provider: "stripe", TTL: caddy.Duration(time.Hour)}, time.Hour, "conflict"},
		{Handler{Provider: "mercadopago"}, 96 * time.Hour, "conflict"},
		{Handler{Provider: "whatsapp"}, 7 * 24 * time.Hour, "conflict"},
		{Handler{Provider: "github"}, 24 * time.Hour, "conflict"},
		{Handler{Provider: "asaas"}, 24 * time.Hour, "wait"},
		{Handler{Provider: "asaas", InFlight: "conflict"}, 24 * time.Hour, "conflict"},
	} {
		h := c.h
		h.Verify = &providers.VerifyConfig{Secrets: []string{"s"}}
		if _, err := h.applyPreset(); err != nil {
			t.Fatal(err)
		}
		if err := h.provisionOptions(); err != nil {
			t.Fatal(err)
		}
		if time.Duration(h.TTL) != c.ttl || h.inFlight.String() != c.inFlight {
			t.Errorf("%s: ttl %v in_flight %s, want %v %s", c.h.Provider, time.Duration(h.TTL), h.inFlight, c.ttl, c.inFlight)
		}
	}
}
