package edge

import (
	"cmp"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// TestEdgeAllowIPsLoopback: a request from 127.0.0.2 is refused before its
// body is read, nothing of it is stored, and the same delivery from
// 127.0.0.1 is then processed as new.
func TestEdgeAllowIPsLoopback(t *testing.T) {
	up := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	c := testkit.StartCaddy(t, "", testkit.ProxySite(port, `webhook_idempotency {
		source loopback
		allow_ips 127.0.0.1
	}`, up))
	url := testkit.SiteURL(port) + "/hook"

	r := post(t, from("127.0.0.2", nil), url, `{"id":"evt_1"}`, "Idempotency-Key", "evt_1")
	wantForbidden(t, r, "address not allowed")
	up.WantCalls(t, 0)
	if st := keyState(t, c, "loopback", "evt_1"); st != "absent" {
		t.Fatalf("after the refusal the key is %s, want absent", st)
	}

	r = post(t, from("127.0.0.1", nil), url, `{"id":"evt_1"}`, "Idempotency-Key", "evt_1")
	if r.status != 200 || r.header.Get(testkit.ReplayedHeader) != "" || r.body != `{"call":1}` {
		t.Fatalf("from 127.0.0.1: %d %s %v", r.status, r.body, r.header)
	}
	r = post(t, from("127.0.0.1", nil), url, `{"id":"evt_1"}`, "Idempotency-Key", "evt_1")
	testkit.WantReplay(t, &http.Response{StatusCode: r.status, Header: r.header}, []byte(r.body), 200, `{"call":1}`)

	// a GET from outside is refused too: the check comes before everything
	get, err := http.NewRequest(http.MethodGet, testkit.SiteURL(port)+"/health", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := from("127.0.0.2", nil).Do(get)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("GET from 127.0.0.2: %d", resp.StatusCode)
	}
	up.WantCalls(t, 1)

	m := c.Metrics(t)
	if v, _ := m.Value("caddy_webhook_idempotency_requests_total", "source", "loopback", "result", "forbidden"); v != 2 {
		t.Fatalf("forbidden counted %v times, want 2", v)
	}
	if v, _ := m.Value("caddy_webhook_idempotency_requests_total", "source", "loopback", "result", "new"); v != 1 {
		t.Fatalf("new counted %v times, want 1", v)
	}
	lists := allowLists(t, c, "loopback")
	if len(lists) != 1 || lists[0].Kind != "inline" || lists[0].Ranges != 1 {
		t.Fatalf("admin allow_ips: %+v", lists)
	}
}

// TestEdgeAllowListFetchedRefreshedKept: a list fetched from a URL (the
// stand-in for a provider's endpoint) is refreshed in the background; a
// malformed one is refused and the last good list kept; after a restart
// while the endpoint is down, the copy kept on disk is used.
func TestEdgeAllowListFetchedRefreshedKept(t *testing.T) {
	list := newListEndpoint(t, "# the provider's webhook addresses\n127.0.0.1\n")
	up := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	sites := testkit.ProxySite(port, fmt.Sprintf(`webhook_idempotency {
		source fetched
		allow_ips url %s/ips.txt {
			refresh 1s
		}
	}`, list.URL), up)
	c := testkit.StartCaddy(t, "", sites)
	url := testkit.SiteURL(port) + "/hook"
	one, two := from("127.0.0.1", nil), from("127.0.0.2", nil)

	if r := post(t, one, url, `{"n":1}`); r.status != 200 {
		t.Fatalf("from 127.0.0.1: %d %s", r.status, r.body)
	}
	wantForbidden(t, post(t, two, url, `{"n":2}`), "address not allowed")
	lists := allowLists(t, c, "fetched")
	if len(lists) != 1 || lists[0].Kind != "url" || lists[0].Source != list.URL+"/ips.txt" || lists[0].Ranges != 1 ||
		lists[0].LoadedFrom != "fetch" || lists[0].LastError != "" || lists[0].LastRefresh == nil || lists[0].Refresh != "1s" {
		t.Fatalf("admin allow_ips: %+v", lists)
	}

	// the provider's list changes: the next refresh takes it
	list.set(http.StatusOK, `["127.0.0.2"]`)
	testkit.WaitFor(t, 10*time.Second, "127.0.0.2 allowed after a refresh", func() (bool, string) {
		r := post(t, two, url, `{"n":3}`)
		return r.status == 200, r.body
	})
	wantForbidden(t, post(t, one, url, `{"n":4}`), "address not allowed")

	// a malformed list is refused, the last good one kept
	good := allowLists(t, c, "fetched")[0]
	list.set(http.StatusOK, "<html>we are down for maintenance</html>")
	testkit.WaitFor(t, 10*time.Second, "the malformed list refused", func() (bool, string) {
		st := allowLists(t, c, "fetched")[0]
		return st.LastError != "", fmt.Sprintf("%+v", st)
	})
	st := allowLists(t, c, "fetched")[0]
	if st.Ranges != 1 || !st.LastRefresh.Equal(*good.LastRefresh) || st.LoadedFrom != "fetch" {
		t.Fatalf("after the malformed list: %+v, want the list loaded at %s", st, good.LastRefresh)
	}
	if r := post(t, two, url, `{"n":5}`); r.status != 200 {
		t.Fatalf("the last good list was not kept: %d %s", r.status, r.body)
	}
	wantForbidden(t, post(t, one, url, `{"n":6}`), "address not allowed")
	if v, _ := c.Metrics(t).Value("caddy_webhook_idempotency_allow_list_refreshes_total", "list", list.URL+"/ips.txt", "outcome", "failed"); v < 1 {
		t.Fatalf("failed refreshes counted %v times", v)
	}

	// a restart while the endpoint is down: the copy on disk is used
	list.Close()
	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := caddy.Load(c.Adapt(sites), true); err != nil {
		t.Fatalf("starting again: %v", err)
	}
	st = allowLists(t, c, "fetched")[0]
	if st.LoadedFrom != "disk" || st.Ranges != 1 || st.LastError == "" {
		t.Fatalf("after the restart: %+v", st)
	}
	if r := post(t, two, url, `{"n":7}`); r.status != 200 {
		t.Fatalf("after the restart, from 127.0.0.2: %d %s", r.status, r.body)
	}
	wantForbidden(t, post(t, one, url, `{"n":8}`), "address not allowed")
}

// TestEdgeAllowIPsTrustedProxies: behind a trusted proxy, the client
// address is the one X-Forwarded-For names, read as Caddy's strict mode
// reads it (from the right, trusted proxies skipped) whether or not the
// server sets trusted_proxies_strict: a client cannot put an allowed
// address in front of its own (before, `<allowed>, <attacker>` went
// through in Caddy's default mode). From an untrusted peer the header is
// ignored.
func TestEdgeAllowIPsTrustedProxies(t *testing.T) {
	for _, mode := range []string{"", "trusted_proxies_strict"} {
		t.Run(cmp.Or(mode, "default"), func(t *testing.T) {
			up := testkit.NewUpstream(t, nil)
			port := testkit.FreePort(t)
			testkit.StartCaddy(t, `servers {
		trusted_proxies static 127.0.0.1/32 10.0.0.0/8
		`+mode+`
	}`, testkit.ProxySite(port, `webhook_idempotency {
		source proxied
		allow_ips 198.51.100.7
	}`, up))
			url := testkit.SiteURL(port) + "/hook"
			proxy, stranger := from("127.0.0.1", nil), from("127.0.0.2", nil)

			if r := post(t, proxy, url, `{"n":1}`, "X-Forwarded-For", "198.51.100.7"); r.status != 200 {
				t.Fatalf("through the trusted proxy: %d %s", r.status, r.body)
			}
			// a chain of trusted proxies in front of the provider
			if r := post(t, proxy, url, `{"n":2}`, "X-Forwarded-For", "198.51.100.7, 10.1.2.3"); r.status != 200 {
				t.Fatalf("through two trusted proxies: %d %s", r.status, r.body)
			}
			wantForbidden(t, post(t, proxy, url, `{"n":3}`, "X-Forwarded-For", "198.51.100.8"), "address not allowed")
			// the client's own header, with the address the proxy appended
			wantForbidden(t, post(t, proxy, url, `{"n":4}`, "X-Forwarded-For", "198.51.100.7, 203.0.113.9"), "address not allowed")
			wantForbidden(t, post(t, proxy, url, `{"n":5}`, "X-Forwarded-For", "198.51.100.7, 203.0.113.9, 10.1.2.3"), "address not allowed")
			wantForbidden(t, post(t, proxy, url, `{"n":6}`), "address not allowed")
			wantForbidden(t, post(t, stranger, url, `{"n":7}`, "X-Forwarded-For", "198.51.100.7"), "address not allowed")
			up.WantCalls(t, 2)
		})
	}
}
