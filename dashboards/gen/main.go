// Command gen drives webhook traffic at the demo Caddy (Caddyfile.example),
// scrapes Caddy's /metrics while it does, and draws the panels of
// dashboards/webhook-idempotency.json from the scraped samples as a static
// HTML page with inline SVG (no scripts, no network).
//
// It only talks to loopback addresses.
//
//	go run ./dashboards/gen -duration 75s -html dashboards/out/index.html
//	go run ./dashboards/gen -from dashboards/out/scrapes.json -html dashboards/out/index.html
//
// Standard library only.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"html"
	"io"
	"log"
	"math"
	"math/rand"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const prefix = "caddy_webhook_idempotency_"

// Scrape is one scrape of /metrics: the webhook_idempotency samples only.
type Scrape struct {
	T       float64            `json:"t"` // seconds since the first scrape
	Unix    int64              `json:"unix"`
	Samples map[string]float64 `json:"samples"` // series (name{labels}) -> value
}

// Run is what gets saved to -raw and read back with -from.
type Run struct {
	Started  time.Time      `json:"started"`
	Duration float64        `json:"duration_seconds"`
	Window   float64        `json:"rate_window_seconds"`
	Sent     map[string]int `json:"sent"` // what the driver sent, by kind
	Scrapes  []Scrape       `json:"scrapes"`
	Statuses map[int]int    `json:"statuses"`
}

func main() {
	var (
		target   = flag.String("target", "http://localhost:8080", "the demo site (Caddyfile.example :8080)")
		metrics  = flag.String("metrics", "http://localhost:2019/metrics", "Caddy's admin /metrics")
		duration = flag.Duration("duration", 75*time.Second, "how long to drive traffic")
		interval = flag.Duration("interval", 3*time.Second, "scrape interval")
		window   = flag.Duration("window", 30*time.Second, "rate() window used for the charts")
		maxBody  = flag.Int64("max-body", 5<<20, "the handler's max_body (the demo uses the default, 5 MiB)")
		rawOut   = flag.String("raw", "", "write the scraped samples here (JSON)")
		from     = flag.String("from", "", "draw from a saved -raw file instead of driving traffic")
		htmlOut  = flag.String("html", "dashboards/out/index.html", "write the page here")
		seed     = flag.Int64("seed", 1, "random seed for the traffic mix")
	)
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("gen: ")

	var run Run
	if *from != "" {
		b, err := os.ReadFile(*from)
		if err != nil {
			log.Fatal(err)
		}
		if err := json.Unmarshal(b, &run); err != nil {
			log.Fatal(err)
		}
		flag.Visit(func(f *flag.Flag) {
			if f.Name == "window" {
				run.Window = window.Seconds()
			}
		})
	} else {
		for _, u := range []string{*target, *metrics} {
			if err := mustLoopback(u); err != nil {
				log.Fatal(err)
			}
		}
		if *duration <= 0 || *duration > 15*time.Minute {
			log.Fatal("-duration must be in (0, 15m]")
		}
		if *interval < 500*time.Millisecond {
			log.Fatal("-interval must be at least 500ms")
		}
		run = drive(*target, *metrics, *duration, *interval, *maxBody, *seed)
		run.Window = window.Seconds()
		if *rawOut != "" {
			b, _ := json.MarshalIndent(run, "", " ")
			if err := writeFile(*rawOut, b); err != nil {
				log.Fatal(err)
			}
		}
	}
	if len(run.Scrapes) < 2 {
		log.Fatal("fewer than two scrapes; nothing to draw")
	}
	page := render(run)
	if err := writeFile(*htmlOut, []byte(page)); err != nil {
		log.Fatal(err)
	}
	log.Printf("wrote %s (%d scrapes over %.0fs)", *htmlOut, len(run.Scrapes), run.Scrapes[len(run.Scrapes)-1].T)
}

func writeFile(name string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return err
	}
	return os.WriteFile(name, b, 0o644)
}

// mustLoopback refuses any URL whose host is not a loopback address.
func mustLoopback(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	host := u.Hostname()
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%s: only loopback hosts are allowed", raw)
}

// ---------------------------------------------------------------- traffic

type driver struct {
	client   *http.Client
	target   string
	mu       sync.Mutex
	sent     map[string]int
	statuses map[int]int
	wg       sync.WaitGroup
	inflight atomic.Int64
}

func (d *driver) post(kind, path, key string, body []byte) {
	d.do(kind, http.MethodPost, path, key, body)
}

func (d *driver) do(kind, method, path, key string, body []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, d.target+path, bytes.NewReader(body))
	if err != nil {
		return
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	status := 0
	resp, err := d.client.Do(req)
	if err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		status = resp.StatusCode
	}
	d.mu.Lock()
	d.sent[kind]++
	d.statuses[status]++
	d.mu.Unlock()
}

// async runs f in a goroutine, unless too many are already running.
func (d *driver) async(f func()) {
	if d.inflight.Load() > 64 {
		return
	}
	d.inflight.Add(1)
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		defer d.inflight.Add(-1)
		f()
	}()
}

// drive sends a mix of deliveries for the given duration while scraping.
//
// Each tick (100ms) it sends new deliveries at a rate that ramps up, peaks
// and falls back; a share of them is redelivered a little later (replays);
// every few seconds a burst of identical concurrent deliveries races for the
// same key (conflicts on the events endpoint, which uses in_flight conflict);
// a few bodies exceed max_body (too_large); a few GETs are not deduplicated
// (skipped).
func drive(target, metricsURL string, duration, interval time.Duration, maxBody, seed int64) Run {
	d := &driver{
		client: &http.Client{Transport: &http.Transport{
			MaxIdleConnsPerHost: 64,
			Proxy:               nil,
		}, Timeout: 15 * time.Second},
		target:   strings.TrimRight(target, "/"),
		sent:     map[string]int{},
		statuses: map[int]int{},
	}
	rng := rand.New(rand.NewSource(seed))
	run := Run{Started: time.Now().UTC()}

	// scraper
	stop := make(chan struct{})
	scraped := make(chan []Scrape)
	go func() {
		var out []Scrape
		t0 := time.Now()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		take := func() {
			s, err := scrape(d.client, metricsURL)
			if err != nil {
				log.Printf("scrape: %v", err)
				return
			}
			out = append(out, Scrape{T: time.Since(t0).Seconds(), Unix: time.Now().Unix(), Samples: s})
		}
		take()
		for {
			select {
			case <-tick.C:
				take()
			case <-stop:
				take()
				scraped <- out
				return
			}
		}
	}()

	type pending struct {
		at   time.Time
		path string
		key  string
		body []byte
	}
	var redeliver []pending
	seq := 0
	start := time.Now()
	end := start.Add(duration)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	nextBurst := start.Add(4 * time.Second)
	nextLarge := start.Add(7 * time.Second)
	nextGet := start.Add(2 * time.Second)
	large := bytes.Repeat([]byte("x"), int(maxBody)+1024)

	for now := range tick.C {
		if now.After(end) {
			break
		}
		frac := now.Sub(start).Seconds() / duration.Seconds()
		// new deliveries per second: 6 → 30 → 10, with a little noise
		perSec := 6 + 24*math.Sin(math.Pi*math.Min(frac*1.3, 1))
		if frac > 0.77 {
			perSec = 10
		}
		n := poisson(rng, perSec/10)
		for i := 0; i < n; i++ {
			seq++
			id := fmt.Sprintf("evt_%d_%06d", seed, seq)
			path, key := "/webhooks/demo", id
			if rng.Intn(3) == 0 {
				path, key = "/webhooks/events", ""
			}
			body := []byte(fmt.Sprintf(`{"id":%q,"type":"invoice.paid","amount":%d}`, id, 100+rng.Intn(9900)))
			d.async(func() { d.post("new", path, key, body) })
			// providers retry: later in the run, more deliveries are redelivered
			redeliveries := 0
			if rng.Float64() < 0.25+0.35*frac {
				redeliveries = 1 + rng.Intn(2)
			}
			for r := 0; r < redeliveries; r++ {
				redeliver = append(redeliver, pending{
					at: now.Add(time.Duration(500+rng.Intn(6000)) * time.Millisecond), path: path, key: key, body: body,
				})
			}
		}
		// due redeliveries
		kept := redeliver[:0]
		for _, p := range redeliver {
			if now.After(p.at) {
				d.async(func() { d.post("duplicate", p.path, p.key, p.body) })
			} else {
				kept = append(kept, p)
			}
		}
		redeliver = kept
		// a burst of identical concurrent deliveries racing for one key
		if now.After(nextBurst) {
			nextBurst = now.Add(time.Duration(3000+rng.Intn(3000)) * time.Millisecond)
			seq++
			id := fmt.Sprintf("evt_%d_%06d", seed, seq)
			body := []byte(fmt.Sprintf(`{"id":%q,"type":"charge.succeeded"}`, id))
			var gate sync.WaitGroup
			gate.Add(1)
			for i := 0; i < 8; i++ {
				d.async(func() { gate.Wait(); d.post("concurrent", "/webhooks/events", "", body) })
			}
			gate.Done()
		}
		// an oversized body
		if now.After(nextLarge) {
			nextLarge = now.Add(time.Duration(8000+rng.Intn(6000)) * time.Millisecond)
			seq++
			key := fmt.Sprintf("big_%d_%06d", seed, seq)
			d.async(func() { d.post("oversized", "/webhooks/demo", key, large) })
		}
		// a GET, which the handler does not deduplicate
		if now.After(nextGet) {
			nextGet = now.Add(time.Duration(2000+rng.Intn(4000)) * time.Millisecond)
			d.async(func() { d.do("get", http.MethodGet, "/webhooks/demo", "", nil) })
		}
	}
	d.wg.Wait()
	// let the rates settle into the last scrape
	time.Sleep(interval)
	close(stop)
	run.Scrapes = <-scraped
	run.Duration = time.Since(start).Seconds()
	run.Sent = d.sent
	run.Statuses = d.statuses
	log.Printf("sent %v; statuses %v", d.sent, d.statuses)
	return run
}

func poisson(rng *rand.Rand, lambda float64) int {
	l, k, p := math.Exp(-lambda), 0, 1.0
	for {
		p *= rng.Float64()
		if p <= l {
			return k
		}
		k++
	}
}

// scrape fetches /metrics and keeps the webhook_idempotency samples.
func scrape(c *http.Client, u string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", u, resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	if len(out) == 0 {
		return nil, errors.New("no " + prefix + "* series in /metrics")
	}
	return out, sc.Err()
}

// ---------------------------------------------------------------- series

// series is one parsed sample key.
type series struct {
	name   string
	labels map[string]string
}

func parseSeries(s string) series {
	i := strings.IndexByte(s, '{')
	if i < 0 {
		return series{name: s, labels: map[string]string{}}
	}
	out := series{name: s[:i], labels: map[string]string{}}
	rest := strings.TrimSuffix(s[i+1:], "}")
	for rest != "" {
		eq := strings.IndexByte(rest, '=')
		if eq < 0 {
			break
		}
		k := rest[:eq]
		rest = rest[eq+1:]
		v, err := strconv.QuotedPrefix(rest)
		if err != nil {
			break
		}
		rest = strings.TrimPrefix(rest[len(v):], ",")
		out.labels[k], _ = strconv.Unquote(v)
	}
	return out
}

// sum adds up the samples of name whose labels match every filter (a filter
// value of "" matches anything) and groups them by the label by ("" = one group).
func sum(s Scrape, name string, filter map[string]string, by string) map[string]float64 {
	out := map[string]float64{}
	for k, v := range s.Samples {
		p := parseSeries(k)
		if p.name != name {
			continue
		}
		ok := true
		for fk, fv := range filter {
			if fv != "" && p.labels[fk] != fv {
				ok = false
				break
			}
		}
		if ok {
			out[p.labels[by]] += v
		}
	}
	return out
}

// at returns the index of the last scrape at or before t.
func at(run Run, t float64) int {
	j := 0
	for i, s := range run.Scrapes {
		if s.T <= t+1e-9 {
			j = i
		}
	}
	return j
}

// windowStart returns the index of the scrape a rate at scrape i starts
// from: the last one a window or more before it (the first scrape while
// less than a window has passed), or the one just before i when the
// window is shorter than the scrape interval.
func windowStart(run Run, i int) int {
	j := at(run, run.Scrapes[i].T-run.Window)
	if j == i {
		j = i - 1
	}
	return j
}

// Point is one chart point; NaN values are gaps.
type Point struct{ T, V float64 }

// rateBy is rate(name[window]) summed by a label, at every scrape once a
// full window (or, before that, at least two scrapes) is available.
func rateBy(run Run, name string, filter map[string]string, by string) map[string][]Point {
	out := map[string][]Point{}
	for i := 1; i < len(run.Scrapes); i++ {
		s, start := run.Scrapes[i], run.Scrapes[windowStart(run, i)]
		dt := s.T - start.T
		cur, prev := sum(s, name, filter, by), sum(start, name, filter, by)
		for k, v := range cur {
			d := v - prev[k]
			if d < 0 { // counter reset
				d = v
			}
			out[k] = append(out[k], Point{s.T, d / dt})
		}
	}
	return out
}

// quantile follows Prometheus' histogram_quantile over the windowed
// increase of the buckets of one op.
func quantiles(run Run, op string, qs []float64) [][]Point {
	out := make([][]Point, len(qs))
	name := prefix + "store_duration_seconds_bucket"
	for i := 1; i < len(run.Scrapes); i++ {
		s, start := run.Scrapes[i], run.Scrapes[windowStart(run, i)]
		cur := sum(s, name, map[string]string{"op": op}, "le")
		prev := sum(start, name, map[string]string{"op": op}, "le")
		type bucket struct{ le, n float64 }
		var bs []bucket
		for le, v := range cur {
			f, err := strconv.ParseFloat(le, 64)
			if le == "+Inf" {
				f, err = math.Inf(1), nil
			}
			if err != nil {
				continue
			}
			bs = append(bs, bucket{f, v - prev[le]})
		}
		sort.Slice(bs, func(a, b int) bool { return bs[a].le < bs[b].le })
		for qi, q := range qs {
			v := math.NaN()
			if len(bs) > 1 && bs[len(bs)-1].n > 0 {
				total := bs[len(bs)-1].n
				rank := q * total
				k := sort.Search(len(bs), func(x int) bool { return bs[x].n >= rank })
				switch {
				case k == len(bs)-1:
					v = bs[len(bs)-2].le
				default:
					lo, below := 0.0, 0.0
					if k > 0 {
						lo, below = bs[k-1].le, bs[k-1].n
					}
					inBucket := bs[k].n - below
					if inBucket > 0 {
						v = lo + (bs[k].le-lo)*((rank-below)/inBucket)
					} else {
						v = bs[k].le
					}
				}
			}
			out[qi] = append(out[qi], Point{s.T, v})
		}
	}
	return out
}

// ---------------------------------------------------------------- drawing

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
