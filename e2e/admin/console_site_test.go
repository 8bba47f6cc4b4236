package admin

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// The console on a site's route (webhook_idempotency_console), in a real
// headless Chromium against a real Caddy, a real upstream and Stripe's own
// API simulator.

// The console route's login: a bcrypt hash of the password at bcrypt's
// lowest cost, so that checking it costs the loaded test machine nothing.
const (
	consoleUser     = "operator"
	consolePassword = "console-test"
	consoleHash     = "$2a$04$ms6aGKeJZCQ6nXLmLtbgwO0lMnvwTSFHJCKo3o/7by7y0ktNcaWQi"
)

// consoleSite is a site on port that serves the console at /ops/ behind
// basic_auth, at both loopback names.
func consoleSite(port int) string {
	return fmt.Sprintf(`
http://127.0.0.1:%[1]d, http://localhost:%[1]d {
	handle_path /ops/* {
		basic_auth {
			%[2]s %[3]s
		}
		webhook_idempotency_console
	}
}`, port, consoleUser, consoleHash)
}

// opsDo sends a request to the console's route with its login and the
// given headers.
func opsDo(t *testing.T, method, u string, header ...string) (*http.Response, string) {
	t.Helper()
	login := base64.StdEncoding.EncodeToString([]byte(consoleUser + ":" + consolePassword))
	resp, body := testkit.Do(t, method, u, nil, append([]string{"Authorization", "Basic " + login}, header...)...)
	return resp, string(body)
}

// runWithin runs one browser action with a deadline.
func runWithin[T any](ctx context.Context, action chromedp.Action[T]) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	return chromedp.Run(ctx, action)
}

// waitText waits until the text of sel contains every part.
func waitText(t *testing.T, ctx context.Context, what, sel string, parts ...string) {
	t.Helper()
	want, _ := json.Marshal(parts)
	js := fmt.Sprintf(`(() => { const e = document.querySelector(%q); return !!e && %s.every((p) => e.textContent.includes(p)); })()`, sel, want)
	if _, err := runWithin(ctx, chromedp.Poll[bool](js, chromedp.WithPollingTimeout(15*time.Second))); err != nil {
		got, _ := runWithin(ctx, chromedp.Evaluate[string](fmt.Sprintf(`(document.querySelector(%q) || {}).textContent || ''`, sel)))
		t.Fatalf("%s: %s never held %q: %v; it holds %q", what, sel, parts, err, got)
	}
}

// jsonInto decodes an answer's JSON.
func jsonInto(body string, v any) error { return json.Unmarshal([]byte(body), v) }

// TestConsoleSite: the console served by webhook_idempotency_console behind
// basic_auth on a port of its own, in Chromium: the page loads and lists
// the sources; a source's panel opens above the charts; an event opens,
// and its URL, reloaded or opened anew, opens it again; Redeliver is
// offered where it works (and works) and, elsewhere, the page says why
// not; the Refused tab lists a forged delivery; the reconciliation status
// shows the pass that ran; Forget asks first, does nothing when
// cancelled, and forgets when confirmed. A POST from another origin,
// sent by a page of that origin in the same logged-in browser, is refused
// (the event is not redelivered), as is one that says it comes from
// another origin; a program's POST, with the login, is accepted.
func TestConsoleSite(t *testing.T) {
	mock := testkit.StartStripeMock(t)
	app := testkit.NewUpstream(t, nil)
	port, opsPort := testkit.FreePort(t), testkit.FreePort(t)
	sites := fmt.Sprintf(`
http://127.0.0.1:%[1]d {
	handle /charges {
		webhook_idempotency {
			source charges
			store memory
			verify hmac {
				header X-Sig
				secret pay-secret
			}
			archive {
				redact json:card.number
			}
		}
		reverse_proxy %[2]s
	}
	handle /shipments {
		webhook_idempotency {
			source shipments
			store memory
			archive {
				redeliver_to %[3]s/again
			}
		}
		reverse_proxy %[2]s
	}
	handle /billing {
		webhook_idempotency stripe {
			source billing
			secret whsec_console
			inbox %[3]s/billing
			reconcile {
				api_key rk_test_console
				api_url %[4]s
				every 1h
			}
		}
		reverse_proxy %[2]s
	}
}`, port, app.Addr(), app.URL, mock.URL) + consoleSite(opsPort)
	testkit.StartCaddy(t, "", sites)
	site := testkit.SiteURL(port)
	sign := func(body string) string {
		m := hmac.New(sha256.New, []byte("pay-secret"))
		m.Write([]byte(body))
		return hex.EncodeToString(m.Sum(nil))
	}
	pay := `{"id":"evt_1","card":{"number":"4242424242424242"}}`
	if resp, b := testkit.PostAfterReload(t, site+"/charges", []byte(pay), "X-Sig", sign(pay), "Idempotency-Key", "evt_1"); resp.StatusCode != http.StatusOK {
		t.Fatalf("charges: %s %s", resp.Status, b)
	}
	if resp, _ := testkit.Post(t, site+"/charges", []byte(`{"id":"forged"}`), "X-Sig", "00", "Idempotency-Key", "dlv_forged_1"); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("forged: %s", resp.Status)
	}
	for range 2 {
		if resp, b := testkit.Post(t, site+"/shipments", []byte(`{"order":"ord_1"}`), "Idempotency-Key", "ord_1"); resp.StatusCode != http.StatusOK {
			t.Fatalf("shipments: %s %s", resp.Status, b)
		}
	}
	ops := fmt.Sprintf("http://127.0.0.1:%d/ops/", opsPort)
	// a program with the login runs a reconciliation pass: no browser
	// headers, accepted
	resp, body := opsDo(t, http.MethodPost, ops+"api/billing/reconcile?wait=true")
	var sum struct {
		Recovered int `json:"recovered"`
	}
	if resp.StatusCode != http.StatusOK || jsonInto(body, &sum) != nil {
		t.Fatalf("a pass through the console's API: %s %s", resp.Status, body)
	}
	var events adminEventsJSON
	if resp, body := opsDo(t, http.MethodGet, ops+"api/shipments/events"); resp.StatusCode != http.StatusOK || jsonInto(body, &events) != nil || len(events.Events) != 2 {
		t.Fatalf("the shipments' archive through the console's API: %s %s", resp.Status, body)
	}
	orderNew, orderReplayed := events.Events[1].ID, events.Events[0].ID
	if events.Events[1].Result != "new" || events.Events[0].Result != "replayed" {
		t.Fatalf("shipments archived: %+v", events.Events)
	}

	// the browser logs in as a person does, with the login in the URL
	ctx := newBrowser(t)
	login := func(host string) string {
		return fmt.Sprintf("http://%s:%s@%s:%d/ops/", consoleUser, consolePassword, host, opsPort)
	}
	browse(t, ctx, "open the console",
		chromedp.Navigate(login("127.0.0.1")),
		chromedp.WaitVisible(`#sources tbody tr[data-source="charges"]`),
		chromedp.WaitVisible(`#sources tbody tr[data-source="shipments"]`),
		chromedp.WaitVisible(`#sources tbody tr[data-source="billing"]`),
		chromedp.WaitVisible(`#charts figure.chart[data-source="charges"] svg`),
	)

	// a source's panel opens above the charts, at a URL of its own
	browse(t, ctx, "open charges",
		chromedp.Click(`#sources tbody tr[data-source="charges"]`),
		chromedp.WaitVisible(`#events tbody tr[data-id]`),
	)
	if got := browserValue(t, ctx, "the panel's place", chromedp.Evaluate[string](`(() => {
		const panel = document.querySelector('#source-panels').getBoundingClientRect();
		const charts = document.querySelector('#trends').getBoundingClientRect();
		return (panel.top < charts.top) + ' ' + location.search;
	})()`)); got != "true ?source=charges" {
		t.Fatalf("the source panel above the charts, and the URL: %q", got)
	}
	browse(t, ctx, "open the payment", chromedp.Click(`#events tbody tr[data-id]`), chromedp.WaitVisible(`#event-detail`))
	waitText(t, ctx, "the payment", `#event-body`, `"number": "[redacted]"`)
	eventURL := browserValue(t, ctx, "the event's URL", chromedp.Evaluate[string](`location.href`))
	if !strings.Contains(eventURL, "source=charges") || !strings.Contains(eventURL, "event=") {
		t.Fatalf("the event's URL: %q", eventURL)
	}
	// nowhere to redeliver to, and a redacted body: no Redeliver, a reason
	if got := browserValue(t, ctx, "redeliver offered", chromedp.Evaluate[string](`document.querySelector('#event-redeliver').hidden + ' ' + document.querySelector('#event-redeliver-note').textContent`)); !strings.HasPrefix(got, "true Not redeliverable: the route has neither an inbox nor an archive redeliver_to") {
		t.Fatalf("a payment with nowhere to redeliver: %q", got)
	}
	// a reload opens the same event
	browse(t, ctx, "reload", chromedp.Reload())
	waitText(t, ctx, "the payment after a reload", `#event-body`, `"number": "[redacted]"`, `"evt_1"`)

	// the URL of an event opens it: the shipments' new event, redeliverable
	orderURL := strings.Replace(login("127.0.0.1"), "/ops/", "/ops/?source=shipments&event="+url.QueryEscape(orderNew), 1)
	browse(t, ctx, "open an order by its URL", chromedp.Navigate(orderURL), chromedp.WaitVisible(`#event-detail`))
	waitText(t, ctx, "the order", `#event-id`, orderNew)
	waitText(t, ctx, "the order's body", `#event-body`, `"ord_1"`)
	if hidden := browserValue(t, ctx, "redeliver", chromedp.Evaluate[bool](`document.querySelector('#event-redeliver').hidden`)); hidden {
		t.Fatal("an order with its body archived and a redeliver_to offers no Redeliver")
	}
	again := func() int {
		n := 0
		for _, r := range app.Requests() {
			if r.URI == "/again" {
				n++
			}
		}
		return n
	}
	browse(t, ctx, "redeliver the order", chromedp.Click(`#event-redeliver`))
	waitText(t, ctx, "the redelivery", `#message`, "event "+orderNew+" redelivered")
	if n := again(); n != 1 {
		t.Fatalf("redeliver_to got %d requests, want 1", n)
	}
	// its replay: the body of a replay is not archived
	browse(t, ctx, "open the replay", chromedp.Click(fmt.Sprintf(`#events tbody tr[data-id=%q]`, orderReplayed)))
	waitText(t, ctx, "the replay", `#event-redeliver-note`, "a replay's body is not archived")
	if hidden := browserValue(t, ctx, "redeliver", chromedp.Evaluate[bool](`document.querySelector('#event-redeliver').hidden`)); !hidden {
		t.Fatal("a replay offers Redeliver")
	}
	// the browser's back button goes back to the order
	browserValue(t, ctx, "back", chromedp.Evaluate[bool](`history.back(), true`))
	waitText(t, ctx, "the order again", `#event-id`, orderNew)

	// the events matching a filter, redelivered once confirmed
	browse(t, ctx, "filter the shipments",
		chromedp.SetValue(`#filter-key`, "ord_1"),
		chromedp.Click(`#search`),
		chromedp.WaitVisible(`#redeliver-matching`),
		chromedp.Click(`#redeliver-matching`),
		chromedp.WaitVisible(`#confirm`),
	)
	waitText(t, ctx, "the question", `#confirm-text`, "Redeliver the archived events of shipments matching key ord_1")
	browse(t, ctx, "cancel", chromedp.Click(`#confirm-cancel`), chromedp.WaitNotVisible(`#confirm`))
	if n := again(); n != 1 {
		t.Fatalf("a cancelled Redeliver matching redelivered: redeliver_to got %d requests, want 1", n)
	}
	browse(t, ctx, "confirm",
		chromedp.Click(`#redeliver-matching`),
		chromedp.WaitVisible(`#confirm`),
		chromedp.Click(`#confirm-ok`),
	)
	waitText(t, ctx, "the redelivered set", `#message`, "1 event redelivered, 0 failed, 1 skipped")
	if n := again(); n != 2 {
		t.Fatalf("redeliver_to got %d requests, want 2", n)
	}
	if search := browserValue(t, ctx, "URL", chromedp.Evaluate[string](`location.search`)); search != "?source=shipments&key=ord_1" {
		t.Fatalf("the filtered archive's URL: %q", search)
	}

	// the Refused tab: the forged delivery, with why and from where
	browse(t, ctx, "refused", chromedp.Click(`#sources tbody tr[data-source="charges"]`), chromedp.WaitVisible(`#tab-refused`), chromedp.Click(`#tab-refused`))
	waitText(t, ctx, "the refused list", `#refused tbody`, "invalid_signature", "401", "invalid signature", "127.0.0.1", "POST /charges", "dlv_forged_1")
	if search := browserValue(t, ctx, "URL", chromedp.Evaluate[string](`location.search`)); search != "?source=charges&tab=refused" {
		t.Fatalf("the Refused tab's URL: %q", search)
	}

	// the reconciliation status, with the pass the program ran
	browse(t, ctx, "billing", chromedp.Click(`#sources tbody tr[data-source="billing"]`), chromedp.WaitVisible(`#reconcile-panel`))
	waitText(t, ctx, "the reconciliation", `#reconcile-state`, "providerstripe", "resultok", "recovered"+strconv.Itoa(sum.Recovered), "next pass")
	if hidden := browserValue(t, ctx, "charges' reconciliation", chromedp.Evaluate[bool](`(async () => {
		document.querySelector('#sources tbody tr[data-source="charges"]').click();
		for (let i = 0; i < 100 && !document.querySelector('#reconcile-panel').hidden; i++) await new Promise((r) => setTimeout(r, 50));
		return document.querySelector('#reconcile-panel').hidden;
	})()`, chromedp.EvalAwaitPromise)); !hidden {
		t.Fatal("a source without reconcile shows a reconciliation")
	}

	// Forget asks first: cancelled, the key stays; confirmed, it goes
	keyState := func() string {
		_, body := opsDo(t, http.MethodGet, ops+"api/charges/keys?key=evt_1")
		var k adminKeyJSON
		_ = jsonInto(body, &k)
		return k.State
	}
	browse(t, ctx, "look up the key",
		chromedp.Click(`#tab-key`),
		chromedp.WaitVisible(`#key-input`),
		chromedp.SetValue(`#key-input`, "evt_1"),
		chromedp.Click(`#key-lookup`),
	)
	waitText(t, ctx, "the key", `#key-state`, "completed")
	browse(t, ctx, "forget, then cancel",
		chromedp.Click(`#key-forget`),
		chromedp.WaitVisible(`#confirm`),
	)
	waitText(t, ctx, "the question", `#confirm-text`, `Forget key "evt_1" of charges?`)
	browse(t, ctx, "cancel", chromedp.Click(`#confirm-cancel`), chromedp.WaitNotVisible(`#confirm`))
	if st := keyState(); st != "completed" {
		t.Fatalf("after a cancelled Forget the key is %q", st)
	}
	browse(t, ctx, "forget, then confirm",
		chromedp.Click(`#key-forget`),
		chromedp.WaitVisible(`#confirm`),
		chromedp.Click(`#confirm-ok`),
	)
	waitText(t, ctx, "forgotten", `#message`, "key evt_1 forgotten")
	if st := keyState(); st != "absent" {
		t.Fatalf("after a confirmed Forget the key is %q", st)
	}

	// another origin's page in the same logged-in browser: its POST is
	// refused, whether cross-site (localhost) or same-site (127.0.0.1 on
	// another port)
	redeliver := ops + "api/shipments/events/redeliver?key=ord_1"
	for _, other := range []string{fmt.Sprintf("http://localhost:%d/", port), site + "/elsewhere"} {
		browse(t, ctx, "another origin", chromedp.Navigate(other))
		sent := browserValue(t, ctx, "a POST from "+other, chromedp.Evaluate[string](fmt.Sprintf(`fetch(%q, { method: 'POST', mode: 'no-cors', credentials: 'include' })
			.then(() => 'sent', (e) => 'failed: ' + e.message)`, redeliver), chromedp.EvalAwaitPromise))
		if sent != "sent" {
			t.Fatalf("the page of %s could not send its POST: %s", other, sent)
		}
	}
	if n := again(); n != 2 {
		t.Fatalf("POSTs from other origins were accepted: redeliver_to got %d requests, want 2", n)
	}
	// as a browser would send them
	for _, h := range [][]string{
		{"Origin", "http://evil.example", "Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "cors"},
		{"Origin", fmt.Sprintf("http://127.0.0.1:%d", port), "Sec-Fetch-Site", "same-site", "Sec-Fetch-Mode", "cors"},
		{"Origin", "http://evil.example"},
		{"Sec-Fetch-Site", "same-origin", "Sec-Fetch-Mode", "no-cors"},
		{"Sec-Fetch-Site", "same-origin", "Sec-Fetch-Mode", "cors"}, // a POST without Origin
	} {
		if resp, body := opsDo(t, http.MethodPost, redeliver, h...); resp.StatusCode != http.StatusForbidden {
			t.Fatalf("a POST with %v: %s %s", h, resp.Status, body)
		}
	}
	if n := again(); n != 2 {
		t.Fatalf("refused POSTs redelivered: redeliver_to got %d requests, want 2", n)
	}
	// the page's own origin, and a program: accepted
	if resp, body := opsDo(t, http.MethodPost, redeliver, "Origin", fmt.Sprintf("http://127.0.0.1:%d", opsPort), "Sec-Fetch-Site", "same-origin", "Sec-Fetch-Mode", "cors"); resp.StatusCode != http.StatusOK {
		t.Fatalf("a POST from the console's origin: %s %s", resp.Status, body)
	}
	if resp, body := opsDo(t, http.MethodPost, redeliver); resp.StatusCode != http.StatusOK {
		t.Fatalf("a program's POST: %s %s", resp.Status, body)
	}
	if n := again(); n != 4 {
		t.Fatalf("redeliver_to got %d requests, want 4", n)
	}

	// on localhost too
	browse(t, ctx, "the console at localhost",
		chromedp.Navigate(login("localhost")),
		chromedp.WaitVisible(`#sources tbody tr[data-source="shipments"]`),
	)
	// without the login, nothing
	if resp, _ := testkit.Do(t, http.MethodGet, ops+"api/", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("the API without the login: %s", resp.Status)
	}
}

// TestConsoleLoopbackSites: the loopback sites of docs/admin.md, the
// webhook_idempotency_console one and the proxy to the admin endpoint, as
// documented (with this test's ports), each open the console in Chromium
// at localhost and at 127.0.0.1, listing the sources.
func TestConsoleLoopbackSites(t *testing.T) {
	doc := testkit.ReadFile(t, "../../docs/admin.md")
	fences := regexp.MustCompile("(?s)```caddy\n(.*?)```").FindAllStringSubmatch(doc, -1)
	var handlerSite, proxySite string
	for _, f := range fences {
		switch {
		case strings.Contains(f[1], "bind 127.0.0.1") && strings.Contains(f[1], "webhook_idempotency_console"):
			handlerSite = f[1]
		case strings.Contains(f[1], "bind 127.0.0.1") && strings.Contains(f[1], "reverse_proxy localhost:2019"):
			proxySite = f[1]
		}
	}
	if handlerSite == "" || proxySite == "" {
		t.Fatalf("docs/admin.md has no loopback console site (handler %v, proxy %v)", handlerSite != "", proxySite != "")
	}
	port, handlerPort, proxyPort := testkit.FreePort(t), testkit.FreePort(t), testkit.FreePort(t)
	source := fmt.Sprintf(`
http://127.0.0.1:%d {
	webhook_idempotency {
		source loopback
		store memory
	}
	respond 204
}`, port)
	sites := func(adminPort int) string {
		return source + "\n" + strings.ReplaceAll(handlerSite, ":2020", ":"+strconv.Itoa(handlerPort)) + "\n" +
			strings.NewReplacer(":2021", ":"+strconv.Itoa(proxyPort), "localhost:2019", "localhost:"+strconv.Itoa(adminPort)).Replace(proxySite)
	}
	c := testkit.StartCaddy(t, "", sites(1))
	if err := c.Reload(sites(c.AdminPort)); err != nil {
		t.Fatal(err)
	}
	ctx := newBrowser(t)
	for _, host := range []string{"localhost", "127.0.0.1"} {
		for _, page := range []string{
			fmt.Sprintf("http://%s:%d/", host, handlerPort),
			fmt.Sprintf("http://%s:%d/webhook_idempotency/console", host, proxyPort),
		} {
			browse(t, ctx, "open "+page, chromedp.Navigate(page))
			if _, err := runWithin(ctx, chromedp.WaitVisible(`#sources tbody tr[data-source="loopback"]`)); err != nil {
				text, _ := runWithin(ctx, chromedp.Evaluate[string](`document.documentElement.outerHTML`))
				t.Fatalf("%s lists no source: %v; the page is %q", page, err, text)
			}
		}
	}
}

// TestConsoleStoreHealth: a source's file store deleted under the running
// Caddy is marked in the console, in the sources table and in the
// source's panel, once the store notices (docs/stores.md).
func TestConsoleStoreHealth(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store.db")
	port, opsPort := testkit.FreePort(t), testkit.FreePort(t)
	testkit.StartCaddy(t, "", fmt.Sprintf(`
http://127.0.0.1:%d {
	webhook_idempotency {
		source filed
		store file %s
	}
	respond 204
}
http://127.0.0.1:%d {
	webhook_idempotency_console
}`, port, path, opsPort))
	ctx := newBrowser(t)
	browse(t, ctx, "open the console",
		chromedp.Navigate(fmt.Sprintf("http://127.0.0.1:%d/?source=filed", opsPort)),
		chromedp.WaitVisible(`#sources tbody tr[data-source="filed"]`),
		chromedp.WaitVisible(`#source-panels`),
	)
	if got := browserValue(t, ctx, "a healthy store", chromedp.Evaluate[string](`document.querySelector('#sources tbody tr[data-source="filed"] td:nth-child(2)').textContent + ' ' + document.querySelector('#store-health').hidden`)); got != "file true" {
		t.Fatalf("a healthy file store: %q", got)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	// the store checks its file every 5 s; the live counts every 2 s
	waitText(t, ctx, "the sources table", `#sources tbody tr[data-source="filed"] td:nth-child(2)`, "file: unhealthy")
	waitText(t, ctx, "the source's panel", `#store-health`, "The file store is unhealthy: file store: "+path+" was deleted while Caddy runs")
}
