package admin

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// TestConsolePausesAndResumesDestinations: in Chromium, a source with an
// inbox shows its destinations (deliver_to's and a route's) with their
// state and breaker; Pause on one asks first and then pauses that
// destination alone, as the admin API tells; Resume resumes it; Pause all
// pauses the source.
func TestConsolePausesAndResumesDestinations(t *testing.T) {
	app := testkit.NewUpstream(t, nil)
	port, opsPort := testkit.FreePort(t), testkit.FreePort(t)
	testkit.StartCaddy(t, "", fmt.Sprintf(`http://127.0.0.1:%[1]d {
	handle /shop {
		webhook_idempotency {
			source shop
			inbox {
				deliver_to %[2]s/main
				route header:X-Topic=refunds/* %[2]s/refunds
				breaker 50%% of 10
			}
		}
	}
}
%[3]s`, port, app.URL, consoleSite(opsPort)))
	ops := fmt.Sprintf("http://127.0.0.1:%d/ops/", opsPort)
	paused := func() string {
		_, body := opsDo(t, http.MethodGet, ops+"api/shop")
		return body
	}

	ctx := newBrowser(t)
	login := fmt.Sprintf("http://%s:%s@127.0.0.1:%d/ops/", consoleUser, consolePassword, opsPort)
	browse(t, ctx, "open the source",
		chromedp.Navigate(login+"?source=shop"),
		chromedp.WaitVisible(`#delivery-panel`),
		chromedp.WaitVisible(`#destinations tbody tr:nth-child(2)`),
	)
	waitText(t, ctx, "the destinations", `#destinations`, app.URL+"/main", "deliver_to", app.URL+"/refunds", "refunds/*", "delivering", "closed")

	browse(t, ctx, "pause the route's destination",
		chromedp.Click(`#destinations tbody tr:nth-child(2) button`),
		chromedp.WaitVisible(`#confirm`),
		chromedp.Click(`#confirm-ok`),
	)
	testkit.WaitFor(t, 10*time.Second, "the refunds destination paused, the main one not", func() (bool, string) {
		b := paused()
		return strings.Contains(b, `"url":"`+app.URL+`/refunds"`) && strings.Count(b, `"paused":true`) == 1 && strings.Contains(b, `"paused":false`), b
	})
	waitText(t, ctx, "the row says so", `#destinations tbody tr:nth-child(2)`, "paused", "Resume")

	browse(t, ctx, "resume it", chromedp.Click(`#destinations tbody tr:nth-child(2) button`))
	testkit.WaitFor(t, 10*time.Second, "nothing paused", func() (bool, string) {
		b := paused()
		return !strings.Contains(b, `"paused":true`), b
	})

	browse(t, ctx, "pause all",
		chromedp.Click(`#delivery-toggle`),
		chromedp.WaitVisible(`#confirm`),
		chromedp.Click(`#confirm-ok`),
	)
	testkit.WaitFor(t, 10*time.Second, "the source paused", func() (bool, string) {
		b := paused()
		return strings.Contains(b, `"paused":true`) && !strings.Contains(b, `"paused":false`), b
	})
	waitText(t, ctx, "the toggle", `#delivery-panel`, "Resume all")
}
