package testkit

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// Probe is a handler for tests, the Caddyfile directive `e2e_probe <name>`:
// it reports every request that reaches it, by its X-Probe header, on the
// channel NewProbe registered under its name, and passes the request on.
// Put it in a route before webhook_idempotency to know that a request has
// arrived.
type Probe struct {
	Name string `json:"name,omitempty"`
}

// CaddyModule returns the Caddy module information.
func (Probe) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "http.handlers.e2e_probe", New: func() caddy.Module { return new(Probe) }}
}

// ServeHTTP reports the request and calls next.
func (p *Probe) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	if ch, ok := probes.Load(p.Name); ok {
		ch.(chan string) <- r.Header.Get("X-Probe")
	}
	return next.ServeHTTP(w, r)
}

var (
	probes        sync.Map // name → chan string
	registerProbe sync.Once
)

// NewProbe registers the e2e_probe directive (once per process) and a
// channel for the probes named name, for the test. The channel holds 1000
// arrivals.
func NewProbe(t testing.TB, name string) chan string {
	registerProbe.Do(func() {
		caddy.RegisterModule(Probe{})
		httpcaddyfile.RegisterHandlerDirective("e2e_probe", func(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
			p := new(Probe)
			h.Next()
			if !h.NextArg() {
				return nil, h.ArgErr()
			}
			p.Name = h.Val()
			return p, nil
		})
	})
	ch := make(chan string, 1000)
	probes.Store(name, ch)
	t.Cleanup(func() { probes.Delete(name) })
	return ch
}

// Arrived waits up to 10s until the probe has seen a request with
// X-Probe id.
func Arrived(t testing.TB, ch chan string, id string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case got := <-ch:
			if got == id {
				return
			}
		case <-timeout:
			t.Fatalf("request %q never arrived", id)
		}
	}
}

var _ caddyhttp.MiddlewareHandler = (*Probe)(nil)
