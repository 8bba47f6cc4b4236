package webhookidempotency

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/redis/go-redis/v9"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/record"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
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

// reloadTraffic sends requests with fresh keys from a few workers until
// stopped, and records every answer that is not the upstream's 200.
type reloadTraffic struct {
	stop    chan struct{}
	done    chan struct{}
	sent    atomic.Int64
	resets  atomic.Int64
	mu      sync.Mutex
	failure []string
}

// startReloadTraffic starts workers that each post fresh keys to url, one
// after the other; with duplicate, every key is sent twice.
func startReloadTraffic(url string, workers int, duplicate bool) *reloadTraffic {
	tr := &reloadTraffic{stop: make(chan struct{}), done: make(chan struct{})}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-tr.stop:
					return
				default:
				}
				key := fmt.Sprintf("evt_traffic_%d_%d_%d", w, i, time.Now().UnixNano())
				n := 1
				if duplicate {
					n = 2
				}
				for range n {
					tr.send(url, key)
				}
			}
		}()
	}
	go func() { wg.Wait(); close(tr.done) }()
	return tr
}

// send posts key once, as a provider would: a request that gets no HTTP
// answer at all (a connection reset while Caddy hands its listener over)
// is sent again, until it gets one. The first attempt may have reached
// Caddy and still be in flight, so a retry may get a 409; the provider
// then retries again later. Only an answer that is not 200 in the end is
// a failure.
func (tr *reloadTraffic) send(url, key string) {
	post := func() (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(key))
		req.Header.Set("Idempotency-Key", key)
		return testkit.Client.Do(req)
	}
	resp, err := post()
	tr.sent.Add(1)
	if err != nil {
		tr.resets.Add(1)
		// a provider retries until it gets an answer: another reset (the
		// next reload) or a 409 (the first attempt still in flight) is
		// retried after a pause
		for range 50 {
			resp, err = post()
			if err == nil && resp.StatusCode != http.StatusConflict {
				break
			}
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if err != nil {
		tr.fail(err.Error())
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		tr.fail(fmt.Sprintf("%s: status %d", key, resp.StatusCode))
	}
}

func (tr *reloadTraffic) fail(s string) {
	tr.mu.Lock()
	tr.failure = append(tr.failure, s)
	tr.mu.Unlock()
}

// finish stops the traffic and returns the failures.
func (tr *reloadTraffic) finish() []string {
	close(tr.stop)
	<-tr.done
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.failure
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
	warm := startReloadTraffic(url, 4, true)
	time.Sleep(500 * time.Millisecond)
	if failures := warm.finish(); len(failures) > 0 {
		t.Fatalf("warm-up failures: %v", failures)
	}
	kept := "evt_kept_" + source
	if resp, _ := testkit.Post(t, url, []byte(kept), "Idempotency-Key", kept); resp.StatusCode != 200 {
		t.Fatalf("recording %s: %d", kept, resp.StatusCode)
	}
	if resp, _ := testkit.Post(t, url, []byte(kept), "Idempotency-Key", kept); resp.Header.Get(record.ReplayedHeader) != "true" {
		t.Fatalf("%s not replayed before the reloads", kept)
	}
	if beforeReloads != nil {
		beforeReloads()
	}
	goroutinesBefore := testkit.SettledGoroutines(up, 0, time.Second)

	traffic := startReloadTraffic(url, 4, true)
	ttls := []string{"2h", "1h"}
	changed := 0
	for i := range 50 {
		ttl := ttls[(changed+1)%2] // unchanged: the current config again
		if i%2 == 0 {
			changed++
			ttl = ttls[(changed+1)%2]
		}
		if err := c.Reload(site(ttl)); err != nil {
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
	resp, _ := testkit.PostAfterReload(t, url, []byte(kept), "Idempotency-Key", kept)
	if resp.StatusCode != 200 || resp.Header.Get(record.ReplayedHeader) != "true" {
		t.Fatalf("a key completed before the reloads is not replayed after them: %d, %s=%q",
			resp.StatusCode, record.ReplayedHeader, resp.Header.Get(record.ReplayedHeader))
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

func TestReloadsUnderTrafficRedis(t *testing.T) {
	srv := testkit.StartRedis(t)
	rc := srv.Client(t)
	up := testkit.NewUpstream(t, nil)
	var idsBefore []string
	reloadsUnderTraffic(t, "reload_redis", fmt.Sprintf(`store redis redis://%s {
			pool_size 8
		}`, srv.Addr()), up, func() { idsBefore = reloadRedisClientIDs(t, rc) })
	if len(idsBefore) == 0 {
		t.Fatal("no store connection in CLIENT LIST before the reloads: the name filter finds nothing")
	}
	// the pool may still grow by a connection or two under the same
	// traffic, while a client per reload would open one or more per reload
	idsAfter := reloadRedisClientIDs(t, rc)
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

// reloadRedisClientIDs returns the ids of the redis store's connections:
// those named caddy-webhook-idempotency in CLIENT LIST.
func reloadRedisClientIDs(t *testing.T, rc *redis.Client) []string {
	t.Helper()
	list, err := rc.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatalf("CLIENT LIST: %v", err)
	}
	var ids []string
	for _, line := range strings.Split(list, "\n") {
		if !strings.Contains(line, " name=caddy-webhook-idempotency ") {
			continue
		}
		id, _, _ := strings.Cut(strings.TrimPrefix(line, "id="), " ")
		ids = append(ids, id)
	}
	return ids
}

// validateConfig adapts sites and runs caddy.Validate on them, which
// provisions every module and cleans it up again.
func validateConfig(t *testing.T, sites string) {
	t.Helper()
	cfg, err := testkit.AdaptConfig(t, "", sites)
	if err != nil {
		t.Fatalf("adapting: %v", err)
	}
	if err := caddy.Validate(cfg); err != nil {
		t.Fatalf("validate: %v", err)
	}
}

func TestReloadValidateLeavesNoGoroutinesMemory(t *testing.T) {
	site := reloadSite(testkit.FreePort(t), "validate_memory", "store memory", "1h", "127.0.0.1:9")
	validateConfig(t, site) // first use: package-level state settles
	before := testkit.SettledGoroutines(nil, 0, 500*time.Millisecond)
	for range 5 {
		validateConfig(t, site)
	}
	if after := testkit.SettledGoroutines(nil, before+2, 5*time.Second); after > before+2 {
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
	if after := testkit.SettledGoroutines(nil, before+2, 5*time.Second); after > before+2 {
		t.Fatalf("goroutines grew from %d to %d after 5 validations", before, after)
	}
	// the server notices closed connections asynchronously: poll
	deadline := time.Now().Add(5 * time.Second)
	for {
		ids := reloadRedisClientIDs(t, rc)
		if len(ids) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("validation left %d store connections open: %v", len(ids), ids)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
