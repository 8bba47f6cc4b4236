package keyset

import (
	"crypto/rsa"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// fastTiming shortens the key sets' timing for one test; the sets the test
// made must be released before it ends.
func fastTiming(t *testing.T) {
	t.Helper()
	saved := Timing
	Timing.Refresh, Timing.MinRefresh, Timing.Retry = time.Hour, 20*time.Millisecond, 20*time.Millisecond
	t.Cleanup(func() { Timing = saved })
}

func TestRotationAndRefresh(t *testing.T) {
	fastTiming(t)
	old, rotated := sigtest.RSAKey("stone-signer"), sigtest.RSAKey("stone-signer-2")
	srv := sigtest.NewJWKSServer(t, map[string]*rsa.PrivateKey{"k1": old})
	s, err := Load(zap.NewNop(), srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Release() }()
	if k, err := s.Key("k1"); err != nil || !k.Equal(&old.PublicKey) {
		t.Fatalf("k1: %v", err)
	}
	// the provider rotates: an unknown kid is refused now and fetched in
	// the background, never on the request path
	srv.Set(false, map[string]*rsa.PrivateKey{"k1": old, "k2": rotated})
	before := srv.Hits.Load()
	start := time.Now()
	if _, err := s.Key("k2"); !errors.Is(err, signature.ErrInvalid) {
		t.Fatalf("unknown kid: %v", err)
	}
	if time.Since(start) > 100*time.Millisecond {
		t.Fatal("the lookup waited for the fetch")
	}
	testkit.Eventually(t, 10*time.Second, "rotated key k2 known", func() bool {
		k, err := s.Key("k2")
		return err == nil && k.Equal(&rotated.PublicKey)
	})
	if n := srv.Hits.Load() - before; n < 1 {
		t.Fatalf("%d fetches", n)
	}
	// a flood of unknown kids makes at most one fetch per minimum interval
	s.Release()
	Timing.MinRefresh = time.Hour
	s, err = Load(zap.NewNop(), srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	before = srv.Hits.Load()
	for range 100 {
		_, _ = s.Key("forged")
	}
	time.Sleep(50 * time.Millisecond)
	if n := srv.Hits.Load() - before; n > 1 {
		t.Fatalf("%d fetches for 100 unknown kids", n)
	}
	// a failing refresh keeps the set it has
	srv.Set(true, nil)
	if err := s.fetch(t.Context()); err == nil {
		t.Fatal("fetch from a failing server succeeded")
	}
	if _, err := s.Key("k1"); err != nil {
		t.Fatalf("after a failed refresh: %v", err)
	}
}

func TestUnreachableAtStart(t *testing.T) {
	fastTiming(t)
	srv := sigtest.NewJWKSServer(t, map[string]*rsa.PrivateKey{"k1": sigtest.RSAKey("stone-signer")})
	srv.Set(true, nil)
	s, err := Load(zap.NewNop(), srv.URL, "")
	if err != nil {
		t.Fatalf("an unreachable key set is not a provision error: %v", err)
	}
	defer s.Release()
	if s.Loaded() {
		t.Fatal("loaded from a failing server")
	}
	if _, err := s.Key("k1"); !errors.Is(err, signature.ErrUnavailable) {
		t.Fatalf("before loading: %v", err)
	}
	srv.Set(false, nil)
	testkit.Eventually(t, 10*time.Second, "key set loaded once reachable", s.Loaded)
	if _, err := s.Key("k1"); err != nil {
		t.Fatal(err)
	}
}

func TestSharedAndStopped(t *testing.T) {
	srv := sigtest.NewJWKSServer(t, map[string]*rsa.PrivateKey{"k1": sigtest.RSAKey("stone-signer")})
	a, err := Load(zap.NewNop(), srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := Load(zap.NewNop(), srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	if a != b || srv.Hits.Load() != 1 {
		t.Fatalf("two sets (%v) or %d fetches for one URL", a != b, srv.Hits.Load())
	}
	a.Release()
	select {
	case <-b.done:
		t.Fatal("stopped while still in use")
	default:
	}
	b.Release()
	select {
	case <-b.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the refresh loop outlived its last user")
	}
}

func TestFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "jwks.json")
	if _, err := Load(zap.NewNop(), "", path); err == nil {
		t.Fatal("a missing jwks_file is accepted")
	}
	if err := os.WriteFile(path, []byte(`{"keys":[]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(zap.NewNop(), "", path); err == nil || !strings.Contains(err.Error(), "no RS256 signing key") {
		t.Fatalf("an empty jwks_file: %v", err)
	}
	if err := os.WriteFile(path, sigtest.StoneKeySet(t, map[string]*rsa.PrivateKey{"k1": sigtest.RSAKey("stone-signer")}), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Load(zap.NewNop(), "", path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release()
	if _, err := s.Key("k1"); err != nil {
		t.Fatal(err)
	}
}
func TestParseRS256(t *testing.T) {
	signer := sigtest.RSAKey("stone-signer")
	good := string(sigtest.StoneKeySet(t, map[string]*rsa.PrivateKey{"sig-1": signer}))
	goodKey := good[strings.Index(good, "[")+1 : strings.LastIndex(good, "]")]
	with := func(old, repl string) string { return strings.Replace(goodKey, old, repl, 1) }
	keys, err := parseRS256([]byte(`{"keys":[` +
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
		if _, err := parseRS256([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func FuzzParseRS256(f *testing.F) {
	f.Add([]byte(`{"keys":[{"kty":"RSA","kid":"k","use":"sig","alg":"RS256","n":"AQAB","e":"AQAB"}]}`))
	f.Add([]byte(`{"keys":[{"kty":"oct","k":"AA"}]}`))
	f.Add([]byte(`{"keys":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		keys, err := parseRS256(data)
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
