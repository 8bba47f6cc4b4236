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
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"net/url"
	"os"
	"path/filepath"
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
