package e2e

import (
	"context"
	"fmt"
	"testing"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// Forgetting a key through the admin API lets the provider's retry be
// processed (docs/admin.md: Keys), also when the key was claimed with a
// guard: the guard (the body's key) goes with it, or the retry of the same
// signed bytes under the same id would be a replay of the guard.

func TestE2EForgetGuardedKey(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) { testForgetGuardedKey(t, st.line) })
	}
}

func TestRedisForgetGuardedKey(t *testing.T) {
	srv := testkit.StartRedis(t)
	rc := srv.Client(t)
	testForgetGuardedKey(t, "store redis redis://"+srv.Addr(), func(body []byte) {
		for _, key := range []string{"idem:github:d1", "idem:github:" + testkit.SHA256Key(string(body))} {
			if n := rc.Exists(context.Background(), key).Val(); n != 0 {
				t.Fatalf("%s is still in Redis after the key was forgotten", key)
			}
		}
	})
}

func TestRedisClusterForgetGuardedKey(t *testing.T) {
	cluster := testkit.StartCluster(t)
	testForgetGuardedKey(t, cluster.StoreBlock())
}

func testForgetGuardedKey(t *testing.T, store string, forgotten ...func(body []byte)) {
	up := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	c := testkit.StartCaddy(t, "", githubSite(port, up, store))
	url := testkit.SiteURL(port) + "/gh"
	body := []byte(`{"ref":"refs/heads/main","after":"f0f0"}`)

	resendSigned(t, url, body, "d1")
	c.Forget(t, "github", "d1")
	for _, check := range forgotten {
		check(body)
	}
	answers := resendSigned(t, url, body, "d1")
	if n := up.Calls.Load(); n != 2 || answers[0].Header.Get(testkit.ReplayedHeader) != "" {
		t.Fatalf("the retry of a forgotten guarded key: %d calls (replayed %q), want it processed again",
			n, answers[0].Header.Get(testkit.ReplayedHeader))
	}
	// processed again, it is guarded again
	for i, a := range resendSigned(t, url, body, "d1", "d2") {
		if a.Header.Get(testkit.ReplayedHeader) != "true" {
			t.Fatalf("re-send %d after the retry was processed is not a replay", i)
		}
	}
	if n := up.Calls.Load(); n != 2 {
		t.Fatalf("%d calls, want 2", n)
	}
}

// Forgetting the body's key alone (the guard) leaves the key: a retry with
// the same id is still a replay.
func TestE2EForgetGuardAloneKeepsKey(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			up := testkit.NewUpstream(t, nil)
			port := testkit.FreePort(t)
			c := testkit.StartCaddy(t, "", githubSite(port, up, st.line))
			url := testkit.SiteURL(port) + "/gh"
			body := []byte(`{"ref":"refs/heads/main","after":"f1f1"}`)
			resendSigned(t, url, body, "d1")
			c.Forget(t, "github", testkit.SHA256Key(string(body))) // the guard
			answers := resendSigned(t, url, body, "d1")
			if up.Calls.Load() != 1 || answers[0].Header.Get(testkit.ReplayedHeader) != "true" {
				t.Fatalf("a retry with the same id after the guard alone was forgotten: %d calls, replayed %q",
					up.Calls.Load(), answers[0].Header.Get(testkit.ReplayedHeader))
			}
		})
	}
}

// Forgetting a key drops this instance's copy of its record (and of its
// guard's): while Redis stalls, the retry of a forgotten delivery is not
// answered from the copy, the fail policy applies.
func TestRedisForgetDropsRecentCopy(t *testing.T) {
	srv := testkit.StartRedis(t)
	up := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	// a timeout the calls before the stall come within on a loaded
	// machine; the stall's wait it out
	c := testkit.StartCaddy(t, "", githubSite(port, up, fmt.Sprintf(`fail open
		store redis redis://%s {
			timeout 2s
		}`, srv.Addr())))
	url := testkit.SiteURL(port) + "/gh"
	body := []byte(`{"ref":"refs/heads/main","after":"f2f2"}`)
	resendSigned(t, url, body, "d1")
	c.Forget(t, "github", "d1")
	srv.Pause()
	defer srv.Resume()
	answers := resendSigned(t, url, body, "d1")
	if n := up.Calls.Load(); n != 2 || answers[0].Header.Get(testkit.ReplayedHeader) != "" {
		t.Fatalf("the retry of a forgotten delivery during the stall: %d calls (replayed %q), want it passed on under fail open",
			n, answers[0].Header.Get(testkit.ReplayedHeader))
	}
}
