package webhookidempotency

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"

	// the standard modules, as in cmd/caddy
	_ "github.com/caddyserver/caddy/v2/modules/standard"
)

// This file is the end-to-end harness: a real Caddy running in the test
// process, on free ports, in front of a real upstream HTTP server that
// records what it received. Tests that use it must not run in parallel
// (Caddy runs one configuration per process).

// newTestContext returns a context of a real, empty configuration, like
// the one Caddy provisions a config's modules in (the webhook_idempotency
// app is made in it on first use); cancel cleans up the modules loaded
// through it. The configuration is never started: a test that needs an
// inbox's workers starts them itself.
func newTestContext(t testing.TB) (caddy.Context, context.CancelFunc) {
	t.Helper()
	// only errors reach the log, as in a quiet test run
	quiet := &caddy.Logging{Logs: map[string]*caddy.CustomLog{"default": {BaseLog: caddy.BaseLog{Level: "ERROR"}}}}
	cfgCtx, err := caddy.ProvisionContext(&caddy.Config{Logging: quiet})
	if err != nil {
		t.Fatalf("provisioning an empty configuration: %v", err)
	}
	return caddy.NewContext(cfgCtx)
}

// receivedRequest is what the upstream saw.
type receivedRequest struct {
	Method           string
	URI              string
	Header           http.Header
	Body             []byte
	ContentLength    int64
	TransferEncoding []string
}

// upstream stands in for the application behind reverse_proxy.
type upstream struct {
	*httptest.Server
	calls    atomic.Int64
	mu       sync.Mutex
	received []receivedRequest
}

// newUpstream starts an upstream that records every request and answers
// with fn (call is 1 for the first request). A nil fn answers 200 with a
// body that differs on every call.
func newUpstream(t *testing.T, fn func(w http.ResponseWriter, r *http.Request, call int64)) *upstream {
	t.Helper()
	u := &upstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		call := u.calls.Add(1)
		u.mu.Lock()
		u.received = append(u.received, receivedRequest{
			Method: r.Method, URI: r.RequestURI, Header: r.Header.Clone(), Body: body,
			ContentLength: r.ContentLength, TransferEncoding: r.TransferEncoding,
		})
		u.mu.Unlock()
		if fn == nil {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Upstream-Call", fmt.Sprint(call))
			fmt.Fprintf(w, `{"call":%d}`, call)
			return
		}
		fn(w, r, call)
	}))
	t.Cleanup(u.Close)
	return u
}

// addr is the upstream's host:port, for reverse_proxy.
func (u *upstream) addr() string { return u.Listener.Addr().String() }

// requests returns a copy of what the upstream received so far.
func (u *upstream) requests() []receivedRequest {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]receivedRequest(nil), u.received...)
}

// freePort returns a TCP port that was free a moment ago and that no
// other freePort call in this process has returned: Caddy binds with
// SO_REUSEPORT, so a port handed out twice (a site and the admin endpoint,
// say) would be shared silently, the kernel splitting connections
// between them.
func freePort(t testing.TB) int {
	t.Helper()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("finding a free port: %v", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if _, taken := usedPorts.LoadOrStore(port, true); !taken {
			return port
		}
	}
	t.Fatal("finding a free port: every port offered was handed out before")
	return 0
}

// usedPorts holds every port freePort has returned.
var usedPorts sync.Map

// testCaddy is a Caddy running in this process.
type testCaddy struct {
	t         *testing.T
	adminPort int
	globals   string
}

// startCaddy adapts and loads a Caddyfile made of the harness's global
// options (a free admin port, no HTTPS, logs discarded), extra global
// options, and sites. It stops Caddy when the test ends.
func startCaddy(t *testing.T, globals, sites string) *testCaddy {
	t.Helper()
	c := &testCaddy{t: t, adminPort: freePort(t), globals: globals}
	if err := caddy.Load(c.adapt(sites), true); err != nil {
		t.Fatalf("loading config: %v\n%s", err, sites)
	}
	t.Cleanup(func() {
		if err := caddy.Stop(); err != nil {
			t.Logf("stopping caddy: %v", err)
		}
	})
	return c
}

// caddyfile returns the whole Caddyfile for sites.
func (c *testCaddy) caddyfile(sites string) string {
	return fmt.Sprintf(`{
	admin localhost:%d
	auto_https off
	persist_config off
	grace_period 2s
	log default {
		output discard
	}
	%s
}
%s
`, c.adminPort, c.globals, sites)
}

// adapt turns sites into JSON config.
func (c *testCaddy) adapt(sites string) []byte {
	c.t.Helper()
	cfg, warnings, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(c.caddyfile(sites)), nil)
	if err != nil {
		c.t.Fatalf("adapting Caddyfile: %v\n%s", err, c.caddyfile(sites))
	}
	for _, w := range warnings {
		c.t.Logf("adapt warning: %s", w.String())
	}
	return cfg
}

// reload loads new sites through the admin API, as `caddy reload` does.
// Every load replaces Caddy's admin server and shuts the old one down
// while it answers: each load goes out on a new connection (a kept-alive
// one belongs to the old server), and one that gets no HTTP answer at all
// (its connection reached the old listener as it closed) is sent again, a
// few times; loading the same config twice is harmless.
func (c *testCaddy) reload(sites string) error {
	cfg := c.adapt(sites)
	var resp *http.Response
	var err error
	for attempt := 1; attempt <= 5; attempt++ {
		req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("http://localhost:%d/load", c.adminPort), bytes.NewReader(cfg))
		req.Header.Set("Content-Type", "application/json")
		// a reload of an identical config is skipped unless forced
		req.Header.Set("Cache-Control", "must-revalidate")
		if resp, err = newConnectionClient.Do(req); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("reload: %s: %s", resp.Status, b)
	}
	return nil
}

// testClient is the client tests use against Caddy.
var testClient = &http.Client{Timeout: 20 * time.Second}

// postAfterReload is post for the first requests after a reload. Caddy
// binds with SO_REUSEPORT, and a connection queued on the old listener when
// it closes is reset, whether new or kept alive: a request that gets no
// HTTP answer is sent again on a new connection, as a provider would, a
// few times.
func postAfterReload(t testing.TB, url string, body []byte, header ...string) (*http.Response, []byte) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := newConnectionClient.Do(req)
		if err != nil {
			if attempt < 5 {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			t.Fatalf("POST %s after a reload, %d attempts: %v", url, attempt, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("reading response of POST %s: %v", url, err)
		}
		return resp, b
	}
}

// newConnectionClient opens a new connection for every request.
var newConnectionClient = &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// post sends a request and returns the response with its body read.
func post(t testing.TB, url string, body []byte, header ...string) (*http.Response, []byte) {
	t.Helper()
	return do(t, http.MethodPost, url, body, header...)
}

// do sends a request with headers given as name, value pairs.
func do(t testing.TB, method, url string, body []byte, header ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading response of %s %s: %v", method, url, err)
	}
	return resp, b
}

// siteURL is the base URL of a site listening on port.
func siteURL(port int) string { return fmt.Sprintf("http://127.0.0.1:%d", port) }

// mustContain fails unless s contains every part.
func mustContain(t testing.TB, s string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(s, p) {
			t.Fatalf("%q does not contain %q", s, p)
		}
	}
}
