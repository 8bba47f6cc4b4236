package signature_test

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// jwk is a key of a test key set.
type jwk struct {
	key      any
	kid, alg string
	use      string
}

// jwkSet writes a JWK set (RFC 7517) with go-jose.
func jwkSet(t testing.TB, keys ...jwk) []byte {
	t.Helper()
	var set jose.JSONWebKeySet
	for _, k := range keys {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: k.key, KeyID: k.kid, Algorithm: k.alg, Use: k.use})
	}
	data, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func writeFile(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// A key set keeps the signing keys usable with its algorithms, and
// never a symmetric key, a short RSA key or an encryption key.
func TestKeySetKeepsUsableKeys(t *testing.T) {
	small, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "jwks.json")
	writeFile(t, file, jwkSet(t,
		jwk{key: &sigtest.RSAKey("jwks-a").PublicKey, kid: "rsa", alg: "RS256", use: "sig"},
		jwk{key: &ecdsaKey("jwks-b").PublicKey, kid: "ec"},
		jwk{key: &small.PublicKey, kid: "small"},
		jwk{key: []byte("0123456789abcdef0123456789abcdef"), kid: "oct"},
		jwk{key: &sigtest.RSAKey("jwks-c").PublicKey, kid: "enc", use: "enc"},
		jwk{key: &sigtest.RSAKey("jwks-d").PublicKey, kid: "ps", alg: "PS256"},
	))
	ks, err := signature.NewKeySet(signature.KeySetConfig{File: file, Algorithms: []string{"RS256", "ES256"}})
	if err != nil {
		t.Fatal(err)
	}
	defer ks.Close()
	for kid, want := range map[string]crypto.PublicKey{"rsa": &sigtest.RSAKey("jwks-a").PublicKey, "ec": &ecdsaKey("jwks-b").PublicKey} {
		k, err := ks.Key(kid)
		if err != nil || !k.(interface{ Equal(crypto.PublicKey) bool }).Equal(want) {
			t.Errorf("key %q: %v", kid, err)
		}
	}
	for _, kid := range []string{"small", "oct", "enc", "ps", "absent", ""} {
		if _, err := ks.Key(kid); err != signature.ErrInvalid {
			t.Errorf("key %q: %v, want refused", kid, err)
		}
	}
	// as Stone's keys: RSA only
	if k, err := ks.StoneKey("rsa"); err != nil || !k.Equal(&sigtest.RSAKey("jwks-a").PublicKey) {
		t.Errorf("StoneKey(rsa): %v", err)
	}
	if _, err := ks.StoneKey("ec"); err != signature.ErrInvalid {
		t.Errorf("StoneKey(ec): %v", err)
	}
}

func TestKeySetFileErrors(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.json")
	writeFile(t, empty, jwkSet(t, jwk{key: []byte("symmetric"), kid: "oct"}))
	for _, cfg := range []signature.KeySetConfig{
		{File: filepath.Join(dir, "absent.json")},
		{File: empty},
		{File: empty, URL: "https://example.com/jwks"},
		{},
		{URL: "ftp://example.com/jwks"},
		{File: empty, Algorithms: []string{"HS256"}},
		{File: empty, Algorithms: []string{"none"}},
	} {
		if ks, err := signature.NewKeySet(cfg); err == nil {
			ks.Close()
			t.Errorf("%+v accepted", cfg)
		} else if !strings.HasPrefix(err.Error(), "jwks") {
			t.Errorf("error %q names no option", err)
		}
	}
}

// A set that cannot be fetched leaves the keys unavailable, never a pass;
// it is fetched again in the background until it loads.
func TestKeySetUnavailableUntilLoaded(t *testing.T) {
	var up atomic.Bool
	set := jwkSet(t, jwk{key: &sigtest.RSAKey("jwks-a").PublicKey, kid: "a"})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !up.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write(set)
	}))
	defer srv.Close()
	var failures atomic.Int64
	ks, err := signature.NewKeySet(signature.KeySetConfig{
		URL: srv.URL, Retry: 10 * time.Millisecond,
		OnFetch: func(err error) {
			if err != nil {
				failures.Add(1)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ks.Close()
	if ks.Loaded() {
		t.Fatal("loaded from a failing URL")
	}
	if _, err := ks.Key("a"); err != signature.ErrUnavailable {
		t.Fatalf("key before a set loaded: %v", err)
	}
	up.Store(true)
	deadline := time.Now().Add(time.Minute)
	for !ks.Loaded() {
		if time.Now().After(deadline) {
			t.Fatal("the set never loaded")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := ks.Key("a"); err != nil {
		t.Fatal(err)
	}
	if failures.Load() == 0 {
		t.Error("no failure reported")
	}
}

// The document is size- and time-bounded.
func TestKeySetBounds(t *testing.T) {
	set := jwkSet(t, jwk{key: &sigtest.RSAKey("jwks-a").PublicKey, kid: "a"})
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		_, _ = w.Write(set)
	}))
	defer srv.Close()
	defer close(release)

	ks, err := signature.NewKeySet(signature.KeySetConfig{URL: srv.URL, MaxSize: int64(len(set) - 1), Retry: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if ks.Loaded() {
		t.Error("a document larger than max_size was loaded")
	}
	ks.Close()

	start := time.Now()
	ks, err = signature.NewKeySet(signature.KeySetConfig{URL: srv.URL + "/slow", Timeout: 200 * time.Millisecond, Retry: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer ks.Close()
	if ks.Loaded() {
		t.Error("loaded from a server that does not answer")
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("the first fetch took %v with a timeout of 200ms", took)
	}
}

// The set is refreshed every hour, and when a token names a key it does
// not have, at most once a minute; lookups never wait on a fetch.
func TestKeySetRefresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "jwks.json")
		a := jwk{key: &sigtest.RSAKey("jwks-a").PublicKey, kid: "a"}
		b := jwk{key: &sigtest.RSAKey("jwks-b").PublicKey, kid: "b"}
		writeFile(t, file, jwkSet(t, a))
		ks, err := signature.NewKeySet(signature.KeySetConfig{File: file})
		if err != nil {
			t.Fatal(err)
		}
		defer ks.Close()
		want := func(n int64) {
			t.Helper()
			synctest.Wait()
			if got := ks.Fetches(); got != n {
				t.Fatalf("%d fetches, want %d", got, n)
			}
		}
		want(1)

		// b is published: the first token naming it asks for a refresh,
		// which waits for the minute since the last fetch to pass
		time.Sleep(10 * time.Second)
		writeFile(t, file, jwkSet(t, a, b))
		if _, err := ks.Key("b"); err != signature.ErrInvalid {
			t.Fatalf("unknown key: %v", err)
		}
		want(1)
		time.Sleep(50*time.Second - time.Nanosecond)
		want(1)
		time.Sleep(time.Nanosecond)
		want(2)
		if _, err := ks.Key("b"); err != nil {
			t.Fatalf("after the refresh: %v", err)
		}

		// a flood of unknown kids costs one fetch a minute
		for range 1000 {
			_, _ = ks.Key("forged")
		}
		want(2)
		time.Sleep(time.Minute)
		want(3)
		for range 1000 {
			_, _ = ks.Key("forged")
		}
		time.Sleep(time.Minute)
		want(4)

		// and the hourly refresh
		time.Sleep(time.Hour)
		want(5)
		time.Sleep(time.Hour)
		want(6)
	})
}
