package reconcile

import (
	"context"
	"time"
)

// Status is what the admin API shows of a source's reconciliation
// (`GET /webhook_idempotency/<source>/reconcile`, docs/reconcile.md:
// Watching it). The last pass is any instance's: the state is shared
// through the store.
type Status struct {
	Source   string `json:"source"`
	Provider string `json:"provider"`
	// Every and Lookback are the configuration, as Go durations.
	Every    string `json:"every"`
	Lookback string `json:"lookback"`
	// Running is true while a pass runs on this instance.
	Running bool `json:"running"`
	// LastStart and LastEnd are the last pass's times.
	LastStart *time.Time `json:"last_start,omitempty"`
	LastEnd   *time.Time `json:"last_end,omitempty"`
	// LastResult is `ok`, or `failed` for a pass that stopped part-way
	// (LastError says why; the next pass resumes it).
	LastResult string `json:"last_result,omitempty"`
	LastError  string `json:"last_error,omitempty"`
	// Recovered is the number of events the last pass recovered.
	Recovered int `json:"recovered"`
	// LastSuccess is when the last pass that completed ended.
	LastSuccess *time.Time `json:"last_success,omitempty"`
	// NextPass is when the next pass is due (a few seconds later on the
	// instance that runs it).
	NextPass time.Time `json:"next_pass"`
	// Resuming is true when the next pass resumes one that stopped
	// part-way.
	Resuming bool `json:"resuming"`
	// RateLimitedUntil is when the provider's rate limit lets the next
	// pass run, when it asked for a wait.
	RateLimitedUntil *time.Time `json:"rate_limited_until,omitempty"`
}

// Status returns the source's reconciliation status, read from the store.
func (r *Reconciler) Status(ctx context.Context) (Status, error) {
	st, _, err := r.readState(ctx)
	if err != nil {
		return Status{}, err
	}
	r.mu.Lock()
	running := r.running
	r.mu.Unlock()
	next := st.due(r.cfg.Every)
	if now := r.now(); next.Before(now) {
		next = now
	}
	s := Status{
		Source:           r.cfg.Source,
		Provider:         r.cfg.Provider.Name(),
		Every:            r.cfg.Every.String(),
		Lookback:         r.cfg.Lookback.String(),
		Running:          running,
		LastStart:        timePtr(st.LastStart),
		LastEnd:          timePtr(st.LastEnd),
		LastResult:       st.LastResult,
		LastError:        st.LastError,
		Recovered:        st.Recovered,
		LastSuccess:      timePtr(st.LastSuccess),
		NextPass:         next.UTC(),
		Resuming:         st.Pass != nil && st.LastResult == resultFailed,
		RateLimitedUntil: timePtr(st.NotBefore),
	}
	return s, nil
}

// timePtr is t in UTC, nil for the zero time.
func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}
