package redise2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/redis/go-redis/v9"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// wantFewNewRedisClients fails when the store opened more than a couple of
// connections since idsBefore: the pool may still grow by a connection or
// two under the same traffic, while a client per reload would open one or
// more per reload.
func wantFewNewRedisClients(t *testing.T, rc *redis.Client, idsBefore []string) {
	t.Helper()
	idsAfter := redisStoreClientIDs(t, rc)
	var opened []string
	for _, id := range idsAfter {
		if !slices.Contains(idsBefore, id) {
			opened = append(opened, id)
		}
	}
	if len(opened) > 2 || len(idsAfter) > len(idsBefore)+2 {
		t.Fatalf("reloads opened %d Redis connections (%d before, %d after)", len(opened), len(idsBefore), len(idsAfter))
	}
}

// storeClientName is the name the redis store's connections carry in
// CLIENT LIST.
const storeClientName = "caddy-webhook-idempotency"

// redisStoreClientIDs returns the ids of the store's connections.
func redisStoreClientIDs(t *testing.T, rc *redis.Client) []string {
	t.Helper()
	list, err := rc.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatalf("CLIENT LIST: %v", err)
	}
	var ids []string
	for _, line := range strings.Split(list, "\n") {
		if !strings.Contains(line, " name="+storeClientName+" ") {
			continue
		}
		id, _, _ := strings.Cut(strings.TrimPrefix(line, "id="), " ")
		ids = append(ids, id)
	}
	return ids
}

// reloadSite is a site on port whose handler for source has ttl and the
// store lines store, in front of upstream.
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
func reloadsUnderTraffic(t *testing.T, source, store string, up *testkit.Upstream, beforeReloads func()) {
	t.Helper()
	port := testkit.FreePort(t)
	site := func(ttl string) string { return reloadSite(port, source, store, ttl, up.Addr()) }
	c := testkit.StartCaddy(t, "", site("1h"))
	url := testkit.SiteURL(port) + "/hook"

	// warm up connection pools with the same traffic as during the reloads
	warm := startTraffic(t, url, 4, true)
	warm.waitSent(t, 200)
	if failures := warm.finish(); len(failures) > 0 {
		t.Fatalf("warm-up failures: %v", failures)
	}
	kept := "evt_kept_" + source
	if resp, _ := testkit.Post(t, url, []byte(kept), "Idempotency-Key", kept); resp.StatusCode != 200 {
		t.Fatalf("recording %s: %d", kept, resp.StatusCode)
	}
	if resp, _ := testkit.Post(t, url, []byte(kept), "Idempotency-Key", kept); resp.Header.Get(testkit.ReplayedHeader) != "true" {
		t.Fatalf("%s not replayed before the reloads", kept)
	}
	if beforeReloads != nil {
		beforeReloads()
	}
	goroutinesBefore := testkit.SettledGoroutines(up, 0, time.Second)

	traffic := startTraffic(t, url, 4, true)
	ttls := []string{"2h", "1h"}
	changed := 0
	// every configuration gets traffic: four requests (one per worker)
	// come back after it is loaded and before the next reload
	loaded := traffic.sent.Load()
	for i := range 50 {
		ttl := ttls[(changed+1)%2] // unchanged: the current config again
		if i%2 == 0 {
			changed++
			ttl = ttls[(changed+1)%2]
		}
		traffic.waitSent(t, loaded+4)
		if err := c.Reload(site(ttl)); err != nil {
			t.Fatalf("reload %d: %v", i, err)
		}
		loaded = traffic.sent.Load()
	}
	traffic.waitSent(t, loaded+4)
	failures := traffic.finish()
	if len(failures) > 0 {
		t.Fatalf("%d of %d requests failed during 50 reloads: %v", len(failures), traffic.sent.Load(), failures[:min(5, len(failures))])
	}
	t.Logf("%d requests during 50 reloads, %d retried after a connection reset", traffic.sent.Load(), traffic.resets.Load())
	if traffic.sent.Load() < 50 {
		t.Fatalf("only %d requests during the reloads: the traffic did not overlap them", traffic.sent.Load())
	}
	resp, _ := testkit.PostAfterReload(t, url, []byte(kept), "Idempotency-Key", kept)
	if resp.StatusCode != 200 || resp.Header.Get(testkit.ReplayedHeader) != "true" {
		t.Fatalf("a key completed before the reloads is not replayed after them: %d, %s=%q",
			resp.StatusCode, testkit.ReplayedHeader, resp.Header.Get(testkit.ReplayedHeader))
	}
	const slack = 8
	if after := testkit.SettledGoroutines(up, goroutinesBefore+slack, 10*time.Second); after > goroutinesBefore+slack {
		t.Fatalf("goroutines grew from %d to %d over 50 reloads", goroutinesBefore, after)
	}
}

func TestReloadsUnderTrafficMemory(t *testing.T) {
	up := testkit.NewUpstream(t, nil)
	reloadsUnderTraffic(t, "reload_memory", "store memory", up, nil)
}

// The file store, the default: no store line.
func TestReloadsUnderTrafficFile(t *testing.T) {
	up := testkit.NewUpstream(t, nil)
	reloadsUnderTraffic(t, "reload_file", "", up, nil)
}

// On Redis, besides: the reloads open no new Redis connection (the store's
// client is shared across configurations).
func TestReloadsUnderTrafficRedis(t *testing.T) {
	srv := testkit.StartRedis(t)
	rc := srv.Client(t)
	up := testkit.NewUpstream(t, nil)
	var idsBefore []string
	reloadsUnderTraffic(t, "reload_redis", fmt.Sprintf(`store redis redis://%s {
			pool_size 8
		}`, srv.Addr()), up, func() { idsBefore = redisStoreClientIDs(t, rc) })
	if len(idsBefore) == 0 {
		t.Fatal("no store connection in CLIENT LIST before the reloads: the name filter finds nothing")
	}
	wantFewNewRedisClients(t, rc, idsBefore)
}

// `caddy validate` with Redis down neither hangs nor leaves anything
// running behind; with Redis up, it reaches Redis (provisioning pings it)
// and leaves no connection behind, so no client was left in use.
func TestRedisValidateLeavesNothingBehind(t *testing.T) {
	validate := func(t *testing.T, addr string) {
		t.Helper()
		sites := fmt.Sprintf(`:%d {
	webhook_idempotency {
		source validate
		fail closed
		store redis redis://%s
	}
	respond 200
}`, testkit.FreePort(t), addr)
		before := testkit.SettledGoroutines(nil, 0, time.Second)
		start := time.Now()
		validateConfig(t, sites)
		// bounded, not a hang on the store (a loaded machine stretches it)
		if d := time.Since(start); d > 20*time.Second {
			t.Fatalf("validate took %v", d)
		}
		if after := testkit.SettledGoroutines(nil, before+2, 30*time.Second); after > before+2 {
			t.Fatalf("goroutines grew from %d to %d after validate", before, after)
		}
	}
	t.Run("redis down", func(t *testing.T) {
		validate(t, "127.0.0.1:"+strconv.Itoa(testkit.FreePort(t)))
	})
	t.Run("redis up", func(t *testing.T) {
		srv := testkit.StartRedis(t)
		rc := srv.Client(t)
		connections := func() int64 {
			n, err := strconv.ParseInt(infoField(t, rc, "stats", "total_connections_received"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		before := connections() // counts rc's own connection, which it keeps
		validate(t, srv.Addr())
		if after := connections(); after <= before {
			t.Fatalf("validate did not reach Redis (%d connections received before, %d after): the test cannot see a client left behind", before, after)
		}
		testkit.WaitFor(t, 30*time.Second, "the connections validate opened are closed", func() (bool, string) {
			ids := redisStoreClientIDs(t, rc)
			return len(ids) == 0, fmt.Sprintf("store connections %v", ids)
		})
	})
}

// validateConfig adapts sites and runs caddy.Validate on them, as `caddy
// validate` does: it provisions every module and cleans it up again.
func validateConfig(t *testing.T, sites string) {
	t.Helper()
	cfg, err := testkit.AdaptConfig(t, "", sites)
	if err != nil {
		t.Fatalf("adapting: %v", err)
	}
	if err := caddy.Validate(cfg); err != nil {
		t.Fatalf("validate: %v\n%s", err, sites)
	}
}

func TestReloadValidateLeavesNoGoroutinesMemory(t *testing.T) {
	site := reloadSite(testkit.FreePort(t), "validate_memory", "store memory", "1h", "127.0.0.1:9")
	validateConfig(t, site) // first use: package-level state settles
	before := testkit.SettledGoroutines(nil, 0, 500*time.Millisecond)
	for range 5 {
		validateConfig(t, site)
	}
	if after := testkit.SettledGoroutines(nil, before+2, 30*time.Second); after > before+2 {
		t.Fatalf("goroutines grew from %d to %d after 5 validations", before, after)
	}
}

// Whole configurations with a redis store, validated five times, leave no
// goroutine and no connection behind. (store/redisstore's
// TestRedisStoreCleanupLeavesNothingBehind checks that a cleaned-up store
// leaves no client in the shared pool.)
func TestReloadValidateLeavesNothingBehindRedis(t *testing.T) {
	srv := testkit.StartRedis(t)
	rc := srv.Client(t)
	site := reloadSite(testkit.FreePort(t), "validate_redis", fmt.Sprintf("store redis redis://%s", srv.Addr()), "1h", "127.0.0.1:9")
	before := testkit.SettledGoroutines(nil, 0, 500*time.Millisecond)
	for range 5 {
		validateConfig(t, site)
	}
	if after := testkit.SettledGoroutines(nil, before+2, 30*time.Second); after > before+2 {
		t.Fatalf("goroutines grew from %d to %d after 5 validations", before, after)
	}
	// the server notices closed connections asynchronously
	testkit.WaitFor(t, 30*time.Second, "the connections validation opened are closed", func() (bool, string) {
		ids := redisStoreClientIDs(t, rc)
		return len(ids) == 0, fmt.Sprintf("%d store connections open: %v", len(ids), ids)
	})
}

// infoField is a field of a section of Redis's INFO.
func infoField(t *testing.T, rc *redis.Client, section, field string) string {
	t.Helper()
	info, err := rc.Info(context.Background(), section).Result()
	if err != nil {
		t.Fatalf("INFO %s: %v", section, err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	t.Fatalf("INFO %s has no %s", section, field)
	return ""
}

// A reload that changes the store's connection settings while a request is
// in flight: Caddy cleans up the old configuration before that request
// ends, and its claim must still be completed through the old client; then
// the old client is closed (its connections leave Redis).
func TestRedisReloadWithChangedStoreFinishesInFlight(t *testing.T) {
	srv := testkit.StartRedis(t)
	rc := srv.Client(t)
	up := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		if r.Header.Get("X-Slow") != "" {
			time.Sleep(time.Second)
		}
		fmt.Fprintf(w, `{"call":%d}`, call)
	})
	port := testkit.FreePort(t)
	site := func(pool int) string {
		return fmt.Sprintf(`:%d {
	webhook_idempotency {
		source drain
		store redis redis://%s {
			pool_size %d
		}
	}
	reverse_proxy %s
}`, port, srv.Addr(), pool, up.Addr())
	}
	c := testkit.StartCaddy(t, "", site(5))
	url := testkit.SiteURL(port) + "/hook"

	done := testkit.SendAsync(http.MethodPost, url, []byte("slow"), "Idempotency-Key", "evt_slow", "X-Slow", "1")
	up.WaitCalls(t, 1, 10*time.Second)
	// every store connection now is the old configuration's client's
	oldIDs := redisStoreClientIDs(t, rc)
	if len(oldIDs) == 0 {
		t.Fatal("no store connection in Redis while a request is in flight")
	}
	if err := c.Reload(site(6)); err != nil {
		t.Fatalf("reload: %v", err)
	}
	if first := testkit.Receive(t, done); first.Status != http.StatusOK {
		t.Fatalf("in-flight request across the reload: %d %s", first.Status, first.Body)
	}
	resp, body := testkit.PostAfterReload(t, url, []byte("slow"), "Idempotency-Key", "evt_slow")
	if resp.Header.Get(testkit.ReplayedHeader) != "true" || string(body) != `{"call":1}` {
		t.Fatalf("duplicate after the reload: %d %q, want the replayed first answer", resp.StatusCode, body)
	}
	// the old client is closed: only the new settings' connections remain
	testkit.WaitFor(t, 10*time.Second, "the old configuration's client closed", func() (bool, string) {
		var left []string
		for _, id := range redisStoreClientIDs(t, rc) {
			if slices.Contains(oldIDs, id) {
				left = append(left, id)
			}
		}
		return len(left) == 0, fmt.Sprintf("connections %v of the old client still open", left)
	})
}
