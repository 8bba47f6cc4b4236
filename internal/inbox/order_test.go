package inbox

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/caddyserver/caddy/v2"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/redact"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
	"github.com/webhookguard/caddy-webhook-idempotency/store/redisstore"
)

// Ordered delivery (order_by) on the redis store (a real Redis) and on the
// file store: a group's events one at a time in acceptance order, other
// groups going on meanwhile, a dead-lettered head handing its group on,
// and nothing of a group left once it has drained.

// backends opens a fresh store of each kind for a test.
var backends = map[string]func(t *testing.T) store.Store{
	"redis": func(t *testing.T) store.Store {
		return openRedisStore(t, testkit.StartRedis(t).Addr())
	},
	"file": func(t *testing.T) store.Store {
		s, closeStore := openFileStore(t, filepath.Join(t.TempDir(), "store.db"))
		t.Cleanup(closeStore)
		return s
	},
}

// openRedisStore provisions a Redis store on addrs. Its calls are bounded
// at 10s rather than the default 500ms: these tests are about what the
// inbox does, and a loaded machine's slow call is not a store outage.
func openRedisStore(t testing.TB, addrs ...string) *redisstore.Store {
	return openRedisStoreWith(t, &redisstore.Store{Addresses: addrs, Timeout: caddy.Duration(10 * time.Second)})
}

// openRedisStoreWith provisions s.
func openRedisStoreWith(t testing.TB, s *redisstore.Store) *redisstore.Store {
	t.Helper()
	ctx, cancel := testkit.NewContext(t)
	if err := s.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.Cleanup()
		cancel()
	})
	return s
}

// groupHeader carries a test event's group.
const groupHeader = "X-Group"

// newOrderedInbox builds an inbox of source on s whose events are grouped
// by their X-Group header, with no jitter; set changes the rest.
func newOrderedInbox(t testing.TB, s store.Store, source, deliverTo string, set func(*Config)) *Inbox {
	t.Helper()
	rd, _ := redact.New(nil)
	cfg := Config{
		Source: source, DeliverTo: deliverTo, Respond: 202, Retries: []time.Duration{300 * time.Millisecond, 300 * time.Millisecond, 300 * time.Millisecond},
		Timeout: 2 * time.Second, Concurrency: 4, TTL: time.Hour, Redact: rd, Logger: zap.NewNop(),
		OrderBy: []string{"header:" + groupHeader},
		GroupOf: func(ev *event.Request) string {
			for line := range strings.SplitSeq(ev.Headers, "\r\n") {
				if v, ok := strings.CutPrefix(line, groupHeader+": "); ok {
					return v
				}
			}
			return ""
		},
	}
	if set != nil {
		set(&cfg)
	}
	ib, err := New(cfg, s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ib.Stop)
	return ib
}

// acceptIn accepts the event key in group ("" for none).
func acceptIn(t testing.TB, ib *Inbox, key, group string) {
	t.Helper()
	res, err := acceptEvent(t, ib, key, group)
	if err != nil || res.State != store.StateClaimed {
		t.Fatalf("accepting %s: %s, %v", key, res.State, err)
	}
}

// acceptEvent offers the inbox the event key in group ("" for none).
func acceptEvent(t testing.TB, ib *Inbox, key, group string) (store.ClaimResult, error) {
	body := []byte(`{"id":"` + key + `"}`)
	hash := sha256.Sum256(body)
	headers := "Content-Type: application/json\r\n"
	if group != "" {
		headers += groupHeader + ": " + group + "\r\n"
	}
	ev := event.Request{Source: ib.Source(), Key: key, StoreKey: "idem:" + ib.Source() + ":" + key, Method: "POST", URI: "/hook",
		Headers: headers, Body: body, Received: time.Now()}
	return ib.Accept(t.Context(), store.Claim{Key: ev.StoreKey, Owner: store.NewOwner()}, &hash, &ev)
}

// attempt is one request the application received.
type attempt struct {
	key, broken string
	status      int
	at          time.Time
}

// recorder is an application that answers by a rule and records every
// attempt in order of arrival.
type recorder struct {
	*testkit.Upstream
	mu       sync.Mutex
	attempts []attempt
}

func newRecorder(t *testing.T, answer func(key string, n int) int) *recorder {
	rec := &recorder{}
	rec.Upstream = testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		key := r.Header.Get("Idempotency-Key")
		rec.mu.Lock()
		n := 1
		for _, a := range rec.attempts {
			if a.key == key {
				n++
			}
		}
		status := answer(key, n)
		rec.attempts = append(rec.attempts, attempt{key: key, broken: r.Header.Get(OrderBrokenHeader), status: status, at: time.Now()})
		rec.mu.Unlock()
		time.Sleep(20 * time.Millisecond) // long enough for a second worker to overtake, were it allowed
		w.WriteHeader(status)
	})
	return rec
}

func (rec *recorder) seen() []attempt {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return slices.Clone(rec.attempts)
}

// delivered lists the keys answered 2xx, in order.
func (rec *recorder) delivered() []string {
	var out []string
	for _, a := range rec.seen() {
		if a.status < 300 {
			out = append(out, a.key)
		}
	}
	return out
}

// of keeps the keys with a prefix.
func of(keys []string, prefix string) []string {
	var out []string
	for _, k := range keys {
		if strings.HasPrefix(k, prefix) {
			out = append(out, k)
		}
	}
	return out
}

func TestInboxOrderedGroupWaitsForItsHead(t *testing.T) {
	t.Parallel()
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			// a1 fails twice; everything else is delivered at once
			app := newRecorder(t, func(key string, n int) int {
				if key == "a1" && n <= 2 {
					return http.StatusInternalServerError
				}
				return http.StatusOK
			})
			s := open(t)
			// a1's retries wait long enough that group B's two deliveries
			// come before its third attempt on a loaded machine too
			ib := newOrderedInbox(t, s, "ordered", app.URL, func(c *Config) { c.Retries = []time.Duration{time.Second, time.Second} })
			for _, e := range [][2]string{{"a1", "A"}, {"a2", "A"}, {"b1", "B"}, {"a3", "A"}, {"b2", "B"}, {"u1", ""}} {
				acceptIn(t, ib, e[0], e[1])
			}
			ib.Start()
			testkit.Eventually(t, 15*time.Second, "every event delivered", func() bool {
				c, err := ib.Counts(t.Context())
				return err == nil && c.Pending == 0 && c.Scheduled == 0 && len(app.delivered()) == 6
			})
			seen := app.seen()
			got := app.delivered()
			if a := of(got, "a"); fmt.Sprint(a) != "[a1 a2 a3]" {
				t.Fatalf("group A delivered as %v, want [a1 a2 a3]; attempts %v", a, seen)
			}
			if b := of(got, "b"); fmt.Sprint(b) != "[b1 b2]" {
				t.Fatalf("group B delivered as %v, want [b1 b2]", b)
			}
			// no attempt of a2 or a3 before a1 was delivered, on its third attempt
			var a1Done time.Time
			for i, a := range seen {
				switch {
				case a.key == "a1" && a.status == http.StatusOK:
					a1Done = a.at
				case (a.key == "a2" || a.key == "a3") && a1Done.IsZero():
					t.Fatalf("attempt %d, %s, came before a1 was delivered: %v", i, a.key, seen)
				}
			}
			if n := len(of(attemptKeys(seen), "a1")); n != 3 {
				t.Fatalf("a1 attempted %d times, want 3", n)
			}
			// group B went on while A waited for its retries
			for _, a := range seen {
				if a.key == "b2" && !a.at.Before(a1Done) {
					t.Fatalf("b2 delivered at %s, after a1 (%s): group B waited for group A", a.at.Format(time.StampMilli), a1Done.Format(time.StampMilli))
				}
			}
			wantNoGroupsLeft(t, s, ib)
		})
	}
}

func attemptKeys(as []attempt) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.key
	}
	return out
}

// wantNoGroupsLeft fails unless the store keeps nothing of any group: the
// groups are bounded by what is pending.
func wantNoGroupsLeft(t *testing.T, s store.Store, ib *Inbox) {
	t.Helper()
	// the application's last answer may still be on its way back
	testkit.WaitFor(t, 30*time.Second, "every group drained", func() (bool, string) {
		g, err := ib.q.groups(t.Context(), 10)
		return err == nil && g.Pending == 0 && g.Held == 0 && len(g.Longest) == 0, fmt.Sprintf("%+v, %v", g, err)
	})
	switch q := ib.q.(type) {
	case *redisQueue:
		for _, p := range q.snapshot() {
			for _, k := range p.keys[3:] { // held, order, heads, groups
				if n, err := q.client.Exists(t.Context(), k).Result(); err != nil || n != 0 {
					t.Fatalf("redis key %s still exists (%d, %v) once every group drained", k, n, err)
				}
			}
		}
	case *fileQueue:
		q.src.mu.Lock()
		n, held := len(q.src.groups), q.src.heldCount
		q.src.mu.Unlock()
		if n != 0 || held != 0 {
			t.Fatalf("file queue keeps %d groups, %d held events once every group drained", n, held)
		}
	default:
		t.Fatalf("queue %T on store %T", ib.q, s)
	}
}

func TestInboxDeadHeadReleasesItsGroup(t *testing.T) {
	t.Parallel()
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			app := newRecorder(t, func(key string, n int) int {
				if key == "a1" {
					return http.StatusBadRequest // refused for good
				}
				return http.StatusOK
			})
			s := open(t)
			ib := newOrderedInbox(t, s, "broken", app.URL, nil)
			for _, k := range []string{"a1", "a2", "a3"} {
				acceptIn(t, ib, k, "A")
			}
			ib.Start()
			testkit.Eventually(t, 10*time.Second, "a2 and a3 delivered", func() bool { return len(app.delivered()) == 2 })
			dead, err := ib.DeadLetters(t.Context(), "", "-", 10)
			if err != nil || len(dead) != 1 || dead[0].Key != "a1" {
				t.Fatalf("dead letters %+v, %v; want a1", dead, err)
			}
			seen := app.seen()
			if fmt.Sprint(attemptKeys(seen)) != "[a1 a2 a3]" {
				t.Fatalf("attempts %v, want a1 a2 a3", seen)
			}
			if seen[1].broken != dead[0].ID {
				t.Fatalf("a2 carried %s %q, want the dead letter's id %q", OrderBrokenHeader, seen[1].broken, dead[0].ID)
			}
			if seen[2].broken != "" {
				t.Fatalf("a3 carried %s %q: only the event right after the gap does", OrderBrokenHeader, seen[2].broken)
			}
			// redelivered, the dead letter joins the end of its group
			acceptIn(t, ib, "a4", "A")
			testkit.Eventually(t, 10*time.Second, "a4 delivered", func() bool { return len(app.delivered()) == 3 })
			wantNoGroupsLeft(t, s, ib)
		})
	}
}

// The admin API's view of a group held by a head waiting for its retry.
func TestInboxGroupsShowWhatHoldsThem(t *testing.T) {
	t.Parallel()
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			app := newRecorder(t, func(key string, n int) int {
				if key == "a1" {
					return http.StatusServiceUnavailable
				}
				return http.StatusOK
			})
			s := open(t)
			ib := newOrderedInbox(t, s, "held", app.URL, func(c *Config) { c.Retries = []time.Duration{time.Hour} })
			acceptIn(t, ib, "a1", "A")
			time.Sleep(5 * time.Millisecond)
			acceptIn(t, ib, "b1", "B")
			acceptIn(t, ib, "a2", "A")
			acceptIn(t, ib, "a3", "A")
			acceptIn(t, ib, "c1", "C")
			ib.Start()
			var d Delivery
			testkit.WaitFor(t, 10*time.Second, "a1 scheduled, B and C delivered", func() (bool, string) {
				var err error
				d, err = ib.Delivery(t.Context(), 10)
				return err == nil && d.Groups != nil && d.Groups.Pending == 1 && d.Pending == 2 && d.Scheduled == 1 && len(app.delivered()) == 2, fmt.Sprintf("%+v %v", d, err)
			})
			g := d.Groups
			if g.Pending != 1 || g.Held != 2 || len(g.Longest) != 1 {
				t.Fatalf("groups %+v, want group A alone, two held", g)
			}
			a := g.Longest[0]
			if a.Group != "A" || a.Pending != 3 || a.Head.State != "scheduled" || a.Head.Attempts != 1 || a.Head.LastStatus != 503 || a.Head.Due == nil {
				t.Fatalf("group A: %+v head %+v; want 3 pending, the head scheduled after one 503", a, a.Head)
			}
			if until := time.Until(*a.Head.Due); until < 50*time.Minute {
				t.Fatalf("head due in %s, want about an hour", until)
			}
			if d.Pending != 2 || fmt.Sprint(d.OrderBy) != "[header:X-Group]" || d.Rate != nil || d.Partitions != 1 {
				t.Fatalf("delivery %+v: want the two held events pending, the order_by sources, no rate, 1 partition", d)
			}
		})
	}
}

// The file store keeps the order of a group across a close and reopen: the
// held events come back behind their head.
func TestFileInboxOrderAcrossReopen(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "store.db")
	s, closeStore := openFileStore(t, path)
	ib := newOrderedInbox(t, s, "reopen", "http://127.0.0.1:9/never", nil)
	for i := range 6 {
		acceptIn(t, ib, fmt.Sprint("a", i), "A")
		acceptIn(t, ib, fmt.Sprint("b", i), "B")
	}
	ib.Stop()
	closeStore()

	app := newRecorder(t, func(string, int) int { return http.StatusOK })
	s2, closeStore2 := openFileStore(t, path)
	defer closeStore2()
	ib2 := newOrderedInbox(t, s2, "reopen", app.URL, nil)
	if c, err := ib2.Counts(t.Context()); err != nil || c.Pending != 12 {
		t.Fatalf("counts after reopening: %+v %v", c, err)
	}
	ib2.Start()
	testkit.Eventually(t, 10*time.Second, "every event delivered", func() bool { return len(app.delivered()) == 12 })
	got := app.delivered()
	if a := of(got, "a"); fmt.Sprint(a) != "[a0 a1 a2 a3 a4 a5]" {
		t.Fatalf("group A after reopening: %v", a)
	}
	if b := of(got, "b"); fmt.Sprint(b) != "[b0 b1 b2 b3 b4 b5]" {
		t.Fatalf("group B after reopening: %v", b)
	}
	wantNoGroupsLeft(t, s2, ib2)
}

// Many groups at once with concurrent acceptance: each group in its own
// order, every event once.
func TestInboxManyGroupsUnderConcurrency(t *testing.T) {
	t.Parallel()
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			app := newRecorder(t, func(key string, n int) int {
				if n == 1 && strings.HasSuffix(key, "-0") {
					return http.StatusBadGateway // every group's first event is retried once
				}
				return http.StatusOK
			})
			s := open(t)
			ib := newOrderedInbox(t, s, "many", app.URL, func(c *Config) {
				c.Concurrency = 8
				c.Retries = []time.Duration{100 * time.Millisecond}
			})
			ib.Start()
			const groups, each = 12, 5
			var wg sync.WaitGroup
			for g := range groups {
				wg.Add(1)
				go func() { // one sender per group: its events in order
					defer wg.Done()
					for i := range each {
						acceptIn(t, ib, fmt.Sprintf("g%02d-%d", g, i), fmt.Sprint("G", g))
					}
				}()
			}
			for i := range 10 {
				acceptIn(t, ib, fmt.Sprint("free", i), "")
			}
			wg.Wait()
			testkit.Eventually(t, 20*time.Second, "every event delivered", func() bool { return len(app.delivered()) == groups*each+10 })
			got := app.delivered()
			for g := range groups {
				var want []string
				for i := range each {
					want = append(want, fmt.Sprintf("g%02d-%d", g, i))
				}
				if o := of(got, fmt.Sprintf("g%02d-", g)); !slices.Equal(o, want) {
					t.Fatalf("group %d delivered as %v", g, o)
				}
			}
			wantNoGroupsLeft(t, s, ib)
		})
	}
}

// Changing the number of partitions loses and reorders nothing: a group
// still pending in the old layout takes its new events there, until it
// drains; then the old layout leaves the registry.
func TestRedisInboxPartitionsChange(t *testing.T) {
	t.Parallel()
	srv := testkit.StartRedis(t)
	s := openRedisStore(t, srv.Addr())
	fail := make(chan struct{})
	app := newRecorder(t, func(key string, n int) int {
		select {
		case <-fail:
			return http.StatusOK
		default:
			return http.StatusServiceUnavailable
		}
	})
	// the application fails until the change is made: retries enough
	// that no event is dead by then, however slow the machine
	retries := slices.Repeat([]time.Duration{200 * time.Millisecond}, 300)
	old := newOrderedInbox(t, s, "moving", app.URL, func(c *Config) {
		c.Retries = retries
	})
	old.Start()
	for i := range 3 {
		acceptIn(t, old, fmt.Sprint("a", i), "A")
		acceptIn(t, old, fmt.Sprint("u", i), "")
	}
	testkit.Eventually(t, 30*time.Second, "the old layout's heads attempted", func() bool { return len(app.seen()) >= 4 })
	old.Stop()

	// a reload to 4 partitions, while group A waits in the old one
	next := newOrderedInbox(t, s, "moving", app.URL, func(c *Config) {
		c.Partitions = 4
		c.Retries = retries
	})
	next.Start()
	testkit.Eventually(t, 30*time.Second, "the old layout is read", func() bool {
		q := next.q.(*redisQueue)
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.layouts[1]
	})
	for i := 3; i < 6; i++ {
		acceptIn(t, next, fmt.Sprint("a", i), "A")
	}
	for i := range 40 {
		acceptIn(t, next, fmt.Sprint("v", i), "")
	}
	close(fail)
	testkit.Eventually(t, time.Minute, "every event delivered", func() bool { return len(app.delivered()) == 6+3+40 })
	if a := of(app.delivered(), "a"); fmt.Sprint(a) != "[a0 a1 a2 a3 a4 a5]" {
		t.Fatalf("group A across the change: %v", a)
	}
	// the new layout spread the unordered events over its 4 streams, and
	// the old one leaves the registry once drained
	q := next.q.(*redisQueue)
	testkit.Eventually(t, 12*layoutEvery, "the old layout drained out of the registry", func() bool {
		m, err := q.client.SMembers(context.Background(), q.registry).Result()
		return err == nil && fmt.Sprint(m) == "[4]"
	})
	for i := range 4 {
		p := q.partOf(4, i)
		if !p.grouped.Load() {
			t.Errorf("partition %d never read", i)
		}
	}
	wantNoGroupsLeft(t, s, next)
}

// Unordered events spread over every partition, and a group stays on one.
func TestRedisInboxPartitionsSpread(t *testing.T) {
	t.Parallel()
	s := openRedisStore(t, testkit.StartRedis(t).Addr())
	ib := newOrderedInbox(t, s, "spread", "http://127.0.0.1:9/never", func(c *Config) { c.Partitions = 4 })
	for i := range 60 {
		acceptIn(t, ib, fmt.Sprint("u", i), "")
	}
	for i := range 5 {
		acceptIn(t, ib, fmt.Sprint("g", i), "G")
	}
	q := ib.q.(*redisQueue)
	ctx := t.Context()
	withG := 0
	for i := range 4 {
		p := q.partOf(4, i)
		if !strings.HasPrefix(p.stream(), fmt.Sprintf("{idem:spread:%d}", i)) {
			t.Fatalf("partition %d is %s, want the hash tag {idem:spread:%d}", i, p.stream(), i)
		}
		n, err := q.client.XLen(ctx, p.stream()).Result()
		if err != nil || n == 0 {
			t.Fatalf("partition %d holds %d events (%v): 60 unordered events did not spread", i, n, err)
		}
		if h, _ := q.client.XLen(ctx, p.held()).Result(); h > 0 {
			withG++
			if h != 4 {
				t.Fatalf("partition %d holds %d of group G behind its head, want 4", i, h)
			}
		}
	}
	if withG != 1 {
		t.Fatalf("group G is held in %d partitions, want one", withG)
	}
	if c, err := ib.Counts(ctx); err != nil || c.Pending != 65 {
		t.Fatalf("counts %+v %v, want 65 pending", c, err)
	}
}

// A reload on the file store: the new configuration's inbox shares the
// source's queue with the old one, reads it too, and goes on delivering,
// in order, once the old one has stopped.
func TestFileInboxReloadKeepsDelivering(t *testing.T) {
	t.Parallel()
	app := newRecorder(t, func(string, int) int { return http.StatusOK })
	s, closeStore := openFileStore(t, filepath.Join(t.TempDir(), "store.db"))
	defer closeStore()
	old := newOrderedInbox(t, s, "reloaded", app.URL, nil)
	old.Start()
	acceptIn(t, old, "a0", "A")
	next := newOrderedInbox(t, s, "reloaded", app.URL, nil)
	next.Start()
	old.Stop()
	for i := 1; i < 5; i++ {
		acceptIn(t, next, fmt.Sprint("a", i), "A")
	}
	testkit.Eventually(t, 10*time.Second, "every event delivered after the reload", func() bool { return len(app.delivered()) == 5 })
	if a := app.delivered(); fmt.Sprint(a) != "[a0 a1 a2 a3 a4]" {
		t.Fatalf("delivered %v", a)
	}
}
