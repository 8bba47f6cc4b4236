package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"math"
	"math/rand"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

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
