package webhookidempotency

import (
	"crypto/hmac"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	gojwt "github.com/golang-jwt/jwt/v5"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/results"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
)

// provisionCaddyfile parses a handler from a Caddyfile and provisions it.
func provisionCaddyfile(t *testing.T, input string) *Handler {
	t.Helper()
	h, err := parseTestHandler(input)
	if err != nil {
		t.Fatal(err)
	}
	return newTestHandler(t, h)
}

// TestVerifyTemplateFromCaddyfile: a provider without a preset written as
// a `verify template` block (docs/providers.md: Generic schemes).
func TestVerifyTemplateFromCaddyfile(t *testing.T) {
	h := provisionCaddyfile(t, `webhook_idempotency {
	source tmpl
	store memory
	verify template {
		string    "{header.X-Ts}.{method}.{body}"
		algorithm hmac-sha256
		signature header:X-Sig prefix v1=
		timestamp header:X-Ts
		secret    tmpl-secret
	}
}`)
	body := `{"id":"t1"}`
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	m := hmac.New(sha256.New, []byte("tmpl-secret"))
	m.Write([]byte(ts + ".POST." + body))
	var calls atomic.Int64
	for _, tc := range []struct {
		sig, want string
	}{{"v1=" + hex.EncodeToString(m.Sum(nil)), results.New}, {"v1=00", results.InvalidSignature}} {
		r := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader(body))
		r.Header.Set("X-Ts", ts)
		r.Header.Set("X-Sig", tc.sig)
		if got := serveReq(h, r, countingNext(&calls)); got.result != tc.want {
			t.Fatalf("signature %q: %q, want %q", tc.sig, got.result, tc.want)
		}
	}
}

// TestVerifyJWTFromCaddyfile: `verify jwt` with a key set file, audience,
// issuer and a claim, as Google Pub/Sub's push authenticates.
func TestVerifyJWTFromCaddyfile(t *testing.T) {
	key := sigtest.RSAKey("jwt-signer")
	jwks := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(jwks, sigtest.StoneKeySet(t, map[string]*rsa.PrivateKey{"k1": key}), 0o600); err != nil {
		t.Fatal(err)
	}
	h := provisionCaddyfile(t, `webhook_idempotency {
	source jwt
	store memory
	verify jwt {
		jwks_file `+jwks+`
		issuer    https://accounts.google.com
		audience  https://example.com/push
		claim     email push@proj.iam.gserviceaccount.com
	}
}`)
	token := func(aud, email string) string {
		tok := gojwt.NewWithClaims(gojwt.SigningMethodRS256, gojwt.MapClaims{
			"iss": "https://accounts.google.com", "aud": aud, "email": email,
			"exp": time.Now().Add(time.Hour).Unix(), "iat": time.Now().Unix(),
		})
		tok.Header["kid"] = "k1"
		s, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	var calls atomic.Int64
	for i, tc := range []struct {
		aud, email, want string
	}{
		{"https://example.com/push", "push@proj.iam.gserviceaccount.com", results.New},
		{"https://attacker.example/push", "push@proj.iam.gserviceaccount.com", results.InvalidSignature},
		{"https://example.com/push", "other@proj.iam.gserviceaccount.com", results.InvalidSignature},
	} {
		r := httptest.NewRequest(http.MethodPost, "/push", strings.NewReader(`{"message":{"messageId":"m`+strconv.Itoa(i)+`"}}`))
		r.Header.Set("Authorization", "Bearer "+token(tc.aud, tc.email))
		if got := serveReq(h, r, countingNext(&calls)); got.result != tc.want {
			t.Fatalf("aud %s email %s: %q, want %q", tc.aud, tc.email, got.result, tc.want)
		}
	}
}
