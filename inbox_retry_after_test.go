//go:build porting

package webhookidempotency

import (
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"
)

// TestRetryAfter: seconds and HTTP dates are read as the wait they ask
// for; anything else asks for none.
func TestRetryAfter(t *testing.T) {
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
		if got := retryAfter(v, at); got != want {
			t.Errorf("retryAfter(%q) = %s, want %s", v, got, want)
		}
	}
}

// TestInboxHonoursRetryAfter: a 429 or 503 with Retry-After is retried no
// earlier than it asks, as seconds or as an HTTP date, and no later than
// the schedule's last step when it asks for more.
func TestInboxHonoursRetryAfter(t *testing.T) {
	srv := startRedis(t)
	var mu sync.Mutex
	attempts := map[string][]time.Time{}
	app := newUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		attempts[key] = append(attempts[key], time.Now())
		n := len(attempts[key])
		mu.Unlock()
		if n > 1 {
			w.WriteHeader(http.StatusOK)
			return
		}
		switch key {
		case "seconds":
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusTooManyRequests)
		case "date":
			w.Header().Set("Retry-After", time.Now().Add(3*time.Second).UTC().Format(http.TimeFormat))
			w.WriteHeader(http.StatusServiceUnavailable)
		case "capped":
			w.Header().Set("Retry-After", strconv.Itoa(3600))
			w.WriteHeader(http.StatusTooManyRequests)
		}
	})
	port := freePort(t)
	// a 200ms first step, a last step of 4s
	startCaddy(t, "", adminInboxSite(port, "retry_after", srv.addr(), app.URL, "200ms 4s"))
	for _, key := range []string{"seconds", "date", "capped"} {
		if resp, b := post(t, siteURL(port)+"/in", []byte(key), "Idempotency-Key", key); resp.StatusCode != http.StatusAccepted {
			t.Fatalf("accept %s: %s %s", key, resp.Status, b)
		}
	}
	adminWait(t, 20*time.Second, "every event's second attempt", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(attempts["seconds"]) == 2 && len(attempts["date"]) == 2 && len(attempts["capped"]) == 2
	})
	mu.Lock()
	defer mu.Unlock()
	gap := func(key string) time.Duration { return attempts[key][1].Sub(attempts[key][0]) }
	if g := gap("seconds"); g < 2*time.Second {
		t.Errorf("Retry-After: 2 was retried after %s", g)
	}
	// an HTTP date has whole seconds: 3s from now is at least 2s away
	if g := gap("date"); g < 2*time.Second {
		t.Errorf("Retry-After as a date 3s ahead was retried after %s", g)
	}
	// asked an hour, capped at the last step (4s)
	if g := gap("capped"); g < 4*time.Second || g > 12*time.Second {
		t.Errorf("Retry-After: 3600 was retried after %s, want the last step, 4s", g)
	}
}
