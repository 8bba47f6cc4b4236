package redise2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// `replicas 1` (docs/inbox.md#failover): an inbox acceptance waits for
// the replica. While the replica is stopped (SIGSTOP) acceptances are
// refused with 503 and Retry-After, counted, and their keys released, so
// once the replica answers again (SIGCONT) the provider's retry is accepted
// anew, not answered as a duplicate. The refused event was on the master:
// a worker that took it at once delivers it too, so the application gets
// it once or twice, never not at all.
func TestRedisReplicasRefuseAcceptanceWithoutTheReplica(t *testing.T) {
	master := testkit.StartRedis(t)
	replica := testkit.StartReplica(t, master)
	app := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	c := testkit.StartCaddy(t, "", fmt.Sprintf(`:%d {
	webhook_idempotency {
		source replicated
		store redis redis://%s {
			replicas 1 2s
			timeout 10s
		}
		inbox {
			deliver_to %s/delivered
		}
	}
}`, port, master.Addr(), app.URL))
	url := testkit.SiteURL(port) + "/hook"

	// (the replica's 2s is what the healthy one takes to acknowledge on a
	// loaded machine; the refusal below waits it out; the calls outlast it)
	resp, body := testkit.Post(t, url, []byte("a"), "Idempotency-Key", "evt_a")
	testkit.WantNew(t, resp, body, http.StatusAccepted)
	app.WaitCalls(t, 1, 10*time.Second)

	replica.Pause()
	defer replica.Resume()
	resp, body = testkit.Post(t, url, []byte("b"), "Idempotency-Key", "evt_b")
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("acceptance with the replica stopped: %d, Retry-After %q: %s; want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if v, _ := c.Metrics(t).Value("caddy_webhook_idempotency_store_replicas_short_total", "address", master.Addr(), "op", "accept"); v != 1 {
		t.Fatalf("store_replicas_short_total{op=accept} is %v after one refused acceptance, want 1", v)
	}
	ctx := context.Background()
	rc := master.Client(t)
	if n := rc.Exists(ctx, "idem:replicated:evt_b").Val(); n != 0 {
		t.Fatal("the refused event's key is kept: the provider's retry would be answered as a duplicate")
	}
	replica.Resume()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, body = testkit.Post(t, url, []byte("b"), "Idempotency-Key", "evt_b")
		if resp.StatusCode != http.StatusServiceUnavailable {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("acceptances still refused 30s after the replica answered again: %s", body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	testkit.WantNew(t, resp, body, http.StatusAccepted)
	resp, body = testkit.Post(t, url, []byte("b"), "Idempotency-Key", "evt_b")
	testkit.WantReplay(t, resp, body, http.StatusAccepted, "")
	waitStreamEmpty(t, rc, "{idem:replicated}:inbox", 30*time.Second)
	count := map[string]int{}
	for _, r := range app.Requests() {
		count[string(r.Body)]++
	}
	if count["a"] != 1 || count["b"] < 1 || count["b"] > 2 || len(count) != 2 {
		t.Fatalf("the application got %v, want a once and b once or twice (its refused copy, taken by a worker, and its retry)", count)
	}
	t.Logf("the refused event was delivered %d times", count["b"])
}

// waitStreamEmpty waits until an inbox stream holds no event: each was
// delivered (and deleted).
func waitStreamEmpty(t *testing.T, rc redis.Cmdable, stream string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for rc.XLen(context.Background(), stream).Val() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%s still holds events after %v", stream, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sent is one request of the failover load and what it got.
type sent struct {
	route     string // "dedup" or "inbox"
	key       string
	master    string // the key's master before the failover
	at, until time.Time
	status    int
}

// failoverLoad sends requests with distinct keys, one every interval,
// alternately to the dedup and the inbox route, until stopped.
type failoverLoad struct {
	mu    sync.Mutex
	sent  []sent
	stop  chan struct{}
	done  chan struct{}
	slots chan struct{}
}

func startFailoverLoad(t *testing.T, interval time.Duration, urls map[string]string, masterOf func(route, key string) string) *failoverLoad {
	l := &failoverLoad{stop: make(chan struct{}), done: make(chan struct{}), slots: make(chan struct{}, 64)}
	var wg sync.WaitGroup
	go func() {
		defer close(l.done)
		defer wg.Wait()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-l.stop:
				return
			case <-tick.C:
			}
			route := [2]string{"dedup", "inbox"}[i%2]
			key := fmt.Sprintf("evt_%s_%d", route, i)
			s := sent{route: route, key: key, master: masterOf(route, key)}
			l.slots <- struct{}{}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-l.slots }()
				s.at = time.Now()
				s.status = postStatus(urls[route], key)
				s.until = time.Now()
				l.mu.Lock()
				l.sent = append(l.sent, s)
				l.mu.Unlock()
			}()
		}
	}()
	return l
}

// postStatus posts a delivery with key and returns the status, 0 for no
// answer.
func postStatus(url, key string) int {
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(key))
	req.Header.Set("Idempotency-Key", key)
	resp, err := testkit.Client.Do(req)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func (l *failoverLoad) finish() []sent {
	close(l.stop)
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sent
}

// succeededSince reports whether a request of route on a key of master
// sent after since was answered 2xx.
func (l *failoverLoad) succeededSince(route, master string, since time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.sent {
		if s.route == route && s.master == master && s.at.After(since) && s.status/100 == 2 {
			return true
		}
	}
	return false
}

// perKey counts the deliveries an upstream got, by Idempotency-Key.
type perKey struct {
	mu sync.Mutex
	n  map[string]int
}

func (p *perKey) count(w http.ResponseWriter, r *http.Request, _ int64) {
	p.mu.Lock()
	p.n[r.Header.Get("Idempotency-Key")]++
	p.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"key":%q}`, r.Header.Get("Idempotency-Key"))
}

func (p *perKey) get(key string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n[key]
}

// A master of a 3-master, 3-replica Cluster killed (kill -9) under a load
// of about 125 deliveries a second with distinct keys (docs/stores.md,
// "Failover"): its replica is promoted; the keys of the healthy masters
// get no 503 for longer than cluster-node-timeout (with the default
// cluster-require-full-coverage, the Cluster refuses every key between the
// master's failure and its replica's promotion), and none at all with
// cluster-require-full-coverage no; every delivery answered 2xx on the
// `fail closed` route and sent again once the leases are over is replayed,
// none executed again; every event the inbox route (replicas 1) accepted
// is delivered.
func TestRedisClusterFailoverUnderLoad(t *testing.T) {
	for _, coverage := range []string{"full", "partial"} {
		t.Run(coverage+" coverage", func(t *testing.T) { failoverUnderLoad(t, coverage == "full") })
	}
}

func failoverUnderLoad(t *testing.T, fullCoverage bool) {
	const nodeTimeout = 2 * time.Second
	const lease = 8 * time.Second
	args := []string{"--appendonly", "yes", "--appendfsync", "everysec"}
	if !fullCoverage {
		args = append(args, "--cluster-require-full-coverage", "no")
	}
	cluster := testkit.StartClusterWith(t, testkit.ClusterOptions{Replicas: 1, NodeTimeout: nodeTimeout, Args: args})
	cc := cluster.Client(t)
	executed := &perKey{n: make(map[string]int)}
	app := testkit.NewUpstream(t, executed.count)
	delivered := &perKey{n: make(map[string]int)}
	inboxApp := testkit.NewUpstream(t, delivered.count)
	dedupPort, inboxPort := testkit.FreePort(t), testkit.FreePort(t)
	c := testkit.StartCaddy(t, "", fmt.Sprintf(`:%d {
	webhook_idempotency {
		source failover
		fail closed
		lease %s
		%s
	}
	reverse_proxy %s
}
:%d {
	webhook_idempotency {
		source failover_inbox
		%s
		inbox {
			deliver_to %s/delivered
		}
	}
}`, dedupPort, lease, cluster.StoreBlock("timeout 2s"), app.Addr(), inboxPort, cluster.StoreBlock("timeout 2s", "replicas 1 1s"), inboxApp.URL))
	// (a store timeout of 2s: on a loaded host a healthy master's answer
	// may take longer than the default 500ms)
	urls := map[string]string{"dedup": testkit.SiteURL(dedupPort) + "/hook", "inbox": testkit.SiteURL(inboxPort) + "/hook"}

	// the master killed is not the inbox stream's: its acceptances go on
	streamMaster := cluster.MasterOf(t, cluster.Nodes[0], "{idem:failover_inbox}:inbox")
	killed, promoted := cluster.Nodes[0], cluster.Replicas[0]
	for i, n := range cluster.Nodes {
		if n != streamMaster {
			killed, promoted = n, cluster.Replicas[i]
			break
		}
	}
	masters := make(map[string]string) // store key -> master before the failover
	var mmu sync.Mutex
	masterOf := func(route, key string) string {
		storeKey := "idem:failover:" + key
		if route == "inbox" {
			storeKey = "idem:failover_inbox:" + key
		}
		m, err := cc.MasterForKey(context.Background(), storeKey)
		if err != nil {
			return ""
		}
		mmu.Lock()
		defer mmu.Unlock()
		masters[key] = m.Options().Addr
		return masters[key]
	}

	load := startFailoverLoad(t, 8*time.Millisecond, urls, masterOf)
	// a second of load before the failure
	time.Sleep(time.Second)
	killedAt := time.Now()
	killed.Kill()
	deadline := time.Now().Add(30 * time.Second)
	for promoted.Role(t) != "master" {
		if time.Now().After(deadline) {
			load.finish()
			t.Fatalf("the replica %s was not promoted within 30s of its master's death", promoted.Addr())
		}
		time.Sleep(50 * time.Millisecond)
	}
	promotedAt := time.Now()
	// the dead master's keys work again, on the promoted replica
	for !load.succeededSince("dedup", killed.Addr(), promotedAt) || !load.succeededSince("inbox", killed.Addr(), promotedAt) {
		if time.Now().After(deadline) {
			load.finish()
			t.Fatalf("the dead master's keys did not work again within 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	backAt := time.Now()
	time.Sleep(time.Second)
	all := load.finish()

	var requests, healthy503, dead503, other int
	var first503, last503 time.Time
	answered := map[string][]string{}
	for _, s := range all {
		requests++
		switch {
		case s.status/100 == 2:
			answered[s.route] = append(answered[s.route], s.key)
		case s.status == http.StatusServiceUnavailable && s.master == killed.Addr():
			dead503++
		case s.status == http.StatusServiceUnavailable:
			healthy503++
			if first503.IsZero() || s.at.Before(first503) {
				first503 = s.at
			}
			last503 = maxTime(last503, s.until)
		default:
			other++
			t.Errorf("%s %s: status %d", s.route, s.key, s.status)
		}
	}
	window := last503.Sub(first503)
	t.Logf("%d requests (%d dedup, %d inbox answered 2xx); killed %s, replica promoted %v later, its keys back %v later; healthy masters' keys: %d 503s over %v (node timeout %v); dead master's keys: %d 503s",
		requests, len(answered["dedup"]), len(answered["inbox"]), killed.Addr(), promotedAt.Sub(killedAt).Round(10*time.Millisecond),
		backAt.Sub(killedAt).Round(10*time.Millisecond), healthy503, window.Round(10*time.Millisecond), nodeTimeout, dead503)
	if !fullCoverage && healthy503 > 0 {
		t.Errorf("the healthy masters' keys got %d 503s with cluster-require-full-coverage no", healthy503)
	}
	if window > nodeTimeout {
		t.Errorf("the healthy masters' keys got 503 over %v (from %v to %v after the kill), longer than cluster-node-timeout %v",
			window, first503.Sub(killedAt), last503.Sub(killedAt), nodeTimeout)
	}

	// no key answered on the dedup route is left in flight: each was
	// recorded, and the leases of any left over are over
	after := cluster.Client(t) // a client of its own reads the slot map anew
	rdeadline := time.Now().Add(lease + 10*time.Second)
	for _, key := range answered["dedup"] {
		for {
			v, err := after.Get(context.Background(), "idem:failover:"+key).Result()
			if err == redis.Nil || (err == nil && !strings.HasPrefix(v, "\x00\x01")) {
				break
			}
			if time.Now().After(rdeadline) {
				t.Fatalf("idem:failover:%s still in flight %v after the load: %v", key, lease+10*time.Second, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	reexecuted, unreplayed := 0, 0
	var wg sync.WaitGroup
	var rmu sync.Mutex
	work := make(chan string)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for key := range work {
				status := postStatus(urls["dedup"], key)
				rmu.Lock()
				if status/100 != 2 {
					unreplayed++
				}
				rmu.Unlock()
			}
		}()
	}
	for _, key := range answered["dedup"] {
		work <- key
	}
	close(work)
	wg.Wait()
	for _, key := range answered["dedup"] {
		if n := executed.get(key); n > 1 {
			reexecuted++
			t.Errorf("%s answered 2xx and executed %d times", key, n)
		}
	}
	v, _ := c.Metrics(t).Value("caddy_webhook_idempotency_answers_unrecorded_total", "source", "failover")
	t.Logf("dedup (fail closed): %d answered deliveries sent again after the leases: %d executed again, %d not answered 2xx; answers_unrecorded_total %v",
		len(answered["dedup"]), reexecuted, unreplayed, v)
	if unreplayed > 0 {
		t.Errorf("%d of the answered deliveries sent again were not answered 2xx", unreplayed)
	}

	// every event the inbox accepted is delivered
	ideadline := time.Now().Add(30 * time.Second)
	lost := 0
	for _, key := range answered["inbox"] {
		for delivered.get(key) == 0 {
			if time.Now().After(ideadline) {
				lost++
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	twice := 0
	for _, key := range answered["inbox"] {
		if delivered.get(key) > 1 {
			twice++
		}
	}
	t.Logf("inbox (replicas 1): %d accepted events: %d lost, %d delivered more than once", len(answered["inbox"]), lost, twice)
	if lost > 0 {
		t.Errorf("%d accepted events were never delivered", lost)
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
