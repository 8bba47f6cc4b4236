package e2e

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

func TestE2EDuplicateIsReplayed(t *testing.T) {
	up := testkit.NewUpstream(t, nil)
	url := testkit.StartProxy(t, "webhook_idempotency source test", up) + "/hook"
	first, firstBody := testkit.Post(t, url, []byte(`{"id":"evt_1"}`), "Idempotency-Key", "evt_1")
	second, secondBody := testkit.Post(t, url, []byte(`{"id":"evt_1"}`), "Idempotency-Key", "evt_1")

	if first.StatusCode != http.StatusOK || second.StatusCode != http.StatusOK {
		t.Fatalf("statuses: %d, %d", first.StatusCode, second.StatusCode)
	}
	if got := up.Calls.Load(); got != 1 {
		t.Fatalf("upstream called %d times, want 1", got)
	}
	if string(secondBody) != string(firstBody) || string(firstBody) != `{"call":1}` {
		t.Fatalf("bodies: %q then %q", firstBody, secondBody)
	}
	if first.Header.Get(testkit.ReplayedHeader) != "" || second.Header.Get(testkit.ReplayedHeader) != "true" {
		t.Fatalf("Idempotent-Replayed: %q then %q", first.Header.Get(testkit.ReplayedHeader), second.Header.Get(testkit.ReplayedHeader))
	}
	if second.Header.Get("X-Upstream-Call") != "1" || second.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("replayed headers: %v", second.Header)
	}
}

func TestE2EBodyHashFallback(t *testing.T) {
	up := testkit.NewUpstream(t, nil)
	url := testkit.StartProxy(t, "webhook_idempotency source bodyhash", up) + "/hook"

	r1, b1 := testkit.Post(t, url, []byte(`{"event":"a"}`))
	testkit.WantNew(t, r1, b1, 200)
	r2, b2 := testkit.Post(t, url, []byte(`{"event":"a"}`))
	testkit.WantReplay(t, r2, b2, 200, `{"call":1}`)
	r3, b3 := testkit.Post(t, url, []byte(`{"event":"b"}`))
	testkit.WantNew(t, r3, b3, 200)
	if string(b3) != `{"call":2}` {
		t.Fatalf("a different body got %q", b3)
	}
	// an empty Idempotency-Key header falls back to the body as well
	r4, b4 := testkit.Post(t, url, []byte(`{"event":"b"}`), "Idempotency-Key", "  ")
	testkit.WantReplay(t, r4, b4, 200, `{"call":2}`)
	up.WantCalls(t, 2)
}

func TestE2EServerErrorIsReleasedAndRetried(t *testing.T) {
	up := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		if call == 1 {
			w.WriteHeader(http.StatusInternalServerError)
			io.WriteString(w, "boom")
			return
		}
		fmt.Fprintf(w, "ok %d", call)
	})
	url := testkit.StartProxy(t, "webhook_idempotency source retry", up) + "/hook"

	r1, b1 := testkit.Post(t, url, []byte(`{}`), "Idempotency-Key", "evt_500")
	testkit.WantNew(t, r1, b1, 500)
	r2, b2 := testkit.Post(t, url, []byte(`{}`), "Idempotency-Key", "evt_500")
	testkit.WantNew(t, r2, b2, 200)
	if string(b2) != "ok 2" {
		t.Fatalf("retry body %q", b2)
	}
	r3, b3 := testkit.Post(t, url, []byte(`{}`), "Idempotency-Key", "evt_500")
	testkit.WantReplay(t, r3, b3, 200, "ok 2")
	up.WantCalls(t, 2)
}

func TestE2EUpstreamDownIsNotCached(t *testing.T) {
	dead := testkit.FreePort(t) // nothing listens there
	up := testkit.NewUpstream(t, nil)
	deadPort, livePort := testkit.FreePort(t), testkit.FreePort(t)
	testkit.StartCaddy(t, "", fmt.Sprintf(`:%d {
	webhook_idempotency source down
	reverse_proxy 127.0.0.1:%d
}
:%d {
	webhook_idempotency source down
	reverse_proxy %s
}`, deadPort, dead, livePort, up.Addr()))

	r1, b1 := testkit.Post(t, testkit.SiteURL(deadPort)+"/hook", []byte(`{}`), "Idempotency-Key", "evt_down")
	testkit.WantNew(t, r1, b1, http.StatusBadGateway)
	// same source and key, upstream back: processed, not a replayed 502
	r2, b2 := testkit.Post(t, testkit.SiteURL(livePort)+"/hook", []byte(`{}`), "Idempotency-Key", "evt_down")
	testkit.WantNew(t, r2, b2, 200)
	up.WantCalls(t, 1)
}

func TestE2EUpstreamCutShortIsReleased(t *testing.T) {
	up := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
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
	url := testkit.StartProxy(t, "webhook_idempotency source cut", up) + "/hook"

	first := testkit.Send(http.MethodPost, url, strings.NewReader(`{}`), "Idempotency-Key", "evt_cut")
	if first.Err == nil && len(first.Body) == 100 {
		t.Fatalf("a response cut short arrived whole: %q", first.Body)
	}
	r2, b2 := testkit.Post(t, url, []byte(`{}`), "Idempotency-Key", "evt_cut")
	testkit.WantNew(t, r2, b2, 200)
	r3, b3 := testkit.Post(t, url, []byte(`{}`), "Idempotency-Key", "evt_cut")
	testkit.WantReplay(t, r3, b3, 200, "ok 2")
	up.WantCalls(t, 2)
}

func TestE2ECacheStatus(t *testing.T) {
	up := statusUpstream(t)
	defPort, customPort := testkit.FreePort(t), testkit.FreePort(t)
	testkit.StartCaddy(t, "", testkit.ProxySite(defPort, "webhook_idempotency source status", up)+
		testkit.ProxySite(customPort, "webhook_idempotency source status-custom {\n\t\tcache_status 201 409\n\t}", up))

	check := func(port, code int, cached bool) {
		t.Helper()
		url := testkit.SiteURL(port) + "/hook"
		key := fmt.Sprintf("evt_%d_%d", port, code)
		before := up.Calls.Load()
		r1, b1 := testkit.Post(t, url, []byte(`{}`), "Idempotency-Key", key, "X-Want-Status", fmt.Sprint(code))
		testkit.WantNew(t, r1, b1, code)
		r2, b2 := testkit.Post(t, url, []byte(`{}`), "Idempotency-Key", key, "X-Want-Status", fmt.Sprint(code))
		if cached {
			testkit.WantReplay(t, r2, b2, code, string(b1))
			up.WantCalls(t, before+1)
		} else {
			testkit.WantNew(t, r2, b2, code)
			up.WantCalls(t, before+2)
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

func TestE2EMaxBody(t *testing.T) {
	up := testkit.NewUpstream(t, nil)
	url := testkit.StartProxy(t, "webhook_idempotency source maxbody max_body 1KiB", up) + "/hook"
	big := bytes.Repeat([]byte("x"), 1025)

	r1, b1 := testkit.Post(t, url, big, "Idempotency-Key", "evt_big")
	if r1.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("with Content-Length: %d %s, want 413", r1.StatusCode, b1)
	}
	r2 := testkit.PostChunked(t, url, big, "Idempotency-Key", "evt_big")
	if r2.Status != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked: %d %s, want 413", r2.Status, r2.Body)
	}
	r3 := testkit.PostChunked(t, url, bytes.Repeat([]byte("y"), 64<<10), "Idempotency-Key", "evt_big")
	if r3.Status != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked, far over: %d %s, want 413", r3.Status, r3.Body)
	}
	up.WantCalls(t, 0)

	// nothing was stored: the same key with a small body is processed
	r4, b4 := testkit.Post(t, url, []byte(`{}`), "Idempotency-Key", "evt_big")
	testkit.WantNew(t, r4, b4, 200)
	// exactly max_body is accepted
	r5, b5 := testkit.Post(t, url, big[:1024], "Idempotency-Key", "evt_exact")
	testkit.WantNew(t, r5, b5, 200)
	up.WantCalls(t, 2)
	if got := up.Requests()[1].Body; !bytes.Equal(got, big[:1024]) {
		t.Fatalf("upstream got %d bytes, want 1024", len(got))
	}
}

func TestE2EMethodsNotProcessedPassThrough(t *testing.T) {
	up := testkit.NewUpstream(t, nil)
	defPort, customPort := testkit.FreePort(t), testkit.FreePort(t)
	testkit.StartCaddy(t, "", testkit.ProxySite(defPort, "webhook_idempotency source methods", up)+
		testkit.ProxySite(customPort, "webhook_idempotency source methods-custom {\n\t\tmethods put\n\t}", up))

	url := testkit.SiteURL(defPort) + "/hook?hub.mode=subscribe&hub.challenge=42"
	for i := range 3 {
		r, b := testkit.Do(t, http.MethodGet, url, nil, "Idempotency-Key", "evt_get")
		testkit.WantNew(t, r, b, 200)
		if string(b) != fmt.Sprintf(`{"call":%d}`, i+1) {
			t.Fatalf("GET %d got %q", i+1, b)
		}
	}
	up.WantCalls(t, 3)
	if got := up.Requests()[0]; got.Method != http.MethodGet || got.URI != "/hook?hub.mode=subscribe&hub.challenge=42" {
		t.Fatalf("upstream saw %s %s", got.Method, got.URI)
	}

	custom := testkit.SiteURL(customPort) + "/hook"
	for range 2 {
		r, b := testkit.Post(t, custom, []byte(`{}`), "Idempotency-Key", "evt_m")
		testkit.WantNew(t, r, b, 200)
	}
	up.WantCalls(t, 5)
	r1, b1 := testkit.Do(t, http.MethodPut, custom, []byte(`{}`), "Idempotency-Key", "evt_m")
	testkit.WantNew(t, r1, b1, 200)
	r2, b2 := testkit.Do(t, http.MethodPut, custom, []byte(`{}`), "Idempotency-Key", "evt_m")
	testkit.WantReplay(t, r2, b2, 200, string(b1))
	up.WantCalls(t, 6)
}

// TestE2EBodyReachesUpstreamByteExact sends bodies through the handler to
// reverse_proxy as it is, and to reverse_proxy with `request_buffers`
// (docs/operating.md: one write per forwarded delivery), whose buffer takes
// the handler's body whole, or in part when it is as long as the buffer or
// longer.
func TestE2EBodyReachesUpstreamByteExact(t *testing.T) {
	for _, proxy := range []struct{ name, block string }{
		{"reverse_proxy", ""},
		{"request_buffers", " {\n\t\trequest_buffers 64KiB\n\t}"},
	} {
		t.Run(proxy.name, func(t *testing.T) {
			up := testkit.NewUpstream(t, nil)
			port := testkit.FreePort(t)
			testkit.StartCaddy(t, "", fmt.Sprintf(":%d {\n\twebhook_idempotency source exact\n\treverse_proxy %s%s\n}\n", port, up.Addr(), proxy.block))
			bodyReachesUpstream(t, testkit.SiteURL(port)+"/hook", up)
		})
	}
}

func bodyReachesUpstream(t *testing.T, url string, up *testkit.Upstream) {
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
		{"64KiB random", random[:64<<10], false},
		{"64KiB less one random", random[1 : 64<<10], false},
		{"chunked by the client", randomChunked, true},
		{"all byte values chunked", append([]byte("chunked:"), all...), true},
	}
	for i, tc := range cases {
		if tc.chunked {
			r := testkit.PostChunked(t, url, tc.body, "Content-Type", "application/octet-stream")
			if r.Status != 200 || r.Header.Get(testkit.ReplayedHeader) != "" {
				t.Fatalf("%s: %d %v", tc.name, r.Status, r.Header)
			}
		} else {
			r, b := testkit.Post(t, url, tc.body, "Content-Type", "application/octet-stream")
			testkit.WantNew(t, r, b, 200)
		}
		got := up.Requests()[i]
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
	r, b := testkit.Post(t, url, random)
	testkit.WantReplay(t, r, b, 200, `{"call":2}`)
	up.WantCalls(t, int64(len(cases)))
}

func TestE2EJSONKey(t *testing.T) {
	up := testkit.NewUpstream(t, nil)
	replayPort, rejectPort := testkit.FreePort(t), testkit.FreePort(t)
	testkit.StartCaddy(t, "", testkit.ProxySite(replayPort, "webhook_idempotency source stripe-like key json:id", up)+
		testkit.ProxySite(rejectPort, "webhook_idempotency source stripe-strict {\n\t\tkey json:id\n\t\tmismatch reject\n\t}", up))

	event := func(id string, created int) []byte {
		return fmt.Appendf(nil, `{"id":%q,"object":"event","created":%d,"type":"invoice.paid","data":{"object":{"id":"in_1"}}}`, id, created)
	}
	// Stripe re-sends an event with the same id; other fields may differ
	url := testkit.SiteURL(replayPort) + "/hook"
	r1, b1 := testkit.Post(t, url, event("evt_1NG8Du2eZvKYlo2C", 1700000000))
	testkit.WantNew(t, r1, b1, 200)
	r2, b2 := testkit.Post(t, url, event("evt_1NG8Du2eZvKYlo2C", 1700000042))
	testkit.WantReplay(t, r2, b2, 200, string(b1))
	r3, b3 := testkit.Post(t, url, event("evt_other", 1700000000))
	testkit.WantNew(t, r3, b3, 200)
	up.WantCalls(t, 2)

	strict := testkit.SiteURL(rejectPort) + "/hook"
	r4, b4 := testkit.Post(t, strict, event("evt_strict", 1))
	testkit.WantNew(t, r4, b4, 200)
	r5, b5 := testkit.Post(t, strict, event("evt_strict", 1))
	testkit.WantReplay(t, r5, b5, 200, string(b4))
	r6, b6 := testkit.Post(t, strict, event("evt_strict", 2))
	if r6.StatusCode != http.StatusUnprocessableEntity || r6.Header.Get(testkit.ReplayedHeader) != "" {
		t.Fatalf("same key, different body, mismatch reject: %d %s, want 422", r6.StatusCode, b6)
	}
	up.WantCalls(t, 3)
}

// Reloads keep the records of the store, the file store (the default) or
// the memory store, with changed options.
func TestE2EReloadKeepsRecords(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			up := testkit.NewUpstream(t, nil)
			port := testkit.FreePort(t)
			c := testkit.StartCaddy(t, "", testkit.ProxySite(port, "webhook_idempotency source reload "+st.line, up))
			url := testkit.SiteURL(port) + "/hook"

			r1, b1 := testkit.Post(t, url, []byte(`{}`), "Idempotency-Key", "evt_r")
			testkit.WantNew(t, r1, b1, 200)

			for i, directive := range []string{
				"webhook_idempotency source reload ttl 12h " + st.line,
				"webhook_idempotency source reload {\n\t\tttl 6h\n\t\tlease 10s\n\t\tin_flight wait 2s\n\t\t" + st.line + "\n\t}",
			} {
				if err := c.Reload(testkit.ProxySite(port, directive, up)); err != nil {
					t.Fatalf("reload %d: %v", i+1, err)
				}
				r, b := testkit.PostAfterReload(t, url, []byte(`{}`), "Idempotency-Key", "evt_r")
				testkit.WantReplay(t, r, b, 200, string(b1))
			}
			up.WantCalls(t, 1)
		})
	}
}

func TestE2EMaxResponse(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 256) // 4KiB
	up := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		w.Header().Set("X-Big", "yes")
		w.Header().Set("Content-Type", "application/octet-stream")
		if r.Header.Get("X-Small") != "" {
			io.WriteString(w, "small")
			return
		}
		w.Write(big)
	})
	url := testkit.StartProxy(t, "webhook_idempotency source maxresp max_response 1KiB", up) + "/hook"

	r1, b1 := testkit.Post(t, url, []byte(`{}`), "Idempotency-Key", "evt_big")
	testkit.WantNew(t, r1, b1, 200)
	if !bytes.Equal(b1, big) {
		t.Fatalf("the first response was not passed through untouched: %d bytes", len(b1))
	}
	r2, b2 := testkit.Post(t, url, []byte(`{}`), "Idempotency-Key", "evt_big")
	testkit.WantReplay(t, r2, b2, 200, "")
	if r2.Header.Get("X-Big") != "yes" || r2.Header.Get("Content-Type") != "application/octet-stream" || r2.ContentLength != 0 {
		t.Fatalf("replay headers: %v (ContentLength %d)", r2.Header, r2.ContentLength)
	}
	// a response within max_response keeps its body
	testkit.Post(t, url, []byte(`{}`), "Idempotency-Key", "evt_small", "X-Small", "1")
	r3, b3 := testkit.Post(t, url, []byte(`{}`), "Idempotency-Key", "evt_small", "X-Small", "1")
	testkit.WantReplay(t, r3, b3, 200, "small")
	up.WantCalls(t, 2)
}

func TestE2EPlaceholders(t *testing.T) {
	g := newGate()
	defer g.open()
	up := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		if r.Header.Get("X-Block") != "" {
			g.wait(r)
		}
		fmt.Fprintf(w, "done %d", call)
	})
	port := testkit.FreePort(t)
	testkit.StartCaddy(t, "", fmt.Sprintf(`:%d {
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
}`, port, up.Addr()))
	url := testkit.SiteURL(port) + "/hook"

	result := func(h http.Header, want string) {
		t.Helper()
		if got := h.Get("X-Result"); got != want {
			t.Fatalf("result placeholder %q, want %q", got, want)
		}
	}
	r, b := testkit.Post(t, url, []byte(`{}`), "Idempotency-Key", "evt_ph")
	testkit.WantNew(t, r, b, 200)
	result(r.Header, "new")
	if got := up.Requests()[0]; got.Header.Get("X-Idempotency-Key") != "evt_ph" || got.Header.Get("X-Idempotency-Source") != "ph" {
		t.Fatalf("upstream saw key %q source %q", got.Header.Get("X-Idempotency-Key"), got.Header.Get("X-Idempotency-Source"))
	}
	if r.Header.Get("X-Key") != "evt_ph" || r.Header.Get("X-Source") != "ph" {
		t.Fatalf("key/source placeholders in the response: %q %q", r.Header.Get("X-Key"), r.Header.Get("X-Source"))
	}

	r, _ = testkit.Post(t, url, []byte(`{}`), "Idempotency-Key", "evt_ph")
	result(r.Header, "replayed")

	body := []byte(`{"no":"key"}`)
	sum := sha256.Sum256(body)
	r, _ = testkit.Post(t, url, body)
	result(r.Header, "new")
	if got := up.Requests()[1].Header.Get("X-Idempotency-Key"); got != "sha256:"+hex.EncodeToString(sum[:]) {
		t.Fatalf("body-hash key at the upstream: %q", got)
	}

	r, _ = testkit.Do(t, http.MethodGet, url, nil)
	result(r.Header, "skipped")

	r, _ = testkit.Post(t, url, bytes.Repeat([]byte("x"), 2048), "Idempotency-Key", "evt_huge")
	if r.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d", r.StatusCode)
	}
	result(r.Header, "too_large")

	first := testkit.SendAsync(http.MethodPost, url, []byte(`{}`), "Idempotency-Key", "evt_block", "X-Block", "1")
	up.WaitCalls(t, 4, 10*time.Second)
	r, _ = testkit.Post(t, url, []byte(`{}`), "Idempotency-Key", "evt_block")
	if r.StatusCode != http.StatusConflict {
		t.Fatalf("status %d", r.StatusCode)
	}
	result(r.Header, "conflict")
	g.open()
	testkit.Receive(t, first)
}

func TestE2EReplayLeavesOutDateAndHopByHop(t *testing.T) {
	old := "Mon, 02 Jan 2006 15:04:05 GMT"
	up := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		w.Header().Set("Date", old)
		w.Header().Set("X-Kept", "yes")
		fmt.Fprintf(w, "done %d", call)
	})
	proxyPort, routePort := testkit.FreePort(t), testkit.FreePort(t)
	testkit.StartCaddy(t, "", testkit.ProxySite(proxyPort, "webhook_idempotency source date", up)+fmt.Sprintf(`:%d {
	route {
		webhook_idempotency source hop
		header Keep-Alive "timeout=5"
		header Proxy-Connection keep-alive
		header X-Kept yes
		respond "hello" 200
	}
}`, routePort))

	url := testkit.SiteURL(proxyPort) + "/hook"
	r1, _ := testkit.Post(t, url, []byte(`{}`), "Idempotency-Key", "evt_date")
	if r1.Header.Get("Date") != old {
		t.Fatalf("first response Date %q, want the upstream's %q", r1.Header.Get("Date"), old)
	}
	r2, b2 := testkit.Post(t, url, []byte(`{}`), "Idempotency-Key", "evt_date")
	testkit.WantReplay(t, r2, b2, 200, "done 1")
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

	rurl := testkit.SiteURL(routePort) + "/hook"
	r3, b3 := testkit.Post(t, rurl, []byte(`{}`), "Idempotency-Key", "evt_hop")
	testkit.WantNew(t, r3, b3, 200)
	if r3.Header.Get("Keep-Alive") == "" || r3.Header.Get("Proxy-Connection") == "" {
		t.Fatalf("first response lacks the hop-by-hop headers the test relies on: %v", r3.Header)
	}
	r4, b4 := testkit.Post(t, rurl, []byte(`{}`), "Idempotency-Key", "evt_hop")
	testkit.WantReplay(t, r4, b4, 200, "hello")
	if r4.Header.Get("Keep-Alive") != "" || r4.Header.Get("Proxy-Connection") != "" || r4.Header.Get("X-Kept") != "yes" {
		t.Fatalf("replayed headers: %v", r4.Header)
	}
}
