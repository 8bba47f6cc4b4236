// Package testkit is the harness of the module's tests: free ports that no
// two test processes share, real redis-server processes (standalone,
// Cluster, Sentinel), a real Caddy running in the test process, and a real
// upstream HTTP server that records what it received. Every test that uses
// Caddy runs one configuration at a time in its process (Caddy runs one
// configuration per process): such tests must not run in parallel with
// each other, but packages of them may run side by side.
package testkit

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago and
// that no other FreePort call has returned, in this process or in any
// other test process running now: Caddy binds with SO_REUSEPORT, so a port
// handed out twice (a site and an admin endpoint, say, or two test
// binaries of `go test ./...`) would be shared silently, the kernel
// splitting connections between them. Other processes are kept off by a
// lock on a file named after the port, held until this process exits.
func FreePort(t testing.TB) int {
	t.Helper()
	for range 200 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("finding a free port: %v", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if _, taken := usedPorts.LoadOrStore(port, true); taken {
			continue
		}
		if lockPort(port) {
			return port
		}
	}
	t.Fatal("finding a free port: every port offered was taken by this or another test process")
	return 0
}

// usedPorts holds every port FreePort has returned in this process.
var usedPorts sync.Map

// heldPorts keeps the lock files of this process's ports open.
var (
	heldMu    sync.Mutex
	heldPorts []*os.File
)

// lockPort takes the cross-process lock of a port; false when another
// process holds it.
func lockPort(port int) bool {
	dir := filepath.Join(os.TempDir(), "caddy-webhook-idempotency-ports")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return true // no lock directory: this process's own check still holds
	}
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return true
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return false
	}
	heldMu.Lock()
	heldPorts = append(heldPorts, f)
	heldMu.Unlock()
	return true
}

// Received is what an Upstream saw of one request.
type Received struct {
	Method           string
	URI              string
	Header           http.Header
	Body             []byte
	ContentLength    int64
	TransferEncoding []string
}

// Upstream stands in for the application behind reverse_proxy.
type Upstream struct {
	*httptest.Server
	// Calls counts the requests received.
	Calls    atomic.Int64
	mu       sync.Mutex
	received []Received
}

// NewUpstream starts an upstream that records every request and answers
// with fn (call is 1 for the first request). A nil fn answers 200 with a
// JSON body that differs on every call and an X-Upstream-Call header.
func NewUpstream(t testing.TB, fn func(w http.ResponseWriter, r *http.Request, call int64)) *Upstream {
	t.Helper()
	u := &Upstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		// The count and the record are taken together, so that
		// Requests()[call-1] is this request's even when others arrive
		// at the same time.
		u.mu.Lock()
		call := u.Calls.Add(1)
		u.received = append(u.received, Received{
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

// Addr is the upstream's host:port, for reverse_proxy.
func (u *Upstream) Addr() string { return u.Listener.Addr().String() }

// Requests returns a copy of what the upstream received so far.
func (u *Upstream) Requests() []Received {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]Received(nil), u.received...)
}

// WaitCalls waits up to within for the upstream to have received n
// requests, and fails the test otherwise.
func (u *Upstream) WaitCalls(t testing.TB, n int64, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for u.Calls.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("upstream received %d requests within %s, want %d", u.Calls.Load(), within, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Client is the client tests use against Caddy: it keeps connections
// alive.
var Client = &http.Client{Timeout: 20 * time.Second}

// NewConnectionClient opens a new connection for every request.
var NewConnectionClient = &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// Post sends a POST with headers given as name, value pairs and returns
// the response with its body read.
func Post(t testing.TB, url string, body []byte, header ...string) (*http.Response, []byte) {
	t.Helper()
	return Do(t, http.MethodPost, url, body, header...)
}

// Do sends a request with headers given as name, value pairs and returns
// the response with its body read.
func Do(t testing.TB, method, url string, body []byte, header ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := Client.Do(req)
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

// PostAfterReload is Post for the first requests after a reload. Caddy
// binds with SO_REUSEPORT, and a connection queued on the old listener when
// it closes is reset, whether new or kept alive: a request that gets no
// HTTP answer is sent again on a new connection, as a provider would, for
// as long as a loaded machine may take to close the old listener
// (reloadRetries).
func PostAfterReload(t testing.TB, url string, body []byte, header ...string) (*http.Response, []byte) {
	t.Helper()
	deadline := time.Now().Add(reloadRetries)
	for attempt := 1; ; attempt++ {
		req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := NewConnectionClient.Do(req)
		if err != nil {
			if time.Now().Before(deadline) {
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

// reloadRetries is how long a request that meets a reload gets no HTTP
// answer before a test gives up on it.
const reloadRetries = 30 * time.Second

// SiteURL is the base URL of a site listening on port.
func SiteURL(port int) string { return fmt.Sprintf("http://127.0.0.1:%d", port) }

// MustContain fails unless s contains every part.
func MustContain(t testing.TB, s string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(s, p) {
			t.Fatalf("%q does not contain %q", s, p)
		}
	}
}

// Eventually waits up to within for cond, and fails the test with what
// otherwise.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
