package webhookidempotency

import (
	"context"
	"crypto/x509/pkix"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/edge"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/results"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/providers"
)

// The edge checks on the request path: refusals answered before the body
// is read, with the documented status and result. The checks themselves
// are internal/edge's, tested there.

// serveFrom drives ServeHTTP with a request whose client address, as
// Caddy determines it, is addr.
func serveFrom(h *Handler, addr string, r *http.Request, next caddyhttp.HandlerFunc) served {
	w := httptest.NewRecorder()
	repl := caddy.NewReplacer()
	r = caddyhttp.PrepareRequest(r, repl, w, nil)
	caddyhttp.SetVar(r.Context(), caddyhttp.ClientIPVarKey, addr)
	err := h.ServeHTTP(w, r, next)
	res, _ := repl.GetString(placeholderResult)
	key, _ := repl.GetString(placeholderKey)
	return served{w: w, err: err, result: res, key: key}
}

func postFrom(h *Handler, addr, key string, next caddyhttp.HandlerFunc) served {
	r := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader(`{"id":"`+key+`"}`))
	r.Header.Set("Idempotency-Key", key)
	return serveFrom(h, addr, r, next)
}

// wantVerdict posts from addr and checks the answer: 200 from the next
// handler when allowed, else 403 (or 503) with nothing called.
func wantVerdict(t *testing.T, h *Handler, addr string, want int) {
	t.Helper()
	var calls atomic.Int64
	s := postFrom(h, addr, "k-"+addr+"-"+time.Now().Format("150405.000000000"), countingNext(&calls))
	if s.w.Code != want {
		t.Fatalf("from %s: status %d (%s), want %d", addr, s.w.Code, s.w.Body, want)
	}
	if want != http.StatusOK && calls.Load() != 0 {
		t.Fatalf("from %s: refused, yet the next handler was called", addr)
	}
}

func TestAllowIPsRanges(t *testing.T) {
	h := newTestHandler(t, &Handler{Source: "ranges", AllowIPs: &AllowIPsConfig{Ranges: []string{"203.0.113.0/24", "2001:db8::1"}}})
	var calls atomic.Int64
	for addr, want := range map[string]int{
		"203.0.113.9":        200,
		"::ffff:203.0.113.9": 200,
		"2001:db8::1":        200,
		"203.0.114.1":        403,
		"2001:db8::2":        403,
		"not-an-address":     403,
	} {
		s := postFrom(h, addr, "k-"+addr+time.Now().Format(".000000000"), countingNext(&calls))
		if s.w.Code != want {
			t.Errorf("from %s: %d %s, want %d", addr, s.w.Code, s.w.Body, want)
		}
		if want == 403 {
			if s.result != results.Forbidden || s.key != "" {
				t.Errorf("from %s: result %q key %q, want forbidden and no key", addr, s.result, s.key)
			}
			if got := s.w.Body.String(); got != `{"error":"address not allowed"}` || s.w.Header().Get("Content-Type") != "application/json" {
				t.Errorf("from %s: body %s", addr, got)
			}
		}
	}
	if calls.Load() != 3 {
		t.Fatalf("next handler called %d times, want 3", calls.Load())
	}
}

// TestAllowIPsBeforeTheBody: a refused request's body is never read, and
// no method escapes the check (a GET passed on to the application is
// refused too).
func TestAllowIPsBeforeTheBody(t *testing.T) {
	h := newTestHandler(t, &Handler{Source: "nobody", AllowIPs: &AllowIPsConfig{Ranges: []string{"192.0.2.1"}}})
	body := &countingReader{}
	r := httptest.NewRequest(http.MethodPost, "/hook", body)
	if s := serveFrom(h, "198.51.100.7", r, countingNext(new(atomic.Int64))); s.w.Code != 403 {
		t.Fatalf("status %d", s.w.Code)
	}
	if body.reads.Load() != 0 {
		t.Fatalf("the refused request's body was read %d times", body.reads.Load())
	}
	get := httptest.NewRequest(http.MethodGet, "/health", nil)
	if s := serveFrom(h, "198.51.100.7", get, countingNext(new(atomic.Int64))); s.w.Code != 403 || s.result != results.Forbidden {
		t.Fatalf("GET from outside: %d %q", s.w.Code, s.result)
	}
}

type countingReader struct{ reads atomic.Int64 }

func (c *countingReader) Read(p []byte) (int, error) {
	c.reads.Add(1)
	return 0, context.Canceled
}

// TestAllowListNeverLoaded: while a URL list has never loaded (no network,
// no copy on disk) addresses no other list allows get 503, so the
// provider retries, and the ranges written out still work.
func TestAllowListNeverLoaded(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler()) // a list URL that answers 404
	t.Cleanup(srv.Close)
	h := newTestHandler(t, &Handler{Source: "never", AllowIPs: &AllowIPsConfig{URLs: []string{srv.URL + "/none"}, Ranges: []string{"192.0.2.1"}}})
	wantVerdict(t, h, "192.0.2.1", 200)
	var calls atomic.Int64
	s := postFrom(h, "192.0.2.9", "never-1", countingNext(&calls))
	if s.w.Code != 503 || s.w.Header().Get("Retry-After") == "" || s.result != results.Unavailable || calls.Load() != 0 {
		t.Fatalf("status %d %s result %q calls %d", s.w.Code, s.w.Body, s.result, calls.Load())
	}
	st := h.edgeStatus()
	if len(st) != 2 || st[0].Kind != "inline" || st[1].Ranges != 0 || !strings.Contains(st[1].LastError, "status 404") {
		t.Fatalf("status %+v", st)
	}
}

func TestAllowIPsProvisionErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  AllowIPsConfig
		want string
	}{
		{AllowIPsConfig{}, "allow_ips lists nothing"},
		{AllowIPsConfig{Ranges: []string{"203.0.113.0/33"}}, `allow_ips: "203.0.113.0/33" is not a CIDR range`},
		{AllowIPsConfig{Providers: []string{"paddle"}}, "paddle publishes no address list that can be fetched"},
		{AllowIPsConfig{Providers: []string{"gitlub"}}, "'gitlub' is neither a provider that publishes its addresses (" + strings.Join(edge.ListProviders(), ", ") + ")"},
		{AllowIPsConfig{URLs: []string{"ftp://example.com/ips"}}, "invalid allow_ips url 'ftp://example.com/ips'"},
		{AllowIPsConfig{Ranges: []string{"192.0.2.1"}, Refresh: caddy.Duration(time.Millisecond)}, "allow_ips refresh 1ms is shorter than 1s"},
	} {
		ctx, cancel := testkit.NewContext(t)
		cfg := tc.cfg
		err := (&Handler{Source: "errs", AllowIPs: &cfg}).Provision(ctx)
		cancel()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

// TestAllowIPsWarnsOfSignedRefusals: a refused request that carries the
// route's signature header is a WARN (the provider's list may have
// changed), at most one every ten seconds; one without is not.
func TestAllowIPsWarnsOfSignedRefusals(t *testing.T) {
	h := newTestHandler(t, &Handler{Provider: "github", Source: "warned", Verify: &providers.VerifyConfig{Secrets: []string{"s3cr3t"}},
		AllowIPs: &AllowIPsConfig{Ranges: []string{"192.0.2.1"}}})
	core, logs := observer.New(zapcore.WarnLevel)
	h.logger = zap.New(core)
	post := func(signed bool) {
		r := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader(`{}`))
		r.Header.Set("X-GitHub-Delivery", "d1")
		if signed {
			r.Header.Set("X-Hub-Signature-256", "sha256=0123")
		}
		if s := serveFrom(h, "198.51.100.7", r, countingNext(new(atomic.Int64))); s.w.Code != 403 {
			t.Fatalf("status %d", s.w.Code)
		}
	}
	post(false)
	if logs.Len() != 0 {
		t.Fatalf("an unsigned refusal was logged: %v", logs.All())
	}
	post(true)
	post(true)
	post(true)
	entries := logs.FilterMessageSnippet("carries a signature").All()
	if len(entries) != 1 {
		t.Fatalf("%d WARN lines, want 1: %v", len(entries), logs.All())
	}
	if f := entries[0].ContextMap(); f["client_ip"] != "198.51.100.7" {
		t.Fatalf("fields %v", f)
	}
	if h.edge.quiet.Load() != 2 {
		t.Fatalf("%d refusals counted as not logged, want 2", h.edge.quiet.Load())
	}
}

// TestClientCertOnTheRequestPath: a refused request gets 403, result
// forbidden, and reaches nothing; an accepted one goes on.
func TestClientCertOnTheRequestPath(t *testing.T) {
	ca := testkit.NewCA(t, "Provider Root")
	leaf := ca.Client(t, pkix.Name{CommonName: "hooks"}).Leaf
	h := newTestHandler(t, &Handler{Source: "certs", ClientCert: &ClientCertConfig{CA: []string{ca.PEMFile}}})
	var calls atomic.Int64
	r := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader(`{}`))
	if s := serveReq(h, r, countingNext(&calls)); s.w.Code != 403 || s.result != results.Forbidden || s.w.Body.String() != `{"error":"client certificate required"}` {
		t.Fatalf("without TLS: %d %s %q", s.w.Code, s.w.Body, s.result)
	}
	r = httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader(`{}`))
	r.TLS = ca.Verified(leaf)
	if s := serveReq(h, r, countingNext(&calls)); s.w.Code != 200 || s.result != results.New {
		t.Fatalf("with the certificate: %d %s %q", s.w.Code, s.w.Body, s.result)
	}
	if calls.Load() != 1 {
		t.Fatalf("next called %d times", calls.Load())
	}
}
