//go:build porting

package webhookidempotency

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// scrape is one read of a Prometheus text exposition: series (name plus
// sorted labels) to value.
type scrape struct {
	raw    string
	series map[string]float64
}

// seriesID names a series the way scrape stores it.
func seriesID(name string, labels ...string) string {
	var pairs []string
	for i := 0; i+1 < len(labels); i += 2 {
		pairs = append(pairs, labels[i]+"="+strconv.Quote(labels[i+1]))
	}
	sort.Strings(pairs)
	return name + "{" + strings.Join(pairs, ",") + "}"
}

// parseScrape parses the text format of the metrics endpoint.
func parseScrape(t testing.TB, text string) scrape {
	t.Helper()
	s := scrape{raw: text, series: make(map[string]float64)}
	for _, line := range strings.Split(text, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			t.Fatalf("metrics line without a value: %q", line)
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		id := line[:i]
		name, labels, hasLabels := strings.Cut(id, "{")
		var pairs []string
		if hasLabels {
			labels = strings.TrimSuffix(labels, "}")
			for labels != "" {
				k, rest, ok := strings.Cut(labels, "=")
				if !ok {
					t.Fatalf("metrics line %q: bad labels", line)
				}
				val, err := strconv.QuotedPrefix(rest)
				if err != nil {
					t.Fatalf("metrics line %q: %v", line, err)
				}
				pairs = append(pairs, k+"="+val)
				labels = strings.TrimPrefix(rest[len(val):], ",")
			}
		}
		sort.Strings(pairs)
		s.series[name+"{"+strings.Join(pairs, ",")+"}"] = v
	}
	return s
}

// value returns a series' value, and whether it is present.
func (s scrape) value(name string, labels ...string) (float64, bool) {
	v, ok := s.series[seriesID(name, labels...)]
	return v, ok
}

// scrapeMetrics reads Caddy's admin metrics endpoint.
func (c *testCaddy) scrapeMetrics(t testing.TB) scrape {
	t.Helper()
	resp, err := testClient.Get(fmt.Sprintf("http://localhost:%d/metrics", c.adminPort))
	if err != nil {
		t.Fatalf("scraping metrics: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading metrics: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("metrics endpoint: %s: %s", resp.Status, b)
	}
	return parseScrape(t, string(b))
}

const (
	metricRequestsName    = "caddy_webhook_idempotency_requests_total"
	metricStoreErrorsName = "caddy_webhook_idempotency_store_errors_total"
	metricDurationCount   = "caddy_webhook_idempotency_store_duration_seconds_count"
)

// signHex signs body as the generic `hmac` scheme expects by default.
func signHex(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

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

func TestMetricsCountEveryResultExactly(t *testing.T) {
	release := make(chan struct{})
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		if r.Header.Get("X-Slow") != "" {
			<-release
		}
		fmt.Fprintf(w, `{"call":%d}`, call)
	})
	port := freePort(t)
	deadRedis := "127.0.0.1:" + strconv.Itoa(freePort(t))
	c := startCaddy(t, "", metricsSites(port, deadRedis, up.addr(), "1h"))
	base := siteURL(port)
	stamp := strconv.FormatInt(time.Now().UnixNano(), 10)
	key := func(name string) string { return "evt_metricskey_" + name + "_" + stamp }

	before := c.scrapeMetrics(t)

	// plain: 3 new, 2 replayed, 1 conflict, 1 too_large, 2 skipped
	for i := range 3 {
		k := key("new" + strconv.Itoa(i))
		if resp, b := post(t, base+"/plain", []byte(k), "Idempotency-Key", k); resp.StatusCode != http.StatusOK {
			t.Fatalf("new delivery: %d %s", resp.StatusCode, b)
		}
	}
	for range 2 {
		k := key("new0")
		if resp, _ := post(t, base+"/plain", []byte(k), "Idempotency-Key", k); resp.Header.Get(replayedHeader) != "true" {
			t.Fatalf("duplicate not replayed: %d", resp.StatusCode)
		}
	}
	slow := key("slow")
	slowDone := make(chan int, 1)
	callsBefore := up.calls.Load()
	go func() {
		req, _ := http.NewRequest(http.MethodPost, base+"/plain", strings.NewReader(slow))
		req.Header.Set("Idempotency-Key", slow)
		req.Header.Set("X-Slow", "1")
		resp, err := testClient.Do(req)
		if err != nil {
			slowDone <- 0
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		slowDone <- resp.StatusCode
	}()
	deadline := time.Now().Add(5 * time.Second)
	for up.calls.Load() == callsBefore {
		if time.Now().After(deadline) {
			close(release)
			t.Fatal("the slow delivery never reached the upstream")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if resp, _ := post(t, base+"/plain", []byte(slow), "Idempotency-Key", slow); resp.StatusCode != http.StatusConflict {
		close(release)
		t.Fatalf("duplicate of an in-flight delivery: %d, want 409", resp.StatusCode)
	}
	close(release)
	if st := <-slowDone; st != http.StatusOK {
		t.Fatalf("slow delivery: %d", st)
	}
	big := strings.Repeat("x", 200)
	if resp, _ := post(t, base+"/plain", []byte(big), "Idempotency-Key", key("big")); resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversized body: %d, want 413", resp.StatusCode)
	}
	for range 2 {
		if resp, _ := do(t, http.MethodGet, base+"/plain", nil, "Idempotency-Key", key("get")); resp.StatusCode != http.StatusOK {
			t.Fatalf("GET: %d", resp.StatusCode)
		}
	}

	// signed: 2 invalid_signature, 1 new
	signedBody := []byte(`{"id":"` + key("signed") + `"}`)
	if resp, _ := post(t, base+"/signed", signedBody, "X-Sig", signHex("wrong", signedBody)); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("forged signature: %d", resp.StatusCode)
	}
	if resp, _ := post(t, base+"/signed", signedBody); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("missing signature: %d", resp.StatusCode)
	}
	if resp, b := post(t, base+"/signed", signedBody, "X-Sig", signHex("metrics-secret", signedBody)); resp.StatusCode != http.StatusOK {
		t.Fatalf("signed delivery: %d %s", resp.StatusCode, b)
	}

	// down: 3 bypassed, each a failed claim
	for i := range 3 {
		k := key("down" + strconv.Itoa(i))
		if resp, _ := post(t, base+"/down", []byte(k), "Idempotency-Key", k); resp.StatusCode != http.StatusOK {
			t.Fatalf("delivery with the store down (fail open): %d", resp.StatusCode)
		}
	}

	after := c.scrapeMetrics(t)
	delta := func(name string, labels ...string) float64 {
		a, ok := after.value(name, labels...)
		if !ok {
			t.Fatalf("series %s missing from the scrape", seriesID(name, labels...))
		}
		b, _ := before.value(name, labels...)
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
	if strings.Contains(after.raw, "evt_metricskey") {
		t.Errorf("an idempotency key appears in the metrics:\n%s", grepLines(after.raw, "evt_metricskey"))
	}
	for id := range after.series {
		if strings.HasPrefix(id, "caddy_webhook_idempotency_") && strings.Contains(id, "evt_") {
			t.Errorf("series labelled by key: %s", id)
		}
	}

	// two reloads that change the config: the endpoint still answers and
	// the counters kept their values
	for i, ttl := range []string{"2h", "3h"} {
		if err := c.reload(metricsSites(port, deadRedis, up.addr(), ttl)); err != nil {
			t.Fatalf("reload %d: %v", i, err)
		}
		again := c.scrapeMetrics(t)
		for _, w := range want {
			id := seriesID(metricRequestsName, "source", w.source, "result", w.result)
			a, okA := after.series[id]
			b, okB := again.series[id]
			if okA != okB || a != b {
				t.Errorf("after reload %d: %s is %v (present %v), was %v (present %v)", i, id, b, okB, a, okA)
			}
		}
		id := seriesID(metricStoreErrorsName, "source", "metrics_down", "op", "claim")
		if again.series[id] != after.series[id] {
			t.Errorf("after reload %d: %s is %v, was %v", i, id, again.series[id], after.series[id])
		}
	}
	// the new config counts into the same series
	k := key("after_reload")
	postAfterReload(t, base+"/plain", []byte(k), "Idempotency-Key", k)
	postAfterReload(t, base+"/plain", []byte(k), "Idempotency-Key", k)
	last := c.scrapeMetrics(t)
	for result, n := range map[string]float64{"new": 1, "replayed": 1} {
		id := seriesID(metricRequestsName, "source", "metrics_plain", "result", result)
		if got := last.series[id] - after.series[id]; got != n {
			t.Errorf("after the reloads %s grew by %v, want %v", id, got, n)
		}
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
