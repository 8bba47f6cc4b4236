package archive

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/redact"
)

// A redelivery to redeliver_to is kept as an attempt of its event, after
// the event's own, on every store (docs/archive.md#attempts): one event
// and a list show both; past event.MaxAttempts the oldest go and the
// total counts them all; an event no longer archived keeps nothing.
func TestArchiveRedeliveries(t *testing.T) {
	t.Parallel()
	stores := exportStores(t)
	for _, name := range []string{"memory", "file", "redis"} {
		t.Run(name, func(t *testing.T) {
			a := stores[name](t, "redeliveries-"+name)
			a.cfg.RedeliverTo, a.cfg.KeepResponse = "http://app.internal/redo", 64
			e := exportEntry(a.cfg.Source, 0, "new")
			e.Attempts = event.History{Total: 1, Attempts: []event.Attempt{{
				At: time.Now().Add(-time.Minute), Destination: event.NextHandler, Number: 1, Status: 200,
			}}}
			if err := a.backend.appendBatch(t.Context(), []*Entry{e}); err != nil {
				t.Fatal(err)
			}
			evs, _, err := a.Find(t.Context(), Query{Count: 1})
			if err != nil || len(evs) != 1 {
				t.Fatalf("find: %v %v", evs, err)
			}
			id, _ := event.ParseID(evs[0].ID)

			redeliver := func(n int) {
				t.Helper()
				resp := &http.Response{StatusCode: 500 + n, Header: http.Header{"Content-Type": {"text/plain"}, "Set-Cookie": {"s=1"}}}
				body := []byte(fmt.Sprintf("answer %d %s", n, strings.Repeat("x", 100)))
				if err := a.Redelivered(t.Context(), id, a.RedeliveryAttempt(time.Now(), resp, body, nil)); err != nil {
					t.Fatalf("redelivery %d: %v", n, err)
				}
			}
			redeliver(1)
			ev, ok, err := a.Event(t.Context(), id)
			if err != nil || !ok {
				t.Fatalf("event: %v %v", ok, err)
			}
			h := ev.History
			if h == nil || h.Total != 2 || len(h.Attempts) != 2 || h.Attempts[0].Destination != event.NextHandler {
				t.Fatalf("after one redelivery: %+v", h)
			}
			re := h.Attempts[1]
			if re.Destination != "http://app.internal/redo" || re.Status != 501 || re.Attempt != 1 || !re.Truncated ||
				re.Body == nil || !strings.HasPrefix(*re.Body, "answer 1 ") || len(*re.Body) > 64 ||
				strings.Join(re.Headers["Set-Cookie"], "") != "[redacted]" {
				t.Fatalf("the redelivery, as kept: %+v (body %v)", re, re.Body)
			}

			for n := 2; n <= event.MaxAttempts; n++ {
				redeliver(n)
			}
			// MaxAttempts redeliveries after the event's own attempt: the
			// oldest, the request's, is gone
			evs, _, err = a.Find(t.Context(), Query{Count: 1})
			if err != nil || len(evs) != 1 {
				t.Fatalf("find: %v %v", evs, err)
			}
			h = evs[0].History
			if h == nil || h.Total != event.MaxAttempts+1 || len(h.Attempts) != event.MaxAttempts ||
				h.Attempts[0].Status != 501 || h.Attempts[event.MaxAttempts-1].Status != 500+event.MaxAttempts ||
				h.Attempts[0].Body != nil {
				t.Fatalf("listed after %d redeliveries: %+v", event.MaxAttempts, h)
			}

			gone := event.ID{MS: id.MS + 1}
			if err := a.Redelivered(t.Context(), gone, a.RedeliveryAttempt(time.Now(), nil, nil, errors.New("dial tcp: refused"))); !errors.Is(err, errGone) {
				t.Fatalf("a redelivery of an event not archived: %v, want errGone", err)
			}
		})
	}
}

// On Redis the redeliveries are kept beside the stream, bounded: at most
// max_events events' lists, the oldest dropped first, each expiring when
// its event does.
func TestRedisRedeliveriesBounded(t *testing.T) {
	t.Parallel()
	a := exportStores(t)["redis"](t, "redeliveries-bound")
	a.cfg.RedeliverTo = "http://app.internal/redo"
	appendEvents(t, a, 0, 3, func(int) string { return "new" })
	evs, _, err := a.Find(t.Context(), Query{Count: 3})
	if err != nil || len(evs) != 3 {
		t.Fatalf("find: %v %v", evs, err)
	}
	a.cfg.MaxEvents = 2
	b := a.backend.(*redisBackend)
	for i := len(evs) - 1; i >= 0; i-- { // oldest first
		id, _ := event.ParseID(evs[i].ID)
		if err := a.Redelivered(t.Context(), id, a.RedeliveryAttempt(time.Now(), &http.Response{StatusCode: 202}, nil, nil)); err != nil {
			t.Fatal(err)
		}
	}
	members, err := b.client.ZRange(t.Context(), b.redeliveries(), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	oldest := mustID(t, evs[2].ID)
	if len(members) != 2 || members[0] != redeliveryMember(mustID(t, evs[1].ID)) || members[1] != redeliveryMember(mustID(t, evs[0].ID)) {
		t.Fatalf("index: %v, want the newest 2 of %v", members, evs)
	}
	if n, _ := b.client.Exists(t.Context(), b.redeliveryList(redeliveryMember(oldest))).Result(); n != 0 {
		t.Fatal("the oldest event's redeliveries outlived the bound")
	}
	newest := mustID(t, evs[0].ID)
	ttl, err := b.client.PTTL(t.Context(), b.redeliveryList(redeliveryMember(newest))).Result()
	if err != nil || ttl <= a.cfg.Retention-time.Minute || ttl > a.cfg.Retention {
		t.Fatalf("the list expires in %v (%v), want about retention", ttl, err)
	}
	if ev, ok, err := a.Event(t.Context(), oldest); err != nil || !ok || ev.History != nil {
		t.Fatalf("the oldest event, its redeliveries dropped: %v %v %+v", ok, err, ev.History)
	}
	if ev, ok, err := a.Event(t.Context(), newest); err != nil || !ok || ev.History == nil || ev.History.Total != 1 || ev.History.Attempts[0].Status != 202 {
		t.Fatalf("the newest event: %v %v %+v", ok, err, ev.History)
	}
}

func mustID(t *testing.T, s string) event.ID {
	t.Helper()
	id, ok := event.ParseID(s)
	if !ok {
		t.Fatalf("bad id %q", s)
	}
	return id
}

// A redelivery's destination and transport error are redacted as a URI
// is, and its error kept on one line.
func TestRedeliveryAttemptRedacted(t *testing.T) {
	rd, err := redact.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	a := &Archive{cfg: Config{RedeliverTo: "http://app.internal/redo?token=s3cr3t", Redact: rd, KeepResponse: 4096}}
	failed := &url.Error{Op: "Post", URL: a.cfg.RedeliverTo, Err: errors.New("dial tcp 10.0.0.1:80:\nconnection refused")}
	at := a.RedeliveryAttempt(time.Now(), nil, nil, failed)
	if at.Destination != "http://app.internal/redo?token=[redacted]" || at.Status != 0 ||
		strings.Contains(at.Error, "s3cr3t") || !strings.Contains(at.Error, "token=[redacted]") ||
		strings.Contains(at.Error, "\n") || !strings.Contains(at.Error, "connection refused") {
		t.Fatalf("%+v", at)
	}
}
