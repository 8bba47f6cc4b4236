package webhookidempotency

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// The archive through the admin API (docs/admin.md#archive): search, one
// event, export, and redelivery to the route's inbox or redeliver_to.

// eventList is the answer to a search: events, newest first, and the
// cursor that continues it ("" when nothing older is left).
type eventList struct {
	Events []archivedEvent `json:"events"`
	Cursor string          `json:"cursor"`
}

// archiveRequest returns the source's archive and the query of the
// request, or the error to answer.
func archiveRequest(r *http.Request, src *adminSource, maxCount int) (*archive, archiveQuery, error) {
	a, err := src.archive()
	if err != nil {
		return nil, archiveQuery{}, err
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
	events, cursor, err := a.find(r.Context(), q, archiveScanMax)
	if err != nil {
		return storeError(src.name, err)
	}
	return writeJSON(w, eventList{Events: events, Cursor: cursor})
}

// handleEvent answers one archived event, whole.
func handleEvent(w http.ResponseWriter, r *http.Request, src *adminSource, id string) error {
	ev, err := findEvent(r.Context(), src, id)
	if err != nil {
		return err
	}
	ev.whole()
	return writeJSON(w, ev)
}

// findEvent returns one archived event, or a 404.
func findEvent(ctx context.Context, src *adminSource, id string) (archivedEvent, error) {
	a, err := src.archive()
	if err != nil {
		return archivedEvent{}, err
	}
	notFound := apiError(http.StatusNotFound, fmt.Errorf("no archived event %q for source %q", id, src.name))
	sid, ok := parseStreamID(id)
	if !ok {
		return archivedEvent{}, notFound
	}
	ev, found, err := a.backend.event(ctx, sid)
	if err != nil {
		return archivedEvent{}, storeError(src.name, err)
	}
	if !found {
		return archivedEvent{}, notFound
	}
	return ev, nil
}

// handleExport writes every event that matches the filters, whole, newest
// first, one JSON object per line (NDJSON). count, when given, bounds the
// number of events.
func handleExport(w http.ResponseWriter, r *http.Request, src *adminSource) error {
	a, q, err := archiveRequest(r, src, math32)
	if err != nil {
		return err
	}
	left := math32
	if r.URL.Query().Get("count") != "" {
		left = q.count
	}
	ctx := r.Context()
	wrote := false
	enc := json.NewEncoder(w)
	for {
		q.count = min(left, maxArchiveCount)
		events, cursor, err := a.find(ctx, q, archiveScanMax)
		if err != nil {
			if !wrote {
				return storeError(src.name, err)
			}
			// the status is sent: cut the export short, visibly
			_, _ = io.WriteString(w, `{"error":`+strconv.Quote("export cut short: "+err.Error())+"}\n")
			return nil
		}
		if !wrote {
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.WriteHeader(http.StatusOK)
			wrote = true
		}
		for i := range events {
			events[i].whole()
			if err := enc.Encode(&events[i]); err != nil {
				return nil // the client went away
			}
		}
		left -= len(events)
		if cursor == "" || left <= 0 {
			return nil
		}
		q.cursor, q.hasCursor = parseStreamID(cursor)
	}
}

// math32 bounds an export without count.
const math32 = 1 << 31

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
	inbox *inbox
	url   string
}

// target returns where the source redelivers, or a 409.
func (s *adminSource) target() (redeliveryTarget, error) {
	if ib, err := s.inbox(); err == nil {
		return redeliveryTarget{inbox: ib}, nil
	}
	if a, err := s.archive(); err == nil && a.redeliverTo != "" {
		return redeliveryTarget{url: a.redeliverTo}, nil
	}
	return redeliveryTarget{}, apiError(http.StatusConflict, fmt.Errorf("source %q has neither an inbox nor an archive redeliver_to: there is nowhere to redeliver to", s.name))
}

// errNotRedeliverable is why an archived event cannot be redelivered.
func errNotRedeliverable(ev *archivedEvent) error {
	switch {
	case !ev.BodyStored && ev.Result == resultReplayed:
		return errors.New("a replay's body is not archived: redeliver the original delivery of this key")
	case !ev.BodyStored:
		return errors.New("its body is not archived (bodies off)")
	case ev.BodyRedacted:
		return errors.New("its body was redacted: redelivering it would send the application '[redacted]' values")
	}
	return nil
}

// redeliverTimeout bounds one redelivery to redeliver_to.
const redeliverTimeout = 10 * time.Second

// redeliverClient sends redeliveries to redeliver_to; it follows no
// redirect.
var redeliverClient = &http.Client{
	Timeout:       redeliverTimeout,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// redeliver sends one archived event to the target.
func (t redeliveryTarget) redeliver(ctx context.Context, ev *archivedEvent) redeliveryOutcome {
	out := redeliveryOutcome{ID: ev.ID, Key: ev.Key}
	if err := errNotRedeliverable(ev); err != nil {
		out.Error = err.Error()
		return out
	}
	if t.inbox != nil {
		id, err := t.inbox.enqueue(ctx, ev.inboxFields())
		if err != nil {
			out.Error = "queueing in the inbox: " + err.Error()
			return out
		}
		out.InboxID, out.Delivered = id, true
		return out
	}
	ctx, cancel := context.WithTimeout(ctx, redeliverTimeout)
	defer cancel()
	o := outgoingEvent{method: ev.Method, headers: ev.headerBlock, body: string(ev.body), key: ev.Key,
		remote: ev.Remote, host: ev.Host, proto: ev.Proto}
	req, err := o.request(ctx, t.url)
	if err != nil {
		out.Error = err.Error()
		return out
	}
	resp, err := redeliverClient.Do(req)
	if err != nil {
		out.Error = err.Error()
		return out
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	out.Status = resp.StatusCode
	out.Delivered = resp.StatusCode >= 200 && resp.StatusCode <= 299
	if !out.Delivered {
		out.Error = "redeliver_to answered " + resp.Status
	}
	return out
}

// inboxFields returns an archived event as a new inbox event: the
// request as received, headers whose value was redacted left out.
func (ev *archivedEvent) inboxFields() []any {
	o := outgoingEvent{headers: ev.headerBlock}
	return []any{
		fieldSource, ev.Source,
		fieldKey, ev.Key,
		fieldMethod, ev.Method,
		fieldURI, ev.URI,
		fieldHost, ev.Host,
		fieldProto, ev.Proto,
		fieldRemote, ev.Remote,
		fieldHeaders, o.unredactedHeaders(),
		fieldBody, ev.body,
		fieldReceived, strconv.FormatInt(ev.Received.UnixMilli(), 10),
		fieldAttempts, "0",
		fieldBase, "0",
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
	if !q.filtered() {
		return apiError(http.StatusBadRequest, errors.New("redelivering a set needs at least one filter (key, result, status, since or until): the whole archive is not redelivered by accident"))
	}
	t, err := src.target()
	if err != nil {
		return err
	}
	events, cursor, err := a.find(r.Context(), q, archiveScanMax)
	if err != nil {
		return storeError(src.name, err)
	}
	seen := make(map[string]bool)
	out := struct {
		Redelivered []redeliveryOutcome `json:"redelivered"`
		Skipped     []redeliveryOutcome `json:"skipped"`
		Cursor      string              `json:"cursor"`
	}{Redelivered: []redeliveryOutcome{}, Skipped: []redeliveryOutcome{}, Cursor: cursor}
	var send []*archivedEvent
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
	// the list is newest first; the application gets them oldest first
	for i := len(send) - 1; i >= 0; i-- {
		out.Redelivered = append(out.Redelivered, t.redeliver(r.Context(), send[i]))
	}
	return writeJSON(w, out)
}
