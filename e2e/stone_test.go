package e2e

import (
	"crypto/rsa"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/keyset"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// Stone's key set through a real Caddy, when it is not there at start or
// names a new kid. The key set's timing (a retry every 30s, a refresh at
// most once a minute) is shortened through internal/keyset's Timing, the
// module's test window on it, which no configuration sets.

// fastKeySets shortens the key sets' timing for one test; the sets the
// test made are released when its Caddy stops.
func fastKeySets(t *testing.T) {
	t.Helper()
	saved := keyset.Timing
	keyset.Timing.Refresh, keyset.Timing.MinRefresh, keyset.Timing.Retry = time.Hour, 20*time.Millisecond, 20*time.Millisecond
	t.Cleanup(func() { keyset.Timing = saved })
}

// stoneSite is a site on port whose stone handler verifies with the key
// set at jwksURL, in front of up.
func stoneSite(t *testing.T, port int, jwksURL string, up *testkit.Upstream) string {
	return fmt.Sprintf(`:%d {
	webhook_idempotency stone {
		private_key {file.%s}
		jwks_url    %s
	}
	reverse_proxy %s
}`, port, sigtest.PartnerKeyFile(t), jwksURL, up.Addr())
}

func TestStoneKeySetUnreachableAtStart(t *testing.T) {
	fastKeySets(t)
	partner, signer := sigtest.RSAKey("stone-partner"), sigtest.RSAKey("stone-signer")
	jwks := sigtest.NewJWKSServer(t, map[string]*rsa.PrivateKey{"stone-1": signer})
	jwks.Set(true, nil)
	// the set is retried every 20ms in this test; slow it so that the 503
	// is seen before the set loads
	keyset.Timing.Retry = 300 * time.Millisecond
	up := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	testkit.StartCaddy(t, "", stoneSite(t, port, jwks.URL, up))
	url := testkit.SiteURL(port) + "/stone"
	delivery := sigtest.StoneDelivery(t, []byte(sigtest.StoneEvent), signer, "stone-1", &partner.PublicKey)

	resp, body := testkit.Post(t, url, delivery, "x-stone-webhook-event-id", "evt-1")
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
		string(body) != `{"error":"verification keys unavailable"}` {
		t.Fatalf("before the key set loads: %d %v %s, want 503 with Retry-After", resp.StatusCode, resp.Header, body)
	}
	up.WantCalls(t, 0)
	jwks.Set(false, nil)
	testkit.WaitFor(t, 10*time.Second, "delivery accepted once the key set loads", func() (bool, string) {
		resp, body = testkit.Post(t, url, delivery, "x-stone-webhook-event-id", "evt-1")
		return resp.StatusCode == http.StatusOK, strconv.Itoa(resp.StatusCode) + " " + string(body)
	})
	up.WantCalls(t, 1)
}

func TestStoneUnknownKidThenRotated(t *testing.T) {
	fastKeySets(t)
	partner, old, rotated := sigtest.RSAKey("stone-partner"), sigtest.RSAKey("stone-signer"), sigtest.RSAKey("stone-signer-2")
	jwks := sigtest.NewJWKSServer(t, map[string]*rsa.PrivateKey{"stone-1": old})
	up := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	testkit.StartCaddy(t, "", stoneSite(t, port, jwks.URL, up))
	url := testkit.SiteURL(port) + "/stone"
	delivery := sigtest.StoneDelivery(t, []byte(sigtest.StoneEvent), rotated, "stone-2", &partner.PublicKey)
	resp, body := testkit.Post(t, url, delivery, "x-stone-webhook-event-id", "evt-2")
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("Content-Type") != "application/json" ||
		string(body) != `{"error":"invalid signature"}` {
		t.Fatalf("signed with a kid the set does not hold yet: %d %s, want 401 invalid signature", resp.StatusCode, body)
	}
	jwks.Set(false, map[string]*rsa.PrivateKey{"stone-1": old, "stone-2": rotated})
	testkit.WaitFor(t, 10*time.Second, "the rotated key is fetched", func() (bool, string) {
		resp, body = testkit.Post(t, url, delivery, "x-stone-webhook-event-id", "evt-2")
		return resp.StatusCode == http.StatusOK, strconv.Itoa(resp.StatusCode) + " " + string(body)
	})
	up.WantCalls(t, 1)
}
