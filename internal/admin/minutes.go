package admin

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/query"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/results"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/series"
)

// A source's series over the last hour, day or week, for the console's
// charts (docs/admin.md#minutes): read from the counts the route keeps in
// its store (internal/series), which every instance sharing the store adds
// to and which survive restarts and reloads.

// The series of the charts, each a sum of results.
const (
	seriesNew      = iota // new
	seriesReplayed        // replayed
	seriesRefused         // refused: what the source's list of refusals keeps
	seriesFailed          // answered with an error otherwise, or passed on without deduplication
)

// resultSeries maps a result to its series; -1 for the results that are
// no delivery (skipped, handshake) or no failure of one (filtered: an
// inbox's drop rule answered it). The refused results are those of the
// requests the source lists as refused (docs/admin.md#refusals: 401, 403,
// 413, 422, 400, 508, and 503 for the body budget, the store or the keys),
// so that the chart counts what the console's Refused tab lists. A result
// not named here (a result added later) counts as failed.
func resultSeries(result string) int {
	switch result {
	case results.New:
		return seriesNew
	case results.Replayed:
		return seriesReplayed
	case results.InvalidSignature, results.Forbidden, results.TooLarge, results.Mismatch,
		results.Ambiguous, results.Loop, results.OverBudget, results.Unavailable:
		return seriesRefused
	case results.Skipped, results.Handshake, results.Filtered:
		return -1
	}
	return seriesFailed
}

// minutesAnswer is a source's window as the admin API answers it: a value
// per step for each series, oldest first, the last one the current step
// (still counting).
type minutesAnswer struct {
	Source string `json:"source"`
	// Window is the span read: 1h, 24h or 7d.
	Window string `json:"window"`
	// From is the start of the first step.
	From time.Time `json:"from"`
	// StepSeconds is the length of each step: 60, 300 or 3600.
	StepSeconds int     `json:"step_seconds"`
	New         []int64 `json:"new"`
	Replayed    []int64 `json:"replayed"`
	// Refused counts the requests the source refused (its list of
	// refusals'), whatever the reason; Results has them by result.
	Refused []int64 `json:"refused"`
	// Failed counts the requests of the other results, and the inbox's
	// failed delivery attempts.
	Failed []int64 `json:"failed"`
	// Results are the requests by result, each result counted in the
	// window.
	Results     map[string][]int64 `json:"results"`
	HandlingP50 millis             `json:"handling_p50_ms"`
	HandlingP99 millis             `json:"handling_p99_ms"`
	AppP50      millis             `json:"app_p50_ms"`
	AppP99      millis             `json:"app_p99_ms"`
	// With an inbox.
	InboxDelivered    []int64 `json:"inbox_delivered,omitempty"`
	InboxRetried      []int64 `json:"inbox_retried,omitempty"`
	InboxDeadLettered []int64 `json:"inbox_dead_lettered,omitempty"`
	InboxBacklog      []int64 `json:"inbox_backlog,omitempty"`
	LagP50            millis  `json:"lag_p50_ms,omitempty"`
	LagP99            millis  `json:"lag_p99_ms,omitempty"`
}

// millis are durations in milliseconds, to the microsecond; null for a
// step that counted none.
type millis []float64

// MarshalJSON implements json.Marshaler.
func (m millis) MarshalJSON() ([]byte, error) {
	out := append(make([]byte, 0, 8*len(m)), '[')
	for i, v := range m {
		if i > 0 {
			out = append(out, ',')
		}
		if math.IsNaN(v) {
			out = append(out, "null"...)
			continue
		}
		out = strconv.AppendFloat(out, math.Round(v*1000)/1000, 'f', -1, 64)
	}
	return append(out, ']'), nil
}

// minutesOf shapes a source's series as the answer.
func minutesOf(source string, w series.Window, s series.Series, inbox bool) minutesAnswer {
	n := w.Steps()
	out := minutesAnswer{
		Source: source, Window: w.Name, From: s.From, StepSeconds: int(w.Step / time.Second),
		New: make([]int64, n), Replayed: make([]int64, n), Refused: make([]int64, n), Failed: make([]int64, n),
		Results:     s.Results,
		HandlingP50: s.Handled.P50, HandlingP99: s.Handled.P99, AppP50: s.App.P50, AppP99: s.App.P99,
	}
	chart := [...][]int64{seriesNew: out.New, seriesReplayed: out.Replayed, seriesRefused: out.Refused, seriesFailed: out.Failed}
	for res, counts := range s.Results {
		k := resultSeries(res)
		if k < 0 {
			continue
		}
		for i, v := range counts {
			chart[k][i] += v
		}
	}
	for i := range n {
		out.Failed[i] += s.Retried[i] + s.DeadLettered[i]
	}
	if inbox {
		out.InboxDelivered, out.InboxRetried, out.InboxDeadLettered = s.Delivered, s.Retried, s.DeadLettered
		out.InboxBacklog, out.LagP50, out.LagP99 = s.Backlog, s.Lag.P50, s.Lag.P99
	}
	return out
}

// handleMinutes answers a source's series over a window,
// ?window=1h (the default), 24h or 7d.
func handleMinutes(w http.ResponseWriter, r *http.Request, src *adminSource) error {
	name := query.Value(r.URL.RawQuery, "window")
	if name == "" {
		name = series.Windows[0].Name
	}
	win, ok := series.WindowNamed(name)
	if !ok {
		return apiError(http.StatusBadRequest, fmt.Errorf("invalid window %q: want 1h, 24h or 7d", name))
	}
	s, err := src.routes[0].Series().Read(r.Context(), win, time.Now())
	if err != nil {
		return storeError(src.name, err)
	}
	_, noInbox := src.inbox()
	return writeJSON(w, minutesOf(src.name, win, s, noInbox == nil))
}
