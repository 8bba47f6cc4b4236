//go:build porting

package webhookidempotency

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func TestE2EDuplicateIsReplayed(t *testing.T) {
	up := newUpstream(t, nil)
	url := startProxy(t, "webhook_idempotency source test", up) + "/hook"
	first, firstBody := post(t, url, []byte(`{"id":"evt_1"}`), "Idempotency-Key", "evt_1")
	second, secondBody := post(t, url, []byte(`{"id":"evt_1"}`), "Idempotency-Key", "evt_1")

	if first.StatusCode != http.StatusOK || second.StatusCode != http.StatusOK {
		t.Fatalf("statuses: %d, %d", first.StatusCode, second.StatusCode)
	}
	if got := up.calls.Load(); got != 1 {
		t.Fatalf("upstream called %d times, want 1", got)
	}
	if string(secondBody) != string(firstBody) || string(firstBody) != `{"call":1}` {
		t.Fatalf("bodies: %q then %q", firstBody, secondBody)
	}
	if first.Header.Get(replayedHeader) != "" || second.Header.Get(replayedHeader) != "true" {
		t.Fatalf("Idempotent-Replayed: %q then %q", first.Header.Get(replayedHeader), second.Header.Get(replayedHeader))
	}
	if second.Header.Get("X-Upstream-Call") != "1" || second.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("replayed headers: %v", second.Header)
	}
}

// --- helpers -----------------------------------------------------------

// proxySite is a site on port that runs directive (a whole
// webhook_idempotency line or block) in front of up.
func proxySite(port int, directive string, up *upstream) string {
	return fmt.Sprintf(":%d {\n\t%s\n\treverse_proxy %s\n}\n", port, directive, up.addr())
}

// startProxy starts Caddy with directive in front of up (a proxySite on a
// free port) and returns the site's URL.
func startProxy(t *testing.T, directive string, up *upstream) string {
	t.Helper()
	port := freePort(t)
	startCaddy(t, "", proxySite(port, directive, up))
	return siteURL(port)
}

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
func gatedUpstream(t *testing.T, g *gate, firstOnly bool) *upstream {
	return newUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		if call == 1 || !firstOnly {
			g.wait(r)
		}
		fmt.Fprintf(w, "done %d", call)
	})
}

// reply is a response seen by a client goroutine.
type reply struct {
	status int
	header http.Header
	body   []byte
	err    error
}

// send is do for goroutines: it reports errors instead of failing the test.
func send(method, url string, body io.Reader, header ...string) reply {
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		return reply{err: err}
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := testClient.Do(req)
	if err != nil {
		return reply{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: b, err: err}
}

// sendAsync sends a request from a goroutine.
func sendAsync(method, url string, body []byte, header ...string) <-chan reply {
	ch := make(chan reply, 1)
	go func() { ch <- send(method, url, bytes.NewReader(body), header...) }()
	return ch
}

// postChunked posts body without a length, so the client sends it chunked.
func postChunked(t *testing.T, url string, body []byte, header ...string) reply {
	t.Helper()
	r := send(http.MethodPost, url, opaqueReader{bytes.NewReader(body)}, header...)
	if r.err != nil {
		t.Fatalf("chunked POST %s: %v", url, r.err)
	}
	return r
}

// waitCalls waits until the upstream has been called n times.
func waitCalls(t *testing.T, up *upstream, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for up.calls.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("upstream called %d times, waited for %d", up.calls.Load(), n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func receive(t *testing.T, ch <-chan reply) reply {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("request failed: %v", r.err)
		}
		return r
	case <-time.After(20 * time.Second):
		t.Fatal("no response")
	}
	return reply{}
}

func wantNew(t *testing.T, resp *http.Response, body []byte, wantStatus int) {
	t.Helper()
	if resp.StatusCode != wantStatus || resp.Header.Get(replayedHeader) != "" {
		t.Fatalf("want a processed %d, got %d (Idempotent-Replayed %q): %s", wantStatus, resp.StatusCode, resp.Header.Get(replayedHeader), body)
	}
}

func wantReplay(t *testing.T, resp *http.Response, body []byte, wantStatus int, wantBody string) {
	t.Helper()
	if resp.StatusCode != wantStatus || resp.Header.Get(replayedHeader) != "true" || string(body) != wantBody {
		t.Fatalf("want a replayed %d %q, got %d (Idempotent-Replayed %q) %q", wantStatus, wantBody, resp.StatusCode, resp.Header.Get(replayedHeader), body)
	}
}

func wantCalls(t *testing.T, up *upstream, n int64) {
	t.Helper()
	if got := up.calls.Load(); got != n {
		t.Fatalf("upstream called %d times, want %d", got, n)
	}
}

// probe is a handler for tests: it reports every request that reaches it,
// by its X-Probe header, on the channel registered under its name. Put it
// in a route before webhook_idempotency to know that a request has arrived.
type probe struct {
	Name string `json:"name,omitempty"`
}

var probes sync.Map // name → chan string

func (probe) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "http.handlers.e2e_probe", New: func() caddy.Module { return new(probe) }}
}

func (p *probe) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	if ch, ok := probes.Load(p.Name); ok {
		ch.(chan string) <- r.Header.Get("X-Probe")
	}
	return next.ServeHTTP(w, r)
}

func init() {
	caddy.RegisterModule(probe{})
	httpcaddyfile.RegisterHandlerDirective("e2e_probe", func(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
		p := new(probe)
		h.Next()
		if !h.NextArg() {
			return nil, h.ArgErr()
		}
		p.Name = h.Val()
		return p, nil
	})
}

// newProbe registers a probe channel for the test.
func newProbe(t *testing.T, name string) chan string {
	ch := make(chan string, 100)
	probes.Store(name, ch)
	t.Cleanup(func() { probes.Delete(name) })
	return ch
}

// arrived waits until the probe has seen a request with X-Probe id.
func arrived(t *testing.T, ch chan string, id string) {
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

// statusUpstream answers with the status in the request's X-Want-Status.
func statusUpstream(t *testing.T) *upstream {
	return newUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		code, _ := strconv.Atoi(r.Header.Get("X-Want-Status"))
		if code == 0 {
			code = http.StatusOK
		}
		w.Header().Set("X-Upstream-Call", fmt.Sprint(call))
		w.WriteHeader(code)
		fmt.Fprintf(w, `{"call":%d,"status":%d}`, call, code)
	})
}

// --- tests -------------------------------------------------------------

func TestE2EBodyHashFallback(t *testing.T) {
	up := newUpstream(t, nil)
	url := startProxy(t, "webhook_idempotency source bodyhash", up) + "/hook"

	r1, b1 := post(t, url, []byte(`{"event":"a"}`))
	wantNew(t, r1, b1, 200)
	r2, b2 := post(t, url, []byte(`{"event":"a"}`))
	wantReplay(t, r2, b2, 200, `{"call":1}`)
	r3, b3 := post(t, url, []byte(`{"event":"b"}`))
	wantNew(t, r3, b3, 200)
	if string(b3) != `{"call":2}` {
		t.Fatalf("a different body got %q", b3)
	}
	// an empty Idempotency-Key header falls back to the body as well
	r4, b4 := post(t, url, []byte(`{"event":"b"}`), "Idempotency-Key", "  ")
	wantReplay(t, r4, b4, 200, `{"call":2}`)
	wantCalls(t, up, 2)
}

func TestE2EServerErrorIsReleasedAndRetried(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		if call == 1 {
			w.WriteHeader(http.StatusInternalServerError)
			io.WriteString(w, "boom")
			return
		}
		fmt.Fprintf(w, "ok %d", call)
	})
	url := startProxy(t, "webhook_idempotency source retry", up) + "/hook"

	r1, b1 := post(t, url, []byte(`{}`), "Idempotency-Key", "evt_500")
	wantNew(t, r1, b1, 500)
	r2, b2 := post(t, url, []byte(`{}`), "Idempotency-Key", "evt_500")
	wantNew(t, r2, b2, 200)
	if string(b2) != "ok 2" {
		t.Fatalf("retry body %q", b2)
	}
	r3, b3 := post(t, url, []byte(`{}`), "Idempotency-Key", "evt_500")
	wantReplay(t, r3, b3, 200, "ok 2")
	wantCalls(t, up, 2)
}

func TestE2EUpstreamDownIsNotCached(t *testing.T) {
	dead := freePort(t) // nothing listens there
	up := newUpstream(t, nil)
	deadPort, livePort := freePort(t), freePort(t)
	startCaddy(t, "", fmt.Sprintf(`:%d {
	webhook_idempotency source down
	reverse_proxy 127.0.0.1:%d
}
:%d {
	webhook_idempotency source down
	reverse_proxy %s
}`, deadPort, dead, livePort, up.addr()))

	r1, b1 := post(t, siteURL(deadPort)+"/hook", []byte(`{}`), "Idempotency-Key", "evt_down")
	wantNew(t, r1, b1, http.StatusBadGateway)
	// same source and key, upstream back: processed, not a replayed 502
	r2, b2 := post(t, siteURL(livePort)+"/hook", []byte(`{}`), "Idempotency-Key", "evt_down")
	wantNew(t, r2, b2, 200)
	wantCalls(t, up, 1)
}

func TestE2EUpstreamCutShortIsReleased(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		if call == 1 {
			// promise 100 bytes, send 10, then drop the connection
			w.Header().Set("Content-Length", "100")
			w.WriteHeader(http.StatusOK)
			io.WriteString(w, "0123456789")
			w.(http.Flusher).Flush()
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		fmt.Fprintf(w, "ok %d", call)
	})
	url := startProxy(t, "webhook_idempotency source cut", up) + "/hook"

	first := send(http.MethodPost, url, strings.NewReader(`{}`), "Idempotency-Key", "evt_cut")
	if first.err == nil && len(first.body) == 100 {
		t.Fatalf("a response cut short arrived whole: %q", first.body)
	}
	r2, b2 := post(t, url, []byte(`{}`), "Idempotency-Key", "evt_cut")
	wantNew(t, r2, b2, 200)
	r3, b3 := post(t, url, []byte(`{}`), "Idempotency-Key", "evt_cut")
	wantReplay(t, r3, b3, 200, "ok 2")
	wantCalls(t, up, 2)
}

func TestE2ECacheStatus(t *testing.T) {
	up := statusUpstream(t)
	defPort, customPort := freePort(t), freePort(t)
	startCaddy(t, "", proxySite(defPort, "webhook_idempotency source status", up)+
		proxySite(customPort, "webhook_idempotency source status-custom {\n\t\tcache_status 201 409\n\t}", up))

	check := func(port, code int, cached bool) {
		t.Helper()
		url := siteURL(port) + "/hook"
		key := fmt.Sprintf("evt_%d_%d", port, code)
		before := up.calls.Load()
		r1, b1 := post(t, url, []byte(`{}`), "Idempotency-Key", key, "X-Want-Status", fmt.Sprint(code))
		wantNew(t, r1, b1, code)
		r2, b2 := post(t, url, []byte(`{}`), "Idempotency-Key", key, "X-Want-Status", fmt.Sprint(code))
		if cached {
			wantReplay(t, r2, b2, code, string(b1))
			wantCalls(t, up, before+1)
		} else {
			wantNew(t, r2, b2, code)
			wantCalls(t, up, before+2)
		}
	}
	for _, code := range []int{200, 201, 202, 204, 400, 401, 403, 404, 410, 422} {
		check(defPort, code, true)
	}
	for _, code := range []int{408, 409, 425, 429, 500, 502, 503, 301, 302} {
		check(defPort, code, false)
	}
	for _, code := range []int{201, 409} {
		check(customPort, code, true)
	}
	for _, code := range []int{200, 202, 404, 500} {
		check(customPort, code, false)
	}
}

func TestE2EInFlightConflict(t *testing.T) {
	g := newGate()
	defer g.open()
	up := gatedUpstream(t, g, false)
	url := startProxy(t, "webhook_idempotency source conflict", up) + "/hook"

	first := sendAsync(http.MethodPost, url, []byte(`{}`), "Idempotency-Key", "evt_busy")
	waitCalls(t, up, 1)

	r2, b2 := post(t, url, []byte(`{}`), "Idempotency-Key", "evt_busy")
	if r2.StatusCode != http.StatusConflict {
		t.Fatalf("duplicate in flight: %d %s, want 409", r2.StatusCode, b2)
	}
	secs, err := strconv.Atoi(r2.Header.Get("Retry-After"))
	if err != nil || secs < 1 || secs > 30 {
		t.Fatalf("Retry-After = %q, want whole seconds in [1, 30] (the lease left)", r2.Header.Get("Retry-After"))
	}
	if ct := r2.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("409 Content-Type %q", ct)
	}
	var e struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal(b2, &e); err != nil || e.Error == "" {
		t.Fatalf("409 body %q is not a JSON error (%v)", b2, err)
	}

	g.open()
	r1 := receive(t, first)
	if r1.status != 200 || string(r1.body) != "done 1" {
		t.Fatalf("first: %d %q", r1.status, r1.body)
	}
	r3, b3 := post(t, url, []byte(`{}`), "Idempotency-Key", "evt_busy")
	wantReplay(t, r3, b3, 200, "done 1")
	wantCalls(t, up, 1)
}

func waitSite(port int, wait string, up *upstream) string {
	return fmt.Sprintf(`:%d {
	route {
		e2e_probe wait
		webhook_idempotency source wait {
			in_flight wait %s
		}
		reverse_proxy %s
	}
}`, port, wait, up.addr())
}

func TestE2EInFlightWaitReplays(t *testing.T) {
	g := newGate()
	defer g.open()
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		if call == 1 {
			g.wait(r)
		}
		w.Header().Set("X-Upstream-Call", fmt.Sprint(call))
		fmt.Fprintf(w, "done %d", call)
	})
	arrivals := newProbe(t, "wait")
	port := freePort(t)
	startCaddy(t, "", waitSite(port, "10s", up))
	url := siteURL(port) + "/hook"

	first := sendAsync(http.MethodPost, url, []byte(`{}`), "Idempotency-Key", "evt_wait", "X-Probe", "first")
	waitCalls(t, up, 1)
	second := sendAsync(http.MethodPost, url, []byte(`{}`), "Idempotency-Key", "evt_wait", "X-Probe", "second")
	arrived(t, arrivals, "second")
	g.open()

	r1, r2 := receive(t, first), receive(t, second)
	if r1.status != 200 || string(r1.body) != "done 1" || r1.header.Get(replayedHeader) != "" {
		t.Fatalf("first: %d %q %v", r1.status, r1.body, r1.header)
	}
	if r2.status != 200 || string(r2.body) != "done 1" || r2.header.Get(replayedHeader) != "true" || r2.header.Get("X-Upstream-Call") != "1" {
		t.Fatalf("waiting duplicate: %d %q %v, want the replay of the first", r2.status, r2.body, r2.header)
	}
	wantCalls(t, up, 1)
}

func TestE2EInFlightWaitProcessesAfterRelease(t *testing.T) {
	g := newGate()
	defer g.open()
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		if call == 1 {
			g.wait(r)
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, "done %d", call)
	})
	arrivals := newProbe(t, "wait")
	port := freePort(t)
	startCaddy(t, "", waitSite(port, "10s", up))
	url := siteURL(port) + "/hook"

	first := sendAsync(http.MethodPost, url, []byte(`{}`), "Idempotency-Key", "evt_rel", "X-Probe", "first")
	waitCalls(t, up, 1)
	second := sendAsync(http.MethodPost, url, []byte(`{}`), "Idempotency-Key", "evt_rel", "X-Probe", "second")
	arrived(t, arrivals, "second")
	g.open()

	if r1 := receive(t, first); r1.status != 503 {
		t.Fatalf("first: %d", r1.status)
	}
	// the first released the key: the waiter claims it and is processed
	r2 := receive(t, second)
	if r2.status != 200 || string(r2.body) != "done 2" || r2.header.Get(replayedHeader) != "" {
		t.Fatalf("waiting duplicate: %d %q %v, want processed", r2.status, r2.body, r2.header)
	}
	wantCalls(t, up, 2)
}

func TestE2EInFlightWaitTimesOut(t *testing.T) {
	g := newGate()
	defer g.open()
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		g.wait(r)
		io.WriteString(w, "late")
	})
	newProbe(t, "wait")
	port := freePort(t)
	startCaddy(t, "", waitSite(port, "300ms", up))
	url := siteURL(port) + "/hook"

	first := sendAsync(http.MethodPost, url, []byte(`{}`), "Idempotency-Key", "evt_slow")
	waitCalls(t, up, 1)
	start := time.Now()
	r2, b2 := post(t, url, []byte(`{}`), "Idempotency-Key", "evt_slow")
	waited := time.Since(start)
	if r2.StatusCode != http.StatusConflict || r2.Header.Get("Retry-After") == "" {
		t.Fatalf("after the wait timeout: %d %s %v, want 409 with Retry-After", r2.StatusCode, b2, r2.Header)
	}
	if waited < 300*time.Millisecond {
		t.Fatalf("answered 409 after %v, before the 300ms wait timeout", waited)
	}
	g.open()
	receive(t, first)
	wantCalls(t, up, 1)
}

func TestE2EInFlightProceed(t *testing.T) {
	g := newGate()
	defer g.open()
	up := gatedUpstream(t, g, true)
	url := startProxy(t, "webhook_idempotency source proceed in_flight proceed", up) + "/hook"

	first := sendAsync(http.MethodPost, url, []byte(`{}`), "Idempotency-Key", "evt_p")
	waitCalls(t, up, 1)
	r2, b2 := post(t, url, []byte(`{}`), "Idempotency-Key", "evt_p")
	wantNew(t, r2, b2, 200)
	if string(b2) != "done 2" {
		t.Fatalf("proceeding duplicate got %q", b2)
	}
	g.open()
	if r1 := receive(t, first); string(r1.body) != "done 1" {
		t.Fatalf("first: %q", r1.body)
	}
	// the claim holder recorded its answer
	r3, b3 := post(t, url, []byte(`{}`), "Idempotency-Key", "evt_p")
	wantReplay(t, r3, b3, 200, "done 1")
	wantCalls(t, up, 2)
}

func TestE2EConcurrentDuplicatesCallUpstreamOnce(t *testing.T) {
	const n = 50
	g := newGate()
	defer g.open()
	up := gatedUpstream(t, g, false)
	url := startProxy(t, "webhook_idempotency source herd", up) + "/hook"

	results := make(chan reply, n)
	start := make(chan struct{})
	for range n {
		go func() {
			<-start
			results <- send(http.MethodPost, url, strings.NewReader(`{"id":"evt_herd"}`), "Idempotency-Key", "evt_herd")
		}()
	}
	close(start)
	// while the one upstream call is held, every other duplicate is
	// answered without reaching the upstream
	var processed, replayed, conflicts int
	count := func(r reply) {
		switch {
		case r.err != nil:
			t.Errorf("request failed: %v", r.err)
		case r.status == http.StatusConflict:
			conflicts++
		case r.status == 200 && r.header.Get(replayedHeader) == "true" && string(r.body) == "done 1":
			replayed++
		case r.status == 200 && r.header.Get(replayedHeader) == "" && string(r.body) == "done 1":
			processed++
		default:
			t.Errorf("unexpected answer %d %q %v", r.status, r.body, r.header)
		}
	}
	timeout := time.After(30 * time.Second)
	for range n - 1 {
		select {
		case r := <-results:
			count(r)
		case <-timeout:
			g.open()
			t.Fatalf("only %d answers while the first was held; upstream called %d times", processed+replayed+conflicts, up.calls.Load())
		}
	}
	g.open()
	count(receive(t, results))
	if processed != 1 || conflicts+replayed != n-1 {
		t.Fatalf("processed %d, replayed %d, conflicts %d; want 1 processed and %d duplicates", processed, replayed, conflicts, n-1)
	}
	t.Logf("processed %d, replayed %d, conflicts %d", processed, replayed, conflicts)
	wantCalls(t, up, 1)
	r, b := post(t, url, []byte(`{"id":"evt_herd"}`), "Idempotency-Key", "evt_herd")
	wantReplay(t, r, b, 200, "done 1")
}

func TestE2EConcurrentDuplicatesWaitAndReplay(t *testing.T) {
	const n = 50
	g := newGate()
	defer g.open()
	up := gatedUpstream(t, g, false)
	arrivals := newProbe(t, "wait")
	port := freePort(t)
	startCaddy(t, "", waitSite(port, "20s", up))
	url := siteURL(port) + "/hook"

	results := make(chan reply, n)
	for range n {
		go func() {
			results <- send(http.MethodPost, url, strings.NewReader(`{}`), "Idempotency-Key", "evt_herd_wait")
		}()
	}
	for range n {
		arrived(t, arrivals, "")
	}
	waitCalls(t, up, 1)
	g.open()
	var processed, replayed int
	for range n {
		r := receive(t, results)
		switch {
		case r.status == 200 && string(r.body) == "done 1" && r.header.Get(replayedHeader) == "true":
			replayed++
		case r.status == 200 && string(r.body) == "done 1" && r.header.Get(replayedHeader) == "":
			processed++
		default:
			t.Errorf("unexpected answer %d %q %v", r.status, r.body, r.header)
		}
	}
	if processed != 1 || replayed != n-1 {
		t.Fatalf("processed %d, replayed %d; want 1 and %d", processed, replayed, n-1)
	}
	wantCalls(t, up, 1)
}

func TestE2EMaxBody(t *testing.T) {
	up := newUpstream(t, nil)
	url := startProxy(t, "webhook_idempotency source maxbody max_body 1KiB", up) + "/hook"
	big := bytes.Repeat([]byte("x"), 1025)

	r1, b1 := post(t, url, big, "Idempotency-Key", "evt_big")
	if r1.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("with Content-Length: %d %s, want 413", r1.StatusCode, b1)
	}
	r2 := postChunked(t, url, big, "Idempotency-Key", "evt_big")
	if r2.status != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked: %d %s, want 413", r2.status, r2.body)
	}
	r3 := postChunked(t, url, bytes.Repeat([]byte("y"), 64<<10), "Idempotency-Key", "evt_big")
	if r3.status != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked, far over: %d %s, want 413", r3.status, r3.body)
	}
	wantCalls(t, up, 0)

	// nothing was stored: the same key with a small body is processed
	r4, b4 := post(t, url, []byte(`{}`), "Idempotency-Key", "evt_big")
	wantNew(t, r4, b4, 200)
	// exactly max_body is accepted
	r5, b5 := post(t, url, big[:1024], "Idempotency-Key", "evt_exact")
	wantNew(t, r5, b5, 200)
	wantCalls(t, up, 2)
	if got := up.requests()[1].Body; !bytes.Equal(got, big[:1024]) {
		t.Fatalf("upstream got %d bytes, want 1024", len(got))
	}
}

func TestE2EMethodsNotProcessedPassThrough(t *testing.T) {
	up := newUpstream(t, nil)
	defPort, customPort := freePort(t), freePort(t)
	startCaddy(t, "", proxySite(defPort, "webhook_idempotency source methods", up)+
		proxySite(customPort, "webhook_idempotency source methods-custom {\n\t\tmethods put\n\t}", up))

	url := siteURL(defPort) + "/hook?hub.mode=subscribe&hub.challenge=42"
	for i := range 3 {
		r, b := do(t, http.MethodGet, url, nil, "Idempotency-Key", "evt_get")
		wantNew(t, r, b, 200)
		if string(b) != fmt.Sprintf(`{"call":%d}`, i+1) {
			t.Fatalf("GET %d got %q", i+1, b)
		}
	}
	wantCalls(t, up, 3)
	if got := up.requests()[0]; got.Method != http.MethodGet || got.URI != "/hook?hub.mode=subscribe&hub.challenge=42" {
		t.Fatalf("upstream saw %s %s", got.Method, got.URI)
	}

	custom := siteURL(customPort) + "/hook"
	for range 2 {
		r, b := post(t, custom, []byte(`{}`), "Idempotency-Key", "evt_m")
		wantNew(t, r, b, 200)
	}
	wantCalls(t, up, 5)
	r1, b1 := do(t, http.MethodPut, custom, []byte(`{}`), "Idempotency-Key", "evt_m")
	wantNew(t, r1, b1, 200)
	r2, b2 := do(t, http.MethodPut, custom, []byte(`{}`), "Idempotency-Key", "evt_m")
	wantReplay(t, r2, b2, 200, string(b1))
	wantCalls(t, up, 6)
}

func TestE2EBodyReachesUpstreamByteExact(t *testing.T) {
	up := newUpstream(t, nil)
	url := startProxy(t, "webhook_idempotency source exact", up) + "/hook"

	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	random := make([]byte, 1<<20+13)
	if _, err := rand.Read(random); err != nil {
		t.Fatal(err)
	}
	randomChunked := make([]byte, 300<<10)
	if _, err := rand.Read(randomChunked); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name    string
		body    []byte
		chunked bool
	}{
		{"all byte values", all, false},
		{"1MiB random", random, false},
		{"chunked by the client", randomChunked, true},
		{"all byte values chunked", append([]byte("chunked:"), all...), true},
	}
	for i, tc := range cases {
		if tc.chunked {
			r := postChunked(t, url, tc.body, "Content-Type", "application/octet-stream")
			if r.status != 200 || r.header.Get(replayedHeader) != "" {
				t.Fatalf("%s: %d %v", tc.name, r.status, r.header)
			}
		} else {
			r, b := post(t, url, tc.body, "Content-Type", "application/octet-stream")
			wantNew(t, r, b, 200)
		}
		got := up.requests()[i]
		if !bytes.Equal(got.Body, tc.body) {
			t.Fatalf("%s: upstream got %d bytes that differ from the %d sent", tc.name, len(got.Body), len(tc.body))
		}
		if got.ContentLength != int64(len(tc.body)) || len(got.TransferEncoding) != 0 {
			t.Fatalf("%s: upstream ContentLength %d, TransferEncoding %v; want %d and none", tc.name, got.ContentLength, got.TransferEncoding, len(tc.body))
		}
		if cl := got.Header.Get("Content-Length"); cl != "" && cl != strconv.Itoa(len(tc.body)) {
			t.Fatalf("%s: Content-Length header %q", tc.name, cl)
		}
	}
	// the same big body again is a duplicate by its hash
	r, b := post(t, url, random)
	wantReplay(t, r, b, 200, `{"call":2}`)
	wantCalls(t, up, int64(len(cases)))
}

func TestE2EJSONKey(t *testing.T) {
	up := newUpstream(t, nil)
	replayPort, rejectPort := freePort(t), freePort(t)
	startCaddy(t, "", proxySite(replayPort, "webhook_idempotency source stripe-like key json:id", up)+
		proxySite(rejectPort, "webhook_idempotency source stripe-strict {\n\t\tkey json:id\n\t\tmismatch reject\n\t}", up))

	event := func(id string, created int) []byte {
		return fmt.Appendf(nil, `{"id":%q,"object":"event","created":%d,"type":"invoice.paid","data":{"object":{"id":"in_1"}}}`, id, created)
	}
	// Stripe re-sends an event with the same id; other fields may differ
	url := siteURL(replayPort) + "/hook"
	r1, b1 := post(t, url, event("evt_1NG8Du2eZvKYlo2C", 1700000000))
	wantNew(t, r1, b1, 200)
	r2, b2 := post(t, url, event("evt_1NG8Du2eZvKYlo2C", 1700000042))
	wantReplay(t, r2, b2, 200, string(b1))
	r3, b3 := post(t, url, event("evt_other", 1700000000))
	wantNew(t, r3, b3, 200)
	wantCalls(t, up, 2)

	strict := siteURL(rejectPort) + "/hook"
	r4, b4 := post(t, strict, event("evt_strict", 1))
	wantNew(t, r4, b4, 200)
	r5, b5 := post(t, strict, event("evt_strict", 1))
	wantReplay(t, r5, b5, 200, string(b4))
	r6, b6 := post(t, strict, event("evt_strict", 2))
	if r6.StatusCode != http.StatusUnprocessableEntity || r6.Header.Get(replayedHeader) != "" {
		t.Fatalf("same key, different body, mismatch reject: %d %s, want 422", r6.StatusCode, b6)
	}
	wantCalls(t, up, 3)
}

func TestE2ELeaseExpiryLetsADuplicateThrough(t *testing.T) {
	up := newUpstream(t, nil)
	url := startProxy(t, "webhook_idempotency source lease lease 1s", up) + "/hook"

	// A request that died after claiming its key: the claim sits in the
	// store, and nothing renews, completes or releases it. That is what a
	// crashed Caddy leaves behind, so the test writes exactly that claim
	// into the running config's memory table (shared through the pool).
	v, loaded, err := memoryPool.LoadOrNew(memoryPoolKey, func() (caddy.Destructor, error) {
		return nil, errors.New("the running config has no memory table")
	})
	if err != nil || !loaded {
		t.Fatalf("loading the shared table: %v (loaded %v)", err, loaded)
	}
	defer memoryPool.Delete(memoryPoolKey)
	tbl := v.(*memoryTable)
	// Its lease is 2s rather than 1s only so that a loaded machine still
	// sends the first duplicate below while the lease runs.
	claimed := time.Now()
	if res := tbl.claim("idem:lease:evt_dead", "a-request-that-died", 2*time.Second); res.State != stateClaimed {
		t.Fatalf("claim: %v", res.State)
	}

	r1, b1 := post(t, url, []byte(`{}`), "Idempotency-Key", "evt_dead")
	if ra := r1.Header.Get("Retry-After"); r1.StatusCode != http.StatusConflict || (ra != "1" && ra != "2") {
		t.Fatalf("while the dead claim's lease runs: %d %v %s, want 409 with Retry-After the lease left", r1.StatusCode, r1.Header, b1)
	}
	wantCalls(t, up, 0)

	// the provider retries until the lease has run out
	deadline := time.Now().Add(10 * time.Second)
	var resp *http.Response
	var body []byte
	for {
		resp, body = post(t, url, []byte(`{}`), "Idempotency-Key", "evt_dead")
		if resp.StatusCode != http.StatusConflict {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the dead claim never expired")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if since := time.Since(claimed); since < 2*time.Second {
		t.Fatalf("processed %v after the claim, before its 2s lease ran out", since)
	}
	wantNew(t, resp, body, 200)
	r3, b3 := post(t, url, []byte(`{}`), "Idempotency-Key", "evt_dead")
	wantReplay(t, r3, b3, 200, string(body))
	wantCalls(t, up, 1)
}

func TestE2ELeaseIsRenewedWhileTheUpstreamWorks(t *testing.T) {
	g := newGate()
	defer g.open()
	up := gatedUpstream(t, g, true)
	// renewed every lease/3: 1.5s leaves a loaded machine (-race, shared
	// cores) a full second of slack for each renewal
	url := startProxy(t, "webhook_idempotency source renew lease 1500ms", up) + "/hook"

	first := sendAsync(http.MethodPost, url, []byte(`{}`), "Idempotency-Key", "evt_slow")
	waitCalls(t, up, 1)
	// the upstream works for more than two leases: every duplicate in
	// that time must still find the key in flight
	start := time.Now()
	for n := 0; time.Since(start) < 3500*time.Millisecond; n++ {
		r, b := post(t, url, []byte(`{}`), "Idempotency-Key", "evt_slow")
		if r.StatusCode != http.StatusConflict {
			t.Fatalf("duplicate %d, %v into a slow delivery: %d %s, want 409 (the lease was not renewed)", n, time.Since(start), r.StatusCode, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
	g.open()
	if r1 := receive(t, first); r1.status != 200 || string(r1.body) != "done 1" {
		t.Fatalf("first: %d %q", r1.status, r1.body)
	}
	r, b := post(t, url, []byte(`{}`), "Idempotency-Key", "evt_slow")
	wantReplay(t, r, b, 200, "done 1")
	wantCalls(t, up, 1)
}

func TestE2EReloadKeepsMemoryRecords(t *testing.T) {
	up := newUpstream(t, nil)
	port := freePort(t)
	c := startCaddy(t, "", proxySite(port, "webhook_idempotency source reload", up))
	url := siteURL(port) + "/hook"

	r1, b1 := post(t, url, []byte(`{}`), "Idempotency-Key", "evt_r")
	wantNew(t, r1, b1, 200)

	for i, directive := range []string{
		"webhook_idempotency source reload ttl 12h",
		"webhook_idempotency source reload {\n\t\tttl 6h\n\t\tlease 10s\n\t\tin_flight wait 2s\n\t}",
	} {
		if err := c.reload(proxySite(port, directive, up)); err != nil {
			t.Fatalf("reload %d: %v", i+1, err)
		}
		r, b := postAfterReload(t, url, []byte(`{}`), "Idempotency-Key", "evt_r")
		wantReplay(t, r, b, 200, string(b1))
	}
	wantCalls(t, up, 1)
}

func TestE2EMaxResponse(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 256) // 4KiB
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		w.Header().Set("X-Big", "yes")
		w.Header().Set("Content-Type", "application/octet-stream")
		if r.Header.Get("X-Small") != "" {
			io.WriteString(w, "small")
			return
		}
		w.Write(big)
	})
	url := startProxy(t, "webhook_idempotency source maxresp max_response 1KiB", up) + "/hook"

	r1, b1 := post(t, url, []byte(`{}`), "Idempotency-Key", "evt_big")
	wantNew(t, r1, b1, 200)
	if !bytes.Equal(b1, big) {
		t.Fatalf("the first response was not passed through untouched: %d bytes", len(b1))
	}
	r2, b2 := post(t, url, []byte(`{}`), "Idempotency-Key", "evt_big")
	wantReplay(t, r2, b2, 200, "")
	if r2.Header.Get("X-Big") != "yes" || r2.Header.Get("Content-Type") != "application/octet-stream" || r2.ContentLength != 0 {
		t.Fatalf("replay headers: %v (ContentLength %d)", r2.Header, r2.ContentLength)
	}
	// a response within max_response keeps its body
	post(t, url, []byte(`{}`), "Idempotency-Key", "evt_small", "X-Small", "1")
	r3, b3 := post(t, url, []byte(`{}`), "Idempotency-Key", "evt_small", "X-Small", "1")
	wantReplay(t, r3, b3, 200, "small")
	wantCalls(t, up, 2)
}

func TestE2EPlaceholders(t *testing.T) {
	g := newGate()
	defer g.open()
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		if r.Header.Get("X-Block") != "" {
			g.wait(r)
		}
		fmt.Fprintf(w, "done %d", call)
	})
	port := freePort(t)
	startCaddy(t, "", fmt.Sprintf(`:%d {
	route {
		header {
			defer
			X-Result {http.webhook_idempotency.result}
			X-Key {http.webhook_idempotency.key}
			X-Source {http.webhook_idempotency.source}
		}
		webhook_idempotency source ph {
			max_body 1KiB
		}
		reverse_proxy %s {
			header_up X-Idempotency-Key {http.webhook_idempotency.key}
			header_up X-Idempotency-Source {http.webhook_idempotency.source}
		}
	}
}`, port, up.addr()))
	url := siteURL(port) + "/hook"

	result := func(h http.Header, want string) {
		t.Helper()
		if got := h.Get("X-Result"); got != want {
			t.Fatalf("result placeholder %q, want %q", got, want)
		}
	}
	r, b := post(t, url, []byte(`{}`), "Idempotency-Key", "evt_ph")
	wantNew(t, r, b, 200)
	result(r.Header, "new")
	if got := up.requests()[0]; got.Header.Get("X-Idempotency-Key") != "evt_ph" || got.Header.Get("X-Idempotency-Source") != "ph" {
		t.Fatalf("upstream saw key %q source %q", got.Header.Get("X-Idempotency-Key"), got.Header.Get("X-Idempotency-Source"))
	}
	if r.Header.Get("X-Key") != "evt_ph" || r.Header.Get("X-Source") != "ph" {
		t.Fatalf("key/source placeholders in the response: %q %q", r.Header.Get("X-Key"), r.Header.Get("X-Source"))
	}

	r, _ = post(t, url, []byte(`{}`), "Idempotency-Key", "evt_ph")
	result(r.Header, "replayed")

	body := []byte(`{"no":"key"}`)
	sum := sha256.Sum256(body)
	r, _ = post(t, url, body)
	result(r.Header, "new")
	if got := up.requests()[1].Header.Get("X-Idempotency-Key"); got != "sha256:"+hex.EncodeToString(sum[:]) {
		t.Fatalf("body-hash key at the upstream: %q", got)
	}

	r, _ = do(t, http.MethodGet, url, nil)
	result(r.Header, "skipped")

	r, _ = post(t, url, bytes.Repeat([]byte("x"), 2048), "Idempotency-Key", "evt_huge")
	if r.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d", r.StatusCode)
	}
	result(r.Header, "too_large")

	first := sendAsync(http.MethodPost, url, []byte(`{}`), "Idempotency-Key", "evt_block", "X-Block", "1")
	waitCalls(t, up, 4)
	r, _ = post(t, url, []byte(`{}`), "Idempotency-Key", "evt_block")
	if r.StatusCode != http.StatusConflict {
		t.Fatalf("status %d", r.StatusCode)
	}
	result(r.Header, "conflict")
	g.open()
	receive(t, first)
}

func TestE2EReplayLeavesOutDateAndHopByHop(t *testing.T) {
	old := "Mon, 02 Jan 2006 15:04:05 GMT"
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		w.Header().Set("Date", old)
		w.Header().Set("X-Kept", "yes")
		fmt.Fprintf(w, "done %d", call)
	})
	proxyPort, routePort := freePort(t), freePort(t)
	startCaddy(t, "", proxySite(proxyPort, "webhook_idempotency source date", up)+fmt.Sprintf(`:%d {
	route {
		webhook_idempotency source hop
		header Keep-Alive "timeout=5"
		header Proxy-Connection keep-alive
		header X-Kept yes
		respond "hello" 200
	}
}`, routePort))

	url := siteURL(proxyPort) + "/hook"
	r1, _ := post(t, url, []byte(`{}`), "Idempotency-Key", "evt_date")
	if r1.Header.Get("Date") != old {
		t.Fatalf("first response Date %q, want the upstream's %q", r1.Header.Get("Date"), old)
	}
	r2, b2 := post(t, url, []byte(`{}`), "Idempotency-Key", "evt_date")
	wantReplay(t, r2, b2, 200, "done 1")
	if vals := r2.Header.Values("Date"); len(vals) != 1 {
		t.Fatalf("replayed Date values %q, want one current Date", vals)
	}
	date, err := http.ParseTime(r2.Header.Get("Date"))
	if err != nil || time.Since(date) > time.Minute || time.Until(date) > time.Minute {
		t.Fatalf("replayed Date %q is not the current time (%v)", r2.Header.Get("Date"), err)
	}
	if r2.Header.Get("X-Kept") != "yes" {
		t.Fatalf("replayed headers: %v", r2.Header)
	}

	rurl := siteURL(routePort) + "/hook"
	r3, b3 := post(t, rurl, []byte(`{}`), "Idempotency-Key", "evt_hop")
	wantNew(t, r3, b3, 200)
	if r3.Header.Get("Keep-Alive") == "" || r3.Header.Get("Proxy-Connection") == "" {
		t.Fatalf("first response lacks the hop-by-hop headers the test relies on: %v", r3.Header)
	}
	r4, b4 := post(t, rurl, []byte(`{}`), "Idempotency-Key", "evt_hop")
	wantReplay(t, r4, b4, 200, "hello")
	if r4.Header.Get("Keep-Alive") != "" || r4.Header.Get("Proxy-Connection") != "" || r4.Header.Get("X-Kept") != "yes" {
		t.Fatalf("replayed headers: %v", r4.Header)
	}
}
