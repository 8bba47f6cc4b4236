//go:build porting

package webhookidempotency

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
)

// reloadSite is a site for the reload tests; store is the store's
// Caddyfile line(s), ttl the setting that changes between reloads.
func reloadSite(port int, source, store, ttl, upstream string) string {
	return fmt.Sprintf(`:%d {
	webhook_idempotency {
		source %s
		ttl %s
		%s
	}
	reverse_proxy %s
}`, port, source, ttl, store, upstream)
}

// reloadsUnderTraffic runs 50 reloads through the admin API, alternating
// a changed config and an unchanged one, under concurrent duplicate
// traffic. It checks that no request failed, that a key completed before
// the reloads is replayed after them, and that the goroutine count came
// back. beforeReloads, if set, runs after the warm-up and before the
// reloads.
func reloadsUnderTraffic(t *testing.T, source, store string, up *upstream, beforeReloads func()) {
	t.Helper()
	port := freePort(t)
	site := func(ttl string) string { return reloadSite(port, source, store, ttl, up.addr()) }
	c := startCaddy(t, "", site("1h"))
	url := siteURL(port) + "/hook"

	// warm up connection pools with the same traffic as during the reloads
	warm := startRedisTraffic(t, url, 4, true)
	time.Sleep(500 * time.Millisecond)
	if failures := warm.finish(); len(failures) > 0 {
		t.Fatalf("warm-up failures: %v", failures)
	}
	kept := "evt_kept_" + source
	if resp, _ := post(t, url, []byte(kept), "Idempotency-Key", kept); resp.StatusCode != 200 {
		t.Fatalf("recording %s: %d", kept, resp.StatusCode)
	}
	if resp, _ := post(t, url, []byte(kept), "Idempotency-Key", kept); resp.Header.Get(replayedHeader) != "true" {
		t.Fatalf("%s not replayed before the reloads", kept)
	}
	if beforeReloads != nil {
		beforeReloads()
	}
	goroutinesBefore := settledGoroutines(up, 0, time.Second)

	traffic := startRedisTraffic(t, url, 4, true)
	ttls := []string{"2h", "1h"}
	changed := 0
	for i := range 50 {
		ttl := ttls[(changed+1)%2] // unchanged: the current config again
		if i%2 == 0 {
			changed++
			ttl = ttls[(changed+1)%2]
		}
		if err := c.reload(site(ttl)); err != nil {
			traffic.finish()
			t.Fatalf("reload %d: %v", i, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	failures := traffic.finish()
	if len(failures) > 0 {
		t.Fatalf("%d of %d requests failed during 50 reloads: %v", len(failures), traffic.sent.Load(), failures[:min(5, len(failures))])
	}
	t.Logf("%d requests during 50 reloads, %d retried after a connection reset", traffic.sent.Load(), traffic.resets.Load())
	if traffic.sent.Load() < 50 {
		t.Fatalf("only %d requests during the reloads: the traffic did not overlap them", traffic.sent.Load())
	}
	resp, _ := postAfterReload(t, url, []byte(kept), "Idempotency-Key", kept)
	if resp.StatusCode != 200 || resp.Header.Get(replayedHeader) != "true" {
		t.Fatalf("a key completed before the reloads is not replayed after them: %d, %s=%q",
			resp.StatusCode, replayedHeader, resp.Header.Get(replayedHeader))
	}
	const slack = 8
	if after := settledGoroutines(up, goroutinesBefore+slack, 10*time.Second); after > goroutinesBefore+slack {
		t.Fatalf("goroutines grew from %d to %d over 50 reloads", goroutinesBefore, after)
	}
}

func TestReloadsUnderTrafficMemory(t *testing.T) {
	up := newUpstream(t, nil)
	reloadsUnderTraffic(t, "reload_memory", "store memory", up, nil)
}

func TestReloadsUnderTrafficRedis(t *testing.T) {
	srv := startRedis(t)
	rc := srv.client(t)
	up := newUpstream(t, nil)
	var idsBefore []string
	reloadsUnderTraffic(t, "reload_redis", fmt.Sprintf(`store redis redis://%s {
			pool_size 8
		}`, srv.addr()), up, func() { idsBefore = redisStoreClientIDs(t, rc) })
	if len(idsBefore) == 0 {
		t.Fatal("no store connection in CLIENT LIST before the reloads: the name filter finds nothing")
	}
	wantFewNewRedisClients(t, rc, idsBefore)
}

// validateConfig adapts sites and runs caddy.Validate on them, which
// provisions every module and cleans it up again.
func validateConfig(t *testing.T, sites string) {
	t.Helper()
	tc := &testCaddy{t: t, adminPort: freePort(t)}
	var cfg caddy.Config
	if err := json.Unmarshal(tc.adapt(sites), &cfg); err != nil {
		t.Fatal(err)
	}
	if err := caddy.Validate(&cfg); err != nil {
		t.Fatalf("validate: %v", err)
	}
}

func TestReloadValidateLeavesNoGoroutinesMemory(t *testing.T) {
	site := reloadSite(freePort(t), "validate_memory", "store memory", "1h", "127.0.0.1:9")
	validateConfig(t, site) // first use: package-level state settles
	before := settledGoroutines(nil, 0, 500*time.Millisecond)
	for range 5 {
		validateConfig(t, site)
	}
	if after := settledGoroutines(nil, before+2, 5*time.Second); after > before+2 {
		t.Fatalf("goroutines grew from %d to %d after 5 validations", before, after)
	}
}

func TestReloadValidateLeavesNothingBehindRedis(t *testing.T) {
	srv := startRedis(t)
	rc := srv.client(t)
	site := reloadSite(freePort(t), "validate_redis", fmt.Sprintf("store redis redis://%s", srv.addr()), "1h", "127.0.0.1:9")
	before := settledGoroutines(nil, 0, 500*time.Millisecond)
	for range 5 {
		validateConfig(t, site)
	}
	if after := settledGoroutines(nil, before+2, 5*time.Second); after > before+2 {
		t.Fatalf("goroutines grew from %d to %d after 5 validations", before, after)
	}
	// the server notices closed connections asynchronously: poll
	deadline := time.Now().Add(5 * time.Second)
	for {
		ids := redisStoreClientIDs(t, rc)
		if len(ids) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("validation left %d store connections open: %v", len(ids), ids)
		}
		time.Sleep(50 * time.Millisecond)
	}
	redisPool.Range(func(key, _ any) bool {
		if s, ok := key.(string); ok && strings.Contains(s, srv.addr()) {
			t.Errorf("validation left a client in the pool: %s", s)
		}
		return true
	})
}
