package inbox

import (
	"fmt"
	"net/http"
	"sort"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// The rate limit: the GCRA's arithmetic and its slow-down rule, and the
// limit at work on both stores, shared by two inboxes on one Redis.

func TestParseRate(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]Rate{"10/s": {10, time.Second}, "600/m": {600, time.Minute}, "1/h": {1, time.Hour}} {
		r, err := ParseRate(in)
		if err != nil || r != want || r.String() != in {
			t.Errorf("ParseRate(%q) = %v (%q), %v; want %v", in, r, r.String(), err, want)
		}
	}
	for _, in := range []string{"", "10", "/s", "0/s", "-1/s", "1.5/s", "10/d", "10/", "1000001/s"} {
		if _, err := ParseRate(in); err == nil {
			t.Errorf("ParseRate(%q): no error", in)
		}
	}
}

func TestGCRA(t *testing.T) {
	t.Parallel()
	const ms = int64(time.Millisecond / time.Microsecond)
	iv := 100 * ms // 10/s
	var g gcra
	now := int64(1_000_000_000) * ms
	// evenly spaced: each reservation one interval after the one before
	for i := range 5 {
		if w, step := g.reserve(now, iv, 1); w != int64(i)*iv || step != iv {
			t.Fatalf("reservation %d waits %dµs (step %d), want %dµs", i, w, step, int64(i)*iv)
		}
	}
	// several at once: the first moment, and the step to each next one
	if w, step := g.reserve(now, iv, 3); w != 5*iv || step != iv {
		t.Fatalf("three moments: wait %d, step %d", w, step)
	}
	if w, _ := g.reserve(now, iv, 1); w != 8*iv {
		t.Fatalf("after three moments: wait %d, want %d", w, 8*iv)
	}
	// idle long enough, the next one goes at once: no burst is saved up
	now += 10_000 * ms
	if w, _ := g.reserve(now, iv, 1); w != 0 {
		t.Fatalf("after idling: wait %d", w)
	}
	if w, _ := g.reserve(now, iv, 1); w != iv {
		t.Fatalf("right after: wait %d, want one interval", w)
	}

	// a 429 halves the rate; another within a second does not
	now += 10_000 * ms
	g.slowDown(now)
	g.slowDown(now + 500*ms)
	if g.level != 1 {
		t.Fatalf("level %d after two 429s half a second apart, want 1", g.level)
	}
	g.reserve(now+600*ms, iv, 1)
	if w, step := g.reserve(now+600*ms, iv, 1); w != 2*iv || step != 2*iv {
		t.Fatalf("slowed once: spacing %d (step %d), want twice the interval", w, step)
	}
	// one more a second later halves it again, down to 1/16 at most
	for i := range 6 {
		g.slowDown(now + int64(i+1)*slowEvery.Microseconds())
	}
	if g.level != maxSlowLevel {
		t.Fatalf("level %d after many 429s, want the floor %d", g.level, maxSlowLevel)
	}
	at := g.at
	st := g.view(at, Rate{10, time.Second})
	if !st.Slowed || st.Current != 10.0/16 || st.SlowedUntil == nil {
		t.Fatalf("at the floor: %+v, want 10/16 a second", st)
	}
	// each minute without a 429 doubles it back
	g.settle(at + slowStep.Microseconds() + 1)
	if g.level != maxSlowLevel-1 {
		t.Fatalf("a minute later: level %d, want %d", g.level, maxSlowLevel-1)
	}
	st = g.view(at+int64(maxSlowLevel)*slowStep.Microseconds(), Rate{10, time.Second})
	if st.Slowed || st.Current != 10 || st.PerSecond != 10 {
		t.Fatalf("four minutes later: %+v, want the whole rate", st)
	}
}

// arrivals returns the sorted times the application received the keys.
func (rec *recorder) arrivals() []time.Time {
	var out []time.Time
	for _, a := range rec.seen() {
		out = append(out, a.at)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	return out
}

func TestInboxRateLimit(t *testing.T) {
	t.Parallel()
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			app := newRecorder(t, func(string, int) int { return http.StatusOK })
			s := open(t)
			ib := newOrderedInbox(t, s, "paced", app.URL, func(c *Config) {
				c.Rate = Rate{N: 20, Per: time.Second}
				c.Concurrency = 8
			})
			const n = 20
			for i := range n {
				acceptIn(t, ib, fmt.Sprint("e", i), "")
			}
			start := time.Now()
			ib.Start()
			testkit.Eventually(t, 20*time.Second, "every event delivered", func() bool { return len(app.delivered()) == n })
			// 20 at 20/s: the last starts 19 intervals after the first
			if took := app.arrivals()[n-1].Sub(start); took < 900*time.Millisecond {
				t.Fatalf("20 deliveries at 20/s took %s, want at least 950ms", took)
			}
			if d, err := ib.Delivery(t.Context(), 1); err != nil || d.Rate == nil || d.Rate.Limit != "20/s" || d.Rate.PerSecond != 20 {
				t.Fatalf("delivery %+v, %v: want the rate 20/s", d.Rate, err)
			}
		})
	}
}

// Two inboxes of one source on one Redis (two instances) share the rate.
func TestRedisInboxRateSharedByInstances(t *testing.T) {
	t.Parallel()
	srv := testkit.StartRedis(t)
	app := newRecorder(t, func(string, int) int { return http.StatusOK })
	paced := func(c *Config) { c.Rate = Rate{N: 20, Per: time.Second} }
	a := newOrderedInbox(t, openRedisStore(t, srv.Addr()), "shared", app.URL, paced)
	b := newOrderedInbox(t, openRedisStore(t, srv.Addr()), "shared", app.URL, paced)
	const n = 30
	for i := range n {
		acceptIn(t, []*Inbox{a, b}[i%2], fmt.Sprint("e", i), "")
	}
	start := time.Now()
	a.Start()
	b.Start()
	testkit.Eventually(t, 20*time.Second, "every event delivered", func() bool { return len(app.delivered()) == n })
	// alone, each would go at 20/s and be done in 0.75s
	if took := app.arrivals()[n-1].Sub(start); took < 1350*time.Millisecond {
		t.Fatalf("30 deliveries at 20/s shared by two instances took %s, want at least 1.45s", took)
	}
	if len(app.seen()) != n {
		t.Fatalf("%d attempts for %d events", len(app.seen()), n)
	}
}

// A 429 without Retry-After halves the rate, on every instance.
func TestInboxRateSlowsDownOn429(t *testing.T) {
	t.Parallel()
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			app := newRecorder(t, func(key string, n int) int {
				if key == "busy" && n == 1 {
					return http.StatusTooManyRequests
				}
				return http.StatusOK
			})
			s := open(t)
			ib := newOrderedInbox(t, s, "slowed", app.URL, func(c *Config) {
				c.Rate = Rate{N: 10, Per: time.Second}
				c.Retries = []time.Duration{100 * time.Millisecond}
			})
			acceptIn(t, ib, "busy", "")
			ib.Start()
			testkit.Eventually(t, 10*time.Second, "the 429 retried and delivered", func() bool { return len(app.delivered()) == 1 })
			d, err := ib.Delivery(t.Context(), 1)
			if err != nil || d.Rate == nil {
				t.Fatalf("delivery %+v, %v", d, err)
			}
			r := d.Rate
			if !r.Slowed || r.Current != 5 || r.PerSecond != 10 || r.SlowedUntil == nil || time.Until(*r.SlowedUntil) < 50*time.Second {
				t.Fatalf("rate after a 429 without Retry-After: %+v; want 5/s for a minute", r)
			}
		})
	}
}

// An event waiting for the rate limit is kept alive: a worker that waits
// longer than the reclaim time does not lose it to another instance, and
// nothing is delivered twice.
func TestRedisInboxHeldWhileThrottledIsNotReclaimed(t *testing.T) {
	t.Parallel()
	srv := testkit.StartRedis(t)
	app := newRecorder(t, func(string, int) int { return http.StatusOK })
	slow := func(c *Config) {
		c.Rate = Rate{N: 20, Per: time.Minute} // one every 3s: the last waits 6s
		c.Timeout = time.Second                // reclaimed after 3s idle; an attempt's time on a loaded machine
	}
	a := newOrderedInbox(t, openRedisStore(t, srv.Addr()), "throttled", app.URL, slow)
	b := newOrderedInbox(t, openRedisStore(t, srv.Addr()), "throttled", app.URL, slow)
	for i := range 3 {
		acceptIn(t, a, fmt.Sprint("e", i), "")
	}
	a.Start()
	b.Start()
	testkit.Eventually(t, time.Minute, "every event delivered", func() bool { return len(app.delivered()) == 3 })
	time.Sleep(time.Second)
	if got := attemptKeys(app.seen()); len(got) != 3 {
		t.Fatalf("attempts %v: an event held while throttled was taken over and delivered twice", got)
	}
	at := app.arrivals()
	for i := 1; i < len(at); i++ {
		if gap := at[i].Sub(at[i-1]); gap < 2700*time.Millisecond {
			t.Fatalf("deliveries %s apart at 20/m", gap)
		}
	}
}

// An inbox stopped while an event waits for the rate limit puts it back,
// unattempted: the next configuration delivers it as its first attempt.
func TestInboxStoppedWhileThrottledPutsEventBack(t *testing.T) {
	t.Parallel()
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			app := newRecorder(t, func(string, int) int { return http.StatusOK })
			s := open(t)
			ib := newOrderedInbox(t, s, "putback", app.URL, func(c *Config) { c.Rate = Rate{N: 1, Per: time.Hour} })
			acceptIn(t, ib, "first", "")
			acceptIn(t, ib, "second", "")
			ib.Start()
			testkit.Eventually(t, 30*time.Second, "the first delivered", func() bool { return len(app.delivered()) == 1 })
			time.Sleep(300 * time.Millisecond) // the second is read, waiting for its turn
			ib.Stop()
			c, err := ib.Counts(t.Context())
			if err != nil || c.Pending+c.Scheduled != 1 {
				t.Fatalf("counts after stopping: %+v, %v; want the second event kept", c, err)
			}
			next := newOrderedInbox(t, s, "putback", app.URL, nil)
			next.Start()
			testkit.Eventually(t, 10*time.Second, "the second delivered", func() bool { return len(app.delivered()) == 2 })
			if got := app.seen(); got[1].key != "second" || len(got) != 2 {
				t.Fatalf("attempts %v", attemptKeys(got))
			}
			if got := app.Requests()[1].Header.Get("Webhook-Attempt"); got != "1" {
				t.Fatalf("the put back event came as attempt %s, want 1: waiting for the rate is no attempt", got)
			}
		})
	}
}
