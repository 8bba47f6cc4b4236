package redise2e

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// Redis killed under traffic with `fail open`: every request still gets
// the upstream's answer; a restarted Redis brings deduplication back.
func TestRedisChaosKillFailOpen(t *testing.T) {
	srv := testkit.StartRedis(t)
	up := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	testkit.StartCaddy(t, "", redisChaosSite(port, srv, "open", up.Addr()))
	url := testkit.SiteURL(port) + "/hook"
	waitForDedup(t, url, 30*time.Second)

	traffic := startTraffic(t, url, 2, false)
	time.Sleep(200 * time.Millisecond)
	srv.Kill()
	time.Sleep(500 * time.Millisecond)

	before := up.Calls.Load()
	for i := range 30 {
		key := fmt.Sprintf("evt_down_%d", i)
		resp, _ := testkit.Post(t, url, []byte(key), "Idempotency-Key", key)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d with Redis down: %d, want the upstream's 200", i, resp.StatusCode)
		}
	}
	if got := up.Calls.Load() - before; got < 30 {
		t.Fatalf("upstream got %d of 30 requests with Redis down", got)
	}

	srv.Restart()
	waitForDedup(t, url, 30*time.Second)
	time.Sleep(200 * time.Millisecond)
	if failures := traffic.finish(); len(failures) > 0 {
		t.Fatalf("%d of %d requests under traffic failed: %v", len(failures), traffic.sent.Load(), failures[:min(5, len(failures))])
	}
}

// A hung Redis (it accepts connections and never answers): once the
// breaker is open, requests stop paying the 500ms timeout.
func TestRedisChaosHungServerBreaker(t *testing.T) {
	srv := testkit.StartRedis(t)
	up := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	testkit.StartCaddy(t, "", redisChaosSite(port, srv, "open", up.Addr()))
	url := testkit.SiteURL(port) + "/hook"
	waitForDedup(t, url, 30*time.Second)

	srv.Pause()
	const n, timeout = 30, 500 * time.Millisecond
	// without a breaker every request waits out the timeout; with it,
	// about breakerThreshold of them. Counted, not timed as a whole: a
	// loaded machine slows every request, but none by the timeout.
	var waited []int
	for i := range n {
		key := fmt.Sprintf("evt_hung_%d", i)
		start := time.Now()
		resp, _ := testkit.Post(t, url, []byte(key), "Idempotency-Key", key)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d with Redis hung: %d", i, resp.StatusCode)
		}
		if time.Since(start) >= timeout {
			waited = append(waited, i)
		}
	}
	if len(waited) > n/3 {
		t.Fatalf("%d of %d sequential requests with Redis hung waited the %v timeout (%v): the breaker does not spare it", len(waited), n, timeout, waited)
	}
	srv.Resume()
	waitForDedup(t, url, 30*time.Second)
}

// With `fail closed`, a Redis outage answers 503 with Retry-After and the
// upstream is not called.
func TestRedisChaosKillFailClosed(t *testing.T) {
	srv := testkit.StartRedis(t)
	up := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	testkit.StartCaddy(t, "", redisChaosSite(port, srv, "closed", up.Addr()))
	url := testkit.SiteURL(port) + "/hook"
	waitForDedup(t, url, 30*time.Second)

	srv.Kill()
	before := up.Calls.Load()
	for i := range 10 {
		key := fmt.Sprintf("evt_closed_%d", i)
		resp, _ := testkit.Post(t, url, []byte(key), "Idempotency-Key", key)
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("request %d with Redis down and fail closed: %d, Retry-After %q", i, resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	}
	if got := up.Calls.Load() - before; got != 0 {
		t.Fatalf("upstream called %d times with fail closed and Redis down", got)
	}
	srv.Restart()
	waitForDedup(t, url, 30*time.Second)
}

// Redis closes connections that stay idle (its `timeout`, a managed
// Redis's or a proxy's idle limit): the pooled connections it closed are
// not handed to a request, so with `fail closed` no delivery gets a 503
// and the upstream gets each delivery once.
func TestRedisIdleConnectionsClosedByTheServer(t *testing.T) {
	srv := testkit.StartRedis(t, "--timeout", "1")
	up := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	// a timeout the calls come within on a loaded machine: a closed
	// connection handed to a request fails it at once, whatever the timeout
	testkit.StartCaddy(t, "", redisTimeoutSite(port, srv, "closed", up.Addr(), "5s"))
	url := testkit.SiteURL(port) + "/hook"
	waitForDedup(t, url, 30*time.Second)
	for round := range 3 {
		// fill the pool with connections, then let Redis close them all
		traffic := startTraffic(t, url, 16, false)
		time.Sleep(300 * time.Millisecond)
		if failures := traffic.finish(); len(failures) > 0 {
			t.Fatalf("round %d, filling the pool: %v", round, failures[:min(5, len(failures))])
		}
		time.Sleep(2500 * time.Millisecond)
		for i := range 20 {
			key := fmt.Sprintf("evt_idle_%d_%d", round, i)
			resp, body := testkit.Post(t, url, []byte(key), "Idempotency-Key", key)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("round %d, request %d after Redis closed the idle connections: %d %s", round, i, resp.StatusCode, body)
			}
		}
	}
}
