package redise2e

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// During a Redis stall, a duplicate of a delivery this instance completed
// recently is answered from its local copy of the record, not executed
// again (docs/stores.md: When Redis fails).
func TestRedisStallReplaysRecentDeliveries(t *testing.T) {
	for _, fail := range []string{"open", "closed"} {
		t.Run(fail, func(t *testing.T) {
			srv := testkit.StartRedis(t)
			up := testkit.NewUpstream(t, nil)
			port := testkit.FreePort(t)
			// every delivery before the stall is recorded (and copied),
			// however slow the machine; the stall outlasts the timeout
			testkit.StartCaddy(t, "", redisTimeoutSite(port, srv, fail, up.Addr(), "2s"))
			url := testkit.SiteURL(port) + "/hook"
			const deliveries = 50
			for i := range deliveries {
				key := fmt.Sprintf("evt_stall_%s_%d", fail, i)
				resp, body := testkit.Post(t, url, []byte(key), "Idempotency-Key", key)
				testkit.WantNew(t, resp, body, http.StatusOK)
			}

			srv.Pause()
			stalled := time.Now()
			before := up.Calls.Load()
			sent, replayed := 0, 0
			for round := 0; round < 3; round++ {
				for i := range deliveries {
					key := fmt.Sprintf("evt_stall_%s_%d", fail, i)
					resp, body := testkit.Post(t, url, []byte(key), "Idempotency-Key", key)
					sent++
					if resp.Header.Get(testkit.ReplayedHeader) == "true" && string(body) == fmt.Sprintf(`{"call":%d}`, i+1) {
						replayed++
					}
				}
			}
			executed := up.Calls.Load() - before
			// a delivery never seen is not in any copy: the fail policy applies
			resp, _ := testkit.Post(t, url, []byte("evt_stall_new"), "Idempotency-Key", "evt_stall_new_"+fail)
			wantStatus := map[string]int{"open": http.StatusOK, "closed": http.StatusServiceUnavailable}[fail]
			if resp.StatusCode != wantStatus || resp.Header.Get(testkit.ReplayedHeader) != "" {
				t.Fatalf("a new delivery during the stall: %d (replayed %q), want %d", resp.StatusCode, resp.Header.Get(testkit.ReplayedHeader), wantStatus)
			}
			if d := 3*time.Second - time.Since(stalled); d > 0 {
				time.Sleep(d) // a stall of at least 3s
			}
			srv.Resume()
			t.Logf("fail %s: %d duplicates during a %v Redis stall: %d replayed, %d executed again",
				fail, sent, time.Since(stalled).Round(100*time.Millisecond), replayed, executed)
			if replayed != sent || executed != 0 {
				t.Fatalf("fail %s: %d of %d duplicates replayed during the stall, %d executed again", fail, replayed, sent, executed)
			}
			waitForDedup(t, url, 30*time.Second)
		})
	}
}

// waitLog waits until a line of the JSON log at path satisfies match.
func waitLog(t *testing.T, path string, within time.Duration, match func(map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		for _, l := range testkit.ReadLogLines(t, path) {
			if match(l) {
				return l
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no log line as expected in %s within %v", path, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// logsMatching counts the lines of the JSON log at path that satisfy match.
func logsMatching(t *testing.T, path string, match func(map[string]any) bool) int {
	n := 0
	for _, l := range testkit.ReadLogLines(t, path) {
		if match(l) {
			n++
		}
	}
	return n
}

func logAt(level, msgPart, address string) func(map[string]any) bool {
	return func(l map[string]any) bool {
		msg, _ := l["msg"].(string)
		return l["level"] == level && strings.Contains(msg, msgPart) && l["address"] == address
	}
}

// A Redis without persistence is no longer lost silently: a configuration
// that relies on Redis keeping what it was told (fail closed, an inbox) is
// warned about a Redis without AOF, once, and a Redis that restarted (its
// run id changed) is warned about and counted, whether INFO or CONFIG is
// renamed away or not.
func TestRedisPersistenceAndRestartsAreReported(t *testing.T) {
	noAOF := testkit.StartRedis(t)
	withAOF := testkit.StartRedis(t, "--appendonly", "yes")
	openNoAOF := testkit.StartRedis(t)
	noInfo := testkit.StartRedis(t, "--rename-command", "INFO", "")
	blind := testkit.StartRedis(t, "--rename-command", "INFO", "", "--rename-command", "CONFIG", "")
	up := testkit.NewUpstream(t, nil)
	logPath := filepath.Join(t.TempDir(), "all.log")
	site := func(port int, source, fail string, srv *testkit.Redis) string {
		return fmt.Sprintf(`:%d {
	webhook_idempotency {
		source %s
		fail %s
		store redis redis://%s
	}
	reverse_proxy %s
}
`, port, source, fail, srv.Addr(), up.Addr())
	}
	port := testkit.FreePort(t)
	c := testkit.StartCaddy(t, fmt.Sprintf(`log everything {
		output file %s
		format json
		level INFO
	}`, logPath), site(port, "durable", "closed", noAOF)+
		site(testkit.FreePort(t), "durable_aof", "closed", withAOF)+
		site(testkit.FreePort(t), "open", "open", openNoAOF)+
		site(testkit.FreePort(t), "noinfo", "closed", noInfo)+
		site(testkit.FreePort(t), "blind", "closed", blind))

	// the restarts counter exists at zero from the provision on, so that
	// increase(…) sees the first restart
	for _, srv := range []*testkit.Redis{noAOF, withAOF, openNoAOF} {
		if v, ok := c.Metrics(t).Value("caddy_webhook_idempotency_store_restarts_total", "address", srv.Addr()); !ok || v != 0 {
			t.Fatalf("store_restarts_total for %s after the provision: %v (present %v), want 0", srv.Addr(), v, ok)
		}
	}

	const noAOFMsg = "without AOF persistence"
	waitLog(t, logPath, 10*time.Second, logAt("warn", noAOFMsg, noAOF.Addr()))
	waitLog(t, logPath, 10*time.Second, logAt("warn", noAOFMsg, noInfo.Addr())) // read through CONFIG GET
	waitLog(t, logPath, 10*time.Second, logAt("info", "cannot read redis persistence settings", blind.Addr()))
	for _, srv := range []*testkit.Redis{withAOF, openNoAOF} {
		if n := logsMatching(t, logPath, logAt("warn", noAOFMsg, srv.Addr())); n != 0 {
			t.Fatalf("%d AOF warnings for %s, want none", n, srv.Addr())
		}
	}

	// a restart without persistence: every key is gone, and it is said
	url := testkit.SiteURL(port) + "/hook"
	waitForDedup(t, url, 30*time.Second)
	noAOF.Kill()
	noAOF.Restart()
	waitForDedup(t, url, 30*time.Second)
	waitLog(t, logPath, 10*time.Second, logAt("warn", "different server process than before", noAOF.Addr()))
	deadline := time.Now().Add(10 * time.Second)
	for {
		v, _ := c.Metrics(t).Value("caddy_webhook_idempotency_store_restarts_total", "address", noAOF.Addr())
		if v == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("store_restarts_total for %s is %v, want 1", noAOF.Addr(), v)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := logsMatching(t, logPath, logAt("warn", noAOFMsg, noAOF.Addr())); n != 1 {
		t.Fatalf("%d AOF warnings for %s after its restart, want 1 (once)", n, noAOF.Addr())
	}
}

// The no-AOF warning names every source that relies on Redis keeping what
// it was told, whenever it registers: `fail closed` routes and inbox routes
// provisioned in any order, and a source a reload adds; a `fail open`
// route is never named, and a reload that adds nothing warns no more.
func TestRedisNoAOFWarningNamesEverySource(t *testing.T) {
	srv := testkit.StartRedis(t)
	up := testkit.NewUpstream(t, nil)
	logPath := filepath.Join(t.TempDir(), "all.log")
	route := func(source, extra string) string {
		return fmt.Sprintf(`	handle /%[1]s {
		webhook_idempotency {
			source %[1]s
			store redis redis://%[2]s
			%[3]s
		}
		reverse_proxy %[4]s
	}
`, source, srv.Addr(), extra, up.Addr())
	}
	inbox := "inbox " + up.URL + "/delivered"
	sitePort := testkit.FreePort(t)
	sites := func(routes ...string) string {
		return fmt.Sprintf(":%d {\n%s}\n", sitePort, strings.Join(routes, ""))
	}
	first := sites(route("closed", "fail closed"), route("orders", inbox), route("open", "fail open"), route("refunds", inbox))
	c := testkit.StartCaddy(t, fmt.Sprintf(`log everything {
		output file %s
		format json
		level INFO
	}`, logPath), first)

	named := func() (union map[string]bool, last []string, warnings int) {
		union = map[string]bool{}
		for _, l := range testkit.ReadLogLines(t, logPath) {
			if !logAt("warn", "without AOF persistence", srv.Addr())(l) {
				continue
			}
			warnings++
			last = last[:0]
			for _, s := range l["sources"].([]any) {
				union[s.(string)] = true
				last = append(last, s.(string))
			}
		}
		return union, last, warnings
	}
	want := []string{"closed", "orders", "refunds"}
	testkit.WaitFor(t, 10*time.Second, "an AOF warning naming "+strings.Join(want, ", "), func() (bool, string) {
		union, last, n := named()
		return strings.Join(last, ",") == strings.Join(want, ","), fmt.Sprintf("%d warnings, sources %v, the last %v", n, union, last)
	})
	if union, _, _ := named(); union["open"] {
		t.Fatalf("a fail open route was named: %v", union)
	}
	_, _, before := named()

	// a reload that adds an inbox source names it, with every other
	want = []string{"closed", "orders", "payouts", "refunds"}
	if err := c.Reload(sites(route("closed", "fail closed"), route("orders", inbox), route("open", "fail open"),
		route("refunds", inbox), route("payouts", inbox))); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "an AOF warning naming payouts", func() (bool, string) {
		_, last, n := named()
		return strings.Join(last, ",") == strings.Join(want, ","), fmt.Sprintf("%d warnings, the last naming %v", n, last)
	})
	l := waitLog(t, logPath, time.Second, func(l map[string]any) bool {
		nv, _ := l["new_sources"].([]any)
		return logAt("warn", "without AOF persistence", srv.Addr())(l) && len(nv) == 1 && nv[0] == "payouts"
	})
	if addrs, _ := l["addresses"].([]any); len(addrs) != 1 || addrs[0] != srv.Addr() {
		t.Fatalf("addresses %v, want [%s]", l["addresses"], srv.Addr())
	}
	_, _, after := named()
	if after != before+1 {
		t.Fatalf("%d AOF warnings after the reload, want %d (one for payouts)", after, before+1)
	}

	// a reload that adds nothing warns no more
	if err := c.Reload(sites(route("closed", "fail closed"), route("orders", inbox), route("open", "fail open"),
		route("refunds", inbox), route("payouts", inbox))); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if _, _, n := named(); n != after {
		t.Fatalf("%d AOF warnings after an unchanged reload, want %d", n, after)
	}
}
