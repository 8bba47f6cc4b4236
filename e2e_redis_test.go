//go:build porting

package webhookidempotency

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/redis/go-redis/v9"
)

// These tests run the handler against real Redis servers: two handler
// instances provisioned side by side stand for two Caddy instances behind a
// load balancer (each has its own Redis client), and a real Caddy in this
// process covers Cluster, Sentinel, outages and reloads. Tests that are not
// about outages give Redis a generous timeout, so that a loaded machine does
// not turn into store failures (fail open) and spurious duplicates.

// newRedisTestHandler provisions a Handler from its JSON config with a
// context of its own, as a separate Caddy instance would, and cleans it up
// when the test ends.
func newRedisTestHandler(t *testing.T, cfg string) *Handler {
	t.Helper()
	h := new(Handler)
	if err := json.Unmarshal([]byte(cfg), h); err != nil {
		t.Fatalf("decoding %s: %v", cfg, err)
	}
	ctx, cancel := newTestContext(t)
	if err := h.Provision(ctx); err != nil {
		cancel()
		t.Fatalf("provisioning handler: %v", err)
	}
	if err := h.Validate(); err != nil {
		cancel()
		t.Fatalf("validating handler: %v", err)
	}
	t.Cleanup(func() {
		_ = h.Cleanup()
		cancel() // cleans up the store module
	})
	return h
}

// keyedUpstream is a next handler that counts calls per idempotency key.
type keyedUpstream struct {
	delay time.Duration
	total atomic.Int64
	mu    sync.Mutex
	calls map[string]int
}

func newKeyedUpstream(delay time.Duration) *keyedUpstream {
	return &keyedUpstream{delay: delay, calls: make(map[string]int)}
}

func (u *keyedUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) error {
	_, _ = io.Copy(io.Discard, r.Body)
	key := r.Header.Get("Idempotency-Key")
	u.mu.Lock()
	u.calls[key]++
	n := u.calls[key]
	u.mu.Unlock()
	call := u.total.Add(1)
	time.Sleep(u.delay)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Upstream-Call", strconv.FormatInt(call, 10))
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"key":%q,"call":%d,"per_key":%d}`, key, call, n)
	return nil
}

func (u *keyedUpstream) callsFor(key string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.calls[key]
}

// redisDeliver sends one delivery with an Idempotency-Key to h.
func redisDeliver(t testing.TB, h *Handler, key string, next caddyhttp.Handler) *http.Response {
	r := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader(`{"id":"`+key+`"}`))
	r.Header.Set("Idempotency-Key", key)
	w := httptest.NewRecorder()
	r = caddyhttp.PrepareRequest(r, caddy.NewReplacer(), w, nil)
	if err := h.ServeHTTP(w, r, next); err != nil {
		t.Errorf("ServeHTTP(%s): %v", key, err)
	}
	return w.Result()
}

func readBody(resp *http.Response) string {
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// twoRedisInstances provisions two handlers on one Redis, each with its
// own client (a different pool size makes a different pool key).
func twoRedisInstances(t *testing.T, addr, extra string) (*Handler, *Handler) {
	a := newRedisTestHandler(t, `{"source":"shop",`+extra+`"store":{"module":"redis","addresses":["`+addr+`"],"pool_size":20,"timeout":5000000000}}`)
	b := newRedisTestHandler(t, `{"source":"shop",`+extra+`"store":{"module":"redis","addresses":["`+addr+`"],"pool_size":21,"timeout":5000000000}}`)
	if a.store.store.(*RedisStore).client == b.store.store.(*RedisStore).client {
		t.Fatal("the two instances share a client; want one each")
	}
	return a, b
}

func TestRedisTwoInstancesShareDeduplication(t *testing.T) {
	srv := startRedis(t)
	a, b := twoRedisInstances(t, srv.addr(), "")
	up := newKeyedUpstream(0)

	for i, pair := range [][2]*Handler{{a, b}, {b, a}} {
		key := "evt_" + strconv.Itoa(i)
		first := redisDeliver(t, pair[0], key, up)
		firstBody := readBody(first)
		second := redisDeliver(t, pair[1], key, up)
		secondBody := readBody(second)
		if first.StatusCode != http.StatusCreated || first.Header.Get(replayedHeader) != "" {
			t.Fatalf("%s: first delivery: %d %v", key, first.StatusCode, first.Header)
		}
		if second.StatusCode != http.StatusCreated || second.Header.Get(replayedHeader) != "true" {
			t.Fatalf("%s: duplicate on the other instance: %d %v", key, second.StatusCode, second.Header)
		}
		if secondBody != firstBody || second.Header.Get("X-Upstream-Call") != first.Header.Get("X-Upstream-Call") {
			t.Fatalf("%s: replay %q differs from %q", key, secondBody, firstBody)
		}
		if n := up.callsFor(key); n != 1 {
			t.Fatalf("%s: upstream called %d times, want 1", key, n)
		}
	}
}

// 100 concurrent duplicates split across two instances reach the upstream
// exactly once, for many keys.
func TestRedisConcurrentDuplicatesAcrossInstances(t *testing.T) {
	srv := startRedis(t)
	a, b := twoRedisInstances(t, srv.addr(), "")
	up := newKeyedUpstream(30 * time.Millisecond)
	const keys, dups = 20, 100

	for k := range keys {
		key := fmt.Sprintf("evt_concurrent_%d", k)
		var (
			wg       sync.WaitGroup
			start    = make(chan struct{})
			mu       sync.Mutex
			statuses = map[string]int{}
		)
		for i := range dups {
			h := a
			if i%2 == 1 {
				h = b
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				resp := redisDeliver(t, h, key, up)
				kind := strconv.Itoa(resp.StatusCode)
				if resp.Header.Get(replayedHeader) == "true" {
					kind += " replayed"
				}
				mu.Lock()
				statuses[kind]++
				mu.Unlock()
			}()
		}
		close(start)
		wg.Wait()
		if n := up.callsFor(key); n != 1 {
			t.Fatalf("%s: upstream called %d times by %d concurrent duplicates, want 1 (%v)", key, n, dups, statuses)
		}
		if statuses["201"] != 1 || statuses["201"]+statuses["201 replayed"]+statuses["409"] != dups {
			t.Fatalf("%s: statuses %v, want one 201 and the rest replays or 409", key, statuses)
		}
		for _, h := range []*Handler{a, b} {
			if resp := redisDeliver(t, h, key, up); resp.Header.Get(replayedHeader) != "true" {
				t.Fatalf("%s: later duplicate not replayed: %d", key, resp.StatusCode)
			}
		}
	}
	if got := up.total.Load(); got != keys {
		t.Fatalf("upstream calls %d, want %d", got, keys)
	}
}

// Lease renewal keeps a slow request's claim alive past the initial lease:
// a duplicate on the other instance gets 409, never a second execution.
func TestRedisLeaseRenewalKeepsSlowRequest(t *testing.T) {
	srv := startRedis(t)
	a, b := twoRedisInstances(t, srv.addr(), `"lease":1500000000,`)
	up := newKeyedUpstream(3500 * time.Millisecond)
	rc := srv.client(t)

	done := make(chan *http.Response)
	start := time.Now()
	go func() { done <- redisDeliver(t, a, "evt_slow", up) }()
	// past the 1.5s lease, twice over
	for _, at := range []time.Duration{2 * time.Second, 3 * time.Second} {
		time.Sleep(time.Until(start.Add(at)))
		resp := redisDeliver(t, b, "evt_slow", up)
		if resp.StatusCode != http.StatusConflict || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("duplicate during a slow request past its lease: %d %v", resp.StatusCode, resp.Header)
		}
		if pttl := rc.PTTL(context.Background(), "idem:shop:evt_slow").Val(); pttl <= 0 || pttl > 1500*time.Millisecond {
			t.Fatalf("in-flight PTTL %v, want within the 1.5s lease", pttl)
		}
	}
	first := <-done
	if first.StatusCode != http.StatusCreated {
		t.Fatalf("slow request: %d", first.StatusCode)
	}
	if resp := redisDeliver(t, b, "evt_slow", up); resp.Header.Get(replayedHeader) != "true" {
		t.Fatalf("duplicate after completion: %d, want a replay", resp.StatusCode)
	}
	if n := up.callsFor("evt_slow"); n != 1 {
		t.Fatalf("upstream called %d times, want 1", n)
	}
}

// Keys and TTLs as docs/stores.md says, with the store set by the global option.
func TestRedisKeysAndTTLsWithGlobalOption(t *testing.T) {
	srv := startRedis(t)
	up := newUpstream(t, nil)
	shop, wa := freePort(t), freePort(t)
	startCaddy(t, fmt.Sprintf(`webhook_idempotency {
		store redis redis://%s {
			key_prefix wh
			timeout 5s
		}
	}`, srv.addr()), fmt.Sprintf(`:%d {
	webhook_idempotency source shop ttl 2h
	reverse_proxy %s
}
:%d {
	webhook_idempotency {
		source wa
		key body
	}
	reverse_proxy %s
}`, shop, up.addr(), wa, up.addr()))

	long := strings.Repeat("k", 201)
	body := []byte(`{"entry":[1]}`)
	post(t, siteURL(shop)+"/hook", []byte(`{}`), "Idempotency-Key", "evt_1")
	post(t, siteURL(shop)+"/hook", []byte(`{}`), "Idempotency-Key", long)
	post(t, siteURL(wa)+"/hook", body)
	resp, _ := post(t, siteURL(wa)+"/hook", body)
	if resp.Header.Get(replayedHeader) != "true" {
		t.Fatal("duplicate body on the wa site not replayed")
	}

	ctx := context.Background()
	rc := srv.client(t)
	var keys []string
	iter := rc.Scan(ctx, 0, "*", 100).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	bodySum := sha256.Sum256(body)
	longSum := sha256.Sum256([]byte(long))
	want := []string{
		"wh:shop:evt_1",
		"wh:shop:key-sha256:" + hex.EncodeToString(longSum[:]),
		"wh:wa:sha256:" + hex.EncodeToString(bodySum[:]),
	}
	slices.Sort(keys)
	slices.Sort(want)
	if !slices.Equal(keys, want) {
		t.Fatalf("keys in Redis:\n%q\nwant\n%q", keys, want)
	}
	for key, ttl := range map[string]time.Duration{want[0]: 2 * time.Hour, want[2]: 24 * time.Hour} {
		if pttl := rc.PTTL(ctx, key).Val(); pttl <= ttl-time.Minute || pttl > ttl {
			t.Errorf("PTTL of %s: %v, want about %v", key, pttl, ttl)
		}
		v, _ := rc.Get(ctx, key).Bytes()
		if rec, err := decodeRecord(v); err != nil || rec.status != http.StatusOK {
			t.Errorf("value of %s is not a 200 record: %v", key, err)
		}
	}
}

// startClusterSite starts a Redis Cluster and a Caddy in front of a fresh
// upstream whose handler for source stores on the cluster (timeout 5s) and
// has the directives extra too; it returns the cluster, the upstream and
// the handler's URL.
func startClusterSite(t *testing.T, source string, extra ...string) (*redisCluster, *upstream, string) {
	t.Helper()
	cluster := startRedisCluster(t)
	up := newUpstream(t, nil)
	directive := "webhook_idempotency {\n\t\tsource " + source + "\n\t\t" + cluster.storeBlock("timeout 5s")
	for _, d := range extra {
		directive += "\n\t\t" + d
	}
	return cluster, up, startProxy(t, directive+"\n\t}", up) + "/hook"
}

func TestRedisClusterDeduplicates(t *testing.T) {
	cluster, up, url := startClusterSite(t, "cluster")

	const keys = 240
	var wg sync.WaitGroup
	errs := make(chan string, keys)
	work := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				key := fmt.Sprintf("evt_%d", i)
				first, firstBody := post(t, url, []byte(key), "Idempotency-Key", key)
				second, secondBody := post(t, url, []byte(key), "Idempotency-Key", key)
				if first.StatusCode != http.StatusOK || first.Header.Get(replayedHeader) != "" ||
					second.StatusCode != http.StatusOK || second.Header.Get(replayedHeader) != "true" ||
					string(firstBody) != string(secondBody) {
					errs <- fmt.Sprintf("%s: %d %q then %d %q", key, first.StatusCode, firstBody, second.StatusCode, secondBody)
				}
			}
		}()
	}
	for i := range keys {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if got := up.calls.Load(); got != keys {
		t.Fatalf("upstream called %d times for %d keys, want once each", got, keys)
	}

	// the keys are spread over every master
	ctx := context.Background()
	total := 0
	for _, n := range cluster.nodes {
		size := n.client(t).DBSize(ctx).Val()
		if size == 0 {
			t.Errorf("master %s holds no key", n.addr())
		}
		total += int(size)
	}
	if total != keys {
		t.Fatalf("%d keys in the cluster, want %d", total, keys)
	}
	if v := cluster.client(t).Get(ctx, "idem:cluster:evt_7").Val(); len(v) == 0 || v[0] != recordVersion {
		t.Fatal("idem:cluster:evt_7 does not hold a record")
	}
}

func TestRedisSentinelFindsMaster(t *testing.T) {
	sentinel := startSentinel(t)
	up := newUpstream(t, nil)
	port := freePort(t)
	startCaddy(t, "", fmt.Sprintf(`:%d {
	webhook_idempotency {
		source sentinel
		store redis {
			address %s
			master_name %s
			timeout 5s
		}
	}
	reverse_proxy %s
}`, port, sentinel.sentinel.addr(), sentinel.masterName, up.addr()))

	url := siteURL(port) + "/hook"
	first, firstBody := post(t, url, []byte(`{}`), "Idempotency-Key", "evt_s")
	second, secondBody := post(t, url, []byte(`{}`), "Idempotency-Key", "evt_s")
	if first.Header.Get(replayedHeader) != "" || second.Header.Get(replayedHeader) != "true" || string(firstBody) != string(secondBody) {
		t.Fatalf("through Sentinel: %d %q then %d %q", first.StatusCode, firstBody, second.StatusCode, secondBody)
	}
	if up.calls.Load() != 1 {
		t.Fatalf("upstream called %d times, want 1", up.calls.Load())
	}
	if n := sentinel.master.client(t).Exists(context.Background(), "idem:sentinel:evt_s").Val(); n != 1 {
		t.Fatal("the key is not on the master the Sentinel names")
	}
}

// redisChaosSite is a site whose handler uses srv with a 500ms timeout.
func redisChaosSite(port int, srv *redisServer, fail, upstream string) string {
	return fmt.Sprintf(`:%d {
	webhook_idempotency {
		source chaos
		fail %s
		store redis redis://%s {
			timeout 500ms
		}
	}
	reverse_proxy %s
}`, port, fail, srv.addr(), upstream)
}

// waitForDedup posts a fresh key twice until the second is a replay.
func waitForDedup(t *testing.T, url string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for i := 0; ; i++ {
		key := fmt.Sprintf("evt_resume_%d_%d", time.Now().UnixNano(), i)
		post(t, url, []byte(key), "Idempotency-Key", key)
		resp, _ := post(t, url, []byte(key), "Idempotency-Key", key)
		if resp.Header.Get(replayedHeader) == "true" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("deduplication did not resume within %v", within)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// redisTraffic sends sequential requests with fresh keys until stopped and
// counts the answers that are not the upstream's 200.
type redisTraffic struct {
	stop    chan struct{}
	done    chan struct{}
	sent    atomic.Int64
	resets  atomic.Int64
	mu      sync.Mutex
	failure []string
}

func startRedisTraffic(t *testing.T, url string, workers int, duplicate bool) *redisTraffic {
	tr := &redisTraffic{stop: make(chan struct{}), done: make(chan struct{})}
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
					req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(key))
					req.Header.Set("Idempotency-Key", key)
					resp, err := testClient.Do(req)
					tr.sent.Add(1)
					if err != nil {
						// no HTTP answer at all (a connection reset while
						// Caddy hands its listener over): a provider
						// retries, and so do we. The first attempt may
						// have reached Caddy and still be in flight, so
						// the retry may get a 409; the provider then
						// retries again later.
						tr.resets.Add(1)
						for attempt := 0; attempt < 50; attempt++ {
							req, _ = http.NewRequest(http.MethodPost, url, strings.NewReader(key))
							req.Header.Set("Idempotency-Key", key)
							resp, err = testClient.Do(req)
							if err != nil || resp.StatusCode != http.StatusConflict {
								break
							}
							_, _ = io.Copy(io.Discard, resp.Body)
							resp.Body.Close()
							time.Sleep(100 * time.Millisecond)
						}
					}
					if err != nil {
						tr.fail(err.Error())
						continue
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						tr.fail(fmt.Sprintf("%s: status %d", key, resp.StatusCode))
					}
				}
			}
		}()
	}
	go func() { wg.Wait(); close(tr.done) }()
	return tr
}

func (tr *redisTraffic) fail(s string) {
	tr.mu.Lock()
	tr.failure = append(tr.failure, s)
	tr.mu.Unlock()
}

// finish stops the traffic and returns the failures.
func (tr *redisTraffic) finish() []string {
	close(tr.stop)
	<-tr.done
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.failure
}

// Redis killed under traffic with `fail open`: every request still gets
// the upstream's answer; a restarted Redis brings deduplication back.
func TestRedisChaosKillFailOpen(t *testing.T) {
	srv := startRedis(t)
	up := newUpstream(t, nil)
	port := freePort(t)
	startCaddy(t, "", redisChaosSite(port, srv, "open", up.addr()))
	url := siteURL(port) + "/hook"
	waitForDedup(t, url, time.Second)

	traffic := startRedisTraffic(t, url, 2, false)
	time.Sleep(200 * time.Millisecond)
	srv.kill()
	time.Sleep(500 * time.Millisecond)

	before := up.calls.Load()
	for i := range 30 {
		key := fmt.Sprintf("evt_down_%d", i)
		resp, _ := post(t, url, []byte(key), "Idempotency-Key", key)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d with Redis down: %d, want the upstream's 200", i, resp.StatusCode)
		}
	}
	if got := up.calls.Load() - before; got < 30 {
		t.Fatalf("upstream got %d of 30 requests with Redis down", got)
	}

	srv.restart()
	waitForDedup(t, url, 5*time.Second)
	time.Sleep(200 * time.Millisecond)
	if failures := traffic.finish(); len(failures) > 0 {
		t.Fatalf("%d of %d requests under traffic failed: %v", len(failures), traffic.sent.Load(), failures[:min(5, len(failures))])
	}
}

// A hung Redis (it accepts connections and never answers): once the
// breaker is open, requests stop paying the 500ms timeout.
func TestRedisChaosHungServerBreaker(t *testing.T) {
	srv := startRedis(t)
	up := newUpstream(t, nil)
	port := freePort(t)
	startCaddy(t, "", redisChaosSite(port, srv, "open", up.addr()))
	url := siteURL(port) + "/hook"
	waitForDedup(t, url, time.Second)

	srv.pause()
	const n, timeout = 30, 500 * time.Millisecond
	start := time.Now()
	for i := range n {
		key := fmt.Sprintf("evt_hung_%d", i)
		resp, _ := post(t, url, []byte(key), "Idempotency-Key", key)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d with Redis hung: %d", i, resp.StatusCode)
		}
	}
	// without a breaker this takes n×timeout = 15s; with it, about
	// breakerThreshold×timeout
	if elapsed := time.Since(start); elapsed > n*timeout/3 {
		t.Fatalf("%d sequential requests took %v with Redis hung: the breaker does not spare the timeout", n, elapsed)
	}
	srv.resume()
	waitForDedup(t, url, 5*time.Second)
}

// With `fail closed`, a Redis outage answers 503 with Retry-After and the
// upstream is not called.
func TestRedisChaosKillFailClosed(t *testing.T) {
	srv := startRedis(t)
	up := newUpstream(t, nil)
	port := freePort(t)
	startCaddy(t, "", redisChaosSite(port, srv, "closed", up.addr()))
	url := siteURL(port) + "/hook"
	waitForDedup(t, url, time.Second)

	srv.kill()
	before := up.calls.Load()
	for i := range 10 {
		key := fmt.Sprintf("evt_closed_%d", i)
		resp, _ := post(t, url, []byte(key), "Idempotency-Key", key)
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("request %d with Redis down and fail closed: %d, Retry-After %q", i, resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	}
	if got := up.calls.Load() - before; got != 0 {
		t.Fatalf("upstream called %d times with fail closed and Redis down", got)
	}
	srv.restart()
	waitForDedup(t, url, 5*time.Second)
}

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

// redisStoreClientIDs returns the ids of the store's connections.
func redisStoreClientIDs(t *testing.T, rc *redis.Client) []string {
	t.Helper()
	list, err := rc.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatalf("CLIENT LIST: %v", err)
	}
	var ids []string
	for _, line := range strings.Split(list, "\n") {
		if !strings.Contains(line, " name="+redisClientName+" ") {
			continue
		}
		id, _, _ := strings.Cut(strings.TrimPrefix(line, "id="), " ")
		ids = append(ids, id)
	}
	return ids
}

// settledGoroutines waits for the goroutine count to drop to at most
// limit, and returns the last count. Keep-alive connections, to Caddy and
// from old configurations' proxies to the upstream, are closed first: they
// are not ours to count.
func settledGoroutines(up *upstream, limit int, within time.Duration) int {
	deadline := time.Now().Add(within)
	for {
		testClient.CloseIdleConnections()
		if up != nil {
			up.CloseClientConnections()
		}
		runtime.GC()
		n := runtime.NumGoroutine()
		if n <= limit || time.Now().After(deadline) {
			return n
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// 20 reloads through the admin API under traffic: no failed request, no
// new Redis connection, no goroutine left behind.
func TestRedisReloadsUnderTraffic(t *testing.T) {
	srv := startRedis(t)
	up := newUpstream(t, nil)
	port := freePort(t)
	site := func(ttl string) string {
		return reloadSite(port, "reload", "store redis redis://"+srv.addr()+" {\n\t\t\tpool_size 8\n\t\t}", ttl, up.addr())
	}
	c := startCaddy(t, "", site("1h"))
	url := siteURL(port) + "/hook"
	rc := srv.client(t)

	// warm up the pool with the same traffic as during the reloads
	warm := startRedisTraffic(t, url, 4, true)
	time.Sleep(time.Second)
	if failures := warm.finish(); len(failures) > 0 {
		t.Fatalf("warm-up failures: %v", failures)
	}
	post(t, url, []byte("kept"), "Idempotency-Key", "evt_kept")
	idsBefore := redisStoreClientIDs(t, rc)
	goroutinesBefore := settledGoroutines(up, 0, time.Second)

	traffic := startRedisTraffic(t, url, 4, true)
	for i := range 20 {
		ttl := "1h"
		if i%2 == 0 {
			ttl = "2h"
		}
		if err := c.reload(site(ttl)); err != nil {
			t.Fatalf("reload %d: %v", i, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	if failures := traffic.finish(); len(failures) > 0 {
		t.Fatalf("%d of %d requests failed during reloads: %v", len(failures), traffic.sent.Load(), failures[:min(5, len(failures))])
	}
	t.Logf("%d requests during the reloads, %d retried after a connection reset", traffic.sent.Load(), traffic.resets.Load())
	if traffic.sent.Load() < 40 {
		t.Fatalf("only %d requests during the reloads", traffic.sent.Load())
	}
	if resp, _ := postAfterReload(t, url, []byte("kept"), "Idempotency-Key", "evt_kept"); resp.Header.Get(replayedHeader) != "true" {
		t.Fatal("a key recorded before the reloads is not replayed after them")
	}

	wantFewNewRedisClients(t, rc, idsBefore)
	const slack = 8
	if after := settledGoroutines(up, goroutinesBefore+slack, 10*time.Second); after > goroutinesBefore+slack {
		t.Fatalf("goroutines grew from %d to %d over 20 reloads", goroutinesBefore, after)
	}
}

// `caddy validate` with Redis down neither hangs nor leaves anything
// running behind.
func TestRedisValidateLeavesNothingBehind(t *testing.T) {
	down := "127.0.0.1:" + strconv.Itoa(freePort(t))
	tc := &testCaddy{t: t, adminPort: freePort(t)}
	cfgJSON := tc.adapt(fmt.Sprintf(`:%d {
	webhook_idempotency {
		source validate
		fail closed
		store redis redis://%s
	}
	respond 200
}`, freePort(t), down))
	var cfg caddy.Config
	if err := json.Unmarshal(cfgJSON, &cfg); err != nil {
		t.Fatal(err)
	}
	before := settledGoroutines(nil, 0, time.Second)
	start := time.Now()
	if err := caddy.Validate(&cfg); err != nil {
		t.Fatalf("validate with Redis down: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("validate took %v", d)
	}
	if after := settledGoroutines(nil, before+2, 5*time.Second); after > before+2 {
		t.Fatalf("goroutines grew from %d to %d after validate", before, after)
	}
	redisPool.Range(func(key, _ any) bool {
		if strings.Contains(key.(string), down) {
			t.Errorf("validate left a client in the pool: %s", key)
		}
		return true
	})
}

// A reload that changes the store's connection settings while a request is
// in flight: Caddy cleans up the old configuration before that request
// ends, and its claim must still be completed through the old client.
func TestRedisReloadWithChangedStoreFinishesInFlight(t *testing.T) {
	srv := startRedis(t)
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		if r.Header.Get("X-Slow") != "" {
			time.Sleep(time.Second)
		}
		fmt.Fprintf(w, `{"call":%d}`, call)
	})
	port := freePort(t)
	site := func(pool int) string {
		return fmt.Sprintf(`:%d {
	webhook_idempotency {
		source drain
		store redis redis://%s {
			pool_size %d
		}
	}
	reverse_proxy %s
}`, port, srv.addr(), pool, up.addr())
	}
	c := startCaddy(t, "", site(5))
	url := siteURL(port) + "/hook"

	done := make(chan *http.Response, 1)
	go func() {
		resp, _ := post(t, url, []byte("slow"), "Idempotency-Key", "evt_slow", "X-Slow", "1")
		done <- resp
	}()
	time.Sleep(300 * time.Millisecond)
	if err := c.reload(site(6)); err != nil {
		t.Fatalf("reload: %v", err)
	}
	first := <-done
	if first.StatusCode != http.StatusOK {
		t.Fatalf("in-flight request across the reload: %d", first.StatusCode)
	}
	resp, body := postAfterReload(t, url, []byte("slow"), "Idempotency-Key", "evt_slow")
	if resp.Header.Get(replayedHeader) != "true" || string(body) != `{"call":1}` {
		t.Fatalf("duplicate after the reload: %d %q, want the replayed first answer", resp.StatusCode, body)
	}
	// the old client is gone from the pool: only the new settings remain
	redisPool.Range(func(key, _ any) bool {
		if k := key.(string); strings.Contains(k, srv.addr()) && strings.Contains(k, "pool=5|") {
			t.Errorf("the old configuration's client is still pooled: %s", k)
		}
		return true
	})
}
