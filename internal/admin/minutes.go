package admin

import (
	"net/http"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/results"
)

// The last hour of each source's results, a minute at a time, for the
// console's charts (docs/admin.md#minutes): drawn from the requests
// counter the module already keeps (caddy_webhook_idempotency_requests_total),
// sampled every few seconds while the admin endpoint runs and whenever
// the route is read, into a small ring per source in this process. The
// ring survives config reloads, as the counters do; a restart empties it.

// minutesKept is how many minutes a source's ring holds.
const minutesKept = 60

// minuteSampleEvery is how often the running configuration's counters
// are read into the rings.
const minuteSampleEvery = 5 * time.Second

// The series of the charts, each a sum of results.
const (
	seriesNew      = iota // new
	seriesReplayed        // replayed
	seriesInvalid         // invalid_signature
	seriesFailed          // answered with an error, or passed on without deduplication
	numSeries
)

// resultSeries maps a result to its series; -1 for the results that are
// no delivery (skipped, handshake). A result not named here (a result
// added later) counts as failed.
func resultSeries(result string) int {
	switch result {
	case results.New:
		return seriesNew
	case results.Replayed:
		return seriesReplayed
	case results.InvalidSignature:
		return seriesInvalid
	case results.Skipped, results.Handshake:
		return -1
	}
	return seriesFailed
}

// minuteCounts are one minute's counts of each series.
type minuteCounts struct {
	minute int64 // Unix minutes
	counts [numSeries]int64
}

// sourceMinutes is a source's ring and the counter values last read.
type sourceMinutes struct {
	last    map[string]int64 // by result
	buckets [minutesKept]minuteCounts
}

// minutesHistory holds every source's ring.
var minutesHistory = struct {
	sync.Mutex
	sources map[string]*sourceMinutes
}{sources: make(map[string]*sourceMinutes)}

// sampleMinutes reads the counters of every source of the running
// configuration and adds what they counted since the last read to the
// current minute. A source read for the first time adds all its counters
// hold: the sampling starts with the admin endpoint, so what they counted
// before is only what came in since the source's provision, moments ago.
func sampleMinutes(now time.Time) {
	minute := now.Unix() / 60
	for _, name := range runningSourceNames() {
		rs := sourceRoutes(name)
		if len(rs) == 0 {
			continue
		}
		values := rs[0].Results()
		minutesHistory.Lock()
		sm := minutesHistory.sources[name]
		if sm == nil {
			sm = &sourceMinutes{last: make(map[string]int64, len(results.All))}
			minutesHistory.sources[name] = sm
		}
		b := &sm.buckets[minute%minutesKept]
		if b.minute != minute {
			*b = minuteCounts{minute: minute}
		}
		for res, v := range values {
			if s := resultSeries(res); s >= 0 && v > sm.last[res] {
				b.counts[s] += v - sm.last[res]
			}
			sm.last[res] = v
		}
		minutesHistory.Unlock()
	}
}

// minutesAnswer is a source's last hour as the admin API answers it: a
// value per minute for each series, oldest first, the last one the
// current minute (still counting).
type minutesAnswer struct {
	Source string `json:"source"`
	// From is the start of the first minute.
	From time.Time `json:"from"`
	// StepSeconds is the length of each step: 60.
	StepSeconds int     `json:"step_seconds"`
	New         []int64 `json:"new"`
	Replayed    []int64 `json:"replayed"`
	Invalid     []int64 `json:"invalid"`
	Failed      []int64 `json:"failed"`
}

// minutesOf returns a source's last hour up to now.
func minutesOf(source string, now time.Time) minutesAnswer {
	last := now.Unix() / 60
	first := last - minutesKept + 1
	out := minutesAnswer{
		Source: source, From: time.Unix(first*60, 0).UTC(), StepSeconds: 60,
		New: make([]int64, minutesKept), Replayed: make([]int64, minutesKept),
		Invalid: make([]int64, minutesKept), Failed: make([]int64, minutesKept),
	}
	minutesHistory.Lock()
	defer minutesHistory.Unlock()
	sm := minutesHistory.sources[source]
	if sm == nil {
		return out
	}
	for m := first; m <= last; m++ {
		b := sm.buckets[m%minutesKept]
		if b.minute != m {
			continue
		}
		i := m - first
		out.New[i], out.Replayed[i] = b.counts[seriesNew], b.counts[seriesReplayed]
		out.Invalid[i], out.Failed[i] = b.counts[seriesInvalid], b.counts[seriesFailed]
	}
	return out
}

// handleMinutes answers a source's last hour, a minute at a time.
func handleMinutes(w http.ResponseWriter, _ *http.Request, src *adminSource) error {
	now := time.Now()
	sampleMinutes(now)
	return writeJSON(w, minutesOf(src.name, now))
}

// Provision starts the sampling of the per-minute counts, which stops
// with the admin endpoint (every config load replaces it).
func (a *AdminAPI) Provision(ctx caddy.Context) error {
	go func() {
		tick := time.NewTicker(minuteSampleEvery)
		defer tick.Stop()
		sampleMinutes(time.Now())
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				sampleMinutes(time.Now())
			}
		}
	}()
	return nil
}

var _ caddy.Provisioner = (*AdminAPI)(nil)
