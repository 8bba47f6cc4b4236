package keyset

import (
	"crypto/rsa"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// fastTiming shortens the key sets' timing for one test; the sets the test
// made must be released before it ends.
func fastTiming(t *testing.T) {
	t.Helper()
	saved := Timing
	Timing.Refresh, Timing.MinRefresh, Timing.Retry = time.Hour, 20*time.Millisecond, 20*time.Millisecond
	t.Cleanup(func() { Timing = saved })
}

// TestSharedAndStoppedByTheLastUser: two routes (or two configurations
// across a reload) naming one URL share one set, fetched once; it keeps
// running until the last of them lets it go.
func TestSharedAndStoppedByTheLastUser(t *testing.T) {
	srv := sigtest.NewJWKSServer(t, map[string]*rsa.PrivateKey{"k1": sigtest.RSAKey("stone-signer")})
	a, err := Load(zap.NewNop(), srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := Load(zap.NewNop(), srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	if a.KeySet != b.KeySet || srv.Hits.Load() != 1 {
		t.Fatalf("two sets (%v) or %d fetches for one URL", a.KeySet != b.KeySet, srv.Hits.Load())
	}
	// another set of algorithms is another set
	c, err := Load(zap.NewNop(), srv.URL, "", "RS256", "ES256")
	if err != nil {
		t.Fatal(err)
	}
	if c.KeySet == a.KeySet {
		t.Fatal("sets of other algorithms shared")
	}
	c.Release()
	a.Release()
	if _, err := b.Key("k1"); err != nil {
		t.Fatalf("stopped while still in use: %v", err)
	}
	b.Release()
	// a set loaded again after its last user let it go is fetched again
	d, err := Load(zap.NewNop(), srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Release()
	if d.KeySet == b.KeySet {
		t.Fatal("the stopped set was handed out again")
	}
}

// TestUnreachableAtStart: a URL that cannot be fetched is not a provision
// error; the set loads in the background once it can.
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
	srv.Set(false, nil)
	testkit.Eventually(t, 10*time.Second, "key set loaded once reachable", s.Loaded)
	if _, err := s.Key("k1"); err != nil {
		t.Fatal(err)
	}
	if RetryAfter() != "1" {
		t.Fatalf("Retry-After %q with a 20ms retry", RetryAfter())
	}
}

// TestFile: a key set file that cannot be read or holds no usable key is an
// error; a good one loads.
func TestFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "jwks.json")
	if _, err := Load(zap.NewNop(), "", path); err == nil {
		t.Fatal("a missing jwks_file is accepted")
	}
	if err := os.WriteFile(path, []byte(`{"keys":[]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(zap.NewNop(), "", path); err == nil || !strings.Contains(err.Error(), "no key for RS256") {
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
