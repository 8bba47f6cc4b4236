package archive

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/record"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// An archived event keeps the application's answer, its one attempt in
// dedup mode (docs/archive.md#attempts), on every store: with the key's
// completion and through the background queue; a list shows the attempt
// without the answer's headers and body, one event shows them whole.
func TestArchiveAttempts(t *testing.T) {
	t.Parallel()
	stores := exportStores(t)
	for _, name := range []string{"memory", "file", "redis"} {
		t.Run(name, func(t *testing.T) {
			a := stores[name](t, "attempts-"+name)
			at := time.Now().Add(-time.Second).Truncate(time.Microsecond).UTC()
			answer := func(key string, status int, body string) *Entry {
				e := exportEntry(a.cfg.Source, 0, "new")
				e.Key = key
				buf := []byte(body)
				e.Attempts = event.History{Total: 1, Attempts: []event.Attempt{{
					At: at, Destination: event.NextHandler, Number: 1, Status: status,
					Latency: 1500 * time.Microsecond, Headers: "Content-Type: application/json\r\nSet-Cookie: [redacted]\r\n",
					Body: buf, Truncated: true,
				}}}
				return e
			}
			// with the completion of its key
			completed := answer("done", 200, `{"ok":true}`)
			recorded := completed.Attempts.Attempts[0].Body
			if err := a.CompleteAndAppend(t.Context(), claimFor(t, a, "done"), record.Encode(nil, 200, http.Header{}, &[32]byte{}), time.Hour, completed); err != nil {
				t.Fatal(err)
			}
			// the answer's body was a slice of the request's recorder, which
			// the memory store's ring would otherwise keep, and see change
			copy(recorded, "XXXXXXXXXXXX")
			// in the background (released after a 500, say)
			failed := answer("failed", 500, "upstream down")
			failed.Result = "new"
			a.Add(failed)
			var evs []Event
			testkit.Eventually(t, 30*time.Second, "both events archived", func() bool {
				evs, _, _ = a.Find(context.Background(), Query{Count: 10})
				return len(evs) == 2
			})
			for _, ev := range evs {
				want := map[string]int{"done": 200, "failed": 500}[ev.Key]
				got := onlyAttempt(t, ev)
				if got["status"] != float64(want) || got["destination"] != "next" || got["attempt"] != float64(1) ||
					got["latency_ms"] != 1.5 || got["at"] != at.Format(time.RFC3339Nano) || got["truncated"] != true {
					t.Fatalf("%s listed with the attempt %v", ev.Key, got)
				}
				if _, ok := got["body"]; ok {
					t.Fatalf("a list shows no answer's body: %v", got)
				}
				id, _ := event.ParseID(ev.ID)
				whole, ok, err := a.Event(t.Context(), id)
				if err != nil || !ok {
					t.Fatalf("event %s: %v %v", ev.ID, ok, err)
				}
				got = onlyAttempt(t, whole)
				wantBody := map[string]string{"done": `{"ok":true}`, "failed": "upstream down"}[ev.Key]
				hdr, _ := got["headers"].(map[string]any)
				if got["body"] != wantBody || hdr == nil || !strings.Contains(jsonOf(t, hdr["Set-Cookie"]), "[redacted]") ||
					!strings.Contains(jsonOf(t, hdr["Content-Type"]), "application/json") {
					t.Fatalf("%s whole, its answer as it was when appended: %v", ev.Key, got)
				}
			}
		})
	}
}

// claimFor claims key of a's source in a's store.
func claimFor(t *testing.T, a *Archive, key string) store.Claim {
	t.Helper()
	owner := store.NewOwner()
	full := "idem:" + a.cfg.Source + ":" + key
	v, _ := archiveStores.Load(a)
	s := v.(store.Store)
	if res, err := s.Claim(t.Context(), full, owner, time.Minute); err != nil || res.State != store.StateClaimed {
		t.Fatalf("claim %s: %+v %v", full, res, err)
	}
	return store.Claim{Key: full, Owner: owner}
}

// onlyAttempt returns the one attempt of an event's history, as the admin
// API writes it.
func onlyAttempt(t *testing.T, ev Event) map[string]any {
	t.Helper()
	var out struct {
		History struct {
			Total    int              `json:"total"`
			Attempts []map[string]any `json:"attempts"`
		} `json:"history"`
	}
	if err := json.Unmarshal([]byte(jsonOf(t, ev)), &out); err != nil {
		t.Fatal(err)
	}
	if h := out.History; h.Total != 1 || len(h.Attempts) != 1 {
		t.Fatalf("%s: %d of %d attempts, want 1 of 1", ev.Key, len(h.Attempts), h.Total)
	}
	return out.History.Attempts[0]
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
