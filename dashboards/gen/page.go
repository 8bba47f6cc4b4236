package main

import (
	"fmt"
	"math"
	"strings"
)

func render(run Run) string {
	last := run.Scrapes[len(run.Scrapes)-1]
	tMax := math.Ceil(last.T/5) * 5
	win := fmt.Sprintf("%.0fs", run.Window)

	// 1. request rate by result
	byResult := rateBy(run, prefix+"requests_total", nil, "result")
	c1 := chart{title: "Request rate by result", unit: "requests / s", stacked: true, fmtY: fmtRate,
		query: "sum by (result) (rate(caddy_webhook_idempotency_requests_total[" + win + "]))"}
	for _, r := range resultOrder {
		if pts, ok := byResult[r]; ok && !allZero([]line{{pts: pts}}) {
			c1.lines = append(c1.lines, line{label: r, color: palette[r], pts: pts})
		}
	}

	// 2. replay ratio
	var ratio []Point
	for i := range byResult["new"] {
		n, r := byResult["new"][i], byResult["replayed"][i]
		v := math.NaN()
		if n.V+r.V > 0 {
			v = r.V / (n.V + r.V)
		}
		ratio = append(ratio, Point{n.T, v})
	}
	c2 := chart{title: "Replay ratio", unit: "replayed / (new + replayed)", yMax: 1, fmtY: fmtPct,
		query: `replayed / (new + replayed), each sum(rate(…requests_total[` + win + `]))`,
		lines: []line{{label: "replay ratio", color: palette["replayed"], pts: ratio}}}

	// 3. rejections
	c3 := chart{title: "Conflicts, invalid signatures, too large", unit: "requests / s", fmtY: fmtRate,
		query: `sum by (result) (rate(…{result=~"conflict|invalid_sig…|too_large"}[` + win + `]))`}
	for _, r := range []string{"conflict", "invalid_signature", "too_large"} {
		c3.lines = append(c3.lines, line{label: r, color: palette[r], pts: byResult[r]})
	}

	// 4. store errors
	errs := rateBy(run, prefix+"store_errors_total", nil, "op")
	c4 := chart{title: "Store errors by op", unit: "errors / s", fmtY: fmtRate,
		query: "sum by (op) (rate(caddy_webhook_idempotency_store_errors_total[" + win + "]))"}
	for _, op := range opOrder {
		c4.lines = append(c4.lines, line{label: op, color: palette[op], pts: errs[op]})
	}
	if allZero(c4.lines) {
		c4.note = "no store errors during the run (0 for every op)"
	}

	// 5. store latency
	c5 := chart{title: "Store latency p50 / p95 / p99 (and mean) by op", unit: "seconds", fmtY: fmtDur,
		query: "histogram_quantile(q, sum by (le, op) (rate(…_bucket[" + win + "])))"}
	counts := sum(last, prefix+"store_duration_seconds_count", nil, "op")
	qs := []float64{0.5, 0.95, 0.99}
	dashes := []string{"", "6 3", "2 3"}
	for _, op := range opOrder {
		if counts[op] == 0 {
			continue
		}
		qp := quantiles(run, op, qs)
		for qi, q := range qs {
			c5.lines = append(c5.lines, line{label: fmt.Sprintf("%s p%.0f", op, q*100), color: palette[op], pts: qp[qi], dash: dashes[qi]})
		}
		// mean = rate(_sum) / rate(_count)
		sums := rateBy(run, prefix+"store_duration_seconds_sum", map[string]string{"op": op}, "op")[op]
		cnts := rateBy(run, prefix+"store_duration_seconds_count", map[string]string{"op": op}, "op")[op]
		var mean []Point
		for i := range sums {
			v := math.NaN()
			if i < len(cnts) && cnts[i].V > 0 {
				v = sums[i].V / cnts[i].V
			}
			mean = append(mean, Point{sums[i].T, v})
		}
		c5.lines = append(c5.lines, line{label: op + " mean", color: palette[op], pts: mean, dash: "1 4 6 4"})
	}

	// 6. stat
	totals := sum(last, prefix+"requests_total", nil, "result")
	first := sum(run.Scrapes[0], prefix+"requests_total", nil, "result")
	total := 0.0
	for r, v := range totals {
		totals[r] = v - first[r]
		total += totals[r]
	}

	var sb strings.Builder
	fmt.Fprintf(&sb, `<!doctype html><html><head><meta charset="utf-8"><title>webhook_idempotency metrics</title><style>
body{margin:0;background:%s;color:%s;font-family:%s}
.top{display:flex;align-items:baseline;gap:16px;padding:12px 16px 6px}
h1{font-size:18px;margin:0;font-weight:600}
.cap{color:%s;font-size:12px;padding:0 16px 10px;line-height:1.45}
.grid{display:grid;grid-template-columns:repeat(3,%dpx);gap:8px;padding:0 16px}
.stat{background:%s;border:1px solid %s;border-radius:3px;height:%dpx;box-sizing:border-box;padding:10px}
.stat h2{font-size:14px;margin:0 0 2px;font-weight:600}
.stat .q{font:10px 'DejaVu Sans Mono',monospace;color:%s}
.big{font-size:64px;font-weight:600;color:#73bf69;margin:26px 0 6px;text-align:center}
.sub{font-size:12px;color:%s;text-align:center;line-height:1.7}
.sub b{color:%s;font-weight:600}
</style></head><body>`, bg, textC, fontStack, mutedC, pw, panelBg, borderC, ph, mutedC, mutedC, textC)
	fmt.Fprintf(&sb, `<div class="top"><h1>Webhook idempotency</h1><span class="cap" style="padding:0">dashboards/webhook-idempotency.json · source = All</span></div>`)
	fmt.Fprintf(&sb, `<div class="cap">Rendered by <b>dashboards/render.sh</b> from real traffic against the demo (Caddyfile.example, memory store): %d scrapes of Caddy's admin <code>/metrics</code> every %.0fs over %.0fs, started %s. Rates use a %s window here (the dashboard uses 5m). `,
		len(run.Scrapes), run.Scrapes[1].T-run.Scrapes[0].T, last.T, run.Started.Format("2006-01-02 15:04 UTC"), win)
	fmt.Fprintf(&sb, `The demo verifies no signatures, so invalid_signature stays 0; memory-store calls take microseconds, below the smallest bucket (100µs), so p50/p95/p99 are interpolated inside that bucket, as histogram_quantile does (claim and complete overlap); the mean (rate of _sum / rate of _count) shows the actual times.</div>`)
	sb.WriteString(`<div class="grid">`)
	for _, c := range []chart{c1, c2, c3, c4, c5} {
		sb.WriteString("<div>" + c.svg(tMax) + "</div>")
	}
	fmt.Fprintf(&sb, `<div class="stat"><h2>Deliveries processed</h2><div class="q">sum(increase(caddy_webhook_idempotency_requests_total[$__range]))</div><div class="big">%.0f</div><div class="sub">`, total)
	var parts []string
	for _, r := range resultOrder {
		if totals[r] > 0 {
			parts = append(parts, fmt.Sprintf(`%s <b>%.0f</b>`, r, totals[r]))
		}
	}
	sb.WriteString(strings.Join(parts, " · "))
	fmt.Fprintf(&sb, `<br>between the first and the last scrape (%.0fs)`, last.T)
	sb.WriteString(`</div></div></div></body></html>`)
	return sb.String()
}
