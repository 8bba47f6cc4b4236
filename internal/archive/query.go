package archive

import (
	"context"
	"encoding/base64"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/results"
)

// Reading the archive back: the events as the admin API shows them, and
// the search over them.

// Event is one archived event, as the admin API shows it. A list shows it
// without headers and body (and reads no body); one event, and an export,
// show it whole.
type Event struct {
	ID           string    `json:"id"`
	Received     time.Time `json:"received"`
	Source       string    `json:"source"`
	Key          string    `json:"key"`
	Result       string    `json:"result"`
	Status       int       `json:"status"`
	DurationMs   float64   `json:"duration_ms"`
	Method       string    `json:"method"`
	URI          string    `json:"uri"`
	Host         string    `json:"host,omitempty"`
	Proto        string    `json:"proto,omitempty"`
	Remote       string    `json:"remote,omitempty"`
	BodySHA256   string    `json:"body_sha256,omitempty"` // "" for a refused body that was not read
	BodyStored   bool      `json:"body_stored"`
	BodySize     *int      `json:"body_size,omitempty"` // bytes of the stored body, when known
	BodyRedacted bool      `json:"body_redacted,omitempty"`
	// BodyOmitted says why the body was not kept although bodies are on.
	BodyOmitted string `json:"body_omitted,omitempty"`
	// Reason says why a refused request was refused, and Size is its
	// body's size in bytes (-1 unknown): the list of refusals only.
	Reason string `json:"reason,omitempty"`
	Size   *int64 `json:"size,omitempty"`
	// Items are a batch's items (docs/caddyfile.md: Batches).
	Items []Item `json:"items,omitempty"`
	// History is the times the event was handed to the application
	// (docs/archive.md#attempts); the answers' headers and bodies with the
	// whole event only.
	History *event.HistoryView `json:"history,omitempty"`

	Headers      map[string][]string `json:"headers,omitempty"`
	Body         *string             `json:"body,omitempty"`
	BodyEncoding string              `json:"body_encoding,omitempty"` // "base64" when the body is not UTF-8
	// TraceID is the trace of the request, when it was traced
	// (docs/operating.md: Traces).
	TraceID string `json:"trace_id,omitempty"`

	trace       event.Trace // the request's span context, which a redelivery links to
	headerBlock string
	attempts    event.History // History's source
	body        []byte
	bodyRead    bool // body holds what is stored (see setBody)
}

// eventFromFields decodes an archived event from its stored fields. An
// event archived before bodies were stored apart holds its body among its
// fields: it is kept only when the caller wants the body (withBody).
func eventFromFields(id string, get func(string) (string, bool), withBody bool) Event {
	field := func(name string) string { v, _ := get(name); return v }
	status, _ := strconv.Atoi(field(event.FieldStatus))
	us, _ := strconv.ParseInt(field(event.FieldDurationUS), 10, 64)
	ev := Event{
		ID:           id,
		Received:     event.UnixMilli(field(event.FieldReceived)),
		Source:       field(event.FieldSource),
		Key:          field(event.FieldKey),
		Result:       field(event.FieldResult),
		Status:       status,
		DurationMs:   float64(us) / 1000,
		Method:       field(event.FieldMethod),
		URI:          field(event.FieldURI),
		Host:         field(event.FieldHost),
		Proto:        field(event.FieldProto),
		Remote:       field(event.FieldRemote),
		BodySHA256:   field(event.FieldBodySHA256),
		BodyRedacted: field(event.FieldRedacted) == "body",
		BodyOmitted:  field(fieldOmitted),
		Reason:       field(fieldReason),
		headerBlock:  field(event.FieldHeaders),
	}
	if s, ok := get(fieldItems); ok {
		ev.Items = decodeItems(s)
	}
	if s, ok := get(event.FieldHistory); ok {
		if h, err := event.ParseHistory([]byte(s)); err == nil {
			ev.SetAttempts(h)
		}
	}
	if s, ok := get(fieldSize); ok {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			ev.Size = &n
		}
	}
	ev.setTrace(event.Trace{Parent: field(event.FieldTraceParent), State: field(event.FieldTraceState)})
	if s, ok := get(fieldBodySize); ok {
		if n, err := strconv.Atoi(s); err == nil && n >= 0 {
			ev.BodyStored, ev.BodySize = true, &n
		}
	}
	if body, ok := get(event.FieldBody); ok {
		ev.BodyStored = true
		if withBody {
			ev.body = []byte(body)
			ev.setBody(ev.body)
		}
	}
	return ev
}

// setBody sets the body read for an event (nil: it is gone).
func (ev *Event) setBody(b []byte) {
	ev.body, ev.bodyRead = b, true
	if b == nil {
		ev.BodyStored, ev.BodySize = false, nil
		return
	}
	n := len(b)
	ev.BodySize = &n
}

// event returns an entry as the admin API shows it, with its body when
// withBody.
func (e *Entry) event(id event.ID, withBody bool) Event {
	ev := Event{
		ID:           id.String(),
		Received:     e.Received.Truncate(time.Millisecond).UTC(),
		Source:       e.Source,
		Key:          e.Key,
		Result:       e.Result,
		Status:       e.Status,
		DurationMs:   float64(e.Duration.Microseconds()) / 1000,
		Method:       e.Method,
		URI:          e.URI,
		Host:         e.Host,
		Proto:        e.Proto,
		Remote:       e.Remote,
		BodySHA256:   e.bodySHA256(),
		BodyStored:   e.HasBody,
		BodyRedacted: e.Redacted,
		BodyOmitted:  e.Omitted,
		Reason:       e.Reason,
		Items:        e.Items,
		headerBlock:  e.Headers,
	}
	if e.Reason != "" {
		size := e.Size
		ev.Size = &size
	}
	ev.SetAttempts(e.Attempts)
	ev.setTrace(e.Trace)
	if e.HasBody {
		n := len(e.Body)
		ev.BodySize = &n
		if withBody {
			ev.setBody(e.Body)
		}
	}
	return ev
}

// SetAttempts sets the event's attempts (an inbox event's, kept by the
// inbox), shown whole when the event is.
func (ev *Event) SetAttempts(h event.History) {
	ev.attempts = h
	ev.History = event.ShowHistory(h, ev.Headers != nil)
}

// setTrace sets the event's trace.
func (ev *Event) setTrace(t event.Trace) {
	ev.trace, ev.TraceID = t, t.TraceID()
}

// whole fills in the headers and the body (read by the backend), for
// showing one event.
func (ev *Event) whole() {
	ev.Headers = event.ParseHeaderBlock(ev.headerBlock)
	if ev.History != nil {
		ev.History = event.ShowHistory(ev.attempts, true)
	}
	if ev.BodyStored && ev.bodyRead {
		// a view of the body, not a copy: an export of large bodies would
		// otherwise leave one copy of each behind it. The body is never
		// written once read: a backend's copy, or an event of the memory
		// ring, which no one changes after its append.
		s := unsafe.String(unsafe.SliceData(ev.body), len(ev.body))
		if !utf8.ValidString(s) {
			s, ev.BodyEncoding = base64.StdEncoding.EncodeToString(ev.body), "base64"
		}
		ev.Body = &s
	}
}

// Request returns the event as a stored request, to deliver it again:
// the headers whose value was redacted left out.
func (ev *Event) Request() event.Request {
	return event.Request{
		Source: ev.Source, Key: ev.Key, Method: ev.Method, URI: ev.URI, Host: ev.Host,
		Proto: ev.Proto, Remote: ev.Remote, Headers: event.UnredactedHeaders(ev.headerBlock),
		Body: ev.body, Received: ev.Received, Trace: ev.trace,
	}
}

// Query is a search of the archive: every filter given must match.
type Query struct {
	Key          string // the event's key, or one of its batch's items'
	Result       string
	Status       func(int) bool // nil: any
	Since, Until time.Time      // zero: unbounded
	Cursor       event.ID       // with HasCursor: events older than this one
	HasCursor    bool
	Count        int
}

// Paging of searches.
const (
	// ScanMax is the most events one search reads; when it finds fewer
	// than Count matches by then, it answers with a cursor to go on.
	ScanMax = 10000
	page    = 256
	// exportBodyBytes bounds the bodies an export reads at a time (a
	// larger body is read alone).
	exportBodyBytes = 8 << 20
	// exportBodyCount bounds the bodies an export reads in one round trip.
	exportBodyCount = 64
)

// match reports whether an event passes the filters that the id range
// does not already apply.
func (q Query) match(ev *Event) bool {
	return (q.Key == "" || ev.hasKey(q.Key)) &&
		(q.Result == "" || ev.Result == q.Result) &&
		(q.Status == nil || q.Status(ev.Status))
}

// hasKey reports whether the event's key, or one of its items', is key.
func (ev *Event) hasKey(key string) bool {
	if ev.Key == key {
		return true
	}
	for _, it := range ev.Items {
		if it.Key == key {
			return true
		}
	}
	return false
}

// bounds returns the id range the query covers, retention applied
// (cutoff); ok is false when the range is empty.
func (q Query) bounds(cutoff event.ID) (hi, lo event.ID, ok bool) {
	hi, lo = event.MaxID, cutoff
	if !q.Until.IsZero() {
		hi = event.ID{MS: uint64(max(q.Until.UnixMilli(), 0)), Seq: math.MaxUint64}
	}
	if q.HasCursor {
		if q.Cursor == event.MinID {
			return hi, lo, false
		}
		if q.Cursor.Prev().Less(hi) {
			hi = q.Cursor.Prev()
		}
	}
	if since := (event.ID{MS: uint64(max(q.Since.UnixMilli(), 0))}); !q.Since.IsZero() && lo.Less(since) {
		lo = since
	}
	return hi, lo, !hi.Less(lo)
}

// filtered reports whether the query matches less than every event of
// its range.
func (q Query) filtered() bool { return q.Key != "" || q.Result != "" || q.Status != nil }

// Find returns up to q.Count matching events, newest first, without their
// headers and bodies, and the cursor that continues the search ("" when
// nothing older is left). It reads at most ScanMax events, and no body:
// the first page asks for as many events as are wanted, the next ones
// (when filters left some out) for more, up to 256. The events an inbox
// delivered come with its attempts.
func (a *Archive) Find(ctx context.Context, q Query) ([]Event, string, error) {
	out, cursor, err := a.find(ctx, q)
	if err != nil || a.attempts == nil {
		return out, cursor, err
	}
	evs := make([]*Event, len(out))
	for i := range out {
		evs[i] = &out[i]
	}
	return out, cursor, a.fillAttempts(ctx, evs...)
}

// find is Find without the inbox's attempts.
func (a *Archive) find(ctx context.Context, q Query) ([]Event, string, error) {
	out := []Event{}
	hi, lo, ok := q.bounds(a.cutoff())
	if !ok {
		return out, "", nil
	}
	n := q.Count
	if q.filtered() {
		n = max(n, 16)
	}
	scanned := 0
	for {
		n = min(n, page, ScanMax-scanned)
		evs, err := a.backend.page(ctx, hi, lo, n)
		if err != nil {
			return nil, "", err
		}
		for i := range evs {
			if q.match(&evs[i]) {
				out = append(out, evs[i])
				if len(out) == q.Count {
					return out, evs[i].ID, nil
				}
			}
		}
		scanned += len(evs)
		if len(evs) < n {
			return out, "", nil
		}
		last, _ := event.ParseID(evs[len(evs)-1].ID)
		if scanned >= ScanMax {
			return out, last.String(), nil
		}
		if last == event.MinID {
			return out, "", nil
		}
		hi = last.Prev()
		n *= 4
	}
}

// Export calls emit with up to limit matching events, whole, newest
// first. It holds one page of events without bodies and one group of
// bodies (exportBodyBytes, or one larger body) at a time, so its memory
// does not grow with the archive; each event's body is let go once emit
// returns. An error of emit ends the export and is returned.
func (a *Archive) Export(ctx context.Context, q Query, limit int, emit func(*Event) error) error {
	hi, lo, ok := q.bounds(a.cutoff())
	if !ok {
		return nil
	}
	for limit > 0 {
		evs, err := a.backend.page(ctx, hi, lo, page)
		if err != nil {
			return err
		}
		if len(evs) == 0 {
			return nil
		}
		// the next page starts below this one's oldest event, read before
		// emit lets the events go
		last, ok := event.ParseID(evs[len(evs)-1].ID)
		if !ok {
			return fmt.Errorf("archive page ends with a malformed id %q", evs[len(evs)-1].ID)
		}
		matched := make([]*Event, 0, len(evs))
		for i := range evs {
			if len(matched) < limit && q.match(&evs[i]) {
				matched = append(matched, &evs[i])
			}
		}
		for len(matched) > 0 {
			group := bodyGroup(matched)
			if err := a.backend.bodies(ctx, group); err != nil {
				return err
			}
			for _, ev := range group {
				ev.whole()
			}
			if err := a.fillAttempts(ctx, group...); err != nil {
				return err
			}
			for _, ev := range group {
				err := emit(ev)
				*ev = Event{} // let the body go
				if err != nil {
					return err
				}
			}
			limit -= len(group)
			matched = matched[len(group):]
		}
		if len(evs) < page || last == event.MinID {
			return nil
		}
		hi = last.Prev()
	}
	return nil
}

// fillAttempts sets, on the events an inbox delivered (accepted, or
// entered by a reconciliation, with no attempts of their own; a batch's
// items are events of their own, under their keys), the attempts their
// inbox keeps, in one read.
func (a *Archive) fillAttempts(ctx context.Context, evs ...*Event) error {
	if a.attempts == nil {
		return nil
	}
	var keys []string
	var at []*Event
	for _, ev := range evs {
		if ev.History == nil && len(ev.Items) == 0 && (ev.Result == results.New || ev.Result == results.Reconciled) {
			keys, at = append(keys, ev.Key), append(at, ev)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	hs, err := a.attempts(ctx, keys...)
	if err != nil {
		return fmt.Errorf("reading the inbox's attempts: %w", err)
	}
	for i, h := range hs {
		at[i].SetAttempts(h)
	}
	return nil
}

// bodyGroup returns the first events of evs whose bodies are read
// together: up to exportBodyCount, and exportBodyBytes of bodies (a larger
// body, or one of unknown size, goes alone).
func bodyGroup(evs []*Event) []*Event {
	total := 0
	for i, ev := range evs {
		size := 0
		if ev.BodyStored {
			size = exportBodyBytes
			if ev.BodySize != nil {
				size = *ev.BodySize
			}
		}
		if i > 0 && (i == exportBodyCount || total+size > exportBodyBytes) {
			return evs[:i]
		}
		total += size
	}
	return evs
}
