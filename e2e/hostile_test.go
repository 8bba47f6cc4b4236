package e2e

import (
	"bufio"
	"bytes"
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// Hostile and misconfigured traffic (issue 22): deliveries that come back
// to the route that sent them, key namespaces that could collide, the key
// placeholder of skipped requests, JSON members given twice, bodies that
// together would take more memory than the process allows, and large
// forged Stone envelopes.

// hostileDead is a dead letter as GET …/dead lists it.
type hostileDead struct {
	ID         string `json:"id"`
	Key        string `json:"key"`
	Attempts   int    `json:"attempts"`
	LastStatus int    `json:"last_status"`
	LastError  string `json:"last_error"`
}

// hostileResults reads requests_total of source for each result.
func hostileResults(t *testing.T, c *testkit.Caddy, source string, results ...string) map[string]float64 {
	t.Helper()
	m := c.Metrics(t)
	out := make(map[string]float64, len(results))
	for _, r := range results {
		out[r], _ = m.Value("caddy_webhook_idempotency_requests_total", "source", source, "result", r)
	}
	return out
}

// An inbox whose deliver_to is its own route: every delivery the route
// gets back is a new event under a new key (the worker sends the body's
// hash, or a hashed key, as Idempotency-Key), accepted and delivered back
// again, without end. Its deliveries carry Webhook-Via naming the route, so
// the route answers 508 and the inbox dead-letters the event at once: one
// accepted event, one dead letter, no loop.
func TestHostileInboxDeliveringToItsOwnRoute(t *testing.T) {
	for _, c := range []struct {
		name, source string
		header       []string
	}{
		// the key is the body's hash: the worker sends sha256:<hex>
		{"body key", "loopy", nil},
		// the key is a hashed header value: the worker sends
		// key-sha256:<hex>, which a route hashes again
		{"hashed header key", "loopy-hashed", []string{"Idempotency-Key", strings.Repeat("k", 300)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			port := testkit.FreePort(t)
			url := testkit.SiteURL(port) + "/hook"
			caddy := testkit.StartCaddy(t, "", fmt.Sprintf(`:%d {
	webhook_idempotency {
		source %s
		inbox %s {
			retries 50ms 50ms 50ms
			jitter  0%%
			timeout 2s
		}
	}
}`, port, c.source, url))
			resp, body := testkit.Post(t, url, []byte(`{"event":"one"}`), c.header...)
			if resp.StatusCode != http.StatusAccepted {
				t.Fatalf("accept: %d %s", resp.StatusCode, body)
			}
			var dead []hostileDead
			testkit.WaitFor(t, 15*time.Second, "the event dead-lettered with 508", func() (bool, string) {
				caddy.AdminJSON(t, http.MethodGet, "/webhook_idempotency/"+c.source+"/dead", &dead)
				return len(dead) > 0, fmt.Sprintf("%+v, results %v", dead, hostileResults(t, caddy, c.source, "new", "loop"))
			})
			// the loop would have accepted an event per hop by now; wait a
			// little longer to see that none comes
			time.Sleep(300 * time.Millisecond)
			caddy.AdminJSON(t, http.MethodGet, "/webhook_idempotency/"+c.source+"/dead", &dead)
			got := hostileResults(t, caddy, c.source, "new", "loop")
			if len(dead) != 1 || dead[0].LastStatus != http.StatusLoopDetected || dead[0].Attempts != 1 ||
				!strings.Contains(dead[0].LastError, "delivery loop") {
				t.Fatalf("dead letters %+v, want the one event, dead-lettered after one attempt with 508", dead)
			}
			if got["new"] != 1 || got["loop"] != 1 {
				t.Fatalf("results %v, want 1 accepted and 1 loop refused", got)
			}
		})
	}
}

// An archive whose redeliver_to is its own route: the redelivery carries
// the body's hash as Idempotency-Key, which the route used to hash into a
// new key and process again. It is refused with 508, and the application
// gets the event once.
func TestHostileRedeliverToItsOwnRoute(t *testing.T) {
	up := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	url := testkit.SiteURL(port) + "/hook"
	caddy := testkit.StartCaddy(t, "", testkit.ProxySite(port, fmt.Sprintf(`webhook_idempotency {
		source  self
		archive {
			redeliver_to %s
		}
	}`, url), up))
	resp, body := testkit.Post(t, url, []byte(`{"event":"paid"}`))
	testkit.WantNew(t, resp, body, http.StatusOK)

	var list struct {
		Events []struct {
			ID string `json:"id"`
		} `json:"events"`
	}
	testkit.WaitFor(t, 10*time.Second, "the delivery archived", func() (bool, string) {
		caddy.AdminJSON(t, http.MethodGet, "/webhook_idempotency/self/events", &list)
		return len(list.Events) == 1, fmt.Sprint(list.Events)
	})
	var out struct {
		Delivered bool   `json:"delivered"`
		Status    int    `json:"status"`
		Error     string `json:"error"`
	}
	caddy.AdminJSON(t, http.MethodPost, "/webhook_idempotency/self/events/"+list.Events[0].ID+"/redeliver", &out)
	if out.Delivered || out.Status != http.StatusLoopDetected {
		t.Fatalf("redelivery through the route itself: %+v, want not delivered, 508", out)
	}
	up.WantCalls(t, 1)
}

// An inbox that delivers to another route with a handler (a route that
// deduplicates in front of the application): the event keeps its key at
// that hop, so a second delivery of it (a redelivery, a reclaimed event)
// is a duplicate there; the hop is named in Webhook-Via.
func TestHostileInboxChainKeepsTheKey(t *testing.T) {
	up := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	site := testkit.SiteURL(port)
	c := testkit.StartCaddy(t, "", fmt.Sprintf(`:%d {
	handle /in {
		webhook_idempotency {
			source edge
			inbox %s/app
		}
	}
	handle /app {
		webhook_idempotency {
			source app
		}
		reverse_proxy %s {
			header_up X-Idempotency-Key {http.webhook_idempotency.key}
		}
	}
}`, port, site, up.Addr()))
	event := []byte(`{"event":"chained"}`)
	resp, body := testkit.Post(t, site+"/in", event)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("accept: %d %s", resp.StatusCode, body)
	}
	up.WaitCalls(t, 1, 10*time.Second)
	got := up.Requests()[0]
	if k := got.Header.Get("X-Idempotency-Key"); k != testkit.SHA256Key(string(event)) {
		t.Fatalf("the next route keyed the event %q, want the body's key %q", k, testkit.SHA256Key(string(event)))
	}
	if via := got.Header.Get("Webhook-Via"); via != "idem:edge" {
		t.Fatalf("Webhook-Via %q, want idem:edge", via)
	}
	// the application's route completes the key once the upstream has
	// answered, a moment after the upstream saw the request
	testkit.WaitFor(t, 10*time.Second, "the app route's key completed", func() (bool, string) {
		var st struct {
			State string `json:"state"`
		}
		c.AdminJSON(t, http.MethodGet, "/webhook_idempotency/app/keys/"+testkit.SHA256Key(string(event)), &st)
		return st.State == "completed", st.State
	})
	// the inbox's delivery as the application's route sees it, once more
	resp, body = testkit.Post(t, site+"/app", event, "Idempotency-Key", testkit.SHA256Key(string(event)), "Webhook-Via", "idem:edge")
	testkit.WantReplay(t, resp, body, http.StatusOK, `{"call":1}`)
	up.WantCalls(t, 1)
}

// A header that carries the body's own hash names that very delivery: it
// is the body's key, not a new one.
func TestHostileBodyHashHeaderIsTheBodysKey(t *testing.T) {
	up := testkit.NewUpstream(t, nil)
	url := testkit.StartProxy(t, "webhook_idempotency source hashed", up) + "/hook"
	event := []byte(`{"event":"a"}`)
	resp, body := testkit.Post(t, url, event)
	testkit.WantNew(t, resp, body, http.StatusOK)
	resp, body = testkit.Post(t, url, event, "Idempotency-Key", testkit.SHA256Key(string(event)))
	testkit.WantReplay(t, resp, body, http.StatusOK, `{"call":1}`)
	// another body's hash is still no key of this body's
	resp, body = testkit.Post(t, url, event, "Idempotency-Key", testkit.SHA256Key("other"))
	testkit.WantNew(t, resp, body, http.StatusOK)
	up.WantCalls(t, 2)
}

// Two routes whose store keys would be the same string: `key_prefix
// idem:a` with source `b` and the default prefix with source `a` both give
// `idem:a:b:<key>`. A ':' (or a brace, which would break the redis hash
// tag) is refused in key_prefix and source, in the Caddyfile and in JSON.
func TestHostileKeyNamespacesCannotCollide(t *testing.T) {
	r := testkit.StartRedis(t)
	t.Run("caddyfile", func(t *testing.T) {
		for _, c := range []struct{ name, globals, site, want string }{
			{"key_prefix", "", fmt.Sprintf("webhook_idempotency {\n\t\tsource b\n\t\tstore redis redis://%s {\n\t\t\tkey_prefix idem:a\n\t\t}\n\t}", r.Addr()), "invalid key_prefix \"idem:a\""},
			{"key_prefix brace", "", fmt.Sprintf("webhook_idempotency {\n\t\tsource b\n\t\tstore redis redis://%s {\n\t\t\tkey_prefix idem}\n\t\t}\n\t}", r.Addr()), "invalid key_prefix \"idem}\""},
			{"global key_prefix", fmt.Sprintf("webhook_idempotency {\n\t\tstore redis redis://%s {\n\t\t\tkey_prefix x:y\n\t\t}\n\t}", r.Addr()), "webhook_idempotency source b", "invalid key_prefix \"x:y\""},
			{"source", "", "webhook_idempotency source a:b", "invalid source 'a:b'"},
		} {
			t.Run(c.name, func(t *testing.T) {
				_, err := testkit.AdaptConfig(t, c.globals, ":8080 {\n\t"+c.site+"\n}")
				if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "Caddyfile:") {
					t.Fatalf("adapting: %v, want an error naming %s and its line", err, c.want)
				}
			})
		}
	})
	t.Run("json", func(t *testing.T) {
		up := testkit.NewUpstream(t, nil)
		port := testkit.FreePort(t)
		url := testkit.SiteURL(port)
		caddy := testkit.StartCaddy(t, "", fmt.Sprintf(":%d {\n\trespond 204\n}", port))
		// two routes, written with placeholders the Caddyfile takes, then
		// set in JSON to a key_prefix and a source with a ':'
		cfg := caddy.Adapt(fmt.Sprintf(`:%d {
	handle /one {
		webhook_idempotency {
			source b
			store redis redis://%s {
				key_prefix PREFIXA
			}
		}
		reverse_proxy %s
	}
	handle /two {
		webhook_idempotency {
			source a
			store redis redis://%s
		}
		reverse_proxy %s
	}
}`, port, r.Addr(), up.Addr(), r.Addr(), up.Addr()))
		for _, c := range []struct{ name, from, to, want string }{
			{"key_prefix", `"key_prefix":"PREFIXA"`, `"key_prefix":"idem:a"`, `invalid key_prefix \"idem:a\"`},
			{"source", `"source":"a"`, `"source":"a:b"`, `invalid source 'a:b'`},
		} {
			t.Run(c.name, func(t *testing.T) {
				changed := bytes.Replace(cfg, []byte(c.from), []byte(c.to), 1)
				if bytes.Equal(changed, cfg) {
					t.Fatalf("no %s in the adapted config: %s", c.from, cfg)
				}
				err := hostileLoad(caddy, changed)
				if err == nil {
					// the collision this rule prevents: the second route
					// replays the first's answer
					r1, b1 := testkit.PostAfterReload(t, url+"/one", []byte(`{"n":1}`), "Idempotency-Key", "k1")
					r2, b2 := testkit.PostAfterReload(t, url+"/two", []byte(`{"n":2}`), "Idempotency-Key", "b:k1")
					t.Fatalf("a config with %s loaded; route one answered %d %s, route two %d (%s %q) %s",
						c.to, r1.StatusCode, b1, r2.StatusCode, testkit.ReplayedHeader, r2.Header.Get(testkit.ReplayedHeader), b2)
				}
				if !strings.Contains(err.Error(), c.want) {
					t.Fatalf("load refused with %v, want an error naming %s", err, c.want)
				}
			})
		}
	})
}

// hostileLoad loads a JSON config through the admin API; the error is the
// admin API's answer when it refuses it.
func hostileLoad(c *testkit.Caddy, cfg []byte) error {
	req, err := http.NewRequest(http.MethodPost, c.AdminURL("/load"), bytes.NewReader(cfg))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Cache-Control", "must-revalidate")
	resp, err := testkit.NewConnectionClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", resp.Status, body)
	}
	testkit.Client.CloseIdleConnections()
	return nil
}

// The key placeholder is set, empty, on requests the handler skips, so the
// header_up docs/caddyfile.md suggests sends no placeholder text.
func TestHostileKeyPlaceholderOnSkippedRequests(t *testing.T) {
	up := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	testkit.StartCaddy(t, "", fmt.Sprintf(`:%d {
	webhook_idempotency source skipped
	reverse_proxy %s {
		header_up X-Idempotency-Key {http.webhook_idempotency.key}
	}
}`, port, up.Addr()))
	url := testkit.SiteURL(port) + "/hook"
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodOptions} {
		resp, body := testkit.Do(t, m, url, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", m, resp.StatusCode, body)
		}
	}
	resp, body := testkit.Post(t, url, []byte(`{}`), "Idempotency-Key", "evt_9")
	testkit.WantNew(t, resp, body, http.StatusOK)
	reqs := up.Requests()
	if len(reqs) != 4 {
		t.Fatalf("upstream got %d requests, want 4", len(reqs))
	}
	for _, r := range reqs[:3] {
		if v := r.Header.Get("X-Idempotency-Key"); v != "" {
			t.Errorf("%s reached the upstream with X-Idempotency-Key %q, want it empty", r.Method, v)
		}
	}
	if v := reqs[3].Header.Get("X-Idempotency-Key"); v != "evt_9" {
		t.Errorf("POST reached the upstream with X-Idempotency-Key %q, want evt_9", v)
	}
}

// A JSON member the key path reads, given twice: the handler would key on
// the first while many applications read the last. It is refused with 400
// before anything is claimed; a member given twice that the handler does
// not read is no concern of its.
func TestHostileDuplicateJSONMembers(t *testing.T) {
	up := testkit.NewUpstream(t, nil)
	url := testkit.StartProxy(t, `webhook_idempotency {
		source dup
		key    json:data.object.id body
	}`, up) + "/hook"
	for _, c := range []struct{ name, body, member string }{
		{"top level", `{"data":{"object":{"id":"evt_1"}},"data":{"object":{"id":"evt_2"}}}`, "data"},
		{"nested", `{"data":{"object":{"id":"evt_1","id":"evt_2"}}}`, "id"},
		{"in another case", `{"data":{"object":{"id":"evt_1","ID":"evt_2"}}}`, "id"},
		{"escaped name", `{"data":{"object":{"id":"evt_1","\u0069d":"evt_2"}}}`, "id"},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, body := testkit.Post(t, url, []byte(c.body))
			want := `{"error":"ambiguous delivery: the JSON member \"` + c.member + `\" of key json:data.object.id appears more than once"}`
			if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Content-Type") != "application/json" || string(body) != want {
				t.Fatalf("%d %s, want 400 %s", resp.StatusCode, body, want)
			}
		})
	}
	up.WantCalls(t, 0)
	// nothing was claimed: evt_1 is new
	resp, body := testkit.Post(t, url, []byte(`{"data":{"object":{"id":"evt_1"}},"other":1,"other":2}`))
	testkit.WantNew(t, resp, body, http.StatusOK)
	resp, body = testkit.Post(t, url, []byte(`{"data":{"object":{"id":"evt_1"}}}`))
	testkit.WantReplay(t, resp, body, http.StatusOK, `{"call":1}`)
	up.WantCalls(t, 1)
}

// A Stone envelope with two encrypted_body members: the first is Stone's
// delivery, verified; the second a JWE anyone can encrypt to the partner's
// key, which an application that reads the last member would decrypt. It
// is refused with 400. A forged envelope larger than the stone preset's
// default max_body (1MiB) is refused before it is read.
func TestHostileStoneEnvelopes(t *testing.T) {
	partner, signer := sigtest.RSAKey("stone-partner"), sigtest.RSAKey("stone-signer")
	jwks := sigtest.NewJWKSServer(t, map[string]*rsa.PrivateKey{"stone-1": signer})
	up := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	c := testkit.StartCaddy(t, "", testkit.ProxySite(port, stoneDirective(sigtest.PartnerKeyFile(t), jwks.URL, ""), up))
	url := testkit.SiteURL(port) + "/stone"

	genuine := sigtest.StoneDelivery(t, []byte(sigtest.StoneEvent), signer, "stone-1", &partner.PublicKey)
	forged := sigtest.StoneJWE(t, "not a JWS", "RSA-OAEP-256", "A256GCM", &partner.PublicKey)
	twice := append(bytes.TrimSuffix(genuine, []byte("}")), []byte(`,"encrypted_body":"`+forged+`"}`)...)
	resp, body := testkit.Post(t, url, twice, "x-stone-webhook-event-id", "evt-dup")
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "ambiguous delivery") {
		t.Fatalf("envelope with two encrypted_body: %d %s, want 400 ambiguous delivery", resp.StatusCode, body)
	}
	up.WantCalls(t, 0)
	// the genuine envelope alone is delivered: nothing was claimed
	resp, body = testkit.Post(t, url, genuine, "x-stone-webhook-event-id", "evt-dup")
	testkit.WantNew(t, resp, body, http.StatusOK)

	large := sigtest.StoneBody(sigtest.StoneJWE(t, strings.Repeat("x", 1<<20), "RSA-OAEP-256", "A256GCM", &partner.PublicKey))
	resp, body = testkit.Post(t, url, large, "x-stone-webhook-event-id", "evt-large")
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("a forged envelope of %d bytes: %d %s, want 413", len(large), resp.StatusCode, body)
	}
	up.WantCalls(t, 1)
	if got := hostileResults(t, c, "stone", "ambiguous", "too_large"); got["ambiguous"] != 1 || got["too_large"] != 1 {
		t.Fatalf("results %v", got)
	}
}

// The bodies being read take at most body_budget together: a slow client
// holding its body's buffer fills a budget of 64KiB, and a delivery then
// gets 503 with Retry-After before its body is read; once the slow client
// is gone, deliveries are read again.
func TestHostileBodyBudget(t *testing.T) {
	up := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	c := testkit.StartCaddy(t, "webhook_idempotency {\n\t\tbody_budget 64KiB\n\t}", testkit.ProxySite(port, `webhook_idempotency {
		source       budget
		body_timeout 30s
	}`, up))
	url := testkit.SiteURL(port) + "/hook"
	buffered := func() float64 {
		v, _ := c.Metrics(t).Value("caddy_webhook_idempotency_buffered_body_bytes")
		return v
	}

	// the budget is the process's: bodies an earlier test left behind
	// are given back once their connections are gone
	testkit.WaitFor(t, 30*time.Second, "no body buffered before the test", func() (bool, string) {
		v := buffered()
		return v == 0, strconv.FormatFloat(v, 'f', 0, 64)
	})

	// announces 1 MB, sends 40 KB and waits: its buffer holds 64 KiB
	slow, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	fmt.Fprintf(slow, "POST /hook HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", 1<<20)
	if _, err := slow.Write(bytes.Repeat([]byte("x"), 40<<10)); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "the slow body counted against the budget", func() (bool, string) {
		v := buffered()
		return v == 64<<10, strconv.FormatFloat(v, 'f', 0, 64)
	})

	resp, body := testkit.Post(t, url, []byte(`{"event":"waits"}`))
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "30" ||
		!strings.Contains(string(body), "retry later") {
		t.Fatalf("a delivery past the budget: %d (Retry-After %q) %s, want 503 with Retry-After 30", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	up.WantCalls(t, 0)

	// the slow client goes; its buffer leaves the budget
	slow.Close()
	testkit.WaitFor(t, 10*time.Second, "the budget given back", func() (bool, string) {
		v := buffered()
		return v == 0, strconv.FormatFloat(v, 'f', 0, 64)
	})
	resp, body = testkit.Post(t, url, []byte(`{"event":"waits"}`))
	testkit.WantNew(t, resp, body, http.StatusOK)
	if got := hostileResults(t, c, "budget", "over_budget", "new"); got["over_budget"] != 1 || got["new"] != 1 {
		t.Fatalf("results %v", got)
	}
}

// A body refused for the budget in the middle leaves the rest of it
// unread: the connection is closed, and the client sees the 503.
func TestHostileBodyBudgetMidBody(t *testing.T) {
	up := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	testkit.StartCaddy(t, "webhook_idempotency {\n\t\tbody_budget 100KiB\n\t}", testkit.ProxySite(port, "webhook_idempotency source budget2", up))
	conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	// 1 MB in one go: the buffer's window outgrows 100 KiB after 64 KiB
	go func() {
		fmt.Fprintf(conn, "POST /hook HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", 1<<20)
		_, _ = conn.Write(bytes.Repeat([]byte("x"), 1<<20))
	}()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusServiceUnavailable || !resp.Close {
		t.Fatalf("%d (close %v) %s, want 503 and the connection closed", resp.StatusCode, resp.Close, body)
	}
	var e struct{ Error string }
	if err := json.Unmarshal(body, &e); err != nil || e.Error == "" {
		t.Fatalf("body %s: %v", body, err)
	}
	up.WantCalls(t, 0)
}

// A captured signed delivery re-sent with its unsigned id set to its own
// body hash gets the body's key, and the replay guard still looks at it:
// flagged with `replay_guard flag` (the default), answered as the
// duplicate it is with `reject`.
func TestHostileBodyHashAsUnsignedID(t *testing.T) {
	body := []byte(`{"action":"blocked","blocked_user":{"id":7}}`)
	for _, c := range []struct{ mode string }{{"flag"}, {"reject"}} {
		t.Run(c.mode, func(t *testing.T) {
			up := testkit.NewUpstream(t, nil)
			port := testkit.FreePort(t)
			testkit.StartCaddy(t, "", testkit.ProxySite(port, fmt.Sprintf(`webhook_idempotency github {
		secret %s
		replay_guard %s
	}`, replaySecret, c.mode), up))
			url := testkit.SiteURL(port) + "/hook"
			resendSigned(t, url, body, "d1", testkit.SHA256Key(string(body)))
			reqs := up.Requests()
			switch c.mode {
			case "flag":
				if len(reqs) != 2 || reqs[1].Header.Get("Webhook-Replay-Suspected") != "d1" {
					t.Fatalf("%d deliveries, the second with Webhook-Replay-Suspected %q; want 2, the second flagged d1", len(reqs), reqs[len(reqs)-1].Header.Get("Webhook-Replay-Suspected"))
				}
			case "reject":
				if len(reqs) != 1 {
					t.Fatalf("the same signed bytes under their own hash reached the application %d times, want once", len(reqs))
				}
			}
		})
	}
}

// A body announced larger than max_body is answered 413 at once, with
// `Connection: close`, without reading or waiting for the body, and never
// with `100 Continue` (docs/caddyfile.md, max_body); the connection closes
// once the client has had the time to read the answer. Before, the server
// waited for 256 KiB of the body before it answered (a connection that
// sent 100 bytes of an announced 6 MB was held until the client gave up),
// and a client that sent `Expect: 100-continue` got no answer at all. A
// client that sends the whole body without waiting reads the 413, not a
// reset.
func TestHostileAnnouncedBodyTooLarge(t *testing.T) {
	up := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	testkit.StartCaddy(t, "", testkit.ProxySite(port, `webhook_idempotency {
		source       announced
		max_body     5MB
		body_timeout 20s
	}`, up))
	for _, c := range []struct {
		name, expect string
		sent         int // bytes of the body sent before the answer is read
	}{
		{"100 bytes sent", "", 100},
		{"expect 100-continue", "Expect: 100-continue\r\n", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			start := time.Now()
			// the answer comes well within body_timeout, or not at all
			_ = conn.SetDeadline(start.Add(10 * time.Second))
			fmt.Fprintf(conn, "POST /hook HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%sContent-Length: 6000000\r\n\r\n%s",
				c.expect, bytes.Repeat([]byte("x"), c.sent))
			r := bufio.NewReader(conn)
			status, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("no answer within 10 s: %v", err)
			}
			if !strings.HasPrefix(status, "HTTP/1.1 413 ") {
				t.Fatalf("first answer %q, want 413 (never 100 Continue)", status)
			}
			resp, err := http.ReadResponse(bufio.NewReader(io.MultiReader(strings.NewReader(status), r)), nil)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.ReadAll(resp.Body)
			if !resp.Close { // ReadResponse takes `Connection: close` out of the header
				t.Fatal("413 without Connection: close")
			}
			// the server closes the connection: nothing more comes, and
			// no wait for the rest of the body
			if n, err := r.Read(make([]byte, 1)); err != io.EOF {
				t.Fatalf("after the 413: %d bytes, %v; want the connection closed", n, err)
			}
			t.Logf("413 and the close after %s", time.Since(start).Round(time.Millisecond))
		})
	}
	// a client that writes all 6 MB at once
	resp, body := testkit.Post(t, testkit.SiteURL(port)+"/hook", bytes.Repeat([]byte("x"), 6_000_000))
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !resp.Close {
		t.Fatalf("6 MB sent whole: %d (close %v) %s, want 413 and the connection closed", resp.StatusCode, resp.Close, body)
	}
	up.WantCalls(t, 0)
}
