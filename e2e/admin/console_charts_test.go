package admin

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// TestConsoleCharts: in a real Chromium, the console draws for each source
// the last hour of its deliveries a minute at a time, from real traffic
// (new, replayed, invalid signature, failed), with nothing the page's
// Content-Security-Policy refuses; it says that a row can be clicked; and
// a replayed event, whose body is not archived, offers no Redeliver, while
// a new one does.
func TestConsoleCharts(t *testing.T) {
	app := testkit.NewUpstream(t, nil)
	port, proxyPort := testkit.FreePort(t), testkit.FreePort(t)
	sites := fmt.Sprintf(`
http://127.0.0.1:%[1]d {
	handle /signed {
		webhook_idempotency {
			source charts_signed
			store memory
			max_body 1KiB
			verify hmac {
				header X-Sig
				secret charts-secret
			}
			archive {
				redeliver_to %[2]s/again
			}
		}
		reverse_proxy %[3]s
	}
	handle /plain {
		webhook_idempotency {
			source charts_plain
			store memory
		}
		reverse_proxy %[3]s
	}
}`, port, app.URL, app.Addr())
	c := testkit.StartCaddy(t, "", sites+consoleProxySite(proxyPort, 0))
	if err := c.Reload(sites + consoleProxySite(proxyPort, c.AdminPort)); err != nil {
		t.Fatal(err)
	}
	site := testkit.SiteURL(port)
	sign := func(body string) string {
		m := hmac.New(sha256.New, []byte("charts-secret"))
		m.Write([]byte(body))
		return hex.EncodeToString(m.Sum(nil))
	}
	// signed: 3 new, 2 replayed, 1 invalid signature, 1 failed (too large)
	for _, key := range []string{"c1", "c2", "c3", "c1", "c2"} {
		body := `{"id":"` + key + `"}`
		if resp, b := testkit.PostAfterReload(t, site+"/signed", []byte(body), "X-Sig", sign(body), "Idempotency-Key", key); resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %s %s", key, resp.Status, b)
		}
	}
	if resp, _ := testkit.Post(t, site+"/signed", []byte(`{"id":"forged"}`), "X-Sig", "00", "Idempotency-Key", "forged"); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("forged: %s", resp.Status)
	}
	big := `{"pad":"` + strings.Repeat("x", 2048) + `"}`
	if resp, _ := testkit.Post(t, site+"/signed", []byte(big), "X-Sig", sign(big), "Idempotency-Key", "big"); resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("too large: %s", resp.Status)
	}
	// plain: 2 new
	for _, key := range []string{"p1", "p2"} {
		testkit.Post(t, site+"/plain", []byte(`{"id":"`+key+`"}`), "Idempotency-Key", key)
	}

	ctx := newBrowser(t)
	// every Content-Security-Policy violation of the page is recorded
	if _, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{
		Source: `window.cspViolations = [];
document.addEventListener('securitypolicyviolation', (e) => window.cspViolations.push(e.violatedDirective + ' ' + e.blockedURI));`,
	}); err != nil {
		t.Fatalf("watching for CSP violations: %v", err)
	}
	browse(t, ctx, "open the console",
		chromedp.Navigate(fmt.Sprintf("http://127.0.0.1:%d/webhook_idempotency/console", proxyPort)),
		chromedp.WaitVisible(`#charts figure.chart[data-source="charts_signed"] svg`),
		chromedp.WaitVisible(`#charts figure.chart[data-source="charts_plain"] svg`),
	)
	for _, tc := range []struct {
		source string
		want   string // new replayed invalid failed
	}{{"charts_signed", "3 2 1 1"}, {"charts_plain", "2 0 0 0"}} {
		got := browserValue(t, ctx, tc.source+" totals", chromedp.Evaluate[string](fmt.Sprintf(`(() => {
			const d = document.querySelector('figure.chart[data-source=%q]').dataset;
			return [d.new, d.replayed, d.invalid, d.failed].join(' ');
		})()`, tc.source)))
		if got != tc.want {
			t.Errorf("%s chart: new replayed invalid failed %q, want %q", tc.source, got, tc.want)
		}
	}
	bars := browserValue(t, ctx, "bars", chromedp.Evaluate[string](`(() => {
		const f = document.querySelector('figure.chart[data-source="charts_signed"]');
		return ['new', 'replayed', 'invalid', 'failed'].map(k => f.querySelectorAll('rect.bar-' + k).length > 0).join(' ') +
			' ' + f.querySelector('svg').getAttribute('viewBox') + ' ' + f.querySelector('ul.legend').textContent;
	})()`))
	if !strings.HasPrefix(bars, "true true true true 0 0 360 72 ") || !strings.Contains(bars, "new 3") || !strings.Contains(bars, "invalid signature 1") {
		t.Errorf("the signed source's chart: %q", bars)
	}
	// the bars are drawn in the charts' colours, from the stylesheet
	if fill := browserValue(t, ctx, "bar colour", chromedp.Evaluate[string](`getComputedStyle(document.querySelector('figure.chart rect.bar-new')).fill`)); fill != "rgb(18, 183, 106)" {
		t.Errorf("a new bar is filled %q", fill)
	}
	hint := browserValue(t, ctx, "hint", chromedp.Text(`#sources + p.hint`))
	if !strings.Contains(hint, "Click a source") {
		t.Errorf("the page does not say a source can be clicked: %q", hint)
	}

	// a replayed event has no body archived: no Redeliver; a new one has
	browse(t, ctx, "open the signed source",
		chromedp.Click(`#sources tbody tr[data-source="charts_signed"]`),
		chromedp.WaitVisible(`#events tbody tr[data-id]`),
	)
	for _, tc := range []struct {
		result string
		hidden bool
	}{{"replayed", true}, {"new", false}} {
		browse(t, ctx, "open a "+tc.result+" event",
			chromedp.Click(fmt.Sprintf(`#events tbody tr:has(td.result-%s)`, tc.result)),
			chromedp.WaitVisible(`#event-detail`),
		)
		browserValue(t, ctx, tc.result+" event shown", chromedp.Poll[bool](fmt.Sprintf(`(() => {
			const meta = document.querySelector('#event-meta').textContent;
			return meta.includes('result%s') && document.querySelector('#event-redeliver').hidden === %v;
		})()`, tc.result, tc.hidden), chromedp.WithPollingTimeout(10*time.Second)))
	}
	if txt := browserValue(t, ctx, "events hint", chromedp.Text(`#archive-panel p.hint`)); !strings.Contains(txt, "Click an event") {
		t.Errorf("the archive does not say an event can be clicked: %q", txt)
	}
	if v := browserValue(t, ctx, "CSP violations", chromedp.Evaluate[string](`window.cspViolations.join('; ')`)); v != "" {
		t.Errorf("Content-Security-Policy violations: %s", v)
	}
}
