package inboxe2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// The delivery policy end to end (docs/inbox.md#delivery-policy): the
// application's own answer within a deadline, routes with fan-out and
// drops, pause across a restart, a breaker shared by two instances on one
// Redis, and newer_than, each behind a real Caddy in front of real
// upstreams.

// sourceState is what GET /webhook_idempotency/ shows of a source with an
// inbox.
type sourceState struct {
	Source       string `json:"source"`
	Pending      int64  `json:"pending"`
	Scheduled    int64  `json:"scheduled"`
	Dead         int64  `json:"dead"`
	Paused       *bool  `json:"paused"`
	Destinations []struct {
		URL       string `json:"url"`
		ID        string `json:"id"`
		Route     string `json:"route"`
		Paused    bool   `json:"paused"`
		Pending   int64  `json:"pending"`
		Scheduled int64  `json:"scheduled"`
		Breaker   *struct {
			State    string `json:"state"`
			Cooldown string `json:"cooldown"`
		} `json:"breaker"`
	} `json:"destinations"`
}

// sourceOf reads one source from GET /webhook_idempotency/ on the admin
// endpoint at adminURL (a Caddy's AdminURL("")).
func sourceOf(t *testing.T, adminURL, source string) sourceState {
	t.Helper()
	resp, body := testkit.Do(t, http.MethodGet, adminURL+"/webhook_idempotency/", nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /webhook_idempotency/: %s: %s", resp.Status, body)
	}
	var all []sourceState
	if err := json.Unmarshal(body, &all); err != nil {
		t.Fatalf("decoding %s: %v", body, err)
	}
	for _, s := range all {
		if s.Source == source {
			return s
		}
	}
	t.Fatalf("no source %q in %s", source, body)
	return sourceState{}
}

// idle tells whether a source's inbox holds nothing pending or scheduled.
func (s sourceState) idle() bool { return s.Pending == 0 && s.Scheduled == 0 }

// quietly is how long a test watches for deliveries that must not happen:
// one that is let through arrives within milliseconds.
const quietly = time.Second

// respond app within 5s, on both durable stores: a slow application (one
// that answers only once the provider has its answer) leaves the provider
// with 202 at the deadline, and the event is delivered once; a fast one's
// own answer is the provider's, and its duplicate's.
func TestInboxRespondAppWithin(t *testing.T) {
	for _, name := range []string{"redis", "file"} {
		t.Run(name, func(t *testing.T) {
			st := "store file " + filepath.Join(t.TempDir(), "store.db")
			if name == "redis" {
				st = "store redis redis://" + testkit.StartRedis(t).Addr()
			}
			release := make(chan struct{})
			var releaseOnce sync.Once
			releaseSlow := func() { releaseOnce.Do(func() { close(release) }) }
			t.Cleanup(releaseSlow)
			app := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, _ int64) {
				key := r.Header.Get("Idempotency-Key")
				if key == "slow" {
					select {
					case <-release:
					case <-r.Context().Done():
						return
					}
				}
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprintf(w, `{"response_type":"ephemeral","text":"done %s"}`, key)
			})
			// the metrics are the process's: a source of each subtest's
			// and each run's own (-count)
			source := fmt.Sprintf("answered-%s-%d", name, time.Now().UnixNano())
			port := testkit.FreePort(t)
			// a deadline a fast answer comes within on a loaded machine
			c := testkit.StartCaddy(t, "", inboxSite(port, source, st,
				fmt.Sprintf("deliver_to %s/hook\n\t\t\trespond app within 5s\n\t\t\ttimeout 30s\n\t\t\tretries 5s", app.URL)))
			url := testkit.SiteURL(port) + "/hook"

			start := time.Now()
			resp, body := testkit.Post(t, url, []byte(`{"id":"slow"}`), "Idempotency-Key", "slow")
			took := time.Since(start)
			wantAccepted(t, resp, body)
			// the application cannot have answered: it is held until now
			if len(body) != 0 || took < 4900*time.Millisecond {
				t.Fatalf("the slow application's event: %d %q after %s; want 202 at the 5s deadline", resp.StatusCode, body, took)
			}
			t.Logf("202 after %s", took)
			releaseSlow()
			testkit.WaitFor(t, 15*time.Second, "the slow event delivered", func() (bool, string) {
				s := sourceOf(t, c.AdminURL(""), source)
				return app.Calls.Load() == 1 && s.idle(), fmt.Sprintf("%d calls, %+v", app.Calls.Load(), s)
			})
			resp, body = testkit.Post(t, url, []byte(`{"id":"slow"}`), "Idempotency-Key", "slow")
			wantAcceptReplayed(t, resp, body) // the provider had 202: so do its duplicates

			resp, body = testkit.Post(t, url, []byte(`{"id":"fast"}`), "Idempotency-Key", "fast")
			if resp.StatusCode != http.StatusOK || string(body) != `{"response_type":"ephemeral","text":"done fast"}` ||
				resp.Header.Get("Content-Type") != "application/json" || resp.Header.Get(testkit.ReplayedHeader) != "" {
				t.Fatalf("the fast application's event: %d %s %q %q; want its own answer", resp.StatusCode, resp.Header.Get("Content-Type"), body, resp.Header.Get(testkit.ReplayedHeader))
			}
			resp, dup := testkit.Post(t, url, []byte(`{"id":"fast"}`), "Idempotency-Key", "fast")
			if resp.StatusCode != http.StatusOK || string(dup) != string(body) || resp.Header.Get(testkit.ReplayedHeader) != "true" {
				t.Fatalf("the fast event's duplicate: %d %q %q; want the application's answer replayed", resp.StatusCode, dup, resp.Header.Get(testkit.ReplayedHeader))
			}
			if n := app.Calls.Load(); n != 2 {
				t.Fatalf("the application got %d requests, want one per event", n)
			}
			m := c.Metrics(t)
			if v, _ := m.Value("caddy_webhook_idempotency_answer_seconds_count", "source", source); v != 2 {
				t.Fatalf("answer_seconds counted %v answers, want 2\n%s", v, m.Raw)
			}
			if v, _ := m.Value("caddy_webhook_idempotency_answer_seconds_bucket", "source", source, "le", "5"); v != 1 {
				t.Fatalf("answer_seconds has %v answers within 5s, want the fast one", v)
			}
		})
	}
}

// An event matching two routes goes to both; while one destination is
// down the other keeps up, and once it recovers it catches up: nothing
// lost, nothing doubled. An event matching no route goes to deliver_to; a
// dropped one is answered and goes nowhere.
func TestInboxFanOutOneDestinationDown(t *testing.T) {
	srv := testkit.StartRedis(t)
	var auditUp atomic.Bool
	orders := newAppLog(t, func(*http.Request, string, int) int { return http.StatusOK })
	audit := newAppLog(t, func(*http.Request, string, int) int {
		if auditUp.Load() {
			return http.StatusOK
		}
		return http.StatusServiceUnavailable
	})
	rest := newAppLog(t, func(*http.Request, string, int) int { return http.StatusOK })
	retries := strings.TrimSpace(strings.Repeat("200ms ", 40))
	port := testkit.FreePort(t)
	c := testkit.StartCaddy(t, "", inboxSite(port, "fan", "store redis redis://"+srv.Addr(), strings.Join([]string{
		"deliver_to " + rest.URL + "/hook",
		"retries " + retries,
		"jitter 0%",
		"timeout 2s",
		"route json:type=order.* " + orders.URL + "/hook",
		"route json:type=order.* " + audit.URL + "/hook",
		"drop json:type=ping",
	}, "\n\t\t\t")))
	url := testkit.SiteURL(port) + "/hook"
	const n = 10
	for i := range n {
		key := fmt.Sprint("ord_", i)
		resp, b := testkit.Post(t, url, []byte(fmt.Sprintf(`{"id":%q,"type":"order.updated"}`, key)), "Idempotency-Key", key)
		wantAccepted(t, resp, b)
	}
	resp, b := testkit.Post(t, url, []byte(`{"id":"ref_1","type":"refund.created"}`), "Idempotency-Key", "ref_1")
	wantAccepted(t, resp, b)
	resp, b = testkit.Post(t, url, []byte(`{"id":"ping_1","type":"ping"}`), "Idempotency-Key", "ping_1")
	wantAccepted(t, resp, b)

	testkit.WaitFor(t, 15*time.Second, "orders keeps up while audit is down", func() (bool, string) {
		return len(orders.delivered("ord_")) == n && len(audit.attempts()) >= 2*n && len(rest.delivered("")) == 1,
			fmt.Sprintf("orders %d, audit %d attempts, rest %v", len(orders.delivered("ord_")), len(audit.attempts()), rest.delivered(""))
	})
	if got := audit.delivered(""); len(got) != 0 {
		t.Fatalf("audit delivered %v while down", got)
	}
	s := sourceOf(t, c.AdminURL(""), "fan")
	if len(s.Destinations) != 3 || s.Destinations[2].Route != "json:type=order.*" || s.Destinations[2].Pending+s.Destinations[2].Scheduled == 0 {
		t.Fatalf("while audit is down: %+v; want deliver_to, orders and audit, audit's events waiting", s)
	}
	auditUp.Store(true)
	testkit.WaitFor(t, 15*time.Second, "audit catches up", func() (bool, string) {
		s := sourceOf(t, c.AdminURL(""), "fan")
		return len(audit.delivered("")) == n && s.idle(), fmt.Sprintf("audit %v, %+v", audit.delivered(""), s)
	})
	for name, app := range map[string]*appLog{"orders": orders, "audit": audit} {
		got := app.delivered("")
		slices.Sort(got)
		if len(slices.Compact(slices.Clone(got))) != n || len(got) != n {
			t.Errorf("%s got %v, want each of the %d orders once", name, got, n)
		}
	}
	if got := rest.delivered(""); fmt.Sprint(got) != "[ref_1]" {
		t.Errorf("deliver_to got %v, want the refund only", got)
	}
	if s := sourceOf(t, c.AdminURL(""), "fan"); s.Dead != 0 {
		t.Errorf("%d dead letters", s.Dead)
	}
	if v, _ := c.Metrics(t).Value("caddy_webhook_idempotency_requests_total", "source", "fan", "result", "filtered"); v != 1 {
		t.Errorf("requests_total{result=filtered} = %v, want the ping", v)
	}
}

// A source paused through the admin API keeps accepting (202, never 409)
// and delivers nothing, across a restart of its Caddy on the same file
// store; `caddy webhook-idempotency resume` lets everything through, once.
func TestInboxPauseAcrossRestart(t *testing.T) {
	app := newAppLog(t, func(*http.Request, string, int) int { return http.StatusOK })
	port := testkit.FreePort(t)
	sites := inboxSite(port, "held", "store file "+filepath.Join(t.TempDir(), "store.db"),
		"deliver_to "+app.URL+"/hook\n\t\t\tretries 200ms")
	ready := testkit.SiteURL(port) + "/ready"
	url := testkit.SiteURL(port) + "/hook"
	first := testkit.StartProcess(t, "", sites, ready)
	resp, body := testkit.Do(t, http.MethodPost, first.AdminURL("/webhook_idempotency/held/pause"), nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"paused":true`) {
		t.Fatalf("pausing: %s %s", resp.Status, body)
	}
	for i := range 3 {
		key := fmt.Sprint("held_", i)
		resp, b := testkit.Post(t, url, []byte(key), "Idempotency-Key", key)
		wantAccepted(t, resp, b)
	}
	resp, b := testkit.Post(t, url, []byte("held_0"), "Idempotency-Key", "held_0")
	wantAcceptReplayed(t, resp, b)
	time.Sleep(quietly)
	if n := app.Calls.Load(); n != 0 {
		t.Fatalf("%d deliveries while paused", n)
	}
	first.Kill()

	second := testkit.StartProcess(t, "", sites, ready)
	s := sourceOf(t, second.AdminURL(""), "held")
	if s.Paused == nil || !*s.Paused || s.Pending != 3 || len(s.Destinations) != 1 || !s.Destinations[0].Paused {
		t.Fatalf("after the restart: %+v; want the source paused with its 3 events", s)
	}
	time.Sleep(quietly)
	if n := app.Calls.Load(); n != 0 {
		t.Fatalf("%d deliveries after restarting a paused source", n)
	}
	out, err := testkit.CaddyCommand("webhook-idempotency", "resume", "held", "--address", fmt.Sprintf("localhost:%d", second.AdminPort)).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "resumed deliveries of source held") {
		t.Fatalf("caddy webhook-idempotency resume: %v: %s", err, out)
	}
	testkit.WaitFor(t, 10*time.Second, "every event delivered once resumed", func() (bool, string) {
		return len(app.delivered("held_")) == 3 && sourceOf(t, second.AdminURL(""), "held").idle(), fmt.Sprint(app.attempts())
	})
	got := app.delivered("held_")
	slices.Sort(got)
	if fmt.Sprint(got) != "[held_0 held_1 held_2]" {
		t.Fatalf("delivered %v, want each once", got)
	}
}

// A breaker shared by two Caddy instances on one Redis opens under a
// failing application, every instance shows it (within a second on an
// idle machine), one probe goes through per cooldown (doubling), and once
// the application recovers a probe closes it and every event is delivered
// once; none spent its retries meanwhile.
func TestInboxBreakerAcrossInstances(t *testing.T) {
	srv := testkit.StartRedis(t)
	var up atomic.Bool
	var mu sync.Mutex
	var failures []time.Time
	app := newAppLog(t, func(*http.Request, string, int) int {
		if up.Load() {
			return http.StatusOK
		}
		mu.Lock()
		failures = append(failures, time.Now())
		mu.Unlock()
		return http.StatusInternalServerError
	})
	inbox := strings.Join([]string{
		"deliver_to " + app.URL + "/hook",
		"retries 100ms 100ms 100ms",
		"jitter 0%",
		"timeout 2s",
		"concurrency 2",
		"breaker 50% of 4 cooldown 1s",
	}, "\n\t\t\t")
	st := "store redis redis://" + srv.Addr()
	portA, portB := testkit.FreePort(t), testkit.FreePort(t)
	c := testkit.StartCaddy(t, "", inboxSite(portA, "fragile", st, inbox))
	other := testkit.StartProcess(t, "", inboxSite(portB, "fragile", st, inbox), testkit.SiteURL(portB)+"/ready")
	const n = 12
	for i := range n {
		port := []int{portA, portB}[i%2]
		key := fmt.Sprint("f_", i)
		resp, b := testkit.Post(t, testkit.SiteURL(port)+"/hook", []byte(key), "Idempotency-Key", key)
		wantAccepted(t, resp, b)
	}
	breakerOf := func(adminURL string) string {
		s := sourceOf(t, adminURL, "fragile")
		if len(s.Destinations) != 1 || s.Destinations[0].Breaker == nil {
			t.Fatalf("no breaker in %+v", s)
		}
		return s.Destinations[0].Breaker.State + " " + s.Destinations[0].Breaker.Cooldown
	}
	testkit.WaitFor(t, 10*time.Second, "the breaker opens", func() (bool, string) {
		st := breakerOf(c.AdminURL(""))
		return strings.HasPrefix(st, "open"), st
	})
	opened := time.Now()
	// the other instance follows it (its gauge is set from the state it
	// delivers by): within a second on an idle machine (logged), later on
	// a loaded one
	testkit.WaitFor(t, 30*time.Second, "the other instance follows the open breaker", func() (bool, string) {
		resp, body := testkit.Do(t, http.MethodGet, other.AdminURL("/metrics"), nil)
		m, err := testkit.ParseMetrics(string(body))
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("the other instance's metrics: %s %v", resp.Status, err)
		}
		v, _ := m.Value("caddy_webhook_idempotency_inbox_breaker_open", "source", "fragile", "destination", app.URL+"/hook")
		return v == 1, fmt.Sprint(v)
	})
	t.Logf("the other instance followed the open breaker %s after this one showed it", time.Since(opened))
	if st := breakerOf(other.AdminURL("")); !strings.HasPrefix(st, "open") && !strings.HasPrefix(st, "probing") {
		t.Fatalf("the other instance's admin API shows the breaker %s", st)
	}
	if v, _ := c.Metrics(t).Value("caddy_webhook_idempotency_inbox_breaker_open", "source", "fragile", "destination", app.URL+"/hook"); v != 1 {
		t.Fatalf("inbox_breaker_open = %v, want 1", v)
	}
	// two failed probes: the first after 1s, the second 2s after it
	testkit.WaitFor(t, 15*time.Second, "two probes fail", func() (bool, string) {
		st := breakerOf(c.AdminURL(""))
		return st == "open 4s", st
	})
	mu.Lock()
	probes := slices.Clone(failures[len(failures)-2:])
	window := len(failures) - 2
	mu.Unlock()
	if gap := probes[1].Sub(probes[0]); gap < 2*time.Second {
		t.Fatalf("the two probes came %s apart, want the doubled cooldown (2s)", gap)
	}
	// the window's 4, and at most the attempts under way on both instances
	// when it opened (2 each)
	if window < 4 || window > 8 {
		t.Fatalf("%d failed attempts before the probes, want the window's 4 and those under way", window)
	}
	up.Store(true)
	testkit.WaitFor(t, 20*time.Second, "a probe closes the breaker and everything is delivered", func() (bool, string) {
		s := sourceOf(t, c.AdminURL(""), "fragile")
		return len(app.delivered("f_")) == n && s.idle() && breakerOf(c.AdminURL("")) == "closed ", fmt.Sprintf("%+v", s)
	})
	if s := sourceOf(t, c.AdminURL(""), "fragile"); s.Dead != 0 {
		t.Fatalf("%d events dead-lettered: the breaker's wait spent their retries", s.Dead)
	}
	got := app.delivered("f_")
	slices.Sort(got)
	if len(slices.Compact(got)) != n {
		t.Fatalf("delivered %v, want each of %d once", app.delivered("f_"), n)
	}
}

// An orders/updated that Shopify retries after a newer one of the same
// order was delivered is not delivered: archived as stale, counted.
func TestInboxNewerThanEndsStaleRetry(t *testing.T) {
	app := newAppLog(t, func(*http.Request, string, int) int { return http.StatusOK })
	port := testkit.FreePort(t)
	c := testkit.StartCaddy(t, "", fmt.Sprintf(`:%d {
	webhook_idempotency {
		source shop
		key header:X-Shopify-Webhook-Id
		store file %s
		archive
		inbox {
			deliver_to %s/hook
			order_by json:id
			newer_than json:updated_at
			retries 200ms
		}
	}
}`, port, filepath.Join(t.TempDir(), "store.db"), app.URL))
	url := testkit.SiteURL(port) + "/hook"
	send := func(webhookID, updatedAt string) {
		resp, b := testkit.Post(t, url, []byte(fmt.Sprintf(`{"id":820982911946154508,"updated_at":%q}`, updatedAt)),
			"X-Shopify-Webhook-Id", webhookID, "X-Shopify-Topic", "orders/updated", "Content-Type", "application/json")
		wantAccepted(t, resp, b)
	}
	send("w-2", "2024-05-01T10:00:02-04:00")
	testkit.WaitFor(t, 10*time.Second, "the newer update delivered", func() (bool, string) {
		return app.Calls.Load() == 1, fmt.Sprint(app.Calls.Load())
	})
	// the counter is the process's: an earlier run's (-count) is in it
	staleBefore, _ := c.Metrics(t).Value("caddy_webhook_idempotency_inbox_deliveries_total", "source", "shop", "outcome", "stale")
	send("w-1", "2024-05-01T10:00:01-04:00") // Shopify's retry of the older update
	testkit.WaitFor(t, 10*time.Second, "the older update ended as stale", func() (bool, string) {
		v, _ := c.Metrics(t).Value("caddy_webhook_idempotency_inbox_deliveries_total", "source", "shop", "outcome", "stale")
		return v-staleBefore == 1 && sourceOf(t, c.AdminURL(""), "shop").idle(), fmt.Sprint(v - staleBefore)
	})
	if n := app.Calls.Load(); n != 1 {
		t.Fatalf("the application got %d requests, want the newer update only", n)
	}
	var events struct {
		Events []struct {
			Key    string `json:"key"`
			Result string `json:"result"`
		} `json:"events"`
	}
	testkit.WaitFor(t, 30*time.Second, "the stale event archived", func() (bool, string) {
		c.AdminJSON(t, http.MethodGet, "/webhook_idempotency/shop/events?result=stale", &events)
		return len(events.Events) == 1 && events.Events[0].Key == "w-1", fmt.Sprintf("%+v", events)
	})
	send("w-3", "2024-05-01T10:00:03-04:00")
	testkit.WaitFor(t, 10*time.Second, "a newer update delivered", func() (bool, string) {
		return app.Calls.Load() == 2, fmt.Sprint(app.Calls.Load())
	})
}
