package admin

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// chartState is what a chart of the console shows: its data-* attributes
// (its series' totals, its peak), the labels of its y-axis and of its time
// axis, its legend, and how many bars, lines and dots it draws.
type chartState struct {
	Data   map[string]string `json:"data"`
	Ticks  []string          `json:"ticks"`
	Times  []string          `json:"times"`
	Legend string            `json:"legend"`
	Marks  int               `json:"marks"`
}

// chartFigure is the selector of a source's chart.
func chartFigure(source, chart string) string {
	return fmt.Sprintf(`#charts figure.chart[data-source=%q][data-chart=%q]`, source, chart)
}

// readChart reads a source's chart; ok is false when the page has none.
func readChart(t *testing.T, ctx context.Context, source, chart string) (chartState, bool) {
	t.Helper()
	raw := browserValue(t, ctx, source+" "+chart+" chart", chromedp.Evaluate[string](fmt.Sprintf(`(() => {
		const f = document.querySelector(%q);
		if (!f) return '';
		const texts = (cls) => [...f.querySelectorAll('svg text.' + cls)].map((e) => e.textContent);
		return JSON.stringify({ data: { ...f.dataset }, ticks: texts('tick'), times: texts('time'),
			legend: f.querySelector('ul.legend').textContent,
			marks: f.querySelectorAll('svg rect[class^="bar-"], svg path, svg circle').length });
	})()`, chartFigure(source, chart))))
	if raw == "" {
		return chartState{}, false
	}
	var st chartState
	if err := json.Unmarshal([]byte(raw), &st); err != nil {
		t.Fatalf("%s %s chart: %v: %s", source, chart, err, raw)
	}
	return st, true
}

// waitChart waits until a source's chart is drawn with its data-*
// attributes (the figure's dataset, d) meeting cond, a JavaScript
// expression: the charts are redrawn every 10 s, and at once when the
// window changes.
func waitChart(t *testing.T, ctx context.Context, source, chart, cond string) chartState {
	t.Helper()
	js := fmt.Sprintf(`(() => { const f = document.querySelector(%q); if (!f) return false; const d = f.dataset; return %s; })()`, chartFigure(source, chart), cond)
	if _, err := runWithin(ctx, chromedp.Poll[bool](js, chromedp.WithPollingTimeout(18*time.Second))); err != nil {
		st, _ := readChart(t, ctx, source, chart)
		t.Fatalf("%s %s chart: never %s: %v; it shows %+v%s", source, chart, cond, err, st, pageState(ctx))
	}
	st, _ := readChart(t, ctx, source, chart)
	return st
}

// yTop is the highest value of a chart's y-axis; every tick must be a
// number.
func yTop(t *testing.T, what string, st chartState) float64 {
	t.Helper()
	if len(st.Ticks) < 2 {
		t.Fatalf("%s: y-axis ticks %q", what, st.Ticks)
	}
	top := -1.0
	for _, s := range st.Ticks {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			t.Fatalf("%s: y-axis tick %q is no number (ticks %q)", what, s, st.Ticks)
		}
		top = max(top, v)
	}
	return top
}

// number reads a data-* attribute as a number.
func number(t *testing.T, what string, st chartState, attr string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(st.Data[attr], 64)
	if err != nil {
		t.Fatalf("%s: data-%s %q: %v (data %v)", what, attr, st.Data[attr], err, st.Data)
	}
	return v
}

// stackedPeak is the most deliveries of one step of a minutes answer, new,
// replayed, refused and failed together: what the deliveries chart's
// y-axis must reach.
func stackedPeak(m minutesAnswer) int64 {
	var peak int64
	for i := range m.New {
		peak = max(peak, m.New[i]+m.Replayed[i]+m.Refused[i]+m.Failed[i])
	}
	return peak
}

// chartsConsole is a Caddy with two sources, after real deliveries: a
// deduplicating one (3 new, 2 replayed, 2 refused: an invalid signature
// and a body over max_body) and an inbox one (3 accepted, one of which its
// application keeps failing: 6 retries and a dead letter), both on one
// store file; and a Chromium that records the page's Content-Security-
// Policy violations and keeps every request in its resource timings.
type chartsConsole struct {
	caddy   *testkit.Caddy
	sites   string
	console string // the console's URL
	ctx     context.Context
}

func startChartsConsole(t *testing.T) chartsConsole {
	t.Helper()
	app := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, _ int64) {
		if r.Header.Get("Idempotency-Key") == "doomed" {
			w.WriteHeader(http.StatusInternalServerError)
		}
	})
	port, proxyPort := testkit.FreePort(t), testkit.FreePort(t)
	storeFile := filepath.Join(t.TempDir(), "charts.db")
	routes := fmt.Sprintf(`
http://127.0.0.1:%[1]d {
	handle /signed {
		webhook_idempotency {
			source charts_signed
			store file %[4]s
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
	handle /inbox {
		webhook_idempotency {
			source charts_inbox
			store file %[4]s
			inbox {
				deliver_to %[2]s/inbox
				retries 300ms 300ms 300ms 300ms 300ms 300ms
				jitter 0%%
				timeout 5s
			}
		}
	}
}`, port, app.URL, app.Addr(), storeFile)
	c := testkit.StartCaddy(t, "", routes+consoleProxySite(proxyPort, 0))
	sites := routes + consoleProxySite(proxyPort, c.AdminPort)
	if err := c.Reload(sites); err != nil {
		t.Fatal(err)
	}
	site := testkit.SiteURL(port)
	sign := func(body string) string {
		m := hmac.New(sha256.New, []byte("charts-secret"))
		m.Write([]byte(body))
		return hex.EncodeToString(m.Sum(nil))
	}
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
	for _, key := range []string{"ok1", "doomed", "ok2"} {
		if resp, b := testkit.Post(t, site+"/inbox", []byte(`{"id":"`+key+`"}`), "Idempotency-Key", key); resp.StatusCode != http.StatusAccepted {
			t.Fatalf("%s: %s %s", key, resp.Status, b)
		}
	}
	testkit.WaitFor(t, 30*time.Second, "the inbox's deliveries and its dead letter counted", func() (bool, string) {
		m := chartsMinutes(t, c, "charts_inbox", "1h")
		return sumOf(m.InboxDelivered) == 2 && sumOf(m.InboxDeadLettered) == 1 && sumOf(m.InboxRetried) == 6,
			fmt.Sprintf("delivered %v, retried %v, dead-lettered %v", m.InboxDelivered, m.InboxRetried, m.InboxDeadLettered)
	})

	ctx := newBrowser(t)
	if _, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{
		Source: `window.cspViolations = [];
document.addEventListener('securitypolicyviolation', (e) => window.cspViolations.push(e.violatedDirective + ' ' + e.blockedURI));
performance.setResourceTimingBufferSize(100000);`,
	}); err != nil {
		t.Fatalf("watching the page: %v", err)
	}
	return chartsConsole{caddy: c, sites: sites, ctx: ctx,
		console: fmt.Sprintf("http://127.0.0.1:%d/webhook_idempotency/console", proxyPort)}
}

// chartsMinutes reads a source's series from the admin API.
func chartsMinutes(t *testing.T, c *testkit.Caddy, source, window string) minutesAnswer {
	t.Helper()
	var m minutesAnswer
	c.AdminJSON(t, http.MethodGet, "/webhook_idempotency/"+source+"/minutes?window="+window, &m)
	return m
}

// minutesRequested lists the series the page requested (their URLs) since
// it loaded or its resource timings were cleared.
func minutesRequested(t *testing.T, ctx context.Context) string {
	t.Helper()
	return browserValue(t, ctx, "requests", chromedp.Evaluate[string](`performance.getEntriesByType('resource').map((e) => e.name).filter((n) => n.includes('/minutes')).join(' ')`))
}

// TestConsoleCharts: in a real Chromium, from real deliveries through a
// real Caddy (startChartsConsole), the console charts each source's
// persisted series: its deliveries, an inbox's failed attempts counted as
// failed (7, not 0), each chart with a y-axis of numbers reaching its peak
// (as the API counts it) and a time axis for the hour; the handling and
// application time (a p99 above 0 ms); the inbox source's backlog and
// delivery lag, which the other source has no chart of. After Caddy
// restarts on the same store file the charts still show every count.
// Nothing is refused by the page's Content-Security-Policy; a replayed
// event, whose body is not archived, offers no Redeliver, a new one does.
func TestConsoleCharts(t *testing.T) {
	cc := startChartsConsole(t)
	c, ctx := cc.caddy, cc.ctx
	browse(t, ctx, "open the console", chromedp.Navigate(cc.console))

	// the deliveries, the inbox's failed attempts in failed
	deliveries := map[string]chartState{
		"charts_signed": waitChart(t, ctx, "charts_signed", "deliveries", `[d.new, d.replayed, d.refused, d.failed].join(' ') === '3 2 2 0'`),
		"charts_inbox":  waitChart(t, ctx, "charts_inbox", "deliveries", `[d.new, d.replayed, d.refused, d.failed].join(' ') === '3 0 0 7'`),
	}
	if in := deliveries["charts_inbox"]; in.Data["inboxRetried"] != "6" || in.Data["inboxDeadLettered"] != "1" || !strings.Contains(in.Legend, "failed 7") {
		t.Errorf("the inbox source's failed deliveries: data %v, legend %q", in.Data, in.Legend)
	}
	if l := deliveries["charts_signed"].Legend; !strings.Contains(l, "new 3") || !strings.Contains(l, "refused 2") {
		t.Errorf("the signed source's legend: %q", l)
	}
	// the y-axis is numbers reaching the busiest step's deliveries, as the
	// API counts them; the time axis spans the hour
	for source, st := range deliveries {
		peak := stackedPeak(chartsMinutes(t, c, source, "1h"))
		if top := yTop(t, source+" deliveries", st); top < float64(peak) || number(t, source, st, "peak") != float64(peak) || st.Marks == 0 {
			t.Errorf("%s deliveries: y-axis %q for a peak of %d (data-peak %s), %d bars", source, st.Ticks, peak, st.Data["peak"], st.Marks)
		}
		if len(st.Times) < 2 || st.Times[0] != "−60 min" || st.Times[len(st.Times)-1] != "now" {
			t.Errorf("%s deliveries: time axis %q", source, st.Times)
		}
	}
	// the bars are drawn in the charts' colours, from the stylesheet
	if fill := browserValue(t, ctx, "bar colour", chromedp.Evaluate[string](`getComputedStyle(document.querySelector('figure.chart rect.bar-new')).fill`)); fill != "rgb(18, 183, 106)" {
		t.Errorf("a new bar is filled %q", fill)
	}

	// handling and application time: a p99 above 0 ms, drawn
	for _, source := range []string{"charts_signed", "charts_inbox"} {
		st := waitChart(t, ctx, source, "latency", `+d.handlingP99 > 0 && +d.appP99 > 0`)
		if top := yTop(t, source+" latency", st); top < number(t, source, st, "handlingP99") || st.Marks == 0 {
			t.Errorf("%s latency: y-axis %q for handling p99 %s, %d lines", source, st.Ticks, st.Data["handlingP99"], st.Marks)
		}
	}

	// the inbox's backlog and delivery lag, for the inbox source only
	backlog := waitChart(t, ctx, "charts_inbox", "backlog", `+d.backlog >= 1`)
	lag := waitChart(t, ctx, "charts_inbox", "lag", `+d.lagP99 > 0`)
	if yTop(t, "backlog", backlog) < number(t, "backlog", backlog, "backlog") || yTop(t, "lag", lag) < number(t, "lag", lag, "lagP99") {
		t.Errorf("the inbox charts' y-axes: backlog %q for %s, lag %q for %s", backlog.Ticks, backlog.Data["backlog"], lag.Ticks, lag.Data["lagP99"])
	}
	for _, chart := range []string{"backlog", "lag"} {
		if _, ok := readChart(t, ctx, "charts_signed", chart); ok {
			t.Errorf("a %s chart for a source without an inbox", chart)
		}
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

	// Caddy restarts on the same store file: the counts are still charted
	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := caddy.Load(c.Adapt(cc.sites), true); err != nil {
		t.Fatalf("starting again: %v", err)
	}
	browse(t, ctx, "open the console again", chromedp.Navigate(cc.console))
	waitChart(t, ctx, "charts_signed", "deliveries", `[d.new, d.replayed, d.refused, d.failed].join(' ') === '3 2 2 0'`)
	waitChart(t, ctx, "charts_inbox", "deliveries", `[d.new, d.failed, d.inboxRetried, d.inboxDeadLettered].join(' ') === '3 7 6 1'`)
	waitChart(t, ctx, "charts_inbox", "lag", `+d.lagP99 > 0`)
}

// TestConsoleChartsWindow: in a real Chromium, choosing the last 24 hours
// requests the sources' series over 24 h (window=24h) and redraws the
// charts for it (the same counts, a time axis from −24 h to now); the
// window is kept in the page's URL, so that a reload of that URL opens 24 h
// (and requests nothing else), a source opened keeps it beside its own
// parameters, and the browser's back button goes back to the hour.
func TestConsoleChartsWindow(t *testing.T) {
	cc := startChartsConsole(t)
	ctx := cc.ctx
	browse(t, ctx, "open the console", chromedp.Navigate(cc.console))
	waitChart(t, ctx, "charts_signed", "deliveries", `d.window === '1h' && d.new === '3'`)
	if got := minutesRequested(t, ctx); !strings.Contains(got, "/minutes?window=1h") {
		t.Fatalf("the hour's requests: %s", got)
	}

	browse(t, ctx, "choose 24 h",
		chromedp.Evaluate[chromedp.Void](`(performance.clearResourceTimings(), {})`),
		chromedp.Click(`#chart-window button[data-window="24h"]`),
	)
	day := waitChart(t, ctx, "charts_signed", "deliveries", `d.window === '24h' && [d.new, d.replayed, d.refused, d.failed].join(' ') === '3 2 2 0'`)
	if len(day.Times) < 2 || day.Times[0] != "−24 h" || day.Times[len(day.Times)-1] != "now" {
		t.Errorf("24 h: time axis %q", day.Times)
	}
	waitChart(t, ctx, "charts_inbox", "deliveries", `d.window === '24h' && d.failed === '7'`)
	waitChart(t, ctx, "charts_inbox", "lag", `d.window === '24h' && +d.lagP99 > 0`)
	if got := minutesRequested(t, ctx); !strings.Contains(got, "/minutes?window=24h") {
		t.Errorf("24 h chosen, the page requested %s", got)
	}
	if search := browserValue(t, ctx, "URL", chromedp.Evaluate[string](`location.search`)); search != "?window=24h" {
		t.Errorf("24 h chosen, the page's URL has %q", search)
	}

	// a reload of that URL opens 24 h, and requests nothing else
	browse(t, ctx, "reload", chromedp.Reload())
	waitChart(t, ctx, "charts_signed", "deliveries", `d.window === '24h' && d.new === '3'`)
	if got := minutesRequested(t, ctx); !strings.Contains(got, "window=24h") || strings.Contains(got, "window=1h") {
		t.Errorf("reloaded at ?window=24h, the page requested %s", got)
	}
	if pressed := browserValue(t, ctx, "window button", chromedp.Evaluate[string](`document.querySelector('#chart-window [aria-pressed="true"]').dataset.window`)); pressed != "24h" {
		t.Errorf("reloaded at ?window=24h, the %s button is pressed", pressed)
	}

	// a source opened keeps the window in the URL
	browse(t, ctx, "open the signed source",
		chromedp.Click(`#sources tbody tr[data-source="charts_signed"]`),
		chromedp.WaitVisible(`#events tbody tr[data-id]`),
	)
	if search := browserValue(t, ctx, "URL", chromedp.Evaluate[string](`location.search`)); search != "?source=charts_signed&window=24h" {
		t.Errorf("a source opened at 24 h: the page's URL has %q", search)
	}

	// back to the hour: the first history entry named none
	browse(t, ctx, "back twice",
		chromedp.NavigateBack(),
		chromedp.NavigateBack(),
	)
	waitChart(t, ctx, "charts_signed", "deliveries", `d.window === '1h' && d.new === '3'`)
	if search := browserValue(t, ctx, "URL", chromedp.Evaluate[string](`location.search`)); search != "" {
		t.Errorf("back at the hour, the page's URL has %q", search)
	}
	if v := browserValue(t, ctx, "CSP violations", chromedp.Evaluate[string](`window.cspViolations.join('; ')`)); v != "" {
		t.Errorf("Content-Security-Policy violations: %s", v)
	}
}
