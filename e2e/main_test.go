// Package e2e holds the black-box end-to-end tests of webhook_idempotency:
// a real Caddy built with the module runs in the test process in front of
// a real upstream (internal/testkit), and the tests see only what a
// provider, an application and an operator see: HTTP answers, what the
// application received, the admin API and metrics on Caddy's admin
// endpoint, and the keys in a real Redis. Tests that start Caddy do not
// run in parallel (Caddy runs one configuration per process).
package e2e

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/webhookguard/caddy-webhook-idempotency"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// gate blocks upstream handlers until opened. Tests `defer g.open()` so a
// failing test never leaves an upstream handler blocked (deferred calls
// run before the harness's Cleanup closes the upstream).
type gate struct {
	ch   chan struct{}
	once sync.Once
}

func newGate() *gate  { return &gate{ch: make(chan struct{})} }
func (g *gate) open() { g.once.Do(func() { close(g.ch) }) }
func (g *gate) wait(r *http.Request) {
	select {
	case <-g.ch:
	case <-r.Context().Done():
	}
}

// gatedUpstream answers "done <call>" once g opens; with firstOnly, only
// the first call waits for it.
func gatedUpstream(t *testing.T, g *gate, firstOnly bool) *testkit.Upstream {
	return testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		if call == 1 || !firstOnly {
			g.wait(r)
		}
		fmt.Fprintf(w, "done %d", call)
	})
}

// statusUpstream answers with the status in the request's X-Want-Status.
func statusUpstream(t *testing.T) *testkit.Upstream {
	return testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		code, _ := strconv.Atoi(r.Header.Get("X-Want-Status"))
		if code == 0 {
			code = http.StatusOK
		}
		w.Header().Set("X-Upstream-Call", fmt.Sprint(call))
		w.WriteHeader(code)
		fmt.Fprintf(w, `{"call":%d,"status":%d}`, call, code)
	})
}

// wantRejected checks a 401 with its JSON reason (docs/caddyfile.md).
func wantRejected(t *testing.T, resp *http.Response, body []byte, reason string) {
	t.Helper()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("status %d (%s), want 401", resp.StatusCode, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q", ct)
	}
	if want := `{"error":"` + reason + `"}`; string(body) != want {
		t.Fatalf("body %s, want %s", body, want)
	}
}

// stores are the stores of one Caddy that the tests not about Redis run
// on: the file store (the default) and the memory store.
var stores = []struct{ name, line string }{
	{"file", ""},
	{"memory", "store memory"},
}

// linesWith returns the lines of s that contain sub.
func linesWith(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
