package admin

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// TestConsoleShowsAttemptsAndItems: in Chromium, the console's event view
// lists an inbox event's attempts, each with its status, destination and
// the application's answer (its body as kept), and an archived batch
// request's items, new or seen before, one click searching the archive for
// an item; a dead letter's details show its body and its attempts.
func TestConsoleShowsAttemptsAndItems(t *testing.T) {
	var orders atomic.Int64
	app := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, _ int64) {
		_, _ = io.Copy(io.Discard, r.Body)
		switch r.URL.Path {
		case "/orders":
			if orders.Add(1) == 1 {
				w.WriteHeader(http.StatusInternalServerError)
				_, _ = io.WriteString(w, `{"error":"out of stock"}`)
				return
			}
		case "/refunds":
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"error":"refund window closed"}`)
			return
		}
		_, _ = io.WriteString(w, `{"ok":true}`)
	})
	port, opsPort := testkit.FreePort(t), testkit.FreePort(t)
	inbox := func(source string) string {
		return fmt.Sprintf(`	handle /%[1]s {
		webhook_idempotency {
			source %[1]s
			archive
			inbox {
				deliver_to %[2]s/%[1]s
				retries 100ms
				jitter 0%%
			}
		}
	}
`, source, app.URL)
	}
	testkit.StartCaddy(t, "", fmt.Sprintf(`http://127.0.0.1:%[1]d {
%[2]s%[3]s	handle /batches {
		webhook_idempotency {
			source batches
			batch json:items {
				key json:id
			}
			archive
		}
		reverse_proxy %[4]s
	}
}
%[5]s`, port, inbox("orders"), inbox("refunds"), app.Addr(), consoleSite(opsPort)))
	site := testkit.SiteURL(port)
	for _, d := range []struct{ path, key string }{{"orders", "ord_1"}, {"refunds", "ref_1"}} {
		if resp, body := testkit.Post(t, site+"/"+d.path, []byte(`{"id":"`+d.key+`","note":"from the console test"}`), "Idempotency-Key", d.key); resp.StatusCode != http.StatusAccepted {
			t.Fatalf("%s: %s %s", d.path, resp.Status, body)
		}
	}
	for _, items := range []string{`[{"id":"b1"},{"id":"b2"}]`, `[{"id":"b2"},{"id":"b3"}]`} {
		if resp, body := testkit.Post(t, site+"/batches", []byte(`{"items":`+items+`}`)); resp.StatusCode != http.StatusOK {
			t.Fatalf("a batch: %s %s", resp.Status, body)
		}
	}
	ops := fmt.Sprintf("http://127.0.0.1:%d/ops/", opsPort)
	var events adminEventsJSON
	testkit.WaitFor(t, 10*time.Second, "ord_1 delivered at its second attempt", func() (bool, string) {
		_, body := opsDo(t, http.MethodGet, ops+"api/orders/events")
		return jsonInto(body, &events) == nil && len(events.Events) == 1 && strings.Contains(body, `"total":2`), body
	})
	testkit.WaitFor(t, 10*time.Second, "ref_1 dead-lettered", func() (bool, string) {
		_, body := opsDo(t, http.MethodGet, ops+"api/refunds/dead")
		return strings.Contains(body, `"key":"ref_1"`), body
	})

	ctx := newBrowser(t)
	login := fmt.Sprintf("http://%s:%s@127.0.0.1:%d/ops/", consoleUser, consolePassword, opsPort)
	browse(t, ctx, "open the order's event",
		chromedp.Navigate(login+"?source=orders&event="+url.QueryEscape(events.Events[0].ID)),
		chromedp.WaitVisible(`#event-attempts-section`),
	)
	waitText(t, ctx, "the order's attempts", `#event-attempts-section`, "Attempts (2)", "#1", "HTTP 500", `"error": "out of stock"`,
		"#2", "HTTP 200", `"ok": true`, app.URL+"/orders")
	if n := browserValue(t, ctx, "attempts drawn", chromedp.Evaluate[int](`document.querySelectorAll('#event-attempts .attempt').length`)); n != 2 {
		t.Fatalf("%d attempts drawn, want 2", n)
	}
	if hidden := browserValue(t, ctx, "items section", chromedp.Evaluate[bool](`document.querySelector('#event-items-section').hidden`)); !hidden {
		t.Fatal("an event of one delivery shows items")
	}

	// a dead letter's body and attempts, in its details
	browse(t, ctx, "open the refunds' dead letters",
		chromedp.Navigate(login+"?source=refunds&tab=dead"),
		chromedp.WaitVisible(`#dead tbody tr.dead-detail summary`),
		chromedp.Click(`#dead tbody tr.dead-detail summary`),
		chromedp.WaitVisible(`#dead .dead-body`),
	)
	waitText(t, ctx, "the dead letter's details", `#dead tbody tr.dead-detail`, `"id": "ref_1"`, `"note": "from the console test"`,
		"Attempts (1)", "HTTP 400", `"error": "refund window closed"`)

	// the second batch: b2 seen before, b3 new; a click on b2 finds both
	browse(t, ctx, "open the batches",
		chromedp.Navigate(login+"?source=batches"),
		chromedp.WaitVisible(`#events tbody tr[data-id]`),
		chromedp.Click(`#events tbody tr[data-id]:first-child`),
		chromedp.WaitVisible(`#event-items-section`),
	)
	waitText(t, ctx, "the batch's items", `#event-items`, "b2", "no (seen before)", "b3", "yes")
	waitText(t, ctx, "the batch's answer", `#event-attempts-section`, "Attempts (1)", "HTTP 200", "next")
	browse(t, ctx, "search for an item", chromedp.Click(`#event-items tbody tr:first-child`))
	browserValue(t, ctx, "both batches that held b2", chromedp.Poll[bool](`(() => {
		return document.querySelector('#filter-key').value === 'b2' && location.search.includes('key=b2') &&
			document.querySelectorAll('#events tbody tr[data-id]').length === 2;
	})()`, chromedp.WithPollingTimeout(10*time.Second)))
}
