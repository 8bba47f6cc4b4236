package inbox

import (
	"crypto/sha256"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/record"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/results"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// The delivery policy on the redis store (a real Redis) and on the file
// store: routes and fan-out, pause and resume, the breaker, the
// application's own answer, newer_than, and the queue of a route a new
// configuration no longer has.

// reopenable opens a store of each kind that a test can open again, as a
// restarted Caddy does: the same Redis, the same file.
var reopenable = map[string]func(t *testing.T) func() store.Store{
	"redis": func(t *testing.T) func() store.Store {
		addr := testkit.StartRedis(t).Addr()
		return func() store.Store { return openRedisStore(t, addr) }
	},
	"file": func(t *testing.T) func() store.Store {
		path := filepath.Join(t.TempDir(), "store.db")
		var closeLast func()
		t.Cleanup(func() {
			if closeLast != nil {
				closeLast()
			}
		})
		return func() store.Store {
			if closeLast != nil {
				closeLast() // one process holds the file: the last one goes
			}
			s, closeStore := openFileStore(t, path)
			closeLast = closeStore
			return s
		}
	},
}

// kindHeader carries a test event's kind, which routes match.
const kindHeader = "X-Kind"

// kindIs matches events whose kind passes f.
func kindIs(f func(kind string) bool) func(ev *event.Request) bool {
	return func(ev *event.Request) bool {
		for line := range strings.SplitSeq(ev.Headers, "\r\n") {
			if v, ok := strings.CutPrefix(line, kindHeader+": "); ok {
				return f(v)
			}
		}
		return false
	}
}

// acceptKind accepts the event key of a kind, in group ("" for none), with
// a version header (newer_than's value, "" for none).
func acceptKind(t testing.TB, ib *Inbox, key, kind, group, version string) {
	t.Helper()
	ev, c, hash := testEvent(ib, key, kind, group, version)
	res, err := ib.Accept(t.Context(), c, &hash, &ev)
	if err != nil || res.State != store.StateClaimed {
		t.Fatalf("accepting %s: %s, %v", key, res.State, err)
	}
}

// testEvent builds a test event, its claim and its body's hash.
func testEvent(ib *Inbox, key, kind, group, version string) (event.Request, store.Claim, [32]byte) {
	body := []byte(`{"id":"` + key + `"}`)
	headers := "Content-Type: application/json\r\n"
	if kind != "" {
		headers += kindHeader + ": " + kind + "\r\n"
	}
	if group != "" {
		headers += groupHeader + ": " + group + "\r\n"
	}
	if version != "" {
		headers += "X-Version: " + version + "\r\n"
	}
	ev := event.Request{Source: ib.Source(), Key: key, StoreKey: "idem:" + ib.Source() + ":" + key, Method: "POST", URI: "/hook",
		Headers: headers, Body: body, Received: time.Now()}
	return ev, store.Claim{Key: ev.StoreKey, Owner: store.NewOwner()}, sha256.Sum256(body)
}

// Fan-out: an event matching two routes is delivered to both, one that
// matches none to deliver_to; a destination that fails for a while does
// not hold the other back, and catches up once it recovers, each event
// delivered once to each of its destinations.
func TestInboxRoutesFanOut(t *testing.T) {
	t.Parallel()
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var bUp atomic.Bool
			appA := newRecorder(t, func(string, int) int { return http.StatusOK })
			appB := newRecorder(t, func(string, int) int {
				if !bUp.Load() {
					return http.StatusServiceUnavailable
				}
				return http.StatusOK
			})
			appD := newRecorder(t, func(string, int) int { return http.StatusOK })
			ib := newOrderedInbox(t, open(t), "fan", appD.URL, func(c *Config) {
				// retries enough that B's events still wait when it comes
				// back, however long a loaded machine takes to see it fail
				c.Retries = slices.Repeat([]time.Duration{100 * time.Millisecond}, 300)
				c.Routes = []Route{
					{URL: appA.URL, Rule: "kind=a*", Match: kindIs(func(k string) bool { return strings.HasPrefix(k, "a") })},
					{URL: appB.URL, Rule: "kind=*b", Match: kindIs(func(k string) bool { return strings.HasSuffix(k, "b") })},
				}
			})
			ib.Start()
			acceptKind(t, ib, "ab1", "ab", "", "")
			acceptKind(t, ib, "a1", "a", "", "")
			acceptKind(t, ib, "ab2", "ab", "", "")
			acceptKind(t, ib, "x1", "x", "", "")
			// A and deliver_to keep up while B is down
			testkit.WaitFor(t, 10*time.Second, "A and deliver_to deliver while B fails", func() (bool, string) {
				return len(appA.delivered()) == 3 && len(appD.delivered()) == 1 && len(appB.seen()) >= 2,
					fmt.Sprintf("A %v, D %v, B %d attempts", appA.delivered(), appD.delivered(), len(appB.seen()))
			})
			if len(appB.delivered()) != 0 {
				t.Fatalf("B delivered %v while down", appB.delivered())
			}
			bUp.Store(true)
			testkit.WaitFor(t, 10*time.Second, "B catches up", func() (bool, string) {
				c, err := ib.Counts(t.Context())
				return err == nil && c.Pending == 0 && c.Scheduled == 0 && len(appB.delivered()) == 2, fmt.Sprintf("%+v %v, B %v", c, err, appB.delivered())
			})
			for app, want := range map[*recorder]string{appA: "[a1 ab1 ab2]", appB: "[ab1 ab2]", appD: "[x1]"} {
				got := app.delivered()
				slices.Sort(got)
				if fmt.Sprint(got) != want {
					t.Errorf("delivered %v, want %s once each", got, want)
				}
			}
			if c, _ := ib.Counts(t.Context()); c.Dead != 0 {
				t.Fatalf("dead letters: %+v", c)
			}
		})
	}
}

// A route's dead letters are its own: listed with its URL, found by id
// without naming it, and redelivered to it.
func TestInboxRouteDeadLetters(t *testing.T) {
	t.Parallel()
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var refuse atomic.Bool
			refuse.Store(true)
			appA := newRecorder(t, func(string, int) int {
				if refuse.Load() {
					return http.StatusBadRequest
				}
				return http.StatusOK
			})
			appD := newRecorder(t, func(string, int) int { return http.StatusOK })
			ib := newOrderedInbox(t, open(t), "deadroute", appD.URL, func(c *Config) {
				c.Routes = []Route{{URL: appA.URL, Rule: "kind=a", Match: kindIs(func(k string) bool { return k == "a" })}}
			})
			ib.Start()
			acceptKind(t, ib, "a1", "a", "", "")
			acceptKind(t, ib, "d1", "d", "", "")
			testkit.WaitFor(t, 10*time.Second, "a1 dead-lettered, d1 delivered", func() (bool, string) {
				c, err := ib.Counts(t.Context())
				return err == nil && c.Dead == 1 && len(appD.delivered()) == 1, fmt.Sprintf("%+v %v", c, err)
			})
			dead, err := ib.DeadLetters(t.Context(), "", "-", 10)
			if err != nil || len(dead) != 1 || dead[0].Key != "a1" || dead[0].Destination != appA.URL {
				t.Fatalf("dead letters %+v, %v; want a1 of %s", dead, err, appA.URL)
			}
			if own, err := ib.DeadLetters(t.Context(), appD.URL, "-", 10); err != nil || len(own) != 0 {
				t.Fatalf("deliver_to's dead letters %+v, %v; want none", own, err)
			}
			if _, err := ib.DeadLetters(t.Context(), "http://127.0.0.1:1/none", "-", 10); err != ErrNoDestination {
				t.Fatalf("an unknown destination: %v, want ErrNoDestination", err)
			}
			refuse.Store(false)
			if _, err := ib.Redeliver(t.Context(), "", dead[0].ID); err != nil {
				t.Fatal(err)
			}
			testkit.Eventually(t, 10*time.Second, "a1 redelivered to A", func() bool { return len(appA.delivered()) == 1 })
			if n := len(appD.seen()); n != 1 {
				t.Fatalf("deliver_to got %d attempts, want d1's only", n)
			}
		})
	}
}

// quiet is how long a test watches for deliveries that must not happen: a
// delivery that is let through comes within milliseconds.
const quiet = 600 * time.Millisecond

// A paused source accepts, delivers nothing, and stays paused across a
// restart; resumed, it delivers everything once. A paused destination
// holds its own events only.
func TestInboxPauseAcrossRestart(t *testing.T) {
	t.Parallel()
	for name, reopen := range reopenable {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			open := reopen(t)
			appA := newRecorder(t, func(string, int) int { return http.StatusOK })
			appD := newRecorder(t, func(string, int) int { return http.StatusOK })
			routes := func(c *Config) {
				c.Routes = []Route{{URL: appA.URL, Rule: "kind=a", Match: kindIs(func(k string) bool { return k == "a" })}}
			}
			ib := newOrderedInbox(t, open(), "paused", appD.URL, routes)
			ib.Start()
			if err := ib.Pause(t.Context(), "", true); err != nil {
				t.Fatal(err)
			}
			acceptKind(t, ib, "d1", "d", "", "")
			acceptKind(t, ib, "a1", "a", "", "")
			time.Sleep(quiet)
			if n := appA.Calls.Load() + appD.Calls.Load(); n != 0 {
				t.Fatalf("%d deliveries while the source is paused", n)
			}
			ib.Stop()

			// a restart: the pause is in the store
			ib = newOrderedInbox(t, open(), "paused", appD.URL, routes)
			ib.Start()
			if paused, err := ib.Paused(t.Context()); err != nil || !paused {
				t.Fatalf("after a restart: paused %v, %v", paused, err)
			}
			acceptKind(t, ib, "d2", "d", "", "")
			time.Sleep(quiet)
			if n := appA.Calls.Load() + appD.Calls.Load(); n != 0 {
				t.Fatalf("%d deliveries after a restart of a paused source", n)
			}
			// one destination paused, the source resumed: deliver_to goes on
			if err := ib.Pause(t.Context(), appA.URL, true); err != nil {
				t.Fatal(err)
			}
			if err := ib.Pause(t.Context(), "", false); err != nil {
				t.Fatal(err)
			}
			testkit.Eventually(t, 10*time.Second, "deliver_to delivers once resumed", func() bool { return len(appD.delivered()) == 2 })
			time.Sleep(quiet)
			if n := appA.Calls.Load(); n != 0 {
				t.Fatalf("%d deliveries to a paused destination", n)
			}
			dests, err := ib.Destinations(t.Context())
			if err != nil || len(dests) != 2 || dests[0].Paused || !dests[1].Paused || dests[1].Pending != 1 {
				t.Fatalf("destinations %+v, %v; want deliver_to going, A paused with a1 pending", dests, err)
			}
			if err := ib.Pause(t.Context(), destID(appA.URL), false); err != nil {
				t.Fatal(err)
			}
			testkit.Eventually(t, 10*time.Second, "A delivers once resumed", func() bool { return len(appA.delivered()) == 1 })
			if err := ib.Pause(t.Context(), "http://127.0.0.1:1/none", true); err != ErrNoDestination {
				t.Fatalf("pausing an unknown destination: %v", err)
			}
		})
	}
}

// A pause made through one instance holds the other instances on the same
// Redis (within a second on an idle machine: the time is logged; the wait
// allows a loaded one ten).
func TestRedisInboxPauseSeenByEveryInstance(t *testing.T) {
	t.Parallel()
	app := newRecorder(t, func(string, int) int { return http.StatusOK })
	addr := testkit.StartRedis(t).Addr()
	one := newOrderedInbox(t, openRedisStore(t, addr), "shared", app.URL, nil)
	two := newOrderedInbox(t, openRedisStore(t, addr), "shared", app.URL, nil)
	one.Start()
	two.Start()
	if err := one.Pause(t.Context(), "", true); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	testkit.WaitFor(t, 10*time.Second, "the other instance paused", func() (bool, string) {
		return two.gate.passage(time.Now()) == passNone, fmt.Sprintf("%+v", two.gate.state())
	})
	t.Logf("the other instance followed the pause after %s", time.Since(paused))
	for i := range 4 {
		acceptKind(t, two, fmt.Sprint("e", i), "", "", "")
	}
	time.Sleep(quiet)
	if n := app.Calls.Load(); n != 0 {
		t.Fatalf("%d deliveries while paused", n)
	}
	if err := two.Pause(t.Context(), "", false); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "every event delivered once resumed", func() bool { return len(app.delivered()) == 4 })
}

// The breaker's arithmetic: it opens on the share of failures of a full
// window, ignores what comes in while open, lets one probe through after
// the cooldown, doubles the cooldown while probes fail (up to
// MaxCooldown), and closes on a probe that succeeds.
func TestBreakerCell(t *testing.T) {
	b := Breaker{Percent: 50, Of: 4, Cooldown: time.Second}
	var c breakerCell
	now := int64(1_000_000)
	for _, failed := range []bool{true, false, true} {
		c.record(b, failed, false, now)
	}
	if c.view(b).State != breakerClosed {
		t.Fatalf("opened before the window was full: %+v", c)
	}
	c.record(b, false, false, now) // 2 of 4: 50%
	if st := c.view(b); st.State != breakerOpen || st.ProbeAt == nil || st.ProbeAt.UnixMilli() != now+1000 {
		t.Fatalf("after 2 failures of 4: %+v", st)
	}
	c.record(b, true, false, now+10) // an attempt under way when it opened
	if c.probe("w1", 5000, now+999) {
		t.Fatal("probe before the cooldown")
	}
	if !c.probe("w1", 5000, now+1000) || c.probe("w2", 5000, now+1001) {
		t.Fatal("the probe goes to one worker")
	}
	if !c.probe("w1", 5000, now+1002) {
		t.Fatal("the probe's worker keeps it")
	}
	c.record(b, true, true, now+1500) // the probe failed
	if st := c.view(b); st.State != breakerOpen || st.Cooldown != "2s" || st.ProbeAt.UnixMilli() != now+3500 {
		t.Fatalf("after a failed probe: %+v", st)
	}
	// a probe whose worker died is taken over once its lease lapses
	if !c.probe("w1", 100, now+3500) || c.probe("w2", 100, now+3550) || !c.probe("w2", 100, now+3601) {
		t.Fatalf("a lapsed probe: %+v", c)
	}
	for range 20 {
		c.record(b, true, true, c.probeAt)
		c.probe("w2", 100, c.probeAt)
	}
	if c.cooldown != MaxCooldown.Milliseconds() {
		t.Fatalf("cooldown %dms after many failed probes, want %s", c.cooldown, MaxCooldown)
	}
	c.record(b, false, true, c.probeAt)
	if st := c.view(b); st.State != breakerClosed || st.Attempts != 0 {
		t.Fatalf("after a probe that succeeded: %+v", st)
	}
}

// Two workers' records cross: the one that opened the breaker reached the
// gate first, then a closed state recorded just before it. The gate stays
// open (only a probe closes it), so no further attempt is let through; the
// probe's own closed state is kept.
func TestGateKeepsAnOpenBreakerFromCrossedRecords(t *testing.T) {
	b := Breaker{Percent: 50, Of: 2, Cooldown: time.Minute}
	var c breakerCell
	now := time.Now().UnixMilli()
	c.record(b, true, false, now)
	stale := c.view(b) // closed, one failure of one
	c.record(b, true, false, now)
	opened := c.view(b)
	var g gate
	if before, kept := g.setBreaker(opened, false); !kept || before != "" || g.passage(time.Now()) != passNone {
		t.Fatalf("the opening record: kept %v, before %q, passage %v", kept, before, g.passage(time.Now()))
	}
	if _, kept := g.setBreaker(stale, false); kept || g.passage(time.Now()) != passNone {
		t.Fatalf("a closed state recorded before the open one reopened deliveries (kept %v)", kept)
	}
	c = breakerCell{state: breakerClosed}
	if before, kept := g.setBreaker(c.view(b), true); !kept || before != breakerOpen || g.passage(time.Now()) != passAll {
		t.Fatalf("the probe's success: kept %v, before %q", kept, before)
	}
}

// A destination that keeps failing opens its breaker: events wait without
// spending attempts (none is dead-lettered, though their retries run out
// long before), one probe goes through after each cooldown, which doubles
// while they fail, and once a probe succeeds everything is delivered.
func TestInboxBreakerOpensAndCloses(t *testing.T) {
	t.Parallel()
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			const cooldown = 300 * time.Millisecond
			// the application fails until two probes have failed (the
			// breaker's cooldown doubled twice), whatever time that takes,
			// and answers from the third probe on
			var opened atomic.Pointer[Inbox]
			var up atomic.Bool
			app := newRecorder(t, func(string, int) int {
				if ib := opened.Load(); ib != nil && ib.gate.state().breaker.Cooldown == (4*cooldown).String() {
					up.Store(true)
				}
				if up.Load() {
					return http.StatusOK
				}
				return http.StatusInternalServerError
			})
			ib := newOrderedInbox(t, open(t), "breaker", app.URL, func(c *Config) {
				c.Retries = []time.Duration{50 * time.Millisecond, 50 * time.Millisecond}
				c.Concurrency = 2
				c.Breaker = Breaker{Percent: 50, Of: 4, Cooldown: cooldown}
			})
			opened.Store(ib)
			for i := range 10 {
				acceptKind(t, ib, fmt.Sprint("e", i), "", "", "")
			}
			ib.Start()
			testkit.WaitFor(t, time.Minute, "every event delivered once the third probe succeeds", func() (bool, string) {
				c, err := ib.Counts(t.Context())
				return err == nil && c.Pending == 0 && c.Scheduled == 0 && len(app.delivered()) == 10, fmt.Sprintf("%+v %v", c, err)
			})
			if c, _ := ib.Counts(t.Context()); c.Dead != 0 {
				t.Fatalf("%d events dead-lettered while the breaker held them", c.Dead)
			}
			if st := ib.gate.state().breaker; st.State != breakerClosed {
				t.Fatalf("breaker %+v after the successful probe", st)
			}
			// while open, attempts came one at a time, a cooldown apart,
			// doubling: the probes
			seen := app.seen()
			var failed []time.Time
			for _, a := range seen {
				if a.status != http.StatusOK {
					failed = append(failed, a.at)
				}
			}
			// the window (4) and up to one attempt under way in the other slot, then probes
			if len(failed) < 6 || len(failed) > 7 {
				t.Fatalf("%d failed attempts, want the 4 of the window (and one under way), then 2 probes: %v", len(failed), seen)
			}
			probes := failed[len(failed)-2:]
			if gap := probes[1].Sub(probes[0]); gap < 2*cooldown {
				t.Fatalf("probes %s apart, want at least the doubled cooldown %s", gap, 2*cooldown)
			}
		})
	}
}

// The application's own answer: a fast application's 2xx is the
// provider's answer and the key's record; a slow one's comes after the
// deadline, the provider has respond, and the event is delivered once all
// the same.
func TestInboxAnswersWithTheApplicationsAnswer(t *testing.T) {
	t.Parallel()
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			release := make(chan struct{})
			var calls atomic.Int64
			app := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, _ int64) {
				calls.Add(1)
				if r.Header.Get("Idempotency-Key") == "slow" {
					<-release
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusOK)
				fmt.Fprintf(w, `{"text":"hello %s"}`, r.Header.Get("Idempotency-Key"))
			})
			s := open(t)
			ib := newOrderedInbox(t, s, "answer", app.URL, func(c *Config) {
				// the slow attempt is held until the checks of its deadline
				// are done, however long a loaded machine takes over them:
				// it must not time out meanwhile
				c.AnswerWithin, c.MaxAnswer, c.Timeout = 700*time.Millisecond, 1<<20, time.Minute
			})
			ib.Start()

			ev, c, hash := testEvent(ib, "fast", "", "", "")
			res, ans, err := ib.AcceptAnswering(t.Context(), c, &hash, &ev)
			if err != nil || res.State != store.StateClaimed || ans == nil {
				t.Fatalf("accepting: %v %v %v", res.State, ans, err)
			}
			// waited for as long as a loaded machine takes to deliver it:
			// the deadline is the slow event's, below
			got := ans.Wait(t.Context(), time.Minute)
			rec, err := record.Decode(got)
			if err != nil || rec.Status != http.StatusOK || string(rec.Body) != `{"text":"hello fast"}` {
				t.Fatalf("the answer: %v %+v", err, rec)
			}
			// the key answers duplicates with it
			dup, err := s.Claim(t.Context(), c.Key, store.NewOwner(), time.Minute)
			if err != nil || dup.State != store.StateCompleted || string(dup.Record) != string(got) {
				t.Fatalf("the key after the answer: %v %v", dup.State, err)
			}

			ev, c, hash = testEvent(ib, "slow", "", "", "")
			start := time.Now()
			_, ans, err = ib.AcceptAnswering(t.Context(), c, &hash, &ev)
			if err != nil || ans == nil {
				t.Fatalf("accepting: %v %v", ans, err)
			}
			if got := ans.Wait(t.Context(), ib.cfg.AnswerWithin); got != nil {
				t.Fatal("a slow application's answer was waited for past the deadline")
			}
			if took := time.Since(start); took < ib.cfg.AnswerWithin || took > ib.cfg.AnswerWithin+10*time.Second {
				t.Fatalf("respond came after %s, want the deadline %s", took, ib.cfg.AnswerWithin)
			}
			close(release)
			testkit.WaitFor(t, 30*time.Second, "the slow event delivered", func() (bool, string) {
				c, err := ib.Counts(t.Context())
				return err == nil && c.Pending == 0 && c.Scheduled == 0, fmt.Sprintf("%+v %v", c, err)
			})
			dup, err = s.Claim(t.Context(), c.Key, store.NewOwner(), time.Minute)
			if r, _ := record.Decode(dup.Record); err != nil || dup.State != store.StateCompleted || r.Status != 202 || len(r.Body) != 0 {
				t.Fatalf("the slow key's record: %v %+v %v; want respond, the answer the provider had", dup.State, r, err)
			}
			if n := calls.Load(); n != 2 {
				t.Fatalf("%d attempts, want one each", n)
			}
		})
	}
}

// An event whose attempt at acceptance never ends (its worker died) is
// taken over and delivered, its attempt counted: on Redis by another
// worker once 3 timeouts passed, on the file store when it opens again.
func TestInboxAnsweringTakenOver(t *testing.T) {
	t.Parallel()
	for name, reopen := range reopenable {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			open := reopen(t)
			app := testkit.NewUpstream(t, nil)
			// the attempt's timeout is what a delivery takes on a loaded
			// machine (an attempt cut short would be a third); the takeover
			// waits three of them
			set := func(c *Config) { c.AnswerWithin, c.MaxAnswer, c.Timeout = time.Second, 1<<20, 2*time.Second }
			ib := newOrderedInbox(t, open(), "takeover", app.URL, set)
			ev, c, hash := testEvent(ib, "orphaned", "", "A", "")
			// stored as in delivery, its attempt never made
			res, ids, err := ib.accept(t.Context(), c, &hash, &ev, ib)
			if err != nil || res.State != store.StateClaimed || !ids[0].answering {
				t.Fatalf("accepting: %v %+v %v", res.State, ids, err)
			}
			acceptKind(t, ib, "behind", "", "A", "") // held behind it
			if name == "file" {
				ib.Stop()
				ib = newOrderedInbox(t, open(), "takeover", app.URL, set)
			}
			ib.Start()
			testkit.WaitFor(t, time.Minute, "both delivered", func() (bool, string) {
				c, err := ib.Counts(t.Context())
				return err == nil && c.Pending == 0 && c.Scheduled == 0 && app.Calls.Load() == 2, fmt.Sprintf("%+v %v", c, err)
			})
			reqs := app.Requests()
			if reqs[0].Header.Get("Idempotency-Key") != "orphaned" || reqs[0].Header.Get("Webhook-Attempt") != "2" {
				t.Fatalf("first delivery %s attempt %s, want orphaned's second attempt (its first began at acceptance)",
					reqs[0].Header.Get("Idempotency-Key"), reqs[0].Header.Get("Webhook-Attempt"))
			}
			wantNoGroupsLeft(t, nil, ib)
		})
	}
}

// newer_than: an event whose value is lower than the largest its group
// delivered is not delivered, but archived and counted as stale; equal and
// greater values, and other groups, are delivered.
func TestInboxNewerThanEndsStaleEvents(t *testing.T) {
	t.Parallel()
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			app := newRecorder(t, func(string, int) int { return http.StatusOK })
			var mu sync.Mutex
			var archived []string
			ib := newOrderedInbox(t, open(t), "newer", app.URL, func(c *Config) {
				c.NewerThan = func(ev *event.Request) string {
					for line := range strings.SplitSeq(ev.Headers, "\r\n") {
						if v, ok := strings.CutPrefix(line, "X-Version: "); ok {
							return v
						}
					}
					return ""
				}
				c.Archive = func(ev *event.Request, result string) {
					mu.Lock()
					archived = append(archived, ev.Key+":"+result)
					mu.Unlock()
				}
			})
			ib.Start()
			acceptKind(t, ib, "v2", "", "order-1", "2024-05-01T10:00:02+02:00")
			testkit.Eventually(t, 10*time.Second, "v2 delivered", func() bool { return len(app.delivered()) == 1 })
			// the provider retries an older state: its clock reads 09:00,
			// its offset makes it a second before v2
			acceptKind(t, ib, "v1", "", "order-1", "2024-05-01T09:00:01+01:00")
			acceptKind(t, ib, "v2b", "", "order-1", "2024-05-01T08:00:02Z")
			acceptKind(t, ib, "o1", "", "order-2", "2024-05-01T07:00:00Z")
			acceptKind(t, ib, "v3", "", "order-1", "2024-05-01T10:00:03+02:00")
			testkit.WaitFor(t, 10*time.Second, "every event ended", func() (bool, string) {
				c, err := ib.Counts(t.Context())
				return err == nil && c.Pending == 0 && c.Scheduled == 0 && len(app.delivered()) == 4, fmt.Sprintf("%+v %v %v", c, err, app.delivered())
			})
			if got := app.delivered(); fmt.Sprint(of(got, "v")) != "[v2 v2b v3]" || len(of(got, "o")) != 1 {
				t.Fatalf("delivered %v, want v2, v2b and v3 in order, and o1; not v1", got)
			}
			mu.Lock()
			defer mu.Unlock()
			if fmt.Sprint(archived) != "[v1:"+results.Stale+"]" {
				t.Fatalf("archived %v, want v1 as stale", archived)
			}
		})
	}
}

// compareValues orders times by the instant, integers exactly, numbers as
// numbers, anything else byte by byte.
func TestCompareValues(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"2024-05-01T10:00:00+02:00", "2024-05-01T09:00:00Z", -1},
		{"2024-05-01T08:00:00.5Z", "2024-05-01T08:00:00.25Z", 1},
		{"9", "10", -1},
		{"1714550400000000001", "1714550400000000000", 1},
		{"1.5", "1.25", 1},
		{"b", "a", 1},
		{"7", "7", 0},
	} {
		if got := compareValues(c.a, c.b); got != c.want {
			t.Errorf("compareValues(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

// A reload that removes a route loses nothing: the events its queue holds
// are delivered to its URL by the new configuration, which forgets the
// route once its queue is empty.
func TestInboxRemovedRouteIsDrained(t *testing.T) {
	t.Parallel()
	for name, reopen := range reopenable {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			open := reopen(t)
			var aUp atomic.Bool
			appA := newRecorder(t, func(string, int) int {
				if aUp.Load() {
					return http.StatusOK
				}
				return http.StatusServiceUnavailable
			})
			appD := newRecorder(t, func(string, int) int { return http.StatusOK })
			old := newOrderedInbox(t, open(), "reroute", appD.URL, func(c *Config) {
				// retries enough that A's events are still waiting, not
				// dead, however late a loaded machine sees them tried
				c.Retries = slices.Repeat([]time.Duration{200 * time.Millisecond}, 300)
				c.Routes = []Route{{URL: appA.URL, Rule: "kind=a", Match: kindIs(func(k string) bool { return k == "a" })}}
			})
			old.Start()
			acceptKind(t, old, "a1", "a", "", "")
			acceptKind(t, old, "a2", "a", "", "")
			testkit.Eventually(t, 10*time.Second, "A tried", func() bool { return len(appA.seen()) >= 2 })
			old.Stop()

			next := newOrderedInbox(t, open(), "reroute", appD.URL, func(c *Config) {
				c.Retries = []time.Duration{200 * time.Millisecond}
			})
			aUp.Store(true)
			next.Start()
			testkit.WaitFor(t, 20*time.Second, "the removed route's events delivered to it", func() (bool, string) {
				return len(appA.delivered()) == 2, fmt.Sprint(appA.delivered())
			})
			acceptKind(t, next, "a3", "a", "", "") // no route now: deliver_to's
			testkit.Eventually(t, 10*time.Second, "a3 to deliver_to", func() bool { return len(appD.delivered()) == 1 })
			testkit.WaitFor(t, 12*destinationsEvery, "the emptied route forgotten", func() (bool, string) {
				rec, err := next.q.destinations(t.Context(), nil)
				return err == nil && len(rec) == 0 && len(next.all()) == 1, fmt.Sprintf("%v %v, %d destinations", rec, err, len(next.all()))
			})
			if got := appA.delivered(); len(got) != 2 {
				t.Fatalf("A got %v, want a1 and a2 once", got)
			}
		})
	}
}
