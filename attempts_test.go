package webhookidempotency

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/archive"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// In dedup mode the application's answer is the event's one attempt, kept
// with its archived event (docs/archive.md#attempts): its status, latency,
// headers (redacted) and body within keep_response, or the next handler's
// error.
func TestDedupAttemptArchived(t *testing.T) {
	keep := int64(80)
	h := newTestHandler(t, &Handler{Source: "h-attempts", Archive: &ArchiveConfig{}, KeepResponse: &keep})
	long := strings.Repeat("a", 200)
	answers := map[string]caddyhttp.HandlerFunc{
		"ok": func(w http.ResponseWriter, r *http.Request) error {
			w.Header().Set("Content-Type", "text/plain")
			w.Header().Set("Set-Cookie", "session=s3cr3t")
			_, err := io.WriteString(w, long)
			return err
		},
		"fails": func(w http.ResponseWriter, r *http.Request) error {
			w.WriteHeader(http.StatusInternalServerError)
			_, err := io.WriteString(w, "boom")
			return err
		},
		"down": func(w http.ResponseWriter, r *http.Request) error {
			return caddyhttp.Error(http.StatusBadGateway, errors.New("dial tcp 127.0.0.1:1: connect: connection refused"))
		},
		"errs": func(w http.ResponseWriter, r *http.Request) error {
			return errors.New("a handler's plain error")
		},
	}
	for key, next := range answers {
		serve(h, key, `{"id":"`+key+`"}`, next)
	}
	events := archivedByKey(t, h, 4)
	// the event's status is the one the request was answered with: Caddy
	// answers a handler's error with its status (500 for a plain error),
	// while the attempt says the application gave no answer (0)
	for key, want := range map[string]int{"ok": 200, "fails": 500, "down": 502, "errs": 500} {
		if events[key].Status != want {
			t.Errorf("event %q archived with status %d, want %d", key, events[key].Status, want)
		}
	}

	ok := wholeAttempt(t, h, events["ok"])
	hdr, _ := ok["headers"].(map[string]any)
	body, _ := ok["body"].(string)
	if ok["status"] != 200.0 || ok["destination"] != "next" || ok["truncated"] != true || hdr == nil ||
		jsonString(t, hdr["Set-Cookie"]) != `["[redacted]"]` || jsonString(t, hdr["Content-Type"]) != `["text/plain"]` ||
		body == "" || strings.Trim(body, "a") != "" || len(body)+len("Content-Type: text/plain\r\nSet-Cookie: [redacted]\r\n") > int(keep) {
		t.Fatalf("a 200's attempt, within keep_response 80: %v", ok)
	}
	if lat, _ := ok["latency_ms"].(float64); lat <= 0 {
		t.Fatalf("latency %v", ok["latency_ms"])
	}
	if f := wholeAttempt(t, h, events["fails"]); f["status"] != 500.0 || f["body"] != "boom" || f["truncated"] != nil {
		t.Fatalf("a 500's attempt: %v", f)
	}
	if d := wholeAttempt(t, h, events["down"]); d["status"] != 0.0 || !strings.Contains(d["error"].(string), "connection refused") || d["body"] != nil {
		t.Fatalf("the next handler's error: %v", d)
	}

	// keep_response 0: the attempt, without headers or body
	none := int64(0)
	h0 := newTestHandler(t, &Handler{Source: "h-attempts-0", Archive: &ArchiveConfig{}, KeepResponse: &none})
	serve(h0, "ok", `{}`, answers["ok"])
	a := wholeAttempt(t, h0, archivedByKey(t, h0, 1)["ok"])
	if a["status"] != 200.0 || a["headers"] != nil || a["body"] != nil {
		t.Fatalf("keep_response 0 keeps no headers nor body: %v", a)
	}
}

// archivedByKey waits for n events in h's archive and returns them by key.
func archivedByKey(t *testing.T, h *Handler, n int) map[string]archive.Event {
	t.Helper()
	out := map[string]archive.Event{}
	testkit.Eventually(t, 10*time.Second, "the events archived", func() bool {
		evs, _, err := h.archive.Find(context.Background(), archive.Query{Count: 10})
		if err != nil || len(evs) != n {
			return false
		}
		for _, ev := range evs {
			out[ev.Key] = ev
		}
		return true
	})
	return out
}

// wholeAttempt reads an archived event whole and returns its one attempt
// as the admin API writes it.
func wholeAttempt(t *testing.T, h *Handler, listed archive.Event) map[string]any {
	t.Helper()
	id, _ := event.ParseID(listed.ID)
	ev, ok, err := h.archive.Event(context.Background(), id)
	if err != nil || !ok {
		t.Fatalf("event %s (%s): %v %v", listed.ID, listed.Key, ok, err)
	}
	var out struct {
		History struct {
			Total    int              `json:"total"`
			Attempts []map[string]any `json:"attempts"`
		} `json:"history"`
	}
	if err := json.Unmarshal([]byte(jsonString(t, ev)), &out); err != nil {
		t.Fatal(err)
	}
	if h := out.History; h.Total != 1 || len(h.Attempts) != 1 {
		t.Fatalf("event %s (%s): %d of %d attempts, want 1 of 1", listed.ID, listed.Key, len(h.Attempts), h.Total)
	}
	return out.History.Attempts[0]
}

func jsonString(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
