package event

import (
	"net/http"
	"testing"
	"time"
)

// TestRetryAfter: seconds and HTTP dates are read as the wait they ask
// for; anything else asks for none.
func TestRetryAfter(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"":     0,
		"7":    7 * time.Second,
		" 7 ":  7 * time.Second,
		"0":    0,
		"-3":   0,
		"soon": 0,
		at.Add(90 * time.Second).Format(http.TimeFormat): 90 * time.Second,
		at.Add(-time.Hour).Format(http.TimeFormat):       0,
	} {
		if got := RetryAfter(v, at); got != want {
			t.Errorf("RetryAfter(%q) = %s, want %s", v, got, want)
		}
	}
}
