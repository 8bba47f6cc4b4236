package redise2e

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// Two Caddy instances behind a load balancer, on one Redis: one runs in
// the test process, the other as a process of its own, each with its own
// Redis client. Tests that are not about outages give Redis a generous
// timeout, so that a loaded machine does not turn into store failures
// (fail open) and spurious duplicates.

// keyedUpstream counts the requests it receives per Idempotency-Key, and
// answers each after delay with 201 and a JSON body naming the key, the
// call and the key's count.
type keyedUpstream struct {
	*testkit.Upstream
	mu    sync.Mutex
	calls map[string]int
}

// newKeyedUpstream is an upstream that counts its calls by key; work, if
// not nil, is the application's work on each.
func newKeyedUpstream(t *testing.T, work func()) *keyedUpstream {
	u := &keyedUpstream{calls: make(map[string]int)}
	u.Upstream = testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		key := r.Header.Get("Idempotency-Key")
		u.mu.Lock()
		u.calls[key]++
		n := u.calls[key]
		u.mu.Unlock()
		if work != nil {
			work()
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Upstream-Call", strconv.FormatInt(call, 10))
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"key":%q,"call":%d,"per_key":%d}`, key, call, n)
	})
	return u
}

func (u *keyedUpstream) callsFor(key string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.calls[key]
}

// instanceSite is a site on port with the handler of source shop on the
// Redis at addr (the lines extra in its block) in front of up, and a
// /ready path that answers without either.
func instanceSite(port int, addr, extra string, up *keyedUpstream) string {
	return fmt.Sprintf(`:%d {
	handle /ready {
		respond "ready"
	}
	handle {
		webhook_idempotency {
			source shop
			%s
			store redis redis://%s {
				timeout 5s
			}
		}
		reverse_proxy %s
	}
}`, port, extra, addr, up.Addr())
}

// twoInstances starts two Caddy instances with the shop handler on srv in
// front of up: the first in the test process, the second as a process of
// its own. It returns the URLs of their hooks.
func twoInstances(t *testing.T, srv *testkit.Redis, extra string, up *keyedUpstream) (a, b string) {
	t.Helper()
	portA, portB := testkit.FreePort(t), testkit.FreePort(t)
	testkit.StartCaddy(t, "", instanceSite(portA, srv.Addr(), extra, up))
	testkit.StartProcess(t, "", instanceSite(portB, srv.Addr(), extra, up), testkit.SiteURL(portB)+"/ready")
	return testkit.SiteURL(portA) + "/hook", testkit.SiteURL(portB) + "/hook"
}

// deliver sends one delivery with an Idempotency-Key to url.
func deliver(url, key string) testkit.Reply {
	return testkit.Send(http.MethodPost, url, strings.NewReader(`{"id":"`+key+`"}`), "Idempotency-Key", key)
}

// mustDeliver is deliver for the test's goroutine.
func mustDeliver(t *testing.T, url, key string) testkit.Reply {
	t.Helper()
	r := deliver(url, key)
	if r.Err != nil {
		t.Fatalf("delivering %s to %s: %v", key, url, r.Err)
	}
	return r
}

func TestRedisTwoInstancesShareDeduplication(t *testing.T) {
	srv := testkit.StartRedis(t)
	up := newKeyedUpstream(t, nil)
	a, b := twoInstances(t, srv, "", up)

	for i, pair := range [][2]string{{a, b}, {b, a}} {
		key := "evt_" + strconv.Itoa(i)
		first := mustDeliver(t, pair[0], key)
		second := mustDeliver(t, pair[1], key)
		if first.Status != http.StatusCreated || first.Header.Get(testkit.ReplayedHeader) != "" {
			t.Fatalf("%s: first delivery: %d %v", key, first.Status, first.Header)
		}
		if second.Status != http.StatusCreated || second.Header.Get(testkit.ReplayedHeader) != "true" {
			t.Fatalf("%s: duplicate on the other instance: %d %v", key, second.Status, second.Header)
		}
		if string(second.Body) != string(first.Body) || second.Header.Get("X-Upstream-Call") != first.Header.Get("X-Upstream-Call") {
			t.Fatalf("%s: replay %q differs from %q", key, second.Body, first.Body)
		}
		if n := up.callsFor(key); n != 1 {
			t.Fatalf("%s: upstream called %d times, want 1", key, n)
		}
	}
}

// 100 concurrent duplicates split across two instances reach the upstream
// exactly once, for many keys.
func TestRedisConcurrentDuplicatesAcrossInstances(t *testing.T) {
	srv := testkit.StartRedis(t)
	up := newKeyedUpstream(t, func() { time.Sleep(30 * time.Millisecond) })
	a, b := twoInstances(t, srv, "", up)
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
			url := a
			if i%2 == 1 {
				url = b
			}
			wg.Go(func() {
				<-start
				r := deliver(url, key)
				kind := strconv.Itoa(r.Status)
				if r.Err != nil {
					kind = "error: " + r.Err.Error()
				} else if r.Header.Get(testkit.ReplayedHeader) == "true" {
					kind += " replayed"
				}
				mu.Lock()
				statuses[kind]++
				mu.Unlock()
			})
		}
		close(start)
		wg.Wait()
		if n := up.callsFor(key); n != 1 {
			t.Fatalf("%s: upstream called %d times by %d concurrent duplicates, want 1 (%v)", key, n, dups, statuses)
		}
		if statuses["201"] != 1 || statuses["201"]+statuses["201 replayed"]+statuses["409"] != dups {
			t.Fatalf("%s: statuses %v, want one 201 and the rest replays or 409", key, statuses)
		}
		for _, url := range []string{a, b} {
			if r := mustDeliver(t, url, key); r.Header.Get(testkit.ReplayedHeader) != "true" {
				t.Fatalf("%s: later duplicate on %s not replayed: %d", key, url, r.Status)
			}
		}
	}
	if got := up.Calls.Load(); got != keys {
		t.Fatalf("upstream calls %d, want %d", got, keys)
	}
}

// Lease renewal keeps a slow request's claim alive past the initial lease:
// a duplicate on the other instance gets 409, never a second execution.
func TestRedisLeaseRenewalKeepsSlowRequest(t *testing.T) {
	srv := testkit.StartRedis(t)
	// the application works until the duplicates below are answered,
	// however long a loaded machine takes over them
	release := make(chan struct{})
	var releaseOnce sync.Once
	releaseUp := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(releaseUp)
	up := newKeyedUpstream(t, func() { <-release })
	// renewed every lease/3: 3s leaves a loaded machine two seconds of
	// slack for each renewal
	const lease = 3 * time.Second
	a, b := twoInstances(t, srv, "lease 3s", up)
	rc := srv.Client(t)

	done := testkit.SendAsync(http.MethodPost, a, []byte(`{"id":"evt_slow"}`), "Idempotency-Key", "evt_slow")
	up.WaitCalls(t, 1, 30*time.Second)
	start := time.Now()
	// past the lease, twice over
	for _, at := range []time.Duration{lease + time.Second, 2*lease + time.Second} {
		time.Sleep(time.Until(start.Add(at)))
		r := mustDeliver(t, b, "evt_slow")
		if r.Status != http.StatusConflict || r.Header.Get("Retry-After") == "" {
			t.Fatalf("duplicate during a slow request past its lease: %d %v", r.Status, r.Header)
		}
		if pttl := rc.PTTL(context.Background(), "idem:shop:evt_slow").Val(); pttl <= 0 || pttl > lease {
			t.Fatalf("in-flight PTTL %v, want within the %v lease", pttl, lease)
		}
	}
	releaseUp()
	if first := testkit.Receive(t, done); first.Status != http.StatusCreated {
		t.Fatalf("slow request: %d", first.Status)
	}
	if r := mustDeliver(t, b, "evt_slow"); r.Header.Get(testkit.ReplayedHeader) != "true" {
		t.Fatalf("duplicate after completion: %d, want a replay", r.Status)
	}
	if n := up.callsFor("evt_slow"); n != 1 {
		t.Fatalf("upstream called %d times, want 1", n)
	}
}
