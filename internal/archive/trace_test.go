package archive

import (
	"crypto/sha256"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/record"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/redact"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
	"github.com/webhookguard/caddy-webhook-idempotency/store/memstore"
	"github.com/webhookguard/caddy-webhook-idempotency/store/redisstore"
)

// openArchiveOn provisions s and builds an archive of cfg on it; both are
// stopped when the test ends.
func openArchiveOn(t *testing.T, s interface {
	store.Store
	caddy.Provisioner
	caddy.CleanerUpper
}, cfg Config) (store.Store, *Archive) {
	t.Helper()
	ctx, cancel := testkit.NewContext(t)
	if err := s.Provision(ctx); err != nil {
		cancel()
		t.Fatal(err)
	}
	a, err := New(cfg, s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Stop(); _ = s.Cleanup(); cancel() })
	return s, a
}

// Every backend keeps each event's trace: the admin API shows its trace
// id, in a list and on one event, and a redelivery gets the span context
// to link to.

func TestArchiveKeepsTheTrace(t *testing.T) {
	rd, _ := redact.New(nil)
	cfg := Config{Source: "files", Retention: time.Hour, Bodies: true, Redact: rd, Logger: zap.NewNop()}
	open := map[string]func(t *testing.T) (store.Store, *Archive){
		"file": func(t *testing.T) (store.Store, *Archive) {
			s, a, closeAll := openFileArchive(t, filepath.Join(t.TempDir(), "store.db"), 0, time.Hour)
			t.Cleanup(closeAll)
			return s, a
		},
		"redis": func(t *testing.T) (store.Store, *Archive) {
			return openArchiveOn(t, &redisstore.Store{Addresses: []string{testkit.StartRedis(t).Addr()}}, cfg)
		},
		"memory": func(t *testing.T) (store.Store, *Archive) {
			return openArchiveOn(t, &memstore.Store{}, cfg)
		},
	}
	traced := event.Trace{Parent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", State: "vendor=opaque"}
	other := event.Trace{Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	for name, openArchive := range open {
		t.Run(name, func(t *testing.T) {
			s, a := openArchive(t)
			// one with its key's completion, two in the background (the
			// last not traced)
			owner := store.NewOwner()
			if _, err := s.Claim(t.Context(), "idem:files:k0", owner, time.Minute); err != nil {
				t.Fatal(err)
			}
			hash := sha256.Sum256([]byte("k0"))
			e0 := entry("k0", "new", time.Now())
			e0.Trace = traced
			if err := a.CompleteAndAppend(t.Context(), store.Claim{Key: "idem:files:k0", Owner: owner}, record.Encode(nil, 200, http.Header{}, &hash), time.Hour, e0); err != nil {
				t.Fatal(err)
			}
			e1 := entry("k1", "replayed", time.Now())
			e1.Trace = other
			a.Add(e1)
			a.Add(entry("k2", "new", time.Now()))
			var evs []Event
			testkit.WaitFor(t, 10*time.Second, "three archived events", func() (bool, string) {
				var err error
				evs, _, err = a.Find(t.Context(), Query{Count: 10})
				return err == nil && len(evs) == 3, keysOf(evs)
			})
			want := map[string]string{"k0": "0af7651916cd43dd8448eb211c80319c", "k1": "4bf92f3577b34da6a3ce929d0e0e4736", "k2": ""}
			for _, ev := range evs {
				if ev.TraceID != want[ev.Key] {
					t.Errorf("listed %s: trace_id %q, want %q", ev.Key, ev.TraceID, want[ev.Key])
				}
				id, _ := event.ParseID(ev.ID)
				whole, ok, err := a.Event(t.Context(), id)
				if err != nil || !ok {
					t.Fatalf("event %s: %v %v", ev.ID, ok, err)
				}
				if whole.TraceID != want[ev.Key] {
					t.Errorf("event %s: trace_id %q, want %q", ev.Key, whole.TraceID, want[ev.Key])
				}
				wantTrace := map[string]event.Trace{"k0": traced, "k1": {Parent: other.Parent}}[ev.Key]
				if got := whole.Request().Trace; got != wantTrace {
					t.Errorf("event %s, to redeliver: trace %+v, want %+v", ev.Key, got, wantTrace)
				}
			}
		})
	}
}
