package redise2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/record"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
	"github.com/webhookguard/caddy-webhook-idempotency/store/memstore"
)

// Regression tests for what a hostile probe found (docs: Guarantees in
// README and docs/stores.md), each against a real Caddy and upstream.

// A header value cannot stand in for another delivery's body hash: with
// the default chain `header:Idempotency-Key body`, a delivery whose header
// spells out `sha256:<hex>` of a body B, or carries B itself as a long or
// non-ASCII value, must not claim the key B gets when it arrives without
// the header.
func TestE2EHeaderValueCannotClaimABodyHash(t *testing.T) {
	up := testkit.NewUpstream(t, nil)
	url := testkit.StartProxy(t, "webhook_idempotency source collide", up) + "/hook"

	long := strings.Repeat("L", 300)
	for _, tc := range []struct {
		name, header string
		body         []byte // the victim's body, sent without the header
	}{
		{"spelled-out body hash", testkit.SHA256Key(`{"id":"evt_victim","amount":100}`), []byte(`{"id":"evt_victim","amount":100}`)},
		{"long value equal to a body", long, []byte(long)},
		{"non-ASCII value equal to a body", "pagamento-ç", []byte("pagamento-ç")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := up.Calls.Load()
			resp, body := testkit.Post(t, url, []byte(`{"id":"evt_attacker"}`), "Idempotency-Key", tc.header)
			testkit.WantNew(t, resp, body, http.StatusOK)
			resp, body = testkit.Post(t, url, tc.body)
			testkit.WantNew(t, resp, body, http.StatusOK)
			if got := up.Calls.Load() - before; got != 2 {
				t.Fatalf("upstream called %d times, want 2: the header claimed the body's key", got)
			}
			// each is still deduplicated on its own key
			resp, _ = testkit.Post(t, url, tc.body)
			if resp.Header.Get(testkit.ReplayedHeader) != "true" {
				t.Fatal("the victim's duplicate is not replayed")
			}
			resp, _ = testkit.Post(t, url, []byte(`{"id":"evt_attacker"}`), "Idempotency-Key", tc.header)
			if resp.Header.Get(testkit.ReplayedHeader) != "true" {
				t.Fatal("the header's duplicate is not replayed")
			}
		})
	}
}

// deliverKeys sends one delivery per key to url and fails unless each is
// processed; then it sends each again and returns how many of those
// duplicates were not replayed (their keys were evicted).
func deliverKeys(t *testing.T, url string, keys []string) (notReplayed int) {
	t.Helper()
	for _, k := range keys {
		resp, body := testkit.Post(t, url, []byte(k), "Idempotency-Key", k)
		testkit.WantNew(t, resp, body, http.StatusOK)
	}
	for _, k := range keys {
		resp, _ := testkit.Post(t, url, []byte(k), "Idempotency-Key", k)
		if resp.Header.Get(testkit.ReplayedHeader) != "true" {
			notReplayed++
		}
	}
	return notReplayed
}

func keyList(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s_%d", prefix, i)
	}
	return keys
}

// The memory store's max_entries bounds the table, not each of its parts:
// at 90% of the bound no completed key is evicted.
func TestE2EMemoryStoreKeepsKeysUpToTheBound(t *testing.T) {
	up := testkit.NewUpstream(t, nil)
	url := testkit.StartProxy(t, `webhook_idempotency {
		source bound
		store memory {
			max_entries 1000
		}
	}`, up) + "/hook"
	if n := deliverKeys(t, url, keyList("evt_bound", 900)); n != 0 {
		t.Fatalf("%d of 900 completed keys evicted at 90%% of max_entries 1000", n)
	}
}

// memoryTableBound measures the bound of the process-wide memory table,
// known to be at most limit: a memory store of the test's own (which sets
// no max_entries, so it lowers nothing) joins the table, which holds
// nothing else yet, and completes limit+100 keys in it; as many as the
// bound stay, the rest are evicted. It forgets them before it returns.
func memoryTableBound(t *testing.T, limit int) int {
	t.Helper()
	ctx, cancel := testkit.NewContext(t)
	defer cancel()
	var m memstore.Store
	if err := m.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	defer m.Cleanup()
	rec := record.Encode(nil, http.StatusOK, nil, &[32]byte{})
	keys := keyList("idem:bound-probe:k", limit+100)
	for _, key := range keys {
		owner := store.NewOwner()
		if res, err := m.Claim(ctx, key, owner, time.Minute); err != nil || res.State != store.StateClaimed {
			t.Fatalf("claiming %s: %v %v", key, res.State, err)
		}
		if err := m.Complete(ctx, key, owner, rec, time.Hour); err != nil {
			t.Fatalf("completing %s: %v", key, err)
		}
	}
	held := 0
	for _, key := range keys {
		info, err := m.Forget(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if info.State == store.KeyCompleted {
			held++
		}
	}
	return held
}

// One handler's max_entries never lowers another's: the shared table holds
// the largest bound configured, whatever the order of the handlers, and a
// memory store that sets none lowers nothing.
func TestE2EMemoryStoreBoundIsTheLargestConfigured(t *testing.T) {
	storeLine := func(n int) string {
		if n == 0 {
			return "store memory" // no max_entries
		}
		return fmt.Sprintf("store memory {\n\t\t\tmax_entries %d\n\t\t}", n)
	}
	for _, tc := range []struct {
		a, b, want int
		fill       string // the route filled to near the bound
	}{
		{1500, 1000, 1500, "a"},
		{1000, 1500, 1500, "b"},
		// above the default bound (100000), which a store that sets none
		// must not bring the table down to
		{120000, 0, 120000, ""},
		{0, 120000, 120000, ""},
	} {
		t.Run(fmt.Sprintf("%d then %d", tc.a, tc.b), func(t *testing.T) {
			up := testkit.NewUpstream(t, nil)
			port := testkit.FreePort(t)
			route := func(path string, n int) string {
				return fmt.Sprintf("route /%s {\n\t\twebhook_idempotency {\n\t\t\tsource %[1]s\n\t\t\t%s\n\t\t}\n\t\treverse_proxy %s\n\t}",
					path, storeLine(n), up.Addr())
			}
			testkit.StartCaddy(t, "", fmt.Sprintf(":%d {\n\t%s\n\t%s\n}\n", port, route("a", tc.a), route("b", tc.b)))
			if got := memoryTableBound(t, tc.want); got != tc.want {
				t.Fatalf("table bound %d, want %d (the largest configured)", got, tc.want)
			}
			if tc.fill == "" {
				return
			}
			if n := deliverKeys(t, testkit.SiteURL(port)+"/"+tc.fill, keyList("evt_largest", 1400)); n != 0 {
				t.Fatalf("%d of 1400 completed keys evicted under the largest bound %d", n, tc.want)
			}
		})
	}
}

// slowBody opens a connection to addr and sends a POST that declares a
// body of declared bytes and sends only sent of them; the connection stays
// open until the test ends.
func slowBody(t *testing.T, addr string, declared, sent int, header ...string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	var req strings.Builder
	fmt.Fprintf(&req, "POST /hook HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n", addr, declared)
	for i := 0; i+1 < len(header); i += 2 {
		fmt.Fprintf(&req, "%s: %s\r\n", header[i], header[i+1])
	}
	req.WriteString("\r\n")
	req.Write(bytes.Repeat([]byte("x"), sent))
	if _, err := io.WriteString(conn, req.String()); err != nil {
		t.Fatal(err)
	}
	return conn
}

// The server's own read timeout (`read_body`) bounds the body when it is
// shorter than body_timeout, on the first request (which finds the server
// in its context) and on the next ones (which use the bound the handler
// kept): each stalled body is answered 408 long before body_timeout. With
// Caddy's idle body reader (`read_body_idle`, on by default) Caddy caps the
// handler's deadline itself; without it, the handler must take the
// earlier of the two, since its deadline replaces the server's.
func TestE2EBodyTimeoutBoundedByReadBody(t *testing.T) {
	for _, tc := range []struct{ name, idle string }{{"idle reader", ""}, {"no idle reader", "\n\t\t\tread_body_idle -1s"}} {
		idle := tc.idle
		t.Run(tc.name, func(t *testing.T) {
			up := testkit.NewUpstream(t, nil)
			port := testkit.FreePort(t)
			testkit.StartCaddy(t, "servers {\n\t\ttimeouts {\n\t\t\tread_body 500ms"+idle+"\n\t\t}\n\t}",
				testkit.ProxySite(port, "webhook_idempotency source readbody body_timeout 5m", up))
			addr := fmt.Sprintf("127.0.0.1:%d", port)
			for i := range 2 {
				conn := slowBody(t, addr, 100, 10, "Idempotency-Key", fmt.Sprintf("evt_readbody_%d", i))
				// far less than body_timeout: an answer by then is read_body's
				_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
				resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
				if err != nil {
					t.Fatalf("request %d: no answer to a body that stalls past read_body: %v", i, err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusRequestTimeout || string(body) != `{"error":"request body not received within body_timeout"}` {
					t.Fatalf("request %d: %d %s, want 408 with a JSON error", i, resp.StatusCode, body)
				}
			}
			up.WantCalls(t, 0)
		})
	}
}

// Memory for a body is taken as its bytes arrive, not as its
// Content-Length announces: 200 connections that declare 5 MiB each and
// send 25 bytes must not grow the heap by a gigabyte.
func TestE2ESlowBodyFloodTakesNoMemoryForBytesNotSent(t *testing.T) {
	up := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	arrivals := testkit.NewProbe(t, "flood")
	testkit.StartCaddy(t, "", fmt.Sprintf(`:%d {
	route {
		e2e_probe flood
		webhook_idempotency {
			source flood
			body_timeout 1m
		}
		reverse_proxy %s
	}
}`, port, up.Addr()))
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	before := liveHeap()
	const conns, declared = 200, 5 << 20
	for range conns {
		slowBody(t, addr, declared, 25)
	}
	for range conns {
		select {
		case <-arrivals:
		case <-time.After(20 * time.Second):
			t.Fatal("not every slow request reached the handler")
		}
	}
	// the handlers are now reading the bodies; let them take what they take
	time.Sleep(300 * time.Millisecond)
	grown := int64(liveHeap()) - int64(before)
	t.Logf("live heap grew by %.1f MiB under %d connections declaring %d MiB and sending 25 bytes", float64(grown)/(1<<20), conns, declared>>20)
	if grown > 64<<20 {
		t.Fatalf("live heap grew by %d MiB under the slow-body flood, want at most 64 MiB", grown>>20)
	}
	up.WantCalls(t, 0)
}

// A body that does not arrive within body_timeout is answered 408 with a
// JSON error; the upstream is not called and nothing is stored, so the
// provider's retry is processed.
func TestE2EBodyTimeout(t *testing.T) {
	up := testkit.NewUpstream(t, nil)
	slowApp := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		time.Sleep(time.Second)
		fmt.Fprintf(w, `{"call":%d}`, call)
	})
	port, port2 := testkit.FreePort(t), testkit.FreePort(t)
	testkit.StartCaddy(t, "servers {\n\t\tprotocols h1 h2c\n\t}", testkit.ProxySite(port, "webhook_idempotency source slow body_timeout 300ms", up)+
		testkit.ProxySite(port2, "webhook_idempotency source slowapp body_timeout 300ms", slowApp))
	addr := fmt.Sprintf("127.0.0.1:%d", port)

	conn := slowBody(t, addr, 100, 10, "Idempotency-Key", "evt_slow")
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a body that stalls: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout || resp.Header.Get("Content-Type") != "application/json" ||
		string(body) != `{"error":"request body not received within body_timeout"}` {
		t.Fatalf("stalled body: %d %q %s, want 408 with a JSON error", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	if !resp.Close {
		t.Fatal("the 408 does not close the connection, whose body is half read")
	}
	up.WantCalls(t, 0)
	// nothing was stored: the retry is processed
	r, b := testkit.Post(t, testkit.SiteURL(port)+"/hook", []byte(`{"id":"evt_slow"}`), "Idempotency-Key", "evt_slow")
	testkit.WantNew(t, r, b, http.StatusOK)

	// the deadline covers the body only: an application slower than
	// body_timeout still has its answer recorded and replayed
	// over HTTP/1.1 and HTTP/2 (where a read deadline left on the stream
	// would reset it)
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	h2c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{Protocols: &protocols}}
	for i, client := range []*http.Client{testkit.Client, h2c} {
		key := fmt.Sprintf("evt_slowapp_%d", i)
		for j, want := range []string{"new", "replayed"} {
			req, _ := http.NewRequest(http.MethodPost, testkit.SiteURL(port2)+"/hook", strings.NewReader(`{}`))
			req.Header.Set("Idempotency-Key", key)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatalf("client %d, request %d: %v", i, j, err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if wantProto := []int{1, 2}[i]; resp.ProtoMajor != wantProto {
				t.Fatalf("client %d spoke HTTP/%d, want HTTP/%d", i, resp.ProtoMajor, wantProto)
			}
			if resp.StatusCode != http.StatusOK || (resp.Header.Get(testkit.ReplayedHeader) == "true") != (want == "replayed") {
				t.Fatalf("HTTP/%d, slow application, request %d: %d %s (replayed %q), want %s", resp.ProtoMajor, j, resp.StatusCode, body, resp.Header.Get(testkit.ReplayedHeader), want)
			}
		}
	}
}

// liveHeap returns the live heap after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
