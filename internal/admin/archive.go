package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/archive"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/cfparse"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/forward"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/inbox"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/results"
)

// The archive through the admin API (docs/admin.md#archive): search, one
// event, export, and redelivery to the route's inbox or redeliver_to.

// eventList is the answer to a search: events, newest first, and the
// cursor that continues it ("" when nothing older is left).
type eventList struct {
	Events []archive.Event `json:"events"`
	Cursor string          `json:"cursor"`
}

// Paging of archive lists.
const (
	defaultArchiveCount = 50
	maxArchiveCount     = 1000
)

// parseArchiveQuery reads the filters of a query string: key, result,
// since, until (RFC 3339 times, or durations before now such as `1h`),
// status (a code or a class such as `5xx`), count and cursor.
func parseArchiveQuery(v url.Values, maxCount int) (archive.Query, error) {
	q := archive.Query{Key: v.Get("key"), Result: v.Get("result"), Count: defaultArchiveCount}
	if q.Result != "" && !results.Known(q.Result) {
		return q, fmt.Errorf("invalid result %q: want one of %s, %s", q.Result, strings.Join(results.All[:], ", "), strings.Join(results.Events[:], ", "))
	}
	if s := v.Get("status"); s != "" {
		lo, hi, ok := cfparse.ParseStatusSpec(s)
		if !ok {
			return q, fmt.Errorf("invalid status %q: want a code such as 200 or a class such as 5xx", s)
		}
		q.Status = func(code int) bool { return code >= lo && code <= hi }
	}
	var err error
	if q.Since, err = parseQueryTime("since", v.Get("since")); err != nil {
		return q, err
	}
	if q.Until, err = parseQueryTime("until", v.Get("until")); err != nil {
		return q, err
	}
	if s := v.Get("count"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxCount {
			return q, fmt.Errorf("invalid count %q: want a number from 1 to %d", s, maxCount)
		}
		q.Count = n
	}
	if s := v.Get("cursor"); s != "" {
		if q.Cursor, q.HasCursor = event.ParseID(s); !q.HasCursor {
			return q, fmt.Errorf("invalid cursor %q: want the cursor of an earlier answer, such as 1712345678901-0", s)
		}
	}
	return q, nil
}

// filtered reports whether the query narrows the archive down at all.
func filtered(q archive.Query) bool {
	return q.Key != "" || q.Result != "" || q.Status != nil || !q.Since.IsZero() || !q.Until.IsZero()
}

// parseQueryTime parses an RFC 3339 time, or a duration before now.
func parseQueryTime(name, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if d, err := cfparse.PositiveDuration(name, v); err == nil {
		return time.Now().Add(-time.Duration(d)), nil
	}
	return time.Time{}, fmt.Errorf("invalid %s %q: want an RFC 3339 time such as 2025-01-02T15:04:05Z or a duration before now such as 1h", name, v)
}

// archiveRequest returns the source's archive and the query of the
// request, or the error to answer.
func archiveRequest(r *http.Request, src *adminSource, maxCount int) (*archive.Archive, archive.Query, error) {
	a, err := src.archive()
	if err != nil {
		return nil, archive.Query{}, err
	}
	q, err := parseArchiveQuery(r.URL.Query(), maxCount)
	if err != nil {
		return nil, q, apiError(http.StatusBadRequest, err)
	}
	return a, q, nil
}

// handleEvents searches the archive.
func handleEvents(w http.ResponseWriter, r *http.Request, src *adminSource) error {
	a, q, err := archiveRequest(r, src, maxArchiveCount)
	if err != nil {
		return err
	}
	events, cursor, err := a.Find(r.Context(), q)
	if err != nil {
		return storeError(src.name, err)
	}
	return writeJSON(w, eventList{Events: events, Cursor: cursor})
}

// eventAnswer is one archived event as the admin API answers it: with the
// URL of its trace in the operator's trace viewer, when the global option
// trace_url sets one.
type eventAnswer struct {
	archive.Event
	TraceURL string `json:"trace_url,omitempty"`
}

// TraceIDPlaceholder stands for a trace id in the trace_url template.
const TraceIDPlaceholder = "{trace_id}"

// traceURL fills the running configuration's trace_url in with traceID;
// "" without either.
func traceURL(traceID string) string {
	tmpl := runningSettings().TraceURL
	if tmpl == "" || traceID == "" {
		return ""
	}
	return strings.ReplaceAll(tmpl, TraceIDPlaceholder, traceID)
}

// handleEvent answers one archived event, whole.
func handleEvent(w http.ResponseWriter, r *http.Request, src *adminSource, id string) error {
	ev, err := findEvent(r.Context(), src, id)
	if err != nil {
		return err
	}
	return writeJSON(w, eventAnswer{Event: ev, TraceURL: traceURL(ev.TraceID)})
}

// findEvent returns one archived event, whole, or a 404.
func findEvent(ctx context.Context, src *adminSource, id string) (archive.Event, error) {
	a, err := src.archive()
	if err != nil {
		return archive.Event{}, err
	}
	notFound := apiError(http.StatusNotFound, fmt.Errorf("no archived event %q for source %q", id, src.name))
	sid, ok := event.ParseID(id)
	if !ok {
		return archive.Event{}, notFound
	}
	ev, found, err := a.Event(ctx, sid)
	if err != nil {
		return archive.Event{}, storeError(src.name, err)
	}
	if !found {
		return archive.Event{}, notFound
	}
	return ev, nil
}

// handleExport writes every event that matches the filters, whole, newest
// first, one JSON object per line (NDJSON), each line as it is read: the
// export holds one page of events and one group of bodies at a time,
// whatever the archive holds. count, when given, bounds the number of
// events.
func handleExport(w http.ResponseWriter, r *http.Request, src *adminSource) error {
	a, q, err := archiveRequest(r, src, exportMax)
	if err != nil {
		return err
	}
	limit := exportMax
	if r.URL.Query().Get("count") != "" {
		limit = q.Count
	}
	wrote := false
	start := func() {
		if !wrote {
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.WriteHeader(http.StatusOK)
			wrote = true
		}
	}
	enc := json.NewEncoder(w)
	flusher, _ := w.(http.Flusher)
	var clientGone error
	err = a.Export(r.Context(), q, limit, func(ev *archive.Event) error {
		start()
		if err := enc.Encode(ev); err != nil {
			clientGone = err
			return err
		}
		if flusher != nil {
			flusher.Flush()
		}
		return nil
	})
	switch {
	case clientGone != nil:
		return nil // no one is left to tell
	case err != nil && !wrote:
		return storeError(src.name, err)
	case err != nil:
		// the status is sent: cut the export short, visibly
		_, _ = io.WriteString(w, `{"error":`+strconv.Quote("export cut short: "+err.Error())+"}\n")
		return nil
	}
	start() // an empty export is an empty 200
	return nil
}

// exportMax bounds an export without count.
const exportMax = 1 << 31

// Redelivery.

// redeliveryOutcome is what became of one event's redelivery.
type redeliveryOutcome struct {
	// ID is the archived event's id.
	ID  string `json:"id"`
	Key string `json:"key"`
	// InboxID is the id of the new inbox event, when the route has an
	// inbox.
	InboxID string `json:"inbox_id,omitempty"`
	// Status is redeliver_to's answer (0 when it did not answer).
	Status int `json:"status,omitempty"`
	// Delivered is true when the event was queued in the inbox, or
	// redeliver_to answered 2xx.
	Delivered bool `json:"delivered"`
	// Error says why it was not delivered.
	Error string `json:"error,omitempty"`
}

// redeliveryTarget is where a source's archived events are redelivered:
// its inbox, else its archive's redeliver_to.
type redeliveryTarget struct {
	inbox   *inbox.Inbox
	archive *archive.Archive // keeps each redelivery to url with its event
	url     string
	via     string             // the route's key namespace, for Webhook-Via
	forward *forward.Forwarder // prepares the redelivery for the application
}

// target returns where the source redelivers, or a 409.
func (s *adminSource) target() (redeliveryTarget, error) {
	if ib, err := s.inbox(); err == nil {
		return redeliveryTarget{inbox: ib}, nil
	}
	if a, err := s.archive(); err == nil && a.Config().RedeliverTo != "" {
		return redeliveryTarget{archive: a, url: a.Config().RedeliverTo, via: strings.TrimSuffix(s.routes[0].KeyPrefix(), ":"), forward: s.routes[0].Forwarder()}, nil
	}
	return redeliveryTarget{}, apiError(http.StatusConflict, fmt.Errorf("source %q has neither an inbox nor an archive redeliver_to: there is nowhere to redeliver to", s.name))
}

// errNotRedeliverable is why an archived event cannot be redelivered.
func errNotRedeliverable(ev *archive.Event) error {
	switch {
	case !ev.BodyStored && ev.Result == results.Replayed:
		return errors.New("a replay's body is not archived: redeliver the original delivery of this key")
	case !ev.BodyStored && ev.BodyOmitted != "":
		return errors.New("its body is not archived: " + ev.BodyOmitted)
	case !ev.BodyStored:
		return errors.New("its body is not archived (bodies off)")
	case ev.BodyRedacted:
		return errors.New("its body was redacted: redelivering it would send the application '[redacted]' values")
	}
	return nil
}

// spanRedeliver is the name of the span of a redelivery to redeliver_to.
const spanRedeliver = "webhook_idempotency.redeliver"

// redeliverTimeout bounds one redelivery to redeliver_to.
const redeliverTimeout = 10 * time.Second

// redeliverClient sends redeliveries to redeliver_to; it follows no
// redirect.
var redeliverClient = &http.Client{
	Timeout:       redeliverTimeout,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// redeliver sends one archived event to the target.
func (t redeliveryTarget) redeliver(ctx context.Context, ev *archive.Event) redeliveryOutcome {
	out := redeliveryOutcome{ID: ev.ID, Key: ev.Key}
	if err := errNotRedeliverable(ev); err != nil {
		out.Error = err.Error()
		return out
	}
	req := ev.Request()
	if t.inbox != nil {
		id, err := t.inbox.Enqueue(ctx, &req)
		if err != nil {
			out.Error = "queueing in the inbox: " + err.Error()
			return out
		}
		out.InboxID, out.Delivered = id, true
		return out
	}
	ctx, cancel := context.WithTimeout(ctx, redeliverTimeout)
	defer cancel()
	// a span of its own, linked to the request the event was archived for
	// (docs/operating.md: Traces)
	ctx, span := req.Trace.StartDelivery(ctx, spanRedeliver, attribute.String("webhook.source", req.Source))
	defer span.End()
	hr, err := req.NewRequest(ctx, t.url)
	if err != nil {
		out.Error = err.Error()
		return out
	}
	// a redeliver_to that leads back to this route answers 508
	// (docs/archive.md: Redelivery)
	event.AddVia(hr.Header, t.via)
	if t.forward != nil {
		if err := t.forward.Apply(hr, req.Body, forward.Delivery{Key: req.Key, Secret: req.Secret, PublicURL: req.PublicURL()}, time.Now()); err != nil {
			out.Error = "preparing the redelivery: " + err.Error()
			return out
		}
	}
	event.InjectTrace(ctx, hr.Header)
	start := time.Now()
	resp, err := redeliverClient.Do(hr)
	if err != nil {
		// the error as the attempt keeps it: redacted (a URL's query), on
		// one line
		at := t.archive.RedeliveryAttempt(start, nil, nil, err)
		out.Error = at.Error
		span.SetStatus(codes.Error, "no answer")
		t.keep(ctx, ev, at)
		return out
	}
	body := t.archive.ReadAnswer(resp)
	_ = resp.Body.Close()
	t.keep(ctx, ev, t.archive.RedeliveryAttempt(start, resp, body, nil))
	span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
	out.Status = resp.StatusCode
	out.Delivered = resp.StatusCode >= 200 && resp.StatusCode <= 299
	if !out.Delivered {
		out.Error = "redeliver_to answered " + resp.Status
		span.SetStatus(codes.Error, out.Error)
	}
	return out
}

// keep keeps a redelivery to redeliver_to as an attempt of its event
// (docs/archive.md#attempts); a failure is logged by the archive, and the
// redelivery's outcome stands.
func (t redeliveryTarget) keep(ctx context.Context, ev *archive.Event, at event.Attempt) {
	if id, ok := event.ParseID(ev.ID); ok {
		_ = t.archive.Redelivered(ctx, id, at)
	}
}

// handleRedeliverEvent redelivers one archived event. An event that cannot
// be redelivered (no body archived, or a redacted one) is a 409; the
// answer otherwise says what became of it.
func handleRedeliverEvent(w http.ResponseWriter, r *http.Request, src *adminSource, id string) error {
	ev, err := findEvent(r.Context(), src, id)
	if err != nil {
		return err
	}
	t, err := src.target()
	if err != nil {
		return err
	}
	if err := errNotRedeliverable(&ev); err != nil {
		return apiError(http.StatusConflict, fmt.Errorf("archived event %q cannot be redelivered: %v", id, err))
	}
	out := t.redeliver(r.Context(), &ev)
	if t.inbox != nil && !out.Delivered {
		return storeError(src.name, errors.New(out.Error))
	}
	return writeJSON(w, out)
}

// handleRedeliverEvents redelivers the archived events that match the
// filters (at least one is required), oldest first, up to count (default
// 50), one per key: the newest matching event of a key that can be
// redelivered.
func handleRedeliverEvents(w http.ResponseWriter, r *http.Request, src *adminSource) error {
	a, q, err := archiveRequest(r, src, maxArchiveCount)
	if err != nil {
		return err
	}
	if !filtered(q) {
		return apiError(http.StatusBadRequest, errors.New("redelivering a set needs at least one filter (key, result, status, since or until): the whole archive is not redelivered by accident"))
	}
	t, err := src.target()
	if err != nil {
		return err
	}
	events, cursor, err := a.Find(r.Context(), q)
	if err != nil {
		return storeError(src.name, err)
	}
	seen := make(map[string]bool)
	out := struct {
		Redelivered []redeliveryOutcome `json:"redelivered"`
		Skipped     []redeliveryOutcome `json:"skipped"`
		Cursor      string              `json:"cursor"`
	}{Redelivered: []redeliveryOutcome{}, Skipped: []redeliveryOutcome{}, Cursor: cursor}
	var send []*archive.Event
	for i := range events {
		ev := &events[i]
		if err := errNotRedeliverable(ev); err != nil {
			out.Skipped = append(out.Skipped, redeliveryOutcome{ID: ev.ID, Key: ev.Key, Error: err.Error()})
			continue
		}
		if seen[ev.Key] {
			out.Skipped = append(out.Skipped, redeliveryOutcome{ID: ev.ID, Key: ev.Key, Error: "a newer event of this key is redelivered"})
			continue
		}
		seen[ev.Key] = true
		send = append(send, ev)
	}
	// the list is newest first, without bodies; the application gets them
	// oldest first, each read whole as it is sent
	for i := len(send) - 1; i >= 0; i-- {
		id, _ := event.ParseID(send[i].ID)
		ev, found, err := a.Event(r.Context(), id)
		switch {
		case err != nil:
			out.Redelivered = append(out.Redelivered, redeliveryOutcome{ID: send[i].ID, Key: send[i].Key, Error: "reading it from the archive: " + err.Error()})
		case !found:
			out.Redelivered = append(out.Redelivered, redeliveryOutcome{ID: send[i].ID, Key: send[i].Key, Error: "it left the archive (max_events or retention) before it was sent"})
		default:
			out.Redelivered = append(out.Redelivered, t.redeliver(r.Context(), &ev))
		}
	}
	return writeJSON(w, out)
}
