package e2e

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// The metrics as Prometheus scrapes them from Caddy's admin endpoint:
// every result counted exactly, across reloads, and every series the
// alerting rules (dashboards/alerts.yml) read present from the start.

const (
	metricRequestsName    = "caddy_webhook_idempotency_requests_total"
	metricStoreErrorsName = "caddy_webhook_idempotency_store_errors_total"
	metricDurationCount   = "caddy_webhook_idempotency_store_duration_seconds_count"
)

// metricsSites is a site with one route per source: a memory store, a
// signed route and a Redis store nobody listens on. ttl changes the
// config without changing what it does.
func metricsSites(port int, deadRedis, upstream, ttl string) string {
	return fmt.Sprintf(`:%[1]d {
	handle /plain* {
		webhook_idempotency {
			source metrics_plain
			max_body 64
			ttl %[4]s
		}
		reverse_proxy %[3]s
	}
	handle /signed* {
		webhook_idempotency {
			source metrics_signed
			verify hmac {
				header X-Sig
				secret metrics-secret
			}
		}
		reverse_proxy %[3]s
	}
	handle /down* {
		webhook_idempotency {
			source metrics_down
			fail open
			store redis redis://%[2]s {
				timeout 200ms
			}
		}
		reverse_proxy %[3]s
	}
}`, port, deadRedis, upstream, ttl)
}

// Every request is counted once, under its result, in requests_total;
// the store's errors and durations count each claim and completion; no
// series carries a key; reloads keep the counters, and the new
// configuration counts into the same series.
func TestMetricsCountEveryResultExactly(t *testing.T) {
	slowGate := newGate()
	defer slowGate.open()
	up := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		if r.Header.Get("X-Slow") != "" {
			slowGate.wait(r)
		}
		fmt.Fprintf(w, `{"call":%d}`, call)
	})
	port := testkit.FreePort(t)
	deadRedis := "127.0.0.1:" + strconv.Itoa(testkit.FreePort(t))
	c := testkit.StartCaddy(t, "", metricsSites(port, deadRedis, up.Addr(), "1h"))
	base := testkit.SiteURL(port)
	stamp := strconv.FormatInt(time.Now().UnixNano(), 10)
	key := func(name string) string { return "evt_metricskey_" + name + "_" + stamp }

	before := c.Metrics(t)

	// plain: 3 new, 2 replayed, 1 conflict, 1 too_large, 2 skipped
	for i := range 3 {
		k := key("new" + strconv.Itoa(i))
		if resp, b := testkit.Post(t, base+"/plain", []byte(k), "Idempotency-Key", k); resp.StatusCode != http.StatusOK {
			t.Fatalf("new delivery: %d %s", resp.StatusCode, b)
		}
	}
	for range 2 {
		k := key("new0")
		if resp, _ := testkit.Post(t, base+"/plain", []byte(k), "Idempotency-Key", k); resp.Header.Get(testkit.ReplayedHeader) != "true" {
			t.Fatalf("duplicate not replayed: %d", resp.StatusCode)
		}
	}
	slow := key("slow")
	callsBefore := up.Calls.Load()
	slowDone := testkit.SendAsync(http.MethodPost, base+"/plain", []byte(slow), "Idempotency-Key", slow, "X-Slow", "1")
	up.WaitCalls(t, callsBefore+1, 30*time.Second)
	if resp, _ := testkit.Post(t, base+"/plain", []byte(slow), "Idempotency-Key", slow); resp.StatusCode != http.StatusConflict {
		t.Fatalf("duplicate of an in-flight delivery: %d, want 409", resp.StatusCode)
	}
	slowGate.open()
	if r := testkit.Receive(t, slowDone); r.Status != http.StatusOK {
		t.Fatalf("slow delivery: %d", r.Status)
	}
	big := strings.Repeat("x", 200)
	if resp, _ := testkit.Post(t, base+"/plain", []byte(big), "Idempotency-Key", key("big")); resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversized body: %d, want 413", resp.StatusCode)
	}
	for range 2 {
		if resp, _ := testkit.Do(t, http.MethodGet, base+"/plain", nil, "Idempotency-Key", key("get")); resp.StatusCode != http.StatusOK {
			t.Fatalf("GET: %d", resp.StatusCode)
		}
	}

	// signed: 2 invalid_signature, 1 new
	signedBody := []byte(`{"id":"` + key("signed") + `"}`)
	if resp, _ := testkit.Post(t, base+"/signed", signedBody, "X-Sig", sigtest.HMACHex("wrong", string(signedBody))); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("forged signature: %d", resp.StatusCode)
	}
	if resp, _ := testkit.Post(t, base+"/signed", signedBody); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("missing signature: %d", resp.StatusCode)
	}
	if resp, b := testkit.Post(t, base+"/signed", signedBody, "X-Sig", sigtest.HMACHex("metrics-secret", string(signedBody))); resp.StatusCode != http.StatusOK {
		t.Fatalf("signed delivery: %d %s", resp.StatusCode, b)
	}

	// down: 3 bypassed, each a failed claim
	for i := range 3 {
		k := key("down" + strconv.Itoa(i))
		if resp, _ := testkit.Post(t, base+"/down", []byte(k), "Idempotency-Key", k); resp.StatusCode != http.StatusOK {
			t.Fatalf("delivery with the store down (fail open): %d", resp.StatusCode)
		}
	}

	after := c.Metrics(t)
	delta := func(name string, labels ...string) float64 {
		a, ok := after.Value(name, labels...)
		if !ok {
			t.Fatalf("series %s%q missing from the scrape", name, labels)
		}
		b, _ := before.Value(name, labels...)
		return a - b
	}
	want := []struct {
		source, result string
		n              float64
	}{
		{"metrics_plain", "new", 4}, // 3 + the slow one
		{"metrics_plain", "replayed", 2},
		{"metrics_plain", "conflict", 1},
		{"metrics_plain", "too_large", 1},
		{"metrics_plain", "skipped", 2},
		{"metrics_plain", "invalid_signature", 0},
		{"metrics_plain", "bypassed", 0},
		{"metrics_signed", "invalid_signature", 2},
		{"metrics_signed", "new", 1},
		{"metrics_signed", "replayed", 0},
		{"metrics_down", "bypassed", 3},
		{"metrics_down", "new", 0},
		{"metrics_down", "unavailable", 0},
	}
	for _, w := range want {
		if got := delta(metricRequestsName, "source", w.source, "result", w.result); got != w.n {
			t.Errorf("requests_total{source=%q,result=%q} grew by %v, want %v", w.source, w.result, got, w.n)
		}
	}
	if got := delta(metricStoreErrorsName, "source", "metrics_down", "op", "claim"); got != 3 {
		t.Errorf("store_errors_total{source=metrics_down,op=claim} grew by %v, want 3", got)
	}
	if got := delta(metricStoreErrorsName, "source", "metrics_plain", "op", "claim"); got != 0 {
		t.Errorf("store_errors_total{source=metrics_plain,op=claim} grew by %v, want 0", got)
	}
	// claims: plain 3 new + 2 replayed + slow + conflict = 7; signed 1; down 3
	if got := delta(metricDurationCount, "op", "claim"); got != 11 {
		t.Errorf("store_duration_seconds{op=claim} observed %v claims, want 11", got)
	}
	// completions: plain 3 + slow, signed 1
	if got := delta(metricDurationCount, "op", "complete"); got != 5 {
		t.Errorf("store_duration_seconds{op=complete} observed %v completions, want 5", got)
	}
	if strings.Contains(after.Raw, "evt_metricskey") {
		t.Errorf("an idempotency key appears in the metrics:\n%s", linesWith(after.Raw, "evt_metricskey"))
	}
	for _, line := range strings.Split(after.Raw, "\n") {
		if strings.HasPrefix(line, "caddy_webhook_idempotency_") && strings.Contains(line, "evt_") {
			t.Errorf("series labelled by key: %s", line)
		}
	}

	// two reloads that change the config: the endpoint still answers and
	// the counters kept their values
	for i, ttl := range []string{"2h", "3h"} {
		if err := c.Reload(metricsSites(port, deadRedis, up.Addr(), ttl)); err != nil {
			t.Fatalf("reload %d: %v", i, err)
		}
		again := c.Metrics(t)
		for _, w := range want {
			labels := []string{"source", w.source, "result", w.result}
			a, okA := after.Value(metricRequestsName, labels...)
			b, okB := again.Value(metricRequestsName, labels...)
			if okA != okB || a != b {
				t.Errorf("after reload %d: %s%q is %v (present %v), was %v (present %v)", i, metricRequestsName, labels, b, okB, a, okA)
			}
		}
		errLabels := []string{"source", "metrics_down", "op", "claim"}
		a, _ := after.Value(metricStoreErrorsName, errLabels...)
		if b, _ := again.Value(metricStoreErrorsName, errLabels...); b != a {
			t.Errorf("after reload %d: %s%q is %v, was %v", i, metricStoreErrorsName, errLabels, b, a)
		}
	}
	// the new config counts into the same series
	k := key("after_reload")
	testkit.PostAfterReload(t, base+"/plain", []byte(k), "Idempotency-Key", k)
	testkit.PostAfterReload(t, base+"/plain", []byte(k), "Idempotency-Key", k)
	last := c.Metrics(t)
	for result, n := range map[string]float64{"new": 1, "replayed": 1} {
		labels := []string{"source", "metrics_plain", "result", result}
		a, _ := after.Value(metricRequestsName, labels...)
		l, _ := last.Value(metricRequestsName, labels...)
		if got := l - a; got != n {
			t.Errorf("after the reloads %s%q grew by %v, want %v", metricRequestsName, labels, got, n)
		}
	}
}

// TestAlertRulesSeriesExistAtZero: every metric the rules read has series
// from the first provision on, before any traffic, at zero (a file store
// healthy at one), so that a rule on its rate or increase sees the first
// event (the first Redis restart, the first file store lost, above all).
func TestAlertRulesSeriesExistAtZero(t *testing.T) {
	srv := testkit.StartRedis(t)
	up := testkit.NewUpstream(t, nil)
	file := t.TempDir() + "/alerts.db"
	c := testkit.StartCaddy(t, "", fmt.Sprintf(`:%d {
	webhook_idempotency {
		source alerts
		fail closed
		store redis redis://%s
		archive
	}
	reverse_proxy %s
}
:%d {
	webhook_idempotency {
		source alerts_file
		store file %s
	}
	reverse_proxy %s
}
:%d {
	webhook_idempotency github {
		source alerts
		secret gh-secret
		store redis redis://%s
		reconcile {
			token   gh-token
			hook    repos/octo/shop/hooks/1
			api_url http://127.0.0.1:1
			every   1h
		}
	}
	reverse_proxy %s
}
:%d {
	webhook_idempotency {
		source alerts
		store redis redis://%s
		inbox %s {
			breaker 50%% of 20
		}
	}
}`, testkit.FreePort(t), srv.Addr(), up.Addr(), testkit.FreePort(t), file, up.Addr(), testkit.FreePort(t), srv.Addr(), up.Addr(), testkit.FreePort(t), srv.Addr(), up.URL))
	m := c.Metrics(t)
	names := regexp.MustCompile(`caddy_webhook_idempotency_[a-z_]+`).FindAllString(testkit.ReadFile(t, "../dashboards/alerts.yml"), -1)
	slices.Sort(names)
	names = slices.Compact(names)
	if len(names) < 3 {
		t.Fatalf("the rules read %v", names)
	}
	for _, name := range names {
		found := false
		for _, line := range strings.Split(m.Raw, "\n") {
			// this Caddy's series: the test process's other tests count too
			ours := strings.Contains(line, `source="alerts"`) || strings.Contains(line, `address="`+srv.Addr()+`"`) ||
				strings.Contains(line, `path="`+file+`"`)
			if strings.HasPrefix(line, name+"{") && ours {
				found = true
				// reconciliation's start time and interval are what they
				// are from its start, a file store is healthy; every other
				// series is at zero
				started := strings.Contains(name, "reconcile_started") || strings.Contains(name, "reconcile_interval")
				if name == "caddy_webhook_idempotency_store_file_healthy" {
					if !strings.HasSuffix(line, " 1") {
						t.Errorf("a file store just opened: %s", line)
					}
				} else if !started && !strings.HasSuffix(line, " 0") {
					t.Errorf("before any traffic: %s", line)
				}
			}
		}
		if !found {
			t.Errorf("%s, which the rules read, has no series of this Caddy after the provision", name)
		}
	}
	if v, ok := m.Value("caddy_webhook_idempotency_store_restarts_total", "address", srv.Addr()); !ok || v != 0 {
		t.Errorf("store_restarts_total{address=%q}: %v (present %v), want 0", srv.Addr(), v, ok)
	}
	if v, ok := m.Value("caddy_webhook_idempotency_requests_total", "source", "alerts", "result", "unavailable"); !ok || v != 0 {
		t.Errorf("requests_total{source=alerts,result=unavailable}: %v (present %v), want 0", v, ok)
	}
}
