package webhookidempotency

import (
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// jwksServer serves Stone's key set as its discovery endpoint does, and
// can be down.
type jwksServer struct {
	*httptest.Server
	mu   sync.Mutex
	keys map[string]*rsa.PrivateKey
	down bool
	hits atomic.Int64
}

func newJWKSServer(t *testing.T, keys map[string]*rsa.PrivateKey) *jwksServer {
	t.Helper()
	s := &jwksServer{keys: keys}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.down {
			http.Error(w, "unavailable", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(sigtest.StoneKeySet(t, s.keys))
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *jwksServer) set(down bool, keys map[string]*rsa.PrivateKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = down
	if keys != nil {
		s.keys = keys
	}
}

// fastStoneKeys shortens the key set's timing for one test; the sets the
// test made must be released before it ends (Caddy's stop does).
func fastStoneKeys(t *testing.T) {
	t.Helper()
	refresh, minRefresh, retry := stoneKeysRefresh, stoneKeysMinRefresh, stoneKeysRetry
	stoneKeysRefresh, stoneKeysMinRefresh, stoneKeysRetry = time.Hour, 20*time.Millisecond, 20*time.Millisecond
	t.Cleanup(func() { stoneKeysRefresh, stoneKeysMinRefresh, stoneKeysRetry = refresh, minRefresh, retry })
}

// partnerKeyFile writes the partner's private key as PKCS #8 PEM.
func partnerKeyFile(t *testing.T) string {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(sigtest.RSAKey("stone-partner"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "stone.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestStoneKeySetRotationAndRefresh(t *testing.T) {
	fastStoneKeys(t)
	old, rotated := sigtest.RSAKey("stone-signer"), sigtest.RSAKey("stone-signer-2")
	srv := newJWKSServer(t, map[string]*rsa.PrivateKey{"k1": old})
	s, err := loadStoneKeys(zap.NewNop(), srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.release() }()
	if k, err := s.StoneKey("k1"); err != nil || !k.Equal(&old.PublicKey) {
		t.Fatalf("k1: %v", err)
	}
	// Stone rotates: an unknown kid is refused now and fetched in the
	// background, never on the request path
	srv.set(false, map[string]*rsa.PrivateKey{"k1": old, "k2": rotated})
	before := srv.hits.Load()
	start := time.Now()
	if _, err := s.StoneKey("k2"); !errors.Is(err, signature.ErrInvalid) {
		t.Fatalf("unknown kid: %v", err)
	}
	if time.Since(start) > 100*time.Millisecond {
		t.Fatal("the lookup waited for the fetch")
	}
	testkit.Eventually(t, 10*time.Second, "rotated key k2 known", func() bool {
		k, err := s.StoneKey("k2")
		return err == nil && k.Equal(&rotated.PublicKey)
	})
	if n := srv.hits.Load() - before; n < 1 {
		t.Fatalf("%d fetches", n)
	}
	// a flood of unknown kids makes at most one fetch per minimum interval
	s.release()
	stoneKeysMinRefresh = time.Hour
	s, err = loadStoneKeys(zap.NewNop(), srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	before = srv.hits.Load()
	for i := 0; i < 100; i++ {
		_, _ = s.StoneKey("forged")
	}
	time.Sleep(50 * time.Millisecond)
	if n := srv.hits.Load() - before; n > 1 {
		t.Fatalf("%d fetches for 100 unknown kids", n)
	}
	// a failing refresh keeps the set it has
	srv.set(true, nil)
	if err := s.fetch(t.Context()); err == nil {
		t.Fatal("fetch from a failing server succeeded")
	}
	if _, err := s.StoneKey("k1"); err != nil {
		t.Fatalf("after a failed refresh: %v", err)
	}
}

func TestStoneKeySetUnreachableAtStart(t *testing.T) {
	fastStoneKeys(t)
	srv := newJWKSServer(t, map[string]*rsa.PrivateKey{"k1": sigtest.RSAKey("stone-signer")})
	srv.set(true, nil)
	s, err := loadStoneKeys(zap.NewNop(), srv.URL, "")
	if err != nil {
		t.Fatalf("an unreachable key set is not a provision error: %v", err)
	}
	defer s.release()
	if s.Loaded() {
		t.Fatal("loaded from a failing server")
	}
	if _, err := s.StoneKey("k1"); !errors.Is(err, signature.ErrUnavailable) {
		t.Fatalf("before loading: %v", err)
	}
	srv.set(false, nil)
	testkit.Eventually(t, 10*time.Second, "key set loaded once reachable", s.Loaded)
	if _, err := s.StoneKey("k1"); err != nil {
		t.Fatal(err)
	}
}

func TestStoneKeySetSharedAndStopped(t *testing.T) {
	srv := newJWKSServer(t, map[string]*rsa.PrivateKey{"k1": sigtest.RSAKey("stone-signer")})
	a, err := loadStoneKeys(zap.NewNop(), srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := loadStoneKeys(zap.NewNop(), srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	if a != b || srv.hits.Load() != 1 {
		t.Fatalf("two sets (%v) or %d fetches for one URL", a != b, srv.hits.Load())
	}
	a.release()
	select {
	case <-b.done:
		t.Fatal("stopped while still in use")
	default:
	}
	b.release()
	select {
	case <-b.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the refresh loop outlived its last user")
	}
}

func TestStoneKeySetFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "jwks.json")
	if _, err := loadStoneKeys(zap.NewNop(), "", path); err == nil {
		t.Fatal("a missing jwks_file is accepted")
	}
	if err := os.WriteFile(path, []byte(`{"keys":[]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadStoneKeys(zap.NewNop(), "", path); err == nil || !strings.Contains(err.Error(), "no RS256 signing key") {
		t.Fatalf("an empty jwks_file: %v", err)
	}
	if err := os.WriteFile(path, sigtest.StoneKeySet(t, map[string]*rsa.PrivateKey{"k1": sigtest.RSAKey("stone-signer")}), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := loadStoneKeys(zap.NewNop(), "", path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.release()
	if _, err := s.StoneKey("k1"); err != nil {
		t.Fatal(err)
	}
}

func TestParseStoneKeySet(t *testing.T) {
	signer := sigtest.RSAKey("stone-signer")
	good := string(sigtest.StoneKeySet(t, map[string]*rsa.PrivateKey{"sig-1": signer}))
	goodKey := good[strings.Index(good, "[")+1 : strings.LastIndex(good, "]")]
	with := func(old, repl string) string { return strings.Replace(goodKey, old, repl, 1) }
	keys, err := parseStoneKeySet([]byte(`{"keys":[` +
		with(`"use":"sig"`, `"use":"enc"`) + `,` + // an encryption key
		with(`"alg":"RS256"`, `"alg":"PS256"`) + `,` + // another algorithm
		with(`"kid":"sig-1"`, `"kid":""`) + `,` + // no kid
		`{"kty":"oct","kid":"hmac","k":"c2VjcmV0"},` + // a symmetric key
		`{"kty":"EC","kid":"ec","crv":"P-256","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"},` +
		`{"kty":"RSA","kid":"junk","n":"!!","e":"AQAB"},` +
		with(`"kid":"sig-1"`, `"kid":"sig-2"`) + `]}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || keys["sig-2"] == nil || !keys["sig-2"].Equal(&signer.PublicKey) {
		t.Fatalf("kept %v", keys)
	}
	for _, bad := range []string{``, `[]`, `{"keys":{}}`, `{"keys":[]}`, `{"keys":[` + with(`"use":"sig"`, `"use":"enc"`) + `]}`} {
		if _, err := parseStoneKeySet([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func FuzzParseStoneKeySet(f *testing.F) {
	f.Add([]byte(`{"keys":[{"kty":"RSA","kid":"k","use":"sig","alg":"RS256","n":"AQAB","e":"AQAB"}]}`))
	f.Add([]byte(`{"keys":[{"kty":"oct","k":"AA"}]}`))
	f.Add([]byte(`{"keys":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		keys, err := parseStoneKeySet(data)
		if err == nil && len(keys) == 0 {
			t.Fatal("no error and no key")
		}
		for kid, k := range keys {
			if kid == "" || k.N.BitLen() < 2048 {
				t.Fatalf("kept key %q of %d bits", kid, k.N.BitLen())
			}
		}
	})
}

func TestProvisionStoneErrors(t *testing.T) {
	keyFile := partnerKeyFile(t)
	srv := newJWKSServer(t, map[string]*rsa.PrivateKey{"k1": sigtest.RSAKey("stone-signer")})
	t.Setenv("WEBHOOK_TEST_STONE_KEY", "not a pem")
	for _, c := range []struct {
		name string
		v    VerifyConfig
		want string
	}{
		{"no private key", VerifyConfig{JWKSURL: srv.URL}, "needs private_key"},
		{"not a PEM", VerifyConfig{PrivateKey: "{env.WEBHOOK_TEST_STONE_KEY}", JWKSURL: srv.URL}, "invalid private_key: no PEM block"},
		{"a secret", VerifyConfig{PrivateKey: "{file." + keyFile + "}", Secrets: []string{"s"}}, "no secret"},
		{"both key sets", VerifyConfig{PrivateKey: "{file." + keyFile + "}", JWKSURL: srv.URL, JWKSFile: keyFile}, "use one"},
		{"key set file is a PEM", VerifyConfig{PrivateKey: "{file." + keyFile + "}", JWKSFile: keyFile}, "jwks_file: not a JWK set"},
		{"bad url", VerifyConfig{PrivateKey: "{file." + keyFile + "}", JWKSURL: "ftp://x"}, "invalid jwks_url"},
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
		h := &Handler{Provider: "github", Verify: &VerifyConfig{Secrets: []string{"s"}, Decrypt: true}}
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
		h := &Handler{Provider: "stone", Verify: &VerifyConfig{PrivateKey: "{file." + pkcs1 + "}", JWKSFile: jwks}}
		if err := h.Provision(ctx); err != nil {
			t.Fatal(err)
		}
		if h.opener == nil || h.decrypt {
			t.Fatalf("opener %v decrypt %v", h.opener, h.decrypt)
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
		h.Verify = &VerifyConfig{Secrets: []string{"s"}}
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
