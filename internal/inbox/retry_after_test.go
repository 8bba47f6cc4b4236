package inbox

import (
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
	"github.com/webhookguard/caddy-webhook-idempotency/store/redisstore"
)

// TestInboxHonoursRetryAfter: a 429 or 503 with Retry-After is retried no
// earlier than it asks, as seconds or as an HTTP date, and no later than
// the schedule's last step when it asks for more; on the redis store and
// on the file store.
func TestInboxHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	for name, open := range map[string]func(t *testing.T) store.Store{
		"redis": func(t *testing.T) store.Store {
			srv := testkit.StartRedis(t)
			ctx, cancel := testkit.NewContext(t)
			s := &redisstore.Store{Addresses: []string{srv.Addr()}, Timeout: caddy.Duration(10 * time.Second)}
			if err := s.Provision(ctx); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = s.Cleanup()
				cancel()
			})
			return s
		},
		"file": func(t *testing.T) store.Store {
			s, closeStore := openFileStore(t, filepath.Join(t.TempDir(), "store.db"))
			t.Cleanup(closeStore)
			return s
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			honoursRetryAfter(t, open(t))
		})
	}
}

func honoursRetryAfter(t *testing.T, s store.Store) {
	var mu sync.Mutex
	attempts := map[string][]time.Time{}
	app := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
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
	// no jitter, a 200ms first step, a last step of 4s
	ib := newTestInbox(t, s, app.URL, 200*time.Millisecond, 4*time.Second)
	for _, key := range []string{"seconds", "date", "capped"} {
		if res := accept(t, ib, key); res.State != store.StateClaimed {
			t.Fatalf("accepting %s: %s", key, res.State)
		}
	}
	ib.Start()
	defer ib.Stop()
	testkit.Eventually(t, time.Minute, "every event's second attempt", func() bool {
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
	if g := gap("capped"); g < 4*time.Second || g > time.Minute {
		t.Errorf("Retry-After: 3600 was retried after %s, want the last step, 4s", g)
	}
}
