package main

import (
	"fmt"
	"html"
	"math"
	"strconv"
	"strings"
)

var palette = map[string]string{
	"new": "#73bf69", "replayed": "#5794f2", "conflict": "#ff9830", "mismatch": "#b877d9",
	"invalid_signature": "#f2495c", "too_large": "#fade2a", "bypassed": "#8ab8ff",
	"unavailable": "#c4162a", "skipped": "#9fa7b3",
	"claim": "#5794f2", "complete": "#73bf69", "release": "#ff9830", "renew": "#b877d9", "replay": "#fade2a",
}

var resultOrder = []string{"new", "replayed", "conflict", "mismatch", "invalid_signature", "too_large", "bypassed", "unavailable", "skipped"}
var opOrder = []string{"claim", "complete", "release", "renew", "replay"}

type line struct {
	label string
	color string
	pts   []Point
	dash  string
}

type chart struct {
	title, unit, query string
	lines              []line
	stacked            bool
	yMax               float64 // 0 = auto
	note               string
	fmtY               func(float64) string
}

const (
	pw, ph           = 446, 372 // panel size
	padL, padR       = 58, 12
	padT, padB       = 44, 88
	bg, panelBg      = "#111217", "#181b1f"
	textC, mutedC    = "#ccccdc", "#8e8e99"
	gridC, borderC   = "#2c3235", "#2c3235"
	fontStack        = "Inter, 'DejaVu Sans', Helvetica, Arial, sans-serif"
	legendRowHeight  = 16
	legendItemSpaceX = 10
)

// niceMax returns a maximum that splits into four round steps.
func niceMax(v float64) float64 {
	if v <= 0 || math.IsNaN(v) {
		return 1
	}
	raw := v * 1.05 / 4
	exp := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 1.5, 2, 2.5, 3, 4, 5, 7.5, 10} {
		if m*exp >= raw {
			return 4 * m * exp
		}
	}
	return 40 * exp
}

func esc(s string) string { return html.EscapeString(s) }

func (c chart) svg(tMax float64) string {
	var b strings.Builder
	x0, y0 := float64(padL), float64(padT)
	w, h := float64(pw-padL-padR), float64(ph-padT-padB)
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="%s">`, pw, ph, fontStack)
	fmt.Fprintf(&b, `<rect x="0.5" y="0.5" width="%d" height="%d" rx="3" fill="%s" stroke="%s"/>`, pw-1, ph-1, panelBg, borderC)
	fmt.Fprintf(&b, `<text x="10" y="20" fill="%s" font-size="14" font-weight="600">%s</text>`, textC, esc(c.title))
	fmt.Fprintf(&b, `<text x="10" y="35" fill="%s" font-size="10" font-family="DejaVu Sans Mono, monospace">%s</text>`, mutedC, esc(c.query))

	// stack
	lines := c.lines
	if c.stacked {
		acc := map[float64]float64{}
		st := make([]line, len(lines))
		for i, l := range lines {
			nl := l
			nl.pts = make([]Point, len(l.pts))
			for k, p := range l.pts {
				v := p.V
				if math.IsNaN(v) {
					v = 0
				}
				acc[p.T] += v
				nl.pts[k] = Point{p.T, acc[p.T]}
			}
			st[i] = nl
		}
		lines = st
	}
	maxV := 0.0
	for _, l := range lines {
		for _, p := range l.pts {
			if !math.IsNaN(p.V) && p.V > maxV {
				maxV = p.V
			}
		}
	}
	yMax := c.yMax
	if yMax == 0 {
		yMax = niceMax(maxV)
	}
	X := func(t float64) float64 { return x0 + w*t/tMax }
	Y := func(v float64) float64 { return y0 + h - h*v/yMax }

	// grid + y labels
	for i := 0; i <= 4; i++ {
		v := yMax * float64(i) / 4
		y := Y(v)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1"/>`, x0, y, x0+w, y, gridC)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" fill="%s" font-size="10" text-anchor="end">%s</text>`, x0-6, y+3, mutedC, esc(c.fmtY(v)))
	}
	// x labels: seconds into the run
	step := 15.0
	if tMax > 150 {
		step = 30
	}
	for t := 0.0; t <= tMax+1e-9; t += step {
		x := X(t)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1"/>`, x, y0, x, y0+h, gridC)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" fill="%s" font-size="10" text-anchor="middle">%.0fs</text>`, x, y0+h+14, mutedC, t)
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" fill="%s" font-size="10" text-anchor="end">time since first scrape</text>`, x0+w, y0+h+27, mutedC)
	fmt.Fprintf(&b, `<text transform="translate(12 %.1f) rotate(-90)" fill="%s" font-size="10" text-anchor="middle">%s</text>`, y0+h/2, mutedC, esc(c.unit))

	// areas (stacked), back to front
	if c.stacked {
		for i := len(lines) - 1; i >= 0; i-- {
			l := lines[i]
			if len(l.pts) == 0 {
				continue
			}
			var pb strings.Builder
			fmt.Fprintf(&pb, "M%.1f,%.1f", X(l.pts[0].T), Y(0))
			for _, p := range l.pts {
				fmt.Fprintf(&pb, " L%.1f,%.1f", X(p.T), Y(p.V))
			}
			fmt.Fprintf(&pb, " L%.1f,%.1f Z", X(l.pts[len(l.pts)-1].T), Y(0))
			fmt.Fprintf(&b, `<path d="%s" fill="%s" fill-opacity="0.35" stroke="none"/>`, pb.String(), l.color)
		}
	}
	// lines, with gaps at NaN
	for _, l := range lines {
		var pb strings.Builder
		pen := false
		for _, p := range l.pts {
			if math.IsNaN(p.V) {
				pen = false
				continue
			}
			cmd := "L"
			if !pen {
				cmd = "M"
			}
			fmt.Fprintf(&pb, "%s%.1f,%.1f ", cmd, X(p.T), Y(math.Min(p.V, yMax)))
			pen = true
		}
		dash := ""
		if l.dash != "" {
			dash = fmt.Sprintf(` stroke-dasharray="%s"`, l.dash)
		}
		fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.8"%s stroke-linejoin="round"/>`, pb.String(), l.color, dash)
	}
	// legend
	lx, ly := x0, y0+h+44
	for _, l := range c.lines {
		label := l.label
		tw := float64(len(label))*6.2 + 18
		if lx+tw > float64(pw-padR) {
			lx = x0
			ly += legendRowHeight
		}
		if l.dash != "" {
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2" stroke-dasharray="%s"/>`, lx, ly-4, lx+12, ly-4, l.color, l.dash)
		} else {
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="12" height="4" fill="%s"/>`, lx, ly-6, l.color)
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" fill="%s" font-size="11">%s</text>`, lx+16, ly-1, textC, esc(label))
		lx += tw + legendItemSpaceX
	}
	if c.note != "" {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" fill="%s" font-size="12" text-anchor="middle">%s</text>`, x0+w/2, y0+h/2, mutedC, esc(c.note))
	}
	b.WriteString(`</svg>`)
	return b.String()
}

func fmtRate(v float64) string {
	if v == 0 {
		return "0"
	}
	return strconv.FormatFloat(math.Round(v*1000)/1000, 'f', -1, 64)
}

func fmtPct(v float64) string { return strconv.FormatFloat(v*100, 'f', 0, 64) + "%" }

func fmtDur(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v < 1e-3:
		return strconv.FormatFloat(v*1e6, 'f', 0, 64) + "µs"
	case v < 1:
		return strconv.FormatFloat(v*1e3, 'f', 1, 64) + "ms"
	}
	return strconv.FormatFloat(v, 'f', 2, 64) + "s"
}

func allZero(ls []line) bool {
	for _, l := range ls {
		for _, p := range l.pts {
			if !math.IsNaN(p.V) && p.V != 0 {
				return false
			}
		}
	}
	return true
}
