package testkit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"
)

// What the end-to-end tests see of the handler on the wire: the answers
// to first deliveries and to duplicates, and sites that put the handler in
// front of an Upstream.

// ReplayedHeader is the header every replayed response carries, with the
// value "true".
const ReplayedHeader = "Idempotent-Replayed"

// ProxySite is a site on port that runs directive (a whole
// webhook_idempotency line or block) in front of up.
func ProxySite(port int, directive string, up *Upstream) string {
	return fmt.Sprintf(":%d {\n\t%s\n\treverse_proxy %s\n}\n", port, directive, up.Addr())
}

// StartProxy starts Caddy with directive in front of up (a ProxySite on a
// free port) and returns the site's URL.
func StartProxy(t *testing.T, directive string, up *Upstream) string {
	t.Helper()
	port := FreePort(t)
	StartCaddy(t, "", ProxySite(port, directive, up))
	return SiteURL(port)
}

// WantNew fails unless resp is a processed (not replayed) answer with
// status wantStatus.
func WantNew(t testing.TB, resp *http.Response, body []byte, wantStatus int) {
	t.Helper()
	if resp.StatusCode != wantStatus || resp.Header.Get(ReplayedHeader) != "" {
		t.Fatalf("want a processed %d, got %d (%s %q): %s", wantStatus, resp.StatusCode, ReplayedHeader, resp.Header.Get(ReplayedHeader), body)
	}
}

// WantReplay fails unless resp is a replay with status wantStatus and body
// wantBody.
func WantReplay(t testing.TB, resp *http.Response, body []byte, wantStatus int, wantBody string) {
	t.Helper()
	if resp.StatusCode != wantStatus || resp.Header.Get(ReplayedHeader) != "true" || string(body) != wantBody {
		t.Fatalf("want a replayed %d %q, got %d (%s %q) %q", wantStatus, wantBody, resp.StatusCode, ReplayedHeader, resp.Header.Get(ReplayedHeader), body)
	}
}

// WantCalls fails unless the upstream has received exactly n requests.
func (u *Upstream) WantCalls(t testing.TB, n int64) {
	t.Helper()
	if got := u.Calls.Load(); got != n {
		t.Fatalf("upstream called %d times, want %d", got, n)
	}
}

// Reply is a response seen by a client goroutine.
type Reply struct {
	Status int
	Header http.Header
	Body   []byte
	Err    error
}

// Send is Do for goroutines: it reports errors instead of failing the
// test.
func Send(method, url string, body io.Reader, header ...string) Reply {
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		return Reply{Err: err}
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := Client.Do(req)
	if err != nil {
		return Reply{Err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return Reply{Status: resp.StatusCode, Header: resp.Header, Body: b, Err: err}
}

// SendAsync sends a request from a goroutine; its reply arrives on the
// channel.
func SendAsync(method, url string, body []byte, header ...string) <-chan Reply {
	ch := make(chan Reply, 1)
	go func() { ch <- Send(method, url, bytes.NewReader(body), header...) }()
	return ch
}

// Receive waits up to 20s for a reply and fails the test if the request
// failed or none came.
func Receive(t testing.TB, ch <-chan Reply) Reply {
	t.Helper()
	select {
	case r := <-ch:
		if r.Err != nil {
			t.Fatalf("request failed: %v", r.Err)
		}
		return r
	case <-time.After(20 * time.Second):
		t.Fatal("no response within 20s")
	}
	return Reply{}
}

// PostChunked posts body without a length, so the client sends it
// chunked.
func PostChunked(t testing.TB, url string, body []byte, header ...string) Reply {
	t.Helper()
	r := Send(http.MethodPost, url, opaqueReader{bytes.NewReader(body)}, header...)
	if r.Err != nil {
		t.Fatalf("chunked POST %s: %v", url, r.Err)
	}
	return r
}

// opaqueReader hides a reader's length, as a chunked request body does.
type opaqueReader struct{ io.Reader }

// SHA256Key is the key value of a body hash, `sha256:<hex>` of s
// (docs/caddyfile.md).
func SHA256Key(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// WaitFor polls cond until it holds, and fails the test after within with
// what and the last thing cond saw.
func WaitFor(t testing.TB, within time.Duration, what string, cond func() (ok bool, saw string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, saw := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s; last seen: %s", what, within, saw)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
