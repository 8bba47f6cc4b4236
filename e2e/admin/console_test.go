package admin

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/record"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// The console, tested in a real headless Chromium against a real Caddy
// with real traffic, a real upstream and a real Redis.

// chromiumPath returns the Chromium binary, failing the test when there is
// none: `make test` installs Debian's chromium.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("chromium not found on PATH: the console tests need a real headless browser; install Debian's chromium (apt-get install chromium) or run `make test`, which installs it")
	return ""
}

// newBrowser starts a headless Chromium with a fresh profile and returns a
// tab's context; everything stops when the test ends.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 1800),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelTab(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return ctx
}

// browse runs browser actions with a deadline, failing the test on error.
func browse(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	within, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(within, actions...); err != nil {
		t.Fatalf("%s: %v%s", what, err, pageState(ctx))
	}
}

// pageState is what the page says, for a failed browser action: its URL
// and the console's message.
func pageState(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href + ' says ' + JSON.stringify((document.querySelector('#message') || {}).textContent || '')`))
	if err != nil {
		return ""
	}
	return " (at " + s + ")"
}

// browserValue runs one browser action that returns a value.
func browserValue[T any](t *testing.T, ctx context.Context, what string, action chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, action)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// consoleProxySite is the loopback site of docs/admin.md that opens the
// console in a browser: Caddy's admin endpoint refuses a browser's own
// navigation (no Origin, no Referer), so this site forwards what the
// browser marks as typed by the user or sent by the page itself, with the
// admin endpoint's own Origin, and refuses everything else.
func consoleProxySite(port, adminPort int) string {
	return fmt.Sprintf(`
http://127.0.0.1:%[1]d, http://localhost:%[1]d {
	@console {
		path /webhook_idempotency/*
		header Sec-Fetch-Site same-origin
		header Sec-Fetch-Site none
	}
	handle @console {
		reverse_proxy localhost:%[2]d {
			header_up Host localhost:%[2]d
			header_up Origin http://localhost:%[2]d
		}
	}
	respond 403
}`, port, adminPort)
}

// TestConsole: in a real Chromium, the console shows the sources with
// their counts, filters the archive, opens an event with its headers and
// body, redelivers a dead letter (the upstream receives it), and forgets a
// key once confirmed (the provider's next retry is processed); it is
// opened through the admin endpoint's loopback proxy site of
// docs/admin.md at 127.0.0.1 and at localhost. With CONSOLE_SCREENSHOT set
// to a file name, it saves a screenshot of the page there.
func TestConsole(t *testing.T) {
	srv := testkit.StartRedis(t)
	var fixed atomic.Bool
	app := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		if strings.HasPrefix(r.URL.Path, "/inbox") && !fixed.Load() && r.Header.Get("Idempotency-Key") == "order-dead" {
			w.WriteHeader(http.StatusUnprocessableEntity)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"received":true,"call":%d}`, call)
	})
	port, proxyPort := testkit.FreePort(t), testkit.FreePort(t)
	sites := fmt.Sprintf(`
http://127.0.0.1:%d {
	handle /payments* {
		webhook_idempotency {
			source payments
			store redis redis://%s {
				timeout 2s
			}
			archive 7d {
				redact json:card.number
			}
		}
		reverse_proxy %s
	}
	handle /orders* {
		webhook_idempotency {
			source orders
			store redis redis://%s {
				timeout 2s
			}
			archive
			inbox {
				deliver_to %s/inbox
				retries 200ms
				jitter 0%%
				timeout 2s
			}
		}
	}
}`, port, srv.Addr(), app.Addr(), srv.Addr(), app.URL)
	c := testkit.StartCaddy(t, "", sites+consoleProxySite(proxyPort, 0))
	// the proxy needs the admin port, known only now
	if err := c.Reload(sites + consoleProxySite(proxyPort, c.AdminPort)); err != nil {
		t.Fatal(err)
	}

	// real traffic
	site := testkit.SiteURL(port)
	for i, evt := range []string{"evt_1001", "evt_1002", "evt_1003", "evt_1002"} {
		body := fmt.Sprintf(`{"id":%q,"type":"payment.succeeded","amount":%d,"card":{"number":"4242424242424242"}}`, evt, 1000+i)
		if resp, b := testkit.PostAfterReload(t, site+"/payments/hook", []byte(body), "Idempotency-Key", evt, "Content-Type", "application/json", "X-Request-Trace", "trace-"+evt); resp.StatusCode != http.StatusOK {
			t.Fatalf("payments %s: %s %s", evt, resp.Status, b)
		}
	}
	for _, key := range []string{"order-ok", "order-dead"} {
		if resp, b := testkit.Post(t, site+"/orders/hook", []byte(`{"order":"`+key+`"}`), "Idempotency-Key", key); resp.StatusCode != http.StatusAccepted {
			t.Fatalf("orders %s: %s %s", key, resp.Status, b)
		}
	}
	testkit.Eventually(t, 10*time.Second, "the dead letter", func() bool {
		var dead []adminDead
		c.AdminJSON(t, http.MethodGet, "/webhook_idempotency/orders/dead", &dead)
		return len(dead) == 1
	})

	// the admin endpoint itself refuses a browser's navigation; the proxy
	// site of docs/admin.md opens it
	ctx := newBrowser(t)
	browse(t, ctx, "direct navigation", chromedp.Navigate(c.AdminURL("/webhook_idempotency/console")))
	if text := browserValue(t, ctx, "direct page", chromedp.Text("body")); !strings.Contains(text, "not allowed") {
		t.Fatalf("Caddy's admin endpoint served a browser's navigation: %q", text)
	}
	for _, host := range []string{"localhost", "127.0.0.1"} { // the last one stays open
		browse(t, ctx, "open the console at "+host,
			chromedp.Navigate(fmt.Sprintf("http://%s:%d/webhook_idempotency/console", host, proxyPort)),
			chromedp.WaitVisible(`#sources tbody tr[data-source="payments"]`),
			chromedp.WaitVisible(`#sources tbody tr[data-source="orders"]`),
		)
	}
	counts := browserValue(t, ctx, "payments counts", chromedp.Text(`#sources tbody tr[data-source="payments"]`))
	if !strings.Contains(counts, "payments\tredis\t3\t1") {
		t.Fatalf("payments row: %q", counts)
	}

	// the archive, filtered, and one event opened
	browse(t, ctx, "open payments",
		chromedp.Click(`#sources tbody tr[data-source="payments"]`),
		chromedp.WaitVisible(`#events tbody tr[data-id]`),
		chromedp.SetValue(`#filter-key`, "evt_1002"),
		chromedp.Click(`#search`),
	)
	browserValue(t, ctx, "the filtered list", chromedp.Poll[bool](`(() => {
		const keys = [...document.querySelectorAll('#events tbody tr td:nth-child(2)')].map(td => td.textContent);
		return keys.length === 2 && keys.every(k => k === 'evt_1002');
	})()`, chromedp.WithPollingTimeout(10*time.Second)))
	browse(t, ctx, "open an event",
		chromedp.Click(`#events tbody tr:last-child`),
		chromedp.WaitVisible(`#event-detail`),
	)
	body := browserValue(t, ctx, "event body", chromedp.Text(`#event-body`))
	headers := browserValue(t, ctx, "event headers", chromedp.Text(`#event-headers`))
	if !strings.Contains(body, `"evt_1002"`) || !strings.Contains(body, `"number": "[redacted]"`) || strings.Contains(body, "4242") ||
		!strings.Contains(headers, "trace-evt_1002") {
		t.Fatalf("event shown: body %q, headers %q", body, headers)
	}

	// forget a key, once confirmed: the provider's next retry is processed
	browse(t, ctx, "look up a key",
		chromedp.Click(`#tab-key`),
		chromedp.WaitVisible(`#key-input`),
		chromedp.SetValue(`#key-input`, "evt_1001"),
		chromedp.Click(`#key-lookup`),
	)
	browserValue(t, ctx, "key completed", chromedp.Poll[bool](`document.querySelector('#key-state').textContent.includes('completed')`, chromedp.WithPollingTimeout(10*time.Second)))
	browse(t, ctx, "forget it", chromedp.Click(`#key-forget`), chromedp.WaitVisible(`#confirm`), chromedp.Click(`#confirm-ok`))
	browserValue(t, ctx, "key absent", chromedp.Poll[bool](`document.querySelector('#key-state').textContent.includes('absent')`, chromedp.WithPollingTimeout(10*time.Second)))
	calls := app.Calls.Load()
	resp, _ := testkit.Post(t, site+"/payments/hook", []byte(`{"id":"evt_1001","type":"payment.succeeded","amount":1000}`), "Idempotency-Key", "evt_1001")
	if resp.StatusCode != http.StatusOK || resp.Header.Get(record.ReplayedHeader) != "" || app.Calls.Load() != calls+1 {
		t.Fatalf("the retry after forgetting: %s %v, %d upstream calls", resp.Status, resp.Header, app.Calls.Load()-calls)
	}

	// redeliver a dead letter: the upstream receives it
	fixed.Store(true)
	before := len(app.Requests())
	browse(t, ctx, "open orders",
		chromedp.Click(`#sources tbody tr[data-source="orders"]`),
		chromedp.WaitVisible(`#tab-dead`),
		chromedp.Click(`#tab-dead`),
		chromedp.WaitVisible(`#dead tbody tr[data-id] button.redeliver`),
		chromedp.Click(`#dead tbody tr[data-id] button.redeliver`),
	)
	testkit.Eventually(t, 10*time.Second, "the redelivered dead letter at the upstream", func() bool {
		for _, r := range app.Requests()[before:] {
			if r.Header.Get("Idempotency-Key") == "order-dead" {
				return true
			}
		}
		return false
	})
	browserValue(t, ctx, "dead list empty", chromedp.Poll[bool](`document.querySelectorAll('#dead tbody tr').length === 0`, chromedp.WithPollingTimeout(10*time.Second)))

	// nothing from another origin: a cross-site request through the proxy,
	// or to the admin endpoint, is refused
	for _, u := range []string{
		fmt.Sprintf("http://127.0.0.1:%d/webhook_idempotency/", proxyPort),
		c.AdminURL("/webhook_idempotency/"),
	} {
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		req.Header.Set("Origin", "http://evil.example")
		req.Header.Set("Sec-Fetch-Site", "cross-site")
		req.Header.Set("Sec-Fetch-Mode", "cors")
		resp, err := testkit.Client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("a cross-site request to %s: %s", u, resp.Status)
		}
	}
	resp, _ = testkit.Do(t, http.MethodGet, c.AdminURL("/webhook_idempotency/console"), nil)
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") {
		t.Fatalf("Content-Security-Policy %q", csp)
	}

	if out := os.Getenv("CONSOLE_SCREENSHOT"); out != "" {
		browse(t, ctx, "screenshot setup",
			chromedp.Click(`#sources tbody tr[data-source="payments"]`),
			chromedp.WaitVisible(`#events tbody tr[data-id]`),
			chromedp.Click(`#events tbody tr:nth-child(4)`), // evt_1002, new, its card number redacted
			chromedp.WaitVisible(`#event-detail`),
			chromedp.Sleep(500*time.Millisecond),
		)
		png := browserValue(t, ctx, "screenshot", chromedp.FullScreenshot(100))
		if err := os.WriteFile(out, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestConsoleDotKeys: the keys `.` and `..`, which a browser removes from
// a URL's path even percent-encoded, are looked up and forgotten from the
// console in a real Chromium (it sends the key in the query), and the
// provider's next retry of each is processed.
func TestConsoleDotKeys(t *testing.T) {
	app := testkit.NewUpstream(t, nil)
	port, proxyPort := testkit.FreePort(t), testkit.FreePort(t)
	sites := fmt.Sprintf(`
http://127.0.0.1:%d {
	webhook_idempotency {
		source dots
		store memory
	}
	reverse_proxy %s
}`, port, app.Addr())
	c := testkit.StartCaddy(t, "", sites+consoleProxySite(proxyPort, 0))
	if err := c.Reload(sites + consoleProxySite(proxyPort, c.AdminPort)); err != nil {
		t.Fatal(err)
	}
	site := testkit.SiteURL(port)
	keys := []string{".", ".."}
	for _, key := range keys {
		resp, b := testkit.PostAfterReload(t, site+"/hook", []byte(`{"key":"`+key+`"}`), "Idempotency-Key", key)
		testkit.WantNew(t, resp, b, http.StatusOK)
	}

	ctx := newBrowser(t)
	browse(t, ctx, "open the console",
		chromedp.Navigate(fmt.Sprintf("http://127.0.0.1:%d/webhook_idempotency/console", proxyPort)),
		chromedp.WaitVisible(`#sources tbody tr[data-source="dots"]`),
		chromedp.Click(`#sources tbody tr[data-source="dots"]`),
		chromedp.WaitVisible(`#tab-key`),
		chromedp.Click(`#tab-key`),
		chromedp.WaitVisible(`#key-input`),
	)
	for _, key := range keys {
		browse(t, ctx, "look up "+key,
			chromedp.SetValue(`#key-input`, key),
			chromedp.Click(`#key-lookup`),
		)
		browserValue(t, ctx, key+" completed", chromedp.Poll[bool](`(() => {
			const text = document.querySelector('#key-state').textContent;
			return text.includes('completed') && text.includes('idem:dots:`+key+`');
		})()`, chromedp.WithPollingTimeout(10*time.Second)))
		browse(t, ctx, "forget "+key, chromedp.Click(`#key-forget`), chromedp.WaitVisible(`#confirm`), chromedp.Click(`#confirm-ok`))
		browserValue(t, ctx, key+" absent", chromedp.Poll[bool](`document.querySelector('#key-state').textContent.includes('absent')`, chromedp.WithPollingTimeout(10*time.Second)))
		if msg := browserValue(t, ctx, "message", chromedp.Text(`#message`)); !strings.Contains(msg, "key "+key+" forgotten") {
			t.Fatalf("after forgetting %q: %q", key, msg)
		}
	}
	calls := app.Calls.Load()
	for _, key := range keys {
		resp, b := testkit.Post(t, site+"/hook", []byte(`{"key":"`+key+`"}`), "Idempotency-Key", key)
		testkit.WantNew(t, resp, b, http.StatusOK)
	}
	if n := app.Calls.Load() - calls; n != int64(len(keys)) {
		t.Fatalf("%d retries processed after forgetting, want %d", n, len(keys))
	}
}
