// Package inboxe2e holds the black-box end-to-end tests of inbox mode
// (docs/inbox.md): a real Redis (or Redis Cluster), a real Caddy built
// with the module (in the test process, or as a process of its own for the
// crash test) and a real upstream standing in for the application
// (internal/testkit). The tests see what a provider, an application and an
// operator see: HTTP answers, what the application received, and the
// inbox's keys in Redis (its documented layout). Tests that start Caddy do
// not run in parallel (Caddy runs one configuration per process).
package inboxe2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
	"github.com/redis/go-redis/v9"

	_ "github.com/webhookguard/caddy-webhook-idempotency"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

func TestMain(m *testing.M) { testkit.RunAsCaddy(); testkit.Main(m) }

// inboxGroup is the consumer group of an inbox's stream (docs/inbox.md:
// Redis layout).
const inboxGroup = "webhook_idempotency"

// inboxRedisKeys are the Redis keys of one source's inbox under the
// default key_prefix.
type inboxRedisKeys struct {
	stream, retry, dead string
}

func inboxKeysOf(source string) inboxRedisKeys {
	tag := "{idem:" + source + "}"
	return inboxRedisKeys{stream: tag + ":inbox", retry: tag + ":retry", dead: tag + ":dead"}
}

// inboxSite is a site whose only handler is an inbox; store is the
// store's Caddyfile line(s), inbox the inbox block's body.
func inboxSite(port int, source, store, inbox string) string {
	return fmt.Sprintf(`:%d {
	webhook_idempotency {
		source %s
		ttl 10m
		%s
		inbox {
			%s
		}
	}
}`, port, source, store, inbox)
}

// inboxState is what Redis holds for an inbox.
type inboxState struct {
	stream, retry, dead, pending int64
}

func (s inboxState) String() string {
	return fmt.Sprintf("stream %d, retry set %d, dead %d, pending in the group %d", s.stream, s.retry, s.dead, s.pending)
}

func readInboxState(t *testing.T, rc redis.Cmdable, k inboxRedisKeys) inboxState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var s inboxState
	var err error
	if s.stream, err = rc.XLen(ctx, k.stream).Result(); err != nil {
		t.Fatalf("XLEN %s: %v", k.stream, err)
	}
	if s.retry, err = rc.ZCard(ctx, k.retry).Result(); err != nil {
		t.Fatalf("ZCARD %s: %v", k.retry, err)
	}
	if s.dead, err = rc.XLen(ctx, k.dead).Result(); err != nil {
		t.Fatalf("XLEN %s: %v", k.dead, err)
	}
	p, err := rc.XPending(ctx, k.stream, inboxGroup).Result()
	switch {
	case err == nil:
		s.pending = p.Count
	case strings.HasPrefix(err.Error(), "NOGROUP"):
		// no group yet: nothing pending
	default:
		t.Fatalf("XPENDING %s: %v", k.stream, err)
	}
	return s
}

// waitInboxDrained waits until every accepted event has been delivered:
// nothing in the stream, nothing scheduled, nothing pending.
func waitInboxDrained(t *testing.T, rc redis.Cmdable, k inboxRedisKeys, within time.Duration) inboxState {
	t.Helper()
	var s inboxState
	testkit.WaitFor(t, within, "inbox drained (stream, retry set and pending list empty)", func() (bool, string) {
		s = readInboxState(t, rc, k)
		return s.stream == 0 && s.retry == 0 && s.pending == 0, s.String()
	})
	return s
}

// deliveriesByKey counts the upstream's requests per Idempotency-Key.
func deliveriesByKey(up *testkit.Upstream) map[string]int {
	n := make(map[string]int)
	for _, r := range up.Requests() {
		n[r.Header.Get("Idempotency-Key")]++
	}
	return n
}

// wantAccepted fails unless resp is the inbox's fresh accept answer.
func wantAccepted(t *testing.T, resp *http.Response, body []byte) {
	t.Helper()
	if resp.StatusCode != http.StatusAccepted || resp.Header.Get(testkit.ReplayedHeader) != "" {
		t.Fatalf("want a fresh 202, got %d %s=%q: %s", resp.StatusCode, testkit.ReplayedHeader, resp.Header.Get(testkit.ReplayedHeader), body)
	}
}

// wantAcceptReplayed fails unless resp is the accept answer of a duplicate.
func wantAcceptReplayed(t *testing.T, resp *http.Response, body []byte) {
	t.Helper()
	if resp.StatusCode != http.StatusAccepted || resp.Header.Get(testkit.ReplayedHeader) != "true" {
		t.Fatalf("want 202 with %s: true for a duplicate, got %d %s=%q: %s", testkit.ReplayedHeader, resp.StatusCode, testkit.ReplayedHeader, resp.Header.Get(testkit.ReplayedHeader), body)
	}
}

// The client's 202 does not wait for deliver_to: it arrives while the
// upstream still holds the delivery, which then completes once.
func TestInboxAnswersBeforeSlowDelivery(t *testing.T) {
	srv := testkit.StartRedis(t)
	rc := srv.Client(t)
	release := make(chan struct{})
	var releaseOnce sync.Once
	releaseUpstream := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(releaseUpstream)
	var answered atomic.Int64
	up := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		// held until released (the checks below assert it still is, on a
		// loaded machine too), for at most a minute
		select {
		case <-release:
		case <-time.After(time.Minute):
		case <-r.Context().Done():
		}
		answered.Add(1)
		w.WriteHeader(http.StatusOK)
	})
	port := testkit.FreePort(t)
	testkit.StartCaddy(t, "", inboxSite(port, "slow", "store redis redis://"+srv.Addr(),
		fmt.Sprintf("deliver_to %s/hook\n\t\t\ttimeout 10s\n\t\t\tretries 1s", up.URL)))
	keys := inboxKeysOf("slow")

	start := time.Now()
	resp, body := testkit.Post(t, testkit.SiteURL(port)+"/hook", []byte(`{"id":"evt_slow"}`), "Idempotency-Key", "evt_slow")
	took := time.Since(start)
	wantAccepted(t, resp, body)
	if n := answered.Load(); n != 0 {
		t.Fatalf("the 202 came after the upstream answered (%d answers, %s): accepting waited for the delivery", n, took)
	}
	t.Logf("202 after %s", took)

	// the delivery reaches the upstream, which is still holding it
	testkit.WaitFor(t, 10*time.Second, "the upstream receives the delivery", func() (bool, string) {
		return up.Calls.Load() >= 1, fmt.Sprintf("%d calls", up.Calls.Load())
	})
	if n := answered.Load(); n != 0 {
		t.Fatalf("the upstream answered before it was released (%d answers)", n)
	}
	if s := readInboxState(t, rc, keys); s.stream != 1 || s.pending != 1 {
		t.Fatalf("while the upstream holds the delivery: %s; want the event in the stream, pending", s)
	}
	releaseUpstream()
	waitInboxDrained(t, rc, keys, 10*time.Second)
	reqs := up.Requests()
	if len(reqs) != 1 {
		t.Fatalf("upstream got %d deliveries, want 1", len(reqs))
	}
	if got := reqs[0].Header.Get("Idempotency-Key"); got != "evt_slow" {
		t.Fatalf("Idempotency-Key %q, want evt_slow", got)
	}
	if got := reqs[0].Header.Get("Webhook-Attempt"); got != "1" {
		t.Fatalf("Webhook-Attempt %q, want 1", got)
	}
	if string(reqs[0].Body) != `{"id":"evt_slow"}` {
		t.Fatalf("delivered body %q", reqs[0].Body)
	}
}

// 500, 500, then 200: three attempts on the retries schedule, each with the
// original body and headers; then the key is completed with the handler's
// ttl and a duplicate is answered without a new delivery.
func TestInboxRetriesOnScheduleThenDelivers(t *testing.T) {
	srv := testkit.StartRedis(t)
	rc := srv.Client(t)
	var mu sync.Mutex
	var arrivals []time.Time
	up := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		mu.Lock()
		arrivals = append(arrivals, time.Now())
		mu.Unlock()
		if call < 3 {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	port := testkit.FreePort(t)
	testkit.StartCaddy(t, "", inboxSite(port, "retry", "store redis redis://"+srv.Addr(),
		fmt.Sprintf("deliver_to %s/hook\n\t\t\tretries 300ms 600ms\n\t\t\tjitter 0%%\n\t\t\ttimeout 2s", up.URL)))
	keys := inboxKeysOf("retry")
	url := testkit.SiteURL(port) + "/hook?from=provider"
	const payload = `{"id":"evt_retry","type":"invoice.paid"}`
	hdrs := []string{
		"Idempotency-Key", "evt_retry",
		"Content-Type", "application/json",
		"X-Signature", "t=1700000000,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd",
		"User-Agent", "provider-webhooks/1.0",
	}
	resp, body := testkit.Post(t, url, []byte(payload), hdrs...)
	wantAccepted(t, resp, body)

	testkit.WaitFor(t, 10*time.Second, "three delivery attempts", func() (bool, string) {
		return up.Calls.Load() >= 3, fmt.Sprintf("%d attempts", up.Calls.Load())
	})
	waitInboxDrained(t, rc, keys, 10*time.Second)

	reqs := up.Requests()
	if len(reqs) != 3 {
		t.Fatalf("upstream got %d attempts, want 3", len(reqs))
	}
	for i, r := range reqs {
		if got, want := r.Header.Get("Webhook-Attempt"), strconv.Itoa(i+1); got != want {
			t.Errorf("attempt %d: Webhook-Attempt %q, want %q", i+1, got, want)
		}
		if got := r.Header.Get("Idempotency-Key"); got != "evt_retry" {
			t.Errorf("attempt %d: Idempotency-Key %q, want evt_retry", i+1, got)
		}
		if r.Method != http.MethodPost || string(r.Body) != payload {
			t.Errorf("attempt %d: %s with body %q, want POST with %q", i+1, r.Method, r.Body, payload)
		}
		for name, want := range map[string]string{
			"X-Forwarded-For": "127.0.0.1", "X-Forwarded-Host": fmt.Sprintf("127.0.0.1:%d", port), "X-Forwarded-Proto": "http",
		} {
			if got := r.Header.Get(name); got != want {
				t.Errorf("attempt %d: %s %q, want %q", i+1, name, got, want)
			}
		}
		for j := 2; j+1 < len(hdrs); j += 2 {
			if got := r.Header.Get(hdrs[j]); got != hdrs[j+1] {
				t.Errorf("attempt %d: header %s %q, want the original %q", i+1, hdrs[j], got, hdrs[j+1])
			}
		}
	}

	// the waits, measured at the upstream. Retry due times are whole
	// milliseconds (sorted set scores), hence the 1ms of slack below.
	mu.Lock()
	at := append([]time.Time(nil), arrivals...)
	mu.Unlock()
	for i, wait := range []time.Duration{300 * time.Millisecond, 600 * time.Millisecond} {
		gap := at[i+1].Sub(at[i])
		t.Logf("attempt %d -> %d: %s (configured %s)", i+1, i+2, gap, wait)
		if gap < wait-time.Millisecond || gap > wait+time.Second {
			t.Errorf("gap between attempts %d and %d is %s, want %s (and under %s)", i+1, i+2, gap, wait, wait+time.Second)
		}
	}

	// once delivered, the key lives for the handler's ttl (10m), no longer
	testkit.WaitFor(t, 30*time.Second, "the delivered key's TTL is at most the handler's ttl", func() (bool, string) {
		pttl, err := rc.PTTL(context.Background(), "idem:retry:evt_retry").Result()
		if err != nil {
			return false, err.Error()
		}
		return pttl > 9*time.Minute && pttl <= 10*time.Minute, pttl.String()
	})

	// a duplicate gets the accept answer and is not delivered again
	resp, body = testkit.Post(t, url, []byte(payload), hdrs...)
	wantAcceptReplayed(t, resp, body)
	if s := readInboxState(t, rc, keys); s.stream != 0 {
		t.Fatalf("a duplicate of a delivered event was stored again: %s", s)
	}
	deadline := time.Now().Add(700 * time.Millisecond) // more than two stream reads
	for time.Now().Before(deadline) {
		if n := up.Calls.Load(); n != 3 {
			t.Fatalf("a duplicate of a delivered event was delivered again: %d attempts", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// An event the upstream always fails is attempted once plus once per
// retry, then dead-lettered with its attempts and last status.
func TestInboxRetriesExhaustedDeadLetters(t *testing.T) {
	srv := testkit.StartRedis(t)
	rc := srv.Client(t)
	up := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		w.WriteHeader(http.StatusInternalServerError)
	})
	port := testkit.FreePort(t)
	testkit.StartCaddy(t, "", inboxSite(port, "exhaust", "store redis redis://"+srv.Addr(),
		fmt.Sprintf("deliver_to %s/hook\n\t\t\tretries 100ms 100ms\n\t\t\tjitter 0%%\n\t\t\ttimeout 2s", up.URL)))
	keys := inboxKeysOf("exhaust")
	resp, body := testkit.Post(t, testkit.SiteURL(port)+"/hook", []byte(`{"id":"evt_dead"}`), "Idempotency-Key", "evt_dead")
	wantAccepted(t, resp, body)

	testkit.WaitFor(t, 10*time.Second, "the event is dead-lettered", func() (bool, string) {
		s := readInboxState(t, rc, keys)
		return s.dead == 1, s.String()
	})
	s := readInboxState(t, rc, keys)
	if s.stream != 0 || s.retry != 0 || s.pending != 0 {
		t.Fatalf("after dead-lettering: %s; want nothing left to deliver", s)
	}
	reqs := up.Requests()
	if len(reqs) != 3 {
		t.Fatalf("upstream got %d attempts, want 3 (one plus two retries)", len(reqs))
	}
	for i, r := range reqs {
		if got, want := r.Header.Get("Webhook-Attempt"), strconv.Itoa(i+1); got != want {
			t.Errorf("attempt %d: Webhook-Attempt %q, want %q", i+1, got, want)
		}
	}
	msgs, err := rc.XRange(context.Background(), keys.dead, "-", "+").Result()
	if err != nil || len(msgs) != 1 {
		t.Fatalf("XRANGE %s: %d entries, %v", keys.dead, len(msgs), err)
	}
	ev := msgs[0].Values
	for field, want := range map[string]string{
		event.FieldSource: "exhaust", event.FieldKey: "evt_dead", event.FieldStoreKey: "idem:exhaust:evt_dead",
		event.FieldAttempts: "3", event.FieldLastStatus: "500", event.FieldBody: `{"id":"evt_dead"}`, event.FieldMethod: http.MethodPost,
	} {
		if got := testkit.FieldString(ev[field]); got != want {
			t.Errorf("dead-lettered event: %s = %q, want %q", field, got, want)
		}
	}
	if testkit.FieldString(ev[event.FieldLastError]) == "" || testkit.FieldString(ev[event.FieldFailed]) == "" {
		t.Errorf("dead-lettered event lacks its last error or failure time: %v", ev)
	}
	// the provider's duplicate is still answered as accepted, not stored again
	resp, body = testkit.Post(t, testkit.SiteURL(port)+"/hook", []byte(`{"id":"evt_dead"}`), "Idempotency-Key", "evt_dead")
	wantAcceptReplayed(t, resp, body)
	if s := readInboxState(t, rc, keys); s.stream != 0 || s.dead != 1 {
		t.Fatalf("after a duplicate of a dead-lettered event: %s", s)
	}
}

// An event whose deliveries keep killing their worker is not reclaimed for
// ever: every hand-out of the stream entry counts as an attempt, and once
// the schedule is used up it is dead-lettered without another attempt.
func TestInboxEventThatKeepsKillingWorkersIsDeadLettered(t *testing.T) {
	srv := testkit.StartRedis(t)
	rc := srv.Client(t)
	up := testkit.NewUpstream(t, nil)
	keys := inboxKeysOf("crashloop")
	ctx := context.Background()
	// three workers took the event and died without recording anything
	if err := rc.XGroupCreateMkStream(ctx, keys.stream, inboxGroup, "0").Err(); err != nil {
		t.Fatal(err)
	}
	id, err := rc.XAdd(ctx, &redis.XAddArgs{Stream: keys.stream, Values: []any{
		event.FieldKey, "evt_loop", event.FieldStoreKey, "idem:crashloop:evt_loop", event.FieldMethod, "POST",
		event.FieldBody, `{"id":"evt_loop"}`, event.FieldAttempts, "0", event.FieldBase, "0",
	}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.XReadGroup(ctx, &redis.XReadGroupArgs{Group: inboxGroup, Consumer: "dead-1", Streams: []string{keys.stream, ">"}, Count: 1}).Err(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"dead-2", "dead-3"} {
		if err := rc.XClaim(ctx, &redis.XClaimArgs{Stream: keys.stream, Group: inboxGroup, Consumer: c, Messages: []string{id}}).Err(); err != nil {
			t.Fatal(err)
		}
	}

	port := testkit.FreePort(t)
	testkit.StartCaddy(t, "", inboxSite(port, "crashloop", "store redis redis://"+srv.Addr(),
		fmt.Sprintf("deliver_to %s/hook\n\t\t\tretries 100ms\n\t\t\tjitter 0%%\n\t\t\ttimeout 1s", up.URL)))
	testkit.WaitFor(t, 15*time.Second, "the event is dead-lettered", func() (bool, string) {
		s := readInboxState(t, rc, keys)
		return s.dead == 1 && s.pending == 0, s.String()
	})
	if n := up.Calls.Load(); n != 0 {
		t.Fatalf("upstream got %d attempts; want none: three were made and the schedule allows two", n)
	}
	msgs, err := rc.XRange(ctx, keys.dead, "-", "+").Result()
	if err != nil || len(msgs) != 1 {
		t.Fatalf("XRANGE %s: %d entries, %v", keys.dead, len(msgs), err)
	}
	if got := testkit.FieldString(msgs[0].Values[event.FieldAttempts]); got != "3" {
		t.Errorf("dead-lettered event: attempts %q, want 3", got)
	}
	testkit.MustContain(t, testkit.FieldString(msgs[0].Values[event.FieldLastError]), "retries exhausted", "stopped without an answer")
}

// A Caddy process killed while its delivery is in progress loses nothing:
// the next process reclaims the unacknowledged event and delivers it.
func TestInboxProcessKilledMidDeliveryIsRedelivered(t *testing.T) {
	srv := testkit.StartRedis(t)
	rc := srv.Client(t)
	release := make(chan struct{})
	var releaseOnce sync.Once
	releaseUpstream := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(releaseUpstream)
	firstArrived := make(chan struct{})
	up := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		if call == 1 {
			close(firstArrived)
			select { // hangs until released or its process dies
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	port := testkit.FreePort(t)
	sites := fmt.Sprintf(`:%d {
	webhook_idempotency {
		source crash
		store redis redis://%s
		inbox {
			deliver_to %s/hook
			timeout 5s
			retries 200ms
		}
	}
}`, port, srv.Addr(), up.URL)
	ready := testkit.SiteURL(port) + "/ready" // a GET: passed on, not processed
	keys := inboxKeysOf("crash")

	// the attempt's timeout outlasts the steps to the kill on a loaded
	// machine (a timeout would reschedule the event first); the next
	// process reclaims the event after three of them
	first := testkit.StartProcess(t, "", sites, ready)
	resp, body := testkit.Post(t, testkit.SiteURL(port)+"/hook", []byte(`{"id":"evt_crash"}`), "Idempotency-Key", "evt_crash")
	wantAccepted(t, resp, body)
	select {
	case <-firstArrived:
	case <-time.After(30 * time.Second):
		t.Fatalf("the first process did not deliver within 30s\n%s", first.Log())
	}
	first.Kill()
	// the event is pending in the group for the dead process: not yet
	// rescheduled by a timeout, not acknowledged
	if s := readInboxState(t, rc, keys); s.stream != 1 || s.pending != 1 || s.retry != 0 {
		t.Fatalf("after killing the process mid-delivery: %s; want the event in the stream, pending", s)
	}
	releaseUpstream()

	second := testkit.StartProcess(t, "", sites, ready)
	testkit.WaitFor(t, 60*time.Second, "the restarted process delivers the event again", func() (bool, string) {
		return up.Calls.Load() >= 2, fmt.Sprintf("%d deliveries", up.Calls.Load())
	})
	var s inboxState
	testkit.WaitFor(t, 20*time.Second, "the redelivered event completes", func() (bool, string) {
		s = readInboxState(t, rc, keys)
		return s.stream == 0 && s.pending == 0 && s.retry == 0, s.String()
	})
	reqs := up.Requests()
	if len(reqs) != 2 {
		t.Fatalf("upstream got %d deliveries, want the interrupted one and its redelivery\n%s", len(reqs), second.Log())
	}
	for i, r := range reqs {
		if r.Header.Get("Idempotency-Key") != "evt_crash" || string(r.Body) != `{"id":"evt_crash"}` {
			t.Errorf("delivery %d: Idempotency-Key %q, body %q", i+1, r.Header.Get("Idempotency-Key"), r.Body)
		}
	}
	// the interrupted attempt counts: the redelivery is the second
	if got := reqs[1].Header.Get("Webhook-Attempt"); got != "2" {
		t.Errorf("redelivery after the crash: Webhook-Attempt %q, want 2", got)
	}
	resp, body = testkit.Post(t, testkit.SiteURL(port)+"/hook", []byte(`{"id":"evt_crash"}`), "Idempotency-Key", "evt_crash")
	wantAcceptReplayed(t, resp, body)
}

// 1,000 distinct events and 200 duplicates from 12 concurrent clients:
// each distinct event is accepted once and delivered exactly once.
func TestInboxLoadWithDuplicatesDeliversEachOnce(t *testing.T) {
	srv := testkit.StartRedis(t)
	rc := srv.Client(t)
	up := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		w.WriteHeader(http.StatusOK)
	})
	port := testkit.FreePort(t)
	// the bound of a Redis call is generous: this test is about each event
	// accepted and delivered once, not about a loaded machine's 503s
	testkit.StartCaddy(t, "", inboxSite(port, "load", "store redis redis://"+srv.Addr()+" {\n\t\t\ttimeout 10s\n\t\t}",
		fmt.Sprintf("deliver_to %s/hook\n\t\t\tconcurrency 8\n\t\t\ttimeout 5s\n\t\t\tretries 200ms", up.URL)))
	keys := inboxKeysOf("load")
	url := testkit.SiteURL(port) + "/hook"

	const distinct, workers = 1000, 12
	// every fifth event is sent twice: half of the duplicates right after
	// their original (so another client sends them concurrently), half at
	// the end
	var jobs []int
	var late []int
	for i := range distinct {
		jobs = append(jobs, i)
		if i%5 == 0 {
			if i%10 == 0 {
				jobs = append(jobs, i)
			} else {
				late = append(late, i)
			}
		}
	}
	jobs = append(jobs, late...)

	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: workers}}
	defer client.CloseIdleConnections()
	work := make(chan int)
	var fresh, replayed atomic.Int64
	var failMu sync.Mutex
	var failures []string
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Go(func() {
			for i := range work {
				key := fmt.Sprintf("evt_load_%04d", i)
				req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"id":"`+key+`"}`))
				req.Header.Set("Idempotency-Key", key)
				resp, err := client.Do(req)
				if err != nil {
					failMu.Lock()
					failures = append(failures, fmt.Sprintf("%s: %v", key, err))
					failMu.Unlock()
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch {
				case resp.StatusCode == http.StatusAccepted && resp.Header.Get(testkit.ReplayedHeader) == "":
					fresh.Add(1)
				case resp.StatusCode == http.StatusAccepted && resp.Header.Get(testkit.ReplayedHeader) == "true":
					replayed.Add(1)
				default:
					failMu.Lock()
					failures = append(failures, fmt.Sprintf("%s: %d %s=%q", key, resp.StatusCode, testkit.ReplayedHeader, resp.Header.Get(testkit.ReplayedHeader)))
					failMu.Unlock()
				}
			}
		})
	}
	for _, i := range jobs {
		work <- i
	}
	close(work)
	wg.Wait()
	t.Logf("%d requests in %s", len(jobs), time.Since(start))
	if len(failures) > 0 {
		t.Fatalf("%d of %d requests were not answered 202: %v", len(failures), len(jobs), failures[:min(10, len(failures))])
	}
	if fresh.Load() != distinct || replayed.Load() != int64(len(jobs)-distinct) {
		t.Fatalf("%d fresh accepts and %d replays, want %d and %d: each distinct event is accepted exactly once",
			fresh.Load(), replayed.Load(), distinct, len(jobs)-distinct)
	}

	s := waitInboxDrained(t, rc, keys, 60*time.Second)
	t.Logf("all delivered %s after the first request", time.Since(start))
	if s.dead != 0 {
		t.Fatalf("%d events dead-lettered with a healthy upstream", s.dead)
	}
	got := deliveriesByKey(up)
	var missing, twice []string
	for i := range distinct {
		key := fmt.Sprintf("evt_load_%04d", i)
		switch n := got[key]; {
		case n == 0:
			missing = append(missing, key)
		case n > 1:
			twice = append(twice, fmt.Sprintf("%s x%d", key, n))
		}
		delete(got, key)
	}
	if len(missing) > 0 || len(twice) > 0 || len(got) > 0 {
		t.Fatalf("%d events never delivered %v, %d delivered more than once %v, %d unknown keys %v",
			len(missing), missing[:min(10, len(missing))], len(twice), twice[:min(10, len(twice))], len(got), got)
	}
}

// inboxConfigError adapts sites and validates the config (provisioning
// every module), returning the first error.
func inboxConfigError(t *testing.T, sites string) error {
	t.Helper()
	cfg, err := testkit.AdaptConfig(t, "", sites)
	if err != nil {
		return err
	}
	return caddy.Validate(cfg)
}

// Redis down when an event arrives: 503 with Retry-After, never 202, even
// without `fail closed`; once Redis is back, events are accepted and
// delivered again.
func TestInboxRedisDownAtAcceptIs503(t *testing.T) {
	srv := testkit.StartRedis(t)
	rc := srv.Client(t)
	up := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		w.WriteHeader(http.StatusOK)
	})
	port := testkit.FreePort(t)
	testkit.StartCaddy(t, "", inboxSite(port, "down", "store redis redis://"+srv.Addr(),
		fmt.Sprintf("deliver_to %s/hook\n\t\t\ttimeout 2s\n\t\t\tretries 200ms", up.URL)))
	keys := inboxKeysOf("down")
	url := testkit.SiteURL(port) + "/hook"

	resp, body := testkit.Post(t, url, []byte("evt_before"), "Idempotency-Key", "evt_before")
	wantAccepted(t, resp, body)
	waitInboxDrained(t, rc, keys, 10*time.Second)

	srv.Kill()
	for i := range 5 {
		key := fmt.Sprintf("evt_down_%d", i)
		resp, body := testkit.Post(t, url, []byte(key), "Idempotency-Key", key)
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("%s with Redis down: %d, Retry-After %q: %s; want 503 with Retry-After", key, resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
	}

	srv.Restart()
	// the provider retries until the event is accepted
	var answers []int
	testkit.WaitFor(t, 20*time.Second, "an event is accepted once Redis is back", func() (bool, string) {
		resp, body := testkit.Post(t, url, []byte("evt_after"), "Idempotency-Key", "evt_after")
		answers = append(answers, resp.StatusCode)
		if resp.StatusCode != http.StatusAccepted && resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("after Redis came back: %d %s, want 503 or 202", resp.StatusCode, body)
		}
		if resp.StatusCode == http.StatusAccepted && resp.Header.Get(testkit.ReplayedHeader) != "" {
			t.Fatalf("the first accepted evt_after is a replay: the event was stored before an earlier 503")
		}
		return resp.StatusCode == http.StatusAccepted, fmt.Sprint(answers)
	})
	testkit.WaitFor(t, 10*time.Second, "the event accepted after Redis came back is delivered", func() (bool, string) {
		n := deliveriesByKey(up)["evt_after"]
		return n >= 1, fmt.Sprintf("%d deliveries", n)
	})
	waitInboxDrained(t, rc, keys, 10*time.Second)
	got := deliveriesByKey(up)
	if got["evt_after"] != 1 || got["evt_before"] != 1 || len(got) != 2 {
		t.Fatalf("deliveries by key: %v; want evt_before and evt_after once each, nothing that was answered 503", got)
	}
}

// Inbox mode refuses `fail open` and the memory store at load time; it
// runs on the redis store and on the file store, the default.
func TestInboxConfigErrors(t *testing.T) {
	srv := testkit.StartRedis(t)
	for _, tc := range []struct {
		name, store, extra string
		want               []string // nil: the config loads
	}{
		{"fail open", "store redis redis://" + srv.Addr(), "fail open", []string{"inbox", "fail", "open"}},
		{"memory store", "store memory", "", []string{"inbox", "memory", "redis"}},
		{"redis store", "store redis redis://" + srv.Addr(), "", nil},
		{"no store", "", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testkit.OwnDataDir(t) // the file store's, for "no store"
			sites := fmt.Sprintf(`:%d {
	webhook_idempotency {
		source cfg
		%s
		%s
		inbox {
			deliver_to http://127.0.0.1:9/hook
		}
	}
}`, testkit.FreePort(t), tc.store, tc.extra)
			err := inboxConfigError(t, sites)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("config does not load: %v\n%s", err, sites)
				}
				return
			}
			if err == nil {
				t.Fatalf("config loads:\n%s", sites)
			}
			msg := strings.ToLower(err.Error())
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Fatalf("error %q does not mention %q", err, w)
				}
			}
			t.Logf("%v", err)
		})
	}
}

// inboxMethod is what the stack trace of a goroutine running a method of
// the inbox (internal/inbox's *Inbox) says.
const inboxMethod = "/internal/inbox.(*Inbox)."

// inboxGoroutineRoots counts the running goroutines of this process whose
// function is a method of the inbox (readLoop, scheduleLoop, deliver), by
// name, and returns their stacks.
func inboxGoroutineRoots() (map[string]int, string) {
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	roots := make(map[string]int)
	var stacks []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		var root string
		for _, line := range strings.Split(g, "\n") {
			if strings.HasPrefix(line, "created by ") {
				break
			}
			if line != "" && !strings.HasPrefix(line, "\t") && !strings.HasPrefix(line, "goroutine ") {
				root = line
			}
		}
		if i := strings.Index(root, inboxMethod); i >= 0 {
			name := root[i+len(inboxMethod):]
			if j := strings.IndexByte(name, '('); j >= 0 {
				name = name[:j]
			}
			roots[name]++
		}
		if strings.Contains(g, inboxMethod) {
			stacks = append(stacks, g)
		}
	}
	return roots, strings.Join(stacks, "\n\n")
}

// A reload while a delivery is in progress neither drops nor duplicates
// it, leaves one set of workers running, and stopping Caddy leaves no
// inbox goroutine behind.
func TestInboxReloadDuringDeliveryDeliversOnce(t *testing.T) {
	srv := testkit.StartRedis(t)
	rc := srv.Client(t)
	up := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		select { // a slow application
		case <-time.After(time.Second):
		case <-r.Context().Done():
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	port := testkit.FreePort(t)
	site := inboxSite(port, "reload", "store redis redis://"+srv.Addr(),
		fmt.Sprintf("deliver_to %s/hook\n\t\t\ttimeout 5s\n\t\t\tretries 200ms", up.URL))
	c := testkit.StartCaddy(t, "", site)
	keys := inboxKeysOf("reload")
	url := testkit.SiteURL(port) + "/hook"

	resp, body := testkit.Post(t, url, []byte("evt_reload_1"), "Idempotency-Key", "evt_reload_1")
	wantAccepted(t, resp, body)
	testkit.WaitFor(t, 10*time.Second, "the delivery is in progress", func() (bool, string) {
		return up.Calls.Load() >= 1, fmt.Sprintf("%d calls", up.Calls.Load())
	})
	start := time.Now()
	if err := c.Reload(site); err != nil {
		t.Fatal(err)
	}
	t.Logf("reload took %s", time.Since(start))

	resp, body = testkit.PostAfterReload(t, url, []byte("evt_reload_2"), "Idempotency-Key", "evt_reload_2")
	wantAccepted(t, resp, body)
	waitInboxDrained(t, rc, keys, 15*time.Second)
	got := deliveriesByKey(up)
	if got["evt_reload_1"] != 1 || got["evt_reload_2"] != 1 || len(got) != 2 {
		t.Fatalf("deliveries by key: %v; want evt_reload_1 (in progress during the reload) and evt_reload_2 once each", got)
	}

	// one set of workers: the old configuration's are gone
	testkit.WaitFor(t, 30*time.Second, "one readLoop and one scheduleLoop after the reload", func() (bool, string) {
		roots, _ := inboxGoroutineRoots()
		return roots["readLoop"] == 1 && roots["scheduleLoop"] == 1, fmt.Sprint(roots)
	})

	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		roots, stacks := inboxGoroutineRoots()
		if stacks == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("inbox goroutines left after Caddy stopped: %v\n%s", roots, stacks)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// An inbox on a three-master Redis Cluster accepts, deduplicates and
// delivers each event exactly once; its keys span the cluster's nodes.
func TestInboxRedisClusterDeliversEachOnce(t *testing.T) {
	cluster := testkit.StartCluster(t)
	cc := cluster.Client(t)
	up := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		w.WriteHeader(http.StatusOK)
	})
	port := testkit.FreePort(t)
	testkit.StartCaddy(t, "", inboxSite(port, "cluster", cluster.StoreBlock("timeout 5s"),
		fmt.Sprintf("deliver_to %s/hook\n\t\t\ttimeout 5s\n\t\t\tretries 200ms", up.URL)))
	keys := inboxKeysOf("cluster")
	url := testkit.SiteURL(port) + "/hook"

	const n = 40
	for i := range n {
		key := fmt.Sprintf("evt_cluster_%d", i)
		resp, body := testkit.Post(t, url, []byte(key), "Idempotency-Key", key)
		wantAccepted(t, resp, body)
		resp, body = testkit.Post(t, url, []byte(key), "Idempotency-Key", key)
		wantAcceptReplayed(t, resp, body)
	}
	s := waitInboxDrained(t, cc, keys, 30*time.Second)
	if s.dead != 0 {
		t.Fatalf("%d events dead-lettered with a healthy upstream", s.dead)
	}
	got := deliveriesByKey(up)
	for i := range n {
		key := fmt.Sprintf("evt_cluster_%d", i)
		if got[key] != 1 {
			t.Errorf("%s delivered %d times, want once", key, got[key])
		}
		delete(got, key)
	}
	if len(got) > 0 {
		t.Errorf("unknown keys delivered: %v", got)
	}
	// after delivery, duplicates are still answered from the cluster
	for i := range 3 {
		key := fmt.Sprintf("evt_cluster_%d", i)
		resp, body := testkit.Post(t, url, []byte(key), "Idempotency-Key", key)
		wantAcceptReplayed(t, resp, body)
	}
	if c := up.Calls.Load(); c != n {
		t.Fatalf("upstream got %d deliveries, want %d", c, n)
	}
	var nodesWithKeys int
	for _, node := range cluster.Nodes {
		if k, err := node.Client(t).DBSize(context.Background()).Result(); err == nil && k > 0 {
			nodesWithKeys++
		}
	}
	if nodesWithKeys < 2 {
		t.Fatalf("the inbox's keys are on %d node(s): the cluster test does not span slots", nodesWithKeys)
	}
}
