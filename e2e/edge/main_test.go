// Package edge holds the black-box end-to-end tests of the protections
// only the edge can give: allow_ips (the client's address, as Caddy
// determines it, in a provider's published list, a list fetched from a
// URL or ranges written out) and client_cert (a client certificate Caddy
// verified in a real TLS handshake), and the efi preset built on them. A
// real Caddy runs in the test process in front of a real upstream; a local
// HTTP server stands in for the providers' list endpoints. Clients connect
// from 127.0.0.1 or 127.0.0.2 (loopback has both). Tests that start Caddy
// do not run in parallel.
package edge

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/webhookguard/caddy-webhook-idempotency"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// from is a client whose connections leave from a loopback address of the
// test's choosing (127.0.0.1 or 127.0.0.2), one connection a request.
func from(local string, tlsConfig *tls.Config) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Timeout: 5 * time.Second}
	return &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		DialContext:       d.DialContext,
		DisableKeepAlives: true,
		TLSClientConfig:   tlsConfig,
	}}
}

// reply is one answer, its body read.
type reply struct {
	status int
	header http.Header
	body   string
}

// post sends a POST with headers given as name, value pairs.
func post(t *testing.T, c *http.Client, url, body string, header ...string) reply {
	t.Helper()
	r, err := send(c, url, body, header...)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	return r
}

func send(c *http.Client, url, body string, header ...string) (reply, error) {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return reply{}, err
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: string(b)}, err
}

// wantForbidden checks a 403 with its JSON reason.
func wantForbidden(t *testing.T, r reply, reason string) {
	t.Helper()
	if r.status != http.StatusForbidden || r.header.Get("Content-Type") != "application/json" || r.body != `{"error":"`+reason+`"}` {
		t.Fatalf("got %d %q %s, want 403 %q", r.status, r.header.Get("Content-Type"), r.body, reason)
	}
}

// keyState reads a key's state through the admin API.
func keyState(t *testing.T, c *testkit.Caddy, source, key string) string {
	t.Helper()
	var st struct {
		State string `json:"state"`
	}
	c.AdminJSON(t, http.MethodGet, "/webhook_idempotency/"+source+"/keys/"+key, &st)
	return st.State
}

// listStatus is an allow list as GET /webhook_idempotency/<source> shows it.
type listStatus struct {
	Source      string     `json:"source"`
	Kind        string     `json:"kind"`
	Ranges      int        `json:"ranges"`
	LoadedFrom  string     `json:"loaded_from"`
	LastRefresh *time.Time `json:"last_refresh"`
	LastAttempt *time.Time `json:"last_attempt"`
	LastError   string     `json:"last_error"`
	Refresh     string     `json:"refresh"`
}

// allowLists reads a source's allow lists through the admin API.
func allowLists(t *testing.T, c *testkit.Caddy, source string) []listStatus {
	t.Helper()
	var st struct {
		AllowIPs []listStatus `json:"allow_ips"`
	}
	c.AdminJSON(t, http.MethodGet, "/webhook_idempotency/"+source, &st)
	return st.AllowIPs
}

// listEndpoint stands in for a provider's address list endpoint.
type listEndpoint struct {
	*httptest.Server
	mu     sync.Mutex
	status int
	body   string
}

func newListEndpoint(t *testing.T, body string) *listEndpoint {
	t.Helper()
	e := &listEndpoint{status: http.StatusOK, body: body}
	e.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		status, body := e.status, e.body
		e.mu.Unlock()
		w.WriteHeader(status)
		fmt.Fprint(w, body)
	}))
	t.Cleanup(e.Close)
	return e
}

func (e *listEndpoint) set(status int, body string) {
	e.mu.Lock()
	e.status, e.body = status, body
	e.mu.Unlock()
}
