// Package archive is the archive's subsystem (docs/archive.md): every
// delivery that passed verification and got a key is appended to a
// per-source archive, for audit and reprocessing, and read back by the
// admin API. An archive is built from a resolved configuration and the
// handler's store; the store's side is a backend (redis.go, file.go,
// memory.go). Appends never delay or fail the answer: a key's completion
// carries its event in the same round trip, other events go through a
// bounded background queue (queue.go). Every backend keeps an event's body
// apart from the rest of it, so that a list reads no body and an export
// reads one group of bodies at a time (query.go).
package archive

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/metrics"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/redact"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
	"github.com/webhookguard/caddy-webhook-idempotency/store/filestore"
	"github.com/webhookguard/caddy-webhook-idempotency/store/memstore"
	"github.com/webhookguard/caddy-webhook-idempotency/store/redisstore"
)

// Config is an archive's resolved configuration (the handler's
// ArchiveConfig applies its rules).
type Config struct {
	Source    string
	Retention time.Duration
	// MaxEvents bounds the events kept; 0 is the store's default (Default
	// MaxEvents).
	MaxEvents   int
	Bodies      bool
	Redact      *redact.Redactor
	RedeliverTo string // "" for none
	// KeepResponse is what a redelivery to RedeliverTo keeps of its
	// answer (keep_response; 0 for nothing).
	KeepResponse int
	Logger       *zap.Logger
	// Kind names the list: "" for the archive of deliveries, Refused for
	// the list of refused requests (docs/admin.md: Refusals), kept apart
	// under names of its own and counted by counters of its own.
	Kind string
}

// Refused is the Kind of a source's list of refused requests.
const Refused = "refused"

// name is the list's name in a store: `archive`, or its Kind.
func (c *Config) name() string {
	if c.Kind != "" {
		return c.Kind
	}
	return "archive"
}

// Defaults of the archive, per store.
const (
	DefaultRetention       = 30 * 24 * time.Hour
	DefaultMaxEventsRedis  = 1_000_000
	DefaultMaxEventsFile   = 1_000_000
	DefaultMaxEventsMemory = 10_000
)

// now is the clock; tests may replace it.
var now = time.Now

// Archive is one handler's archive.
type Archive struct {
	cfg     Config
	backend backend
	queue   *queue
	metrics *archiveMetrics
	logger  *zap.Logger
	// attempts reads the attempts of events an inbox delivered; nil
	// without an inbox (ReadAttempts)
	attempts AttemptsReader
}

// AttemptsReader returns the attempts of the event of each key, as an
// inbox keeps them (none for a key it has none of), in one round trip.
type AttemptsReader func(ctx context.Context, keys ...string) ([]event.History, error)

// ReadAttempts makes the archive show, with an event its route's inbox
// accepted (or a reconciliation entered there), the attempts the inbox
// keeps of it (docs/archive.md#attempts). Called before the route serves.
func (a *Archive) ReadAttempts(r AttemptsReader) { a.attempts = r }

// backend is a store's side of the archive.
type backend interface {
	// completeAndAppend completes the key and its guard ("" for none), as
	// the store's CompleteGuarded does, and appends e in the same round
	// trip; it returns the completion's error and the append's. A nil e
	// (refused by a memoryWatcher's admit) completes the key alone.
	completeAndAppend(ctx context.Context, key, guard, owner string, record []byte, ttl time.Duration, e *Entry) (err, appendErr error)
	// appendBatch appends events, in order, in one round trip.
	appendBatch(ctx context.Context, es []*Entry) error
	// page returns up to count events with ids from hi down to lo, both
	// included, newest first, without their bodies.
	page(ctx context.Context, hi, lo event.ID, count int) ([]Event, error)
	// event returns one event with its body, or false when there is none
	// with that id.
	event(ctx context.Context, id event.ID) (Event, bool, error)
	// bodies reads the body of each event that has one stored; an event
	// whose body is gone (trimmed since its page was read) is marked as
	// having none.
	bodies(ctx context.Context, evs []*Event) error
	// size returns the number of events from cutoff on, and may drop
	// those before it.
	size(ctx context.Context, cutoff event.ID) (int64, error)
	// redelivered keeps a redelivery of the event with id as an attempt of
	// it (redeliveries.go); errGone when there is no such event.
	redelivered(ctx context.Context, id event.ID, at *event.Attempt) error
	// timeout bounds one append.
	timeout() time.Duration
	// close releases what the archive holds of its store.
	close()
}

// New builds the archive of a handler on its store: a stream per source on
// the redis store, a bucket per source in the file store's file, a ring per
// source on the memory store.
func New(cfg Config, s store.Store) (*Archive, error) {
	a := &Archive{cfg: cfg, logger: cfg.Logger, metrics: newArchiveMetrics(cfg.Source, cfg.Kind)}
	if a.logger == nil {
		a.logger = zap.NewNop()
	}
	if err := Supports(s); err != nil {
		return nil, err
	}
	var err error
	switch s := s.(type) {
	case *redisstore.Store:
		if a.cfg.MaxEvents == 0 {
			a.cfg.MaxEvents = DefaultMaxEventsRedis
		}
		a.backend, err = newRedisBackend(s.Streams(), a)
	case *filestore.Store:
		if a.cfg.MaxEvents == 0 {
			a.cfg.MaxEvents = DefaultMaxEventsFile
		}
		a.backend, err = newFileBackend(s.File(), a)
	case *memstore.Store:
		if a.cfg.MaxEvents == 0 {
			a.cfg.MaxEvents = DefaultMaxEventsMemory
		}
		a.backend, err = newMemoryBackend(s, a)
	}
	if err != nil {
		return nil, fmt.Errorf("archive: %v", err)
	}
	a.queue = newQueue(a)
	return a, nil
}

// Supports is the rule of which stores hold an archive: the redis, file and
// memory stores.
func Supports(s store.Store) error {
	switch s.(type) {
	case *redisstore.Store, *filestore.Store, *memstore.Store:
		return nil
	}
	return fmt.Errorf("archive: the store %T keeps no archive", s)
}

// Config returns the archive's configuration, its defaults applied.
func (a *Archive) Config() Config { return a.cfg }

// Add appends e in the background; a full queue drops it and counts it.
func (a *Archive) Add(e *Entry) { a.queue.add(e) }

// CompleteAndAppend completes a key (and its guard, "" for none) as the
// store's CompleteGuarded does and appends e in the same round trip. It
// returns the completion's error; the append's is counted and logged.
func (a *Archive) CompleteAndAppend(ctx context.Context, c store.Claim, record []byte, ttl time.Duration, e *Entry) error {
	key, guard, owner := c.Key, c.CompletionGuard(), c.Owner
	// a call that times out may still be sent after the request is done
	// with its pooled body: the event keeps a copy
	e.OwnBody()
	if !a.admit(e) {
		err, _ := a.backend.completeAndAppend(ctx, key, guard, owner, record, ttl, nil)
		return err
	}
	err, appendErr := a.backend.completeAndAppend(ctx, key, guard, owner, record, ttl, e)
	a.appended(1, appendErr)
	return err
}

// admit reports whether e may be appended: a backend that watches its
// store's memory refuses events while the store has no room for them
// (redis_memory.go); a refused event is dropped and counted.
func (a *Archive) admit(e *Entry) bool {
	w, ok := a.backend.(memoryWatcher)
	if !ok || w.admit(e) {
		return true
	}
	a.metrics.dropped.Inc()
	return false
}

// warnFull logs that the archive stopped appending because its Redis is
// nearly full.
func (a *Archive) warnFull(used, maxMemory int64) {
	a.logger.Warn("redis is nearly at its maxmemory: the archive stops appending, and drops and counts its events, until Redis has room again, so that the idempotency keys keep theirs; raise maxmemory, or lower the archive's max_events or retention",
		zap.String("source", a.cfg.Source), zap.Int64("used_memory", used), zap.Int64("maxmemory", maxMemory),
		zap.Float64("archive_share", archiveMemoryShare))
}

// Size returns the number of events kept, those older than retention
// left out (and dropped).
func (a *Archive) Size(ctx context.Context) (int64, error) {
	return a.backend.size(ctx, a.cutoff())
}

// Event returns one event, whole; false when there is none with that id,
// or it is older than retention.
func (a *Archive) Event(ctx context.Context, id event.ID) (Event, bool, error) {
	if id.Less(a.cutoff()) {
		return Event{}, false, nil
	}
	ev, ok, err := a.backend.event(ctx, id)
	if ok && err == nil {
		ev.whole()
		err = a.fillAttempts(ctx, &ev)
	}
	return ev, ok, err
}

// cutoff is the id of the oldest moment retention keeps: reads leave out
// what is older, whether or not an append has trimmed it yet.
func (a *Archive) cutoff() event.ID {
	return event.ID{MS: uint64(max(now().Add(-a.cfg.Retention).UnixMilli(), 0))}
}

// Stop stops the background queue, appending what it holds, and releases
// what the archive holds of its store.
func (a *Archive) Stop() {
	a.queue.stop()
	a.backend.close()
}

// Dropped counts an event left out before it was added (a list written at
// a bounded rate, past that rate).
func (a *Archive) Dropped() { a.metrics.dropped.Inc() }

// appended counts the outcome of one append.
func (a *Archive) appended(n int, err error) {
	if err != nil {
		a.metrics.errors.Add(float64(n))
		a.Warn("appending to the archive failed; the events are not archived", err)
		return
	}
	a.metrics.events.Add(float64(n))
}

// Warn logs an archive error at most once every 30 seconds.
func (a *Archive) Warn(msg string, err error) {
	t := time.Now().UnixNano()
	if last := a.metrics.lastWarned.Load(); t-last > int64(30*time.Second) && a.metrics.lastWarned.CompareAndSwap(last, t) {
		a.logger.Warn(msg, zap.Error(err))
	}
}

// Entry is one event on its way to the archive: the request (its URI,
// headers and body redacted; Body nil when not kept) and its outcome.
type Entry struct {
	event.Request
	Result   string
	Status   int
	Duration time.Duration
	// BodyHash is the SHA-256 of the body as received; zero when the body
	// was not read (a refusal over max_body, or of an address not
	// allowed), and then not shown.
	BodyHash [32]byte
	HasBody  bool // Body is kept
	Redacted bool // values of the body were redacted
	// Omitted says why the body is not kept although bodies are on (""
	// when it is kept, or bodies are off).
	Omitted string
	// Reason says why a refused request was refused; Size is its body's
	// size in bytes (what it announced, when it was not read), -1 when
	// unknown. The list of refusals only.
	Reason string
	Size   int64
	// BodyOwned tells that Body is not the request's pooled buffer.
	BodyOwned bool
	// Items are the keys of a batch's items, in the request's order
	// (docs/caddyfile.md: Batches); nil for a request of one event.
	Items []Item
	// Attempts is the application's answer to the request, in dedup mode
	// (docs/archive.md#attempts); none otherwise.
	Attempts event.History
}

// Item is one item of an archived batch: its key, and whether the request
// handed it on (the others were seen before, or were in flight).
type Item struct {
	Key string `json:"key"`
	New bool   `json:"new"`
}

// OwnBody copies the body out of the request's pooled buffer, for an
// entry that outlives the request.
func (e *Entry) OwnBody() {
	if e.HasBody && !e.BodyOwned {
		e.Body = append([]byte(nil), e.Body...)
		e.BodyOwned = true
	}
}

// ownAttempts copies the attempts out of the request's buffers, for an
// entry kept as it is (the memory store's ring).
func (e *Entry) ownAttempts() {
	if len(e.Attempts.Attempts) == 0 {
		return
	}
	as := slices.Clone(e.Attempts.Attempts)
	for i := range as {
		as[i].Body = bytes.Clone(as[i].Body)
	}
	e.Attempts.Attempts = as
}

// size is what the entry costs the queue.
func (e *Entry) size() int { return len(e.Headers) + len(e.Body) + 256 + e.attemptsSize() }

// attemptsSize is about what the entry's attempts take encoded, a little
// more.
func (e *Entry) attemptsSize() int {
	n := 0
	for i := range e.Attempts.Attempts {
		a := &e.Attempts.Attempts[i]
		n += len(a.Destination) + len(a.Headers) + len(a.Body) + len(a.Error) + 96
	}
	return n
}

// Fields of an archived event besides those of internal/event. An event's
// body is stored apart from these (see backend), and body_size says that
// it is.
const (
	fieldBodySize = "body_size"    // bytes of the stored body
	fieldOmitted  = "body_omitted" // why the body is not kept
	fieldReason   = "reason"       // refusals: why it was refused
	fieldSize     = "size"         // refusals: the body's size, -1 unknown
	fieldItems    = "items"        // a batch's items: a line each, "1" (new) or "0", a tab, the key
)

// fieldCount is the most fields and values of an entry.
const fieldCount = 42

// appendFields appends the entry's fields and values to f: everything but
// the body, which the backends store apart.
func (e *Entry) appendFields(f []any) []any {
	f = append(f,
		event.FieldReceived, event.Millis(e.Received),
		event.FieldSource, e.Source,
		event.FieldKey, e.Key,
		event.FieldResult, e.Result,
		event.FieldStatus, strconv.Itoa(e.Status),
		event.FieldDurationUS, strconv.FormatInt(e.Duration.Microseconds(), 10),
		event.FieldMethod, e.Method,
		event.FieldURI, e.URI,
		event.FieldHost, e.Host,
		event.FieldProto, e.Proto,
		event.FieldRemote, e.Remote,
		event.FieldHeaders, e.Headers,
	)
	if sum := e.bodySHA256(); sum != "" {
		f = append(f, event.FieldBodySHA256, sum)
	}
	if e.HasBody {
		f = append(f, fieldBodySize, strconv.Itoa(len(e.Body)))
	}
	if e.Omitted != "" {
		f = append(f, fieldOmitted, e.Omitted)
	}
	if e.Redacted {
		f = append(f, event.FieldRedacted, "body")
	}
	if e.Reason != "" {
		f = append(f, fieldReason, e.Reason, fieldSize, strconv.FormatInt(e.Size, 10))
	}
	if len(e.Items) > 0 {
		f = append(f, fieldItems, encodeItems(e.Items))
	}
	if e.Attempts.Total > 0 {
		f = append(f, event.FieldHistory, event.AppendHistory(make([]byte, 0, e.attemptsSize()), &e.Attempts))
	}
	if e.Trace.Parent != "" {
		f = append(f, event.FieldTraceParent, e.Trace.Parent)
		if e.Trace.State != "" {
			f = append(f, event.FieldTraceState, e.Trace.State)
		}
	}
	return f
}

// bodySHA256 is the body's SHA-256 in hex, "" when the body was not read.
func (e *Entry) bodySHA256() string {
	if e.BodyHash == ([32]byte{}) {
		return ""
	}
	return hex.EncodeToString(e.BodyHash[:])
}

// encodeItems writes a batch's items as the items field holds them.
func encodeItems(items []Item) string {
	var b strings.Builder
	for _, it := range items {
		if it.New {
			b.WriteString("1\t")
		} else {
			b.WriteString("0\t")
		}
		b.WriteString(it.Key)
		b.WriteByte('\n')
	}
	return b.String()
}

// decodeItems reads the items field.
func decodeItems(s string) []Item {
	var out []Item
	for line := range strings.Lines(s) {
		flag, key, ok := strings.Cut(strings.TrimSuffix(line, "\n"), "\t")
		if ok {
			out = append(out, Item{Key: key, New: flag == "1"})
		}
	}
	return out
}

// archiveMetrics holds one archive's resolved series.
type archiveMetrics struct {
	events, errors, dropped prometheus.Counter
	lastWarned              atomic.Int64
}

func newArchiveMetrics(source, kind string) *archiveMetrics {
	if kind == Refused {
		return &archiveMetrics{
			events:  metrics.RefusalsListed.WithLabelValues(source),
			errors:  metrics.RefusalsErrors.WithLabelValues(source),
			dropped: metrics.RefusalsUnlisted.WithLabelValues(source),
		}
	}
	return &archiveMetrics{
		events:  metrics.ArchiveEvents.WithLabelValues(source),
		errors:  metrics.ArchiveErrors.WithLabelValues(source),
		dropped: metrics.ArchiveDropped.WithLabelValues(source),
	}
}
