package webhookidempotency

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Reading the archive back: what a store's archive does, the events as the
// admin API shows them, and the search over them.

// archiveBackend is a store's side of the archive.
type archiveBackend interface {
	// completeAndAppend completes the key and its guard ("" for none, see
	// guard.go), as the store's CompleteGuarded does, and appends e in the
	// same round trip; it returns the completion's error and the append's.
	completeAndAppend(ctx context.Context, key, guard, owner string, record []byte, ttl time.Duration, e *archiveEntry) (err, appendErr error)
	// appendBatch appends events, in order, in one round trip.
	appendBatch(ctx context.Context, es []*archiveEntry) error
	// page returns up to count events with ids from hi down to lo, both
	// included, newest first.
	page(ctx context.Context, hi, lo streamID, count int) ([]archivedEvent, error)
	// event returns one event, or false when there is none with that id.
	event(ctx context.Context, id streamID) (archivedEvent, bool, error)
	// size returns the number of events kept.
	size(ctx context.Context) (int64, error)
	// timeout bounds one append.
	timeout() time.Duration
	// close releases what the archive holds of its store.
	close()
}

// streamID is a Redis stream id, `<ms>-<seq>`; the memory store's archive
// numbers its events the same way.
type streamID struct{ ms, seq uint64 }

var (
	minStreamID = streamID{}
	maxStreamID = streamID{math.MaxUint64, math.MaxUint64}
)

// parseStreamID parses a whole id, `<ms>-<seq>`.
func parseStreamID(s string) (streamID, bool) {
	ms, seq, ok := strings.Cut(s, "-")
	if !ok {
		return streamID{}, false
	}
	m, err1 := strconv.ParseUint(ms, 10, 64)
	q, err2 := strconv.ParseUint(seq, 10, 64)
	return streamID{m, q}, err1 == nil && err2 == nil
}

func (id streamID) String() string {
	return strconv.FormatUint(id.ms, 10) + "-" + strconv.FormatUint(id.seq, 10)
}

func (id streamID) less(o streamID) bool {
	return id.ms < o.ms || id.ms == o.ms && id.seq < o.seq
}

// prev returns the id just before id (id must not be the smallest).
func (id streamID) prev() streamID {
	if id.seq > 0 {
		return streamID{id.ms, id.seq - 1}
	}
	return streamID{id.ms - 1, math.MaxUint64}
}

// archivedEvent is one archived event, as the admin API shows it. A list
// shows it without headers and body; one event is shown whole.
type archivedEvent struct {
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

// eventFromFields decodes an archived event from its stream fields.
func eventFromFields(id string, get func(string) (string, bool)) archivedEvent {
	field := func(name string) string { v, _ := get(name); return v }
	status, _ := strconv.Atoi(field(fieldStatus))
	us, _ := strconv.ParseInt(field(fieldDurationUS), 10, 64)
	ev := archivedEvent{
		ID:           id,
		Received:     unixMilli(field(fieldReceived)),
		Source:       field(fieldSource),
		Key:          field(fieldKey),
		Result:       field(fieldResult),
		Status:       status,
		DurationMs:   float64(us) / 1000,
		Method:       field(fieldMethod),
		URI:          field(fieldURI),
		Host:         field(fieldHost),
		Proto:        field(fieldProto),
		Remote:       field(fieldRemote),
		BodySHA256:   field(fieldBodySHA256),
		BodyRedacted: field(fieldRedacted) == "body",
		headerBlock:  field(fieldHeaders),
	}
	if body, ok := get(fieldBody); ok {
		ev.BodyStored, ev.body = true, []byte(body)
	}
	return ev
}

// event returns an entry as the admin API shows it.
func (e *archiveEntry) event(id streamID) archivedEvent {
	return archivedEvent{
		ID:           id.String(),
		Received:     e.received.Truncate(time.Millisecond).UTC(),
		Source:       e.source,
		Key:          e.key,
		Result:       e.result,
		Status:       e.status,
		DurationMs:   float64(e.duration.Microseconds()) / 1000,
		Method:       e.method,
		URI:          e.uri,
		Host:         e.host,
		Proto:        e.proto,
		Remote:       e.remote,
		BodySHA256:   hex.EncodeToString(e.bodyHash[:]),
		BodyStored:   e.hasBody,
		BodyRedacted: e.redacted,
		headerBlock:  e.headers,
		body:         e.body,
	}
}

// whole fills in the headers and the body, for showing one event.
func (ev *archivedEvent) whole() {
	ev.Headers = parseHeaderBlock(ev.headerBlock)
	if ev.BodyStored {
		s := string(ev.body)
		if !utf8.ValidString(s) {
			s, ev.BodyEncoding = base64.StdEncoding.EncodeToString(ev.body), "base64"
		}
		ev.Body = &s
	}
}

// archiveQuery is a search of the archive: every filter given must match.
type archiveQuery struct {
	key, result  string
	status       statusSet
	hasStatus    bool
	since, until time.Time // zero: unbounded
	cursor       streamID  // continue with events older than this one
	hasCursor    bool
	count        int
}

// Paging of archive lists.
const (
	defaultArchiveCount = 50
	maxArchiveCount     = 1000
	// archiveScanMax is the most events one search reads; when it finds
	// fewer than count matches by then, it answers with a cursor to go on.
	archiveScanMax = 10000
	archivePage    = 256
)

// parseArchiveQuery reads the filters of a query string: key, result,
// since, until (RFC 3339 times, or durations before now such as `1h`),
// status (a code or a class such as `5xx`), count and cursor.
func parseArchiveQuery(v url.Values, maxCount int) (archiveQuery, error) {
	q := archiveQuery{key: v.Get("key"), result: v.Get("result"), count: defaultArchiveCount}
	if q.result != "" && !knownResult(q.result) {
		return q, fmt.Errorf("invalid result %q: want one of %s", q.result, strings.Join(allResults[:], ", "))
	}
	if s := v.Get("status"); s != "" {
		if err := addQueryStatus(&q.status, s); err != nil {
			return q, err
		}
		q.hasStatus = true
	}
	var err error
	if q.since, err = parseQueryTime("since", v.Get("since")); err != nil {
		return q, err
	}
	if q.until, err = parseQueryTime("until", v.Get("until")); err != nil {
		return q, err
	}
	if s := v.Get("count"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxCount {
			return q, fmt.Errorf("invalid count %q: want a number from 1 to %d", s, maxCount)
		}
		q.count = n
	}
	if s := v.Get("cursor"); s != "" {
		if q.cursor, q.hasCursor = parseStreamID(s); !q.hasCursor {
			return q, fmt.Errorf("invalid cursor %q: want the cursor of an earlier answer, such as 1712345678901-0", s)
		}
	}
	return q, nil
}

// filtered reports whether the query narrows the archive down at all.
func (q archiveQuery) filtered() bool {
	return q.key != "" || q.result != "" || q.hasStatus || !q.since.IsZero() || !q.until.IsZero()
}

func knownResult(r string) bool {
	for _, known := range allResults {
		if r == known {
			return true
		}
	}
	return false
}

// addQueryStatus adds a status code (100-599) or class (`2xx`) to s.
func addQueryStatus(s *statusSet, v string) error {
	lo, hi, ok := parseStatusSpec(v)
	if !ok {
		return fmt.Errorf("invalid status %q: want a code such as 200 or a class such as 5xx", v)
	}
	s.addRange(lo, hi)
	return nil
}

// parseQueryTime parses an RFC 3339 time, or a duration before now.
func parseQueryTime(name, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if d, err := parsePositiveDuration(name, v); err == nil {
		return now().Add(-time.Duration(d)), nil
	}
	return time.Time{}, fmt.Errorf("invalid %s %q: want an RFC 3339 time such as 2025-01-02T15:04:05Z or a duration before now such as 1h", name, v)
}

// match reports whether an event passes the filters that the id range
// does not already apply.
func (q archiveQuery) match(ev *archivedEvent) bool {
	return (q.key == "" || ev.Key == q.key) &&
		(q.result == "" || ev.Result == q.result) &&
		(!q.hasStatus || q.status.has(ev.Status))
}

// bounds returns the id range the query covers.
func (q archiveQuery) bounds() (hi, lo streamID) {
	hi, lo = maxStreamID, minStreamID
	if !q.until.IsZero() {
		hi = streamID{uint64(max(q.until.UnixMilli(), 0)), math.MaxUint64}
	}
	if q.hasCursor && q.cursor != minStreamID && q.cursor.prev().less(hi) {
		hi = q.cursor.prev()
	}
	if !q.since.IsZero() {
		lo = streamID{uint64(max(q.since.UnixMilli(), 0)), 0}
	}
	return hi, lo
}

// find returns up to q.count matching events, newest first, and the cursor
// that continues the search ("" when nothing older is left). It reads at
// most scanMax events.
func (a *archive) find(ctx context.Context, q archiveQuery, scanMax int) ([]archivedEvent, string, error) {
	out := []archivedEvent{}
	hi, lo := q.bounds()
	if q.hasCursor && q.cursor == minStreamID || hi.less(lo) {
		return out, "", nil
	}
	scanned := 0
	for {
		n := min(archivePage, scanMax-scanned)
		page, err := a.backend.page(ctx, hi, lo, n)
		if err != nil {
			return nil, "", err
		}
		for i := range page {
			if q.match(&page[i]) {
				out = append(out, page[i])
				if len(out) == q.count {
					return out, page[i].ID, nil
				}
			}
		}
		scanned += len(page)
		if len(page) < n {
			return out, "", nil
		}
		last, _ := parseStreamID(page[len(page)-1].ID)
		if scanned >= scanMax {
			return out, last.String(), nil
		}
		if last == minStreamID {
			return out, "", nil
		}
		hi = last.prev()
	}
}
