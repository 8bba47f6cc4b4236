package testkit

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
)

// What the end-to-end tests read from Caddy's admin endpoint: the
// module's admin API (/webhook_idempotency/...) and the metrics; and
// configurations checked as `caddy validate` does.

// AdminJSON sends a request to the admin endpoint that must answer 200
// with JSON, and decodes the body into v.
func (c *Caddy) AdminJSON(t testing.TB, method, path string, v any) {
	t.Helper()
	resp, body := Do(t, method, c.AdminURL(path), nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: %s: %s", method, path, resp.Status, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s %s: Content-Type %q", method, path, ct)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("%s %s: decoding %s: %v", method, path, body, err)
	}
}

// Forget forgets key of source through the admin API
// (`DELETE /webhook_idempotency/<source>/keys/<key>`), which must answer
// 204.
func (c *Caddy) Forget(t testing.TB, source, key string) {
	t.Helper()
	path := "/webhook_idempotency/" + source + "/keys/" + key
	resp, body := Do(t, http.MethodDelete, c.AdminURL(path), nil)
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("forget %s of %s: %s: %s", key, source, resp.Status, body)
	}
}

// Metrics is one read of Caddy's metrics endpoint (the Prometheus text
// format): each series (name and sorted labels) and its value.
type Metrics struct {
	Raw    string
	series map[string]float64
}

// Metrics reads Caddy's metrics from the admin endpoint.
func (c *Caddy) Metrics(t testing.TB) Metrics {
	t.Helper()
	resp, body := Do(t, http.MethodGet, c.AdminURL("/metrics"), nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("metrics endpoint: %s: %s", resp.Status, body)
	}
	m, err := ParseMetrics(string(body))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// ParseMetrics parses the Prometheus text format.
func ParseMetrics(text string) (Metrics, error) {
	m := Metrics{Raw: text, series: make(map[string]float64)}
	for _, line := range strings.Split(text, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			return m, fmt.Errorf("metrics line without a value: %q", line)
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return m, fmt.Errorf("metrics line %q: %v", line, err)
		}
		name, labels, hasLabels := strings.Cut(line[:i], "{")
		var pairs []string
		if hasLabels {
			labels = strings.TrimSuffix(labels, "}")
			for labels != "" {
				k, rest, ok := strings.Cut(labels, "=")
				if !ok {
					return m, fmt.Errorf("metrics line %q: bad labels", line)
				}
				val, err := strconv.QuotedPrefix(rest)
				if err != nil {
					return m, fmt.Errorf("metrics line %q: %v", line, err)
				}
				pairs = append(pairs, k+"="+val)
				labels = strings.TrimPrefix(rest[len(val):], ",")
			}
		}
		sort.Strings(pairs)
		m.series[name+"{"+strings.Join(pairs, ",")+"}"] = v
	}
	return m, nil
}

// Value returns the value of the series name with labels given as name,
// value pairs (all of them, in any order), and whether it is present.
func (m Metrics) Value(name string, labels ...string) (float64, bool) {
	var pairs []string
	for i := 0; i+1 < len(labels); i += 2 {
		pairs = append(pairs, labels[i]+"="+strconv.Quote(labels[i+1]))
	}
	sort.Strings(pairs)
	v, ok := m.series[name+"{"+strings.Join(pairs, ",")+"}"]
	return v, ok
}

// AdaptConfig adapts the Caddyfile made of the harness's global options,
// globals and sites (as StartCaddy would load it) and returns the
// configuration, or the adapter's error. Nothing is loaded: the test may
// check it with caddy.Validate, as `caddy validate` does.
func AdaptConfig(t *testing.T, globals, sites string) (*caddy.Config, error) {
	t.Helper()
	c := &Caddy{t: t, AdminPort: FreePort(t), globals: globals}
	adapted, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(c.Caddyfile(sites)), nil)
	if err != nil {
		return nil, err
	}
	var cfg caddy.Config
	if err := json.Unmarshal(adapted, &cfg); err != nil {
		return nil, err
	}
	return &cfg, nil
}
