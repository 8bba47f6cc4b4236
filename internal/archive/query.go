package archive

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
)

// Reading the archive back: the events as the admin API shows them, and
// the search over them.

// Event is one archived event, as the admin API shows it. A list shows it
// without headers and body; one event is shown whole.
type Event struct {
	ID           string              `json:"id"`
	Received     time.Time           `json:"received"`
	Source       string              `json:"source"`
	Key          string              `json:"key"`
	Result       string              `json:"result"`
	Status       int                 `json:"status"`
	DurationMs   float64             `json:"duration_ms"`
	Method       string              `json:"method"`
	URI          string              `json:"uri"`
	Host         string              `json:"host,omitempty"`
	Proto        string              `json:"proto,omitempty"`
	Remote       string              `json:"remote,omitempty"`
	BodySHA256   string              `json:"body_sha256"`
	BodyStored   bool                `json:"body_stored"`
	BodyRedacted bool                `json:"body_redacted,omitempty"`
	Headers      map[string][]string `json:"headers,omitempty"`
	Body         *string             `json:"body,omitempty"`
	BodyEncoding string              `json:"body_encoding,omitempty"` // "base64" when the body is not UTF-8

	headerBlock string
	body        []byte
}

// eventFromFields decodes an archived event from its stored fields.
func eventFromFields(id string, get func(string) (string, bool)) Event {
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
		headerBlock:  field(event.FieldHeaders),
	}
	if body, ok := get(event.FieldBody); ok {
		ev.BodyStored, ev.body = true, []byte(body)
	}
	return ev
}

// event returns an entry as the admin API shows it.
func (e *Entry) event(id event.ID) Event {
	return Event{
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
		BodySHA256:   hex.EncodeToString(e.BodyHash[:]),
		BodyStored:   e.HasBody,
		BodyRedacted: e.Redacted,
		headerBlock:  e.Headers,
		body:         e.Body,
	}
}

// whole fills in the headers and the body, for showing one event.
func (ev *Event) whole() {
	ev.Headers = event.ParseHeaderBlock(ev.headerBlock)
	if ev.BodyStored {
		s := string(ev.body)
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
		Body: ev.body, Received: ev.Received,
	}
}

// Query is a search of the archive: every filter given must match.
type Query struct {
	Key, Result  string
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
)

// match reports whether an event passes the filters that the id range
// does not already apply.
func (q Query) match(ev *Event) bool {
	return (q.Key == "" || ev.Key == q.Key) &&
		(q.Result == "" || ev.Result == q.Result) &&
		(q.Status == nil || q.Status(ev.Status))
}

// bounds returns the id range the query covers.
func (q Query) bounds() (hi, lo event.ID) {
	hi, lo = event.MaxID, event.MinID
	if !q.Until.IsZero() {
		hi = event.ID{MS: uint64(max(q.Until.UnixMilli(), 0)), Seq: math.MaxUint64}
	}
	if q.HasCursor && q.Cursor != event.MinID && q.Cursor.Prev().Less(hi) {
		hi = q.Cursor.Prev()
	}
	if !q.Since.IsZero() {
		lo = event.ID{MS: uint64(max(q.Since.UnixMilli(), 0))}
	}
	return hi, lo
}

// Find returns up to q.Count matching events, newest first, and the cursor
// that continues the search ("" when nothing older is left). It reads at
// most ScanMax events. With whole, every event comes with its headers and
// body.
func (a *Archive) Find(ctx context.Context, q Query, whole bool) ([]Event, string, error) {
	out := []Event{}
	hi, lo := q.bounds()
	if q.HasCursor && q.Cursor == event.MinID || hi.Less(lo) {
		return out, "", nil
	}
	scanned := 0
	for {
		n := min(page, ScanMax-scanned)
		evs, err := a.backend.page(ctx, hi, lo, n)
		if err != nil {
			return nil, "", err
		}
		for i := range evs {
			if q.match(&evs[i]) {
				if whole {
					evs[i].whole()
				}
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
	}
}
