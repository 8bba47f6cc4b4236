package admin

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
)

// TestConsoleCaddyfile: the directive takes no argument and no block
// (an error naming the line), and sits where Caddy puts its own metrics:
// after the middleware (basic_auth) and respond, before reverse_proxy.
func TestConsoleCaddyfile(t *testing.T) {
	adapt := func(site string) (string, error) {
		cfg, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(site), nil)
		return string(cfg), err
	}
	cfg, err := adapt(`:8080 {
	reverse_proxy /app/* 127.0.0.1:9000
	webhook_idempotency_console /ops/*
	respond /health 200
	basic_auth {
		operator $2a$04$ms6aGKeJZCQ6nXLmLtbgwO0lMnvwTSFHJCKo3o/7by7y0ktNcaWQi
	}
}`)
	if err != nil {
		t.Fatal(err)
	}
	order := []string{`"handler":"authentication"`, `"handler":"static_response"`, `"handler":"webhook_idempotency_console"`, `"handler":"reverse_proxy"`}
	last := -1
	for _, h := range order {
		i := strings.Index(cfg, h)
		if i < 0 || i < last {
			t.Fatalf("handlers not in the order %v:\n%s", order, cfg)
		}
		last = i
	}
	for _, tc := range []struct{ site, want string }{
		{":8080 {\n\twebhook_idempotency_console extra\n}", "webhook_idempotency_console takes no arguments, got 'extra', at Caddyfile:2"},
		{":8080 {\n\twebhook_idempotency_console {\n\t\tread_only\n\t}\n}", "webhook_idempotency_console has no options, got 'read_only', at Caddyfile:3"},
	} {
		if _, err := adapt(tc.site); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.site, err, tc.want)
		}
	}
}

// serveConsoleRequest sends one request to the handler, as Caddy does
// under `handle_path /ops/*`: path is what is left of the original path.
func serveConsoleRequest(t *testing.T, method, original, path string, header ...string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(method, "http://console.test"+original, nil)
	orig := *r
	r.URL = &url.URL{Path: path, RawQuery: r.URL.RawQuery}
	r = r.WithContext(context.WithValue(r.Context(), caddyhttp.OriginalRequestCtxKey, orig))
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	if err := new(Console).ServeHTTP(w, r, nil); err != nil {
		t.Fatalf("%s %s: ServeHTTP returned %v", method, original, err)
	}
	return w
}

// TestConsoleHandlerPaths: the page at the route's root, naming the API
// below api/ relative to itself (the admin endpoint's page names ./); its
// files below console/; the route's root without its slash sent to it;
// everything else a JSON error, as the admin endpoint answers.
func TestConsoleHandlerPaths(t *testing.T) {
	w := serveConsoleRequest(t, http.MethodGet, "/ops/?source=x", "/")
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `<meta name="webhook-idempotency-api" content="api/">`) ||
		!strings.Contains(w.Header().Get("Content-Security-Policy"), "script-src 'self'") {
		t.Fatalf("the page: %d %v %.300s", w.Code, w.Header(), w.Body)
	}
	rec := httptest.NewRecorder()
	_ = serveConsolePage(rec, adminPageAPI)
	if !strings.Contains(rec.Body.String(), `<meta name="webhook-idempotency-api" content="./">`) {
		t.Fatalf("the admin endpoint's page: %.300s", rec.Body)
	}
	if w := serveConsoleRequest(t, http.MethodGet, "/ops/console/api.js", "/console/api.js"); w.Code != http.StatusOK || w.Header().Get("Content-Type") != "text/javascript; charset=utf-8" {
		t.Fatalf("api.js: %d %v", w.Code, w.Header())
	}
	if w := serveConsoleRequest(t, http.MethodGet, "/a/ops?source=x", "/"); w.Code != http.StatusMovedPermanently || w.Header().Get("Location") != "ops/?source=x" {
		t.Fatalf("the root without its slash: %d %v", w.Code, w.Header())
	}
	for _, tc := range []struct {
		method, path string
		status       int
		err          string
	}{
		{http.MethodGet, "/console/secret.go", http.StatusNotFound, "not found"},
		{http.MethodGet, "/nothing", http.StatusNotFound, "not found"},
		{http.MethodPost, "/", http.StatusMethodNotAllowed, "method POST not allowed: use GET, HEAD"},
		{http.MethodGet, "/api/no_such_source/events", http.StatusNotFound, `no webhook_idempotency route for source "no_such_source"`},
		{http.MethodPut, "/api/", http.StatusMethodNotAllowed, "method PUT not allowed: use GET"},
	} {
		w := serveConsoleRequest(t, tc.method, "/ops"+tc.path, tc.path)
		var body struct {
			Error string `json:"error"`
		}
		if w.Code != tc.status || w.Header().Get("Content-Type") != "application/json" || json.Unmarshal(w.Body.Bytes(), &body) != nil || !strings.Contains(body.Error, tc.err) {
			t.Errorf("%s %s: %d %q, want %d with %q", tc.method, tc.path, w.Code, w.Body, tc.status, tc.err)
		}
	}
}

// TestCheckOrigin: a browser's request to the API is accepted from the
// console's own origin only; a state change must say so with Origin; a
// program (no browser header) is accepted.
func TestCheckOrigin(t *testing.T) {
	const self = "http://console.test"
	for _, tc := range []struct {
		name   string
		method string
		header []string
		ok     bool
	}{
		{"a program's POST", http.MethodPost, nil, true},
		{"the page's POST", http.MethodPost, []string{"Origin", self, "Sec-Fetch-Site", "same-origin", "Sec-Fetch-Mode", "cors"}, true},
		{"the page's DELETE, an older browser", http.MethodDelete, []string{"Origin", self}, true},
		{"the page's read", http.MethodGet, []string{"Sec-Fetch-Site", "same-origin", "Sec-Fetch-Mode", "cors", "Referer", self + "/ops/"}, true},
		{"a read typed in the address bar", http.MethodGet, []string{"Sec-Fetch-Site", "none", "Sec-Fetch-Mode", "navigate"}, true},
		{"a cross-site POST", http.MethodPost, []string{"Origin", "http://evil.test", "Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "cors"}, false},
		{"a same-site POST (another port)", http.MethodPost, []string{"Origin", "http://console.test:8080", "Sec-Fetch-Site", "same-site", "Sec-Fetch-Mode", "cors"}, false},
		{"another origin's POST, an older browser", http.MethodPost, []string{"Origin", "http://evil.test"}, false},
		{"a form of another page", http.MethodPost, []string{"Sec-Fetch-Site", "same-origin", "Sec-Fetch-Mode", "no-cors", "Origin", self}, false},
		{"a POST with Origin null", http.MethodPost, []string{"Origin", "null"}, false},
		{"a browser's POST without Origin", http.MethodPost, []string{"Sec-Fetch-Site", "same-origin", "Sec-Fetch-Mode", "cors"}, false},
		{"a cross-site read", http.MethodGet, []string{"Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "cors", "Origin", "http://evil.test"}, false},
		{"a typed-in POST", http.MethodPost, []string{"Sec-Fetch-Site", "none", "Origin", self}, false},
	} {
		r := httptest.NewRequest(tc.method, self+"/ops/api/x/keys?key=k", nil)
		for i := 0; i+1 < len(tc.header); i += 2 {
			r.Header.Set(tc.header[i], tc.header[i+1])
		}
		err := checkOrigin(r)
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v, want accepted %v", tc.name, err, tc.ok)
		}
	}
	// over TLS the origin's scheme must be https
	r := httptest.NewRequest(http.MethodPost, "https://console.test/ops/api/x/keys?key=k", nil)
	r.Header.Set("Origin", "http://console.test")
	if checkOrigin(r) == nil {
		t.Error("a POST over TLS from the plain-HTTP origin of the same host was accepted")
	}
}

// TestConsoleSourceNamedConsole: on the admin endpoint a source named
// console loses its summary to the page (docs/admin.md) and keeps its
// other routes, the page's files still served below it; the handler,
// whose page is at its root, answers the summary at api/console.
func TestConsoleSourceNamedConsole(t *testing.T) {
	owner := new(int)
	Publish(owner, []Route{&countingRoute{source: "console", counts: map[string]int64{}}}, Settings{})
	t.Cleanup(func() { Withdraw(owner) })
	admin := func(path string) *httptest.ResponseRecorder {
		t.Helper()
		w := httptest.NewRecorder()
		if err := (AdminAPI{}).handle(w, httptest.NewRequest(http.MethodGet, "http://localhost:2019"+adminPrefix+path, nil)); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		return w
	}
	if w := admin("console"); !strings.Contains(w.Header().Get("Content-Type"), "text/html") {
		t.Fatalf("the admin endpoint's console: %v", w.Header())
	}
	if w := admin("console/console.js"); w.Header().Get("Content-Type") != "text/javascript; charset=utf-8" {
		t.Fatalf("the admin endpoint's console.js: %v", w.Header())
	}
	if w := admin("console/minutes"); !strings.Contains(w.Body.String(), `"source":"console"`) {
		t.Fatalf("the minutes of the source named console: %d %.200s", w.Code, w.Body)
	}
	if w := serveConsoleRequest(t, http.MethodGet, "/ops/api/console", "/api/console"); w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"source":"console"`) {
		t.Fatalf("the handler's summary of the source named console: %d %.200s", w.Code, w.Body)
	}
}
