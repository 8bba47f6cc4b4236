package webhookidempotency

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
)

// The archive (docs/archive.md): every delivery that passed verification
// and got a key is appended to a per-source archive, for audit and
// reprocessing. This file holds its configuration and what the request
// path does; the background queue is in archive_queue.go, the stores' sides
// in archive_memory.go and archive_redis.go, and reading it back in
// archive_query.go.

// ArchiveConfig keeps every verified delivery of the route: time received,
// source, key, result, method, URI, headers, client address, body, the
// answer's status and the handling time. With the redis store the events
// are a Redis Stream per source, `{<key_prefix>:<source>}:archive`; with the
// memory store, a ring per source that a restart empties.
type ArchiveConfig struct {
	// How long an event is kept. Default: 30d.
	Retention caddy.Duration `json:"retention,omitempty"`

	// The most events kept per source; older ones are dropped first.
	// Default: 1000000 with the redis store, 10000 with the memory store.
	MaxEvents int `json:"max_events,omitempty"`

	// Whether request bodies are kept: `on` or `off` (only their SHA-256
	// is kept). A replay's body is never kept, only its SHA-256: it is the
	// body of the delivery it replays. Default: `on`.
	Bodies string `json:"bodies,omitempty"`

	// Header and JSON values replaced by `"[redacted]"` before an event is
	// stored: `header:<name>` or `json:<path>` (names and array indexes
	// separated by dots; `#` is every element of an array, `*` every
	// member of an object). Headers that carry a credential
	// (Authorization, Proxy-Authorization, Cookie, X-Gitlab-Token,
	// asaas-access-token, and the header of a token scheme) are always
	// redacted. Default: none besides those.
	Redact []string `json:"redact,omitempty"`

	// Where the admin API redelivers an archived event when the route has
	// no inbox, e.g. `http://app:3000/webhooks/stripe`. Placeholders such
	// as `{env.APP}` are resolved at provision time. Default: none (only
	// a route with an inbox can redeliver).
	RedeliverTo string `json:"redeliver_to,omitempty"`
}

// Defaults of the archive's options.
const (
	defaultArchiveRetention       = 30 * 24 * time.Hour
	defaultArchiveMaxEventsRedis  = 1_000_000
	defaultArchiveMaxEventsMemory = 10_000
)

// unmarshalCaddyfile parses the archive block; the dispenser is on
// `archive`:
//
//	archive [<retention>] {
//		retention    <duration>
//		max_events   <n>
//		bodies       on | off
//		redact       header:<name> | json:<path> ...
//		redeliver_to <url>
//	}
func (ac *ArchiveConfig) unmarshalCaddyfile(d *caddyfile.Dispenser, inline bool) error {
	args := d.RemainingArgs()
	if inline {
		// on the directive line: `archive <retention>`
		args = []string{d.Val()}
	}
	if len(args) > 1 {
		return d.Errf("archive takes one retention, got extra argument '%s'", args[1])
	} else if len(args) == 1 {
		dur, err := parseArchiveRetention(args[0])
		if err != nil {
			return d.Errf("%v", err)
		}
		ac.Retention = dur
	}
	if inline {
		return nil
	}
	return parseBlock(d, "archive", archiveOptions, ac.setOption)
}

// archiveOptions are the subdirectives of the archive block and the values
// each takes.
var archiveOptions = map[string]arity{
	"retention": takesOne, "max_events": takesOne, "bodies": takesOne, "redact": takesSome,
	"redeliver_to": takesOne,
}

// setOption applies a subdirective of the archive block, its values
// checked by the parser (v is the first).
func (ac *ArchiveConfig) setOption(name, v string, args []string) (err error) {
	switch name {
	case "retention":
		ac.Retention, err = parseArchiveRetention(v)
	case "max_events":
		ac.MaxEvents, err = parseMaxEvents(v)
	case "bodies":
		ac.Bodies = v
		_, err = parseArchiveBodies(v)
	case "redact":
		for _, a := range args {
			if _, _, err := parseRedactRule(a); err != nil {
				return err
			}
		}
		ac.Redact = append(ac.Redact, args...)
	case "redeliver_to":
		ac.RedeliverTo = v
		err = checkRedeliverTo(v)
	}
	return err
}

// archive is the runtime of one handler's archive.
type archive struct {
	source      string
	retention   time.Duration
	maxEvents   int
	bodies      bool
	redact      *redactor
	redeliverTo string
	backend     archiveBackend
	queue       *archiveQueue
	metrics     *archiveMetrics
	logger      *zap.Logger
}

// newArchive resolves the configuration with the parser's rules and
// attaches the archive to the handler's store.
func newArchive(cfg *ArchiveConfig, h *Handler) (*archive, error) {
	a := &archive{
		source:    h.Source,
		retention: time.Duration(cfg.Retention),
		maxEvents: cfg.MaxEvents,
		logger:    h.logger,
		metrics:   newArchiveMetrics(h.Source),
	}
	if a.retention == 0 {
		a.retention = defaultArchiveRetention
	} else if a.retention < 0 {
		return nil, fmt.Errorf("invalid archive retention '%s': must be positive", a.retention)
	}
	if a.maxEvents < 0 {
		return nil, fmt.Errorf("invalid archive max_events '%d': want a positive integer", a.maxEvents)
	}
	bodies := cfg.Bodies
	if bodies == "" {
		bodies = "on"
	}
	var err error
	if a.bodies, err = parseArchiveBodies(bodies); err != nil {
		return nil, err
	}
	if cfg.RedeliverTo != "" {
		a.redeliverTo = caddy.NewReplacer().ReplaceKnown(cfg.RedeliverTo, "")
		if err := checkRedeliverTo(a.redeliverTo); err != nil {
			return nil, err
		}
	}
	if a.redact, err = h.redactor(cfg.Redact); err != nil {
		return nil, err
	}
	if err := a.checkKeyNotRedacted(h.keys); err != nil {
		return nil, err
	}
	switch s := h.store.store.(type) {
	case *RedisStore:
		if a.maxEvents == 0 {
			a.maxEvents = defaultArchiveMaxEventsRedis
		}
		a.backend, err = newRedisArchive(s, a)
	case *MemoryStore:
		if a.maxEvents == 0 {
			a.maxEvents = defaultArchiveMaxEventsMemory
		}
		a.backend, err = newMemoryArchive(s, a)
	default:
		err = fmt.Errorf("the archive does not support the store %T", s)
	}
	if err != nil {
		return nil, fmt.Errorf("archive: %v", err)
	}
	a.queue = newArchiveQueue(a)
	return a, nil
}

// checkKeyNotRedacted refuses a key taken from a redacted header or JSON
// path: the key is stored (as the store key and in every event), so the
// redacted value would be stored after all.
func (a *archive) checkKeyNotRedacted(keys []keySource) error {
	for _, ks := range keys {
		switch ks.kind {
		case keyHeader:
			if a.redact.redactsHeader(ks.arg) {
				return fmt.Errorf("archive redacts header %s, which is a key source: the key is stored, so the header's value would be too; key on another value or stop redacting it", ks.arg)
			}
		case keyJSON:
			probe := []byte(`{}`)
			if path, err := splitRedactPath(ks.arg); err == nil {
				probe = jsonProbe(path)
			}
			if _, changed, _ := a.redact.body(probe); changed {
				return fmt.Errorf("archive redacts the JSON value of key source json:%s: the key is stored, so the value would be too; key on another value or stop redacting it", ks.arg)
			}
		}
	}
	return nil
}

// jsonProbe builds a JSON document with a value at path, to see whether a
// redactor reaches it.
func jsonProbe(path []string) []byte {
	doc := `"probe"`
	for i := len(path) - 1; i >= 0; i-- {
		seg := strings.TrimPrefix(path[i], "\x00")
		if n, err := strconv.Atoi(seg); err == nil && n >= 0 && n < 64 {
			doc = "[" + strings.Repeat("0,", n) + doc + "]"
			continue
		}
		doc = `{` + strconv.Quote(seg) + `:` + doc + `}`
	}
	return []byte(doc)
}

// stop stops the background queue, appending what it holds, and releases
// what the archive holds of its store.
func (a *archive) stop() {
	a.queue.stop()
	a.backend.close()
}

// appended counts the outcome of one append.
func (a *archive) appended(n int, err error) {
	if err != nil {
		a.metrics.errors.Add(float64(n))
		a.warn("appending to the archive failed; the events are not archived", err)
		return
	}
	a.metrics.events.Add(float64(n))
}

// warn logs an archive error at most once every 30 seconds.
func (a *archive) warn(msg string, err error) {
	t := time.Now().UnixNano()
	if last := a.metrics.lastWarned.Load(); t-last > int64(30*time.Second) && a.metrics.lastWarned.CompareAndSwap(last, t) {
		a.logger.Warn(msg, zap.Error(err))
	}
}

// archiveEntry is one event on its way to the archive.
type archiveEntry struct {
	received  time.Time
	source    string
	key       string
	result    string
	status    int
	duration  time.Duration
	method    string
	uri       string
	host      string
	proto     string
	remote    string
	headers   string // "Name: value\r\n" lines, redacted
	body      []byte // redacted; nil when not kept
	hasBody   bool
	redacted  bool // the body had values redacted
	ownsBody  bool // body is not the request's pooled buffer
	bodyHash  [sha256.Size]byte
	sizeBytes int
}

// Stream entry fields of an archived event, besides the fields it shares
// with an inbox event (inbox_accept.go).
const (
	fieldResult     = "result"
	fieldStatus     = "status"
	fieldDurationUS = "duration_us"
	fieldBodySHA256 = "body_sha256"
	fieldRedacted   = "redacted" // "body" when values of the body were redacted
)

// archiveFieldCount is the most fields and values of an entry.
const archiveFieldCount = 34

// appendFields appends the entry's stream fields and values to f.
func (e *archiveEntry) appendFields(f []any) []any {
	f = append(f,
		fieldReceived, strconv.FormatInt(e.received.UnixMilli(), 10),
		fieldSource, e.source,
		fieldKey, e.key,
		fieldResult, e.result,
		fieldStatus, strconv.Itoa(e.status),
		fieldDurationUS, strconv.FormatInt(e.duration.Microseconds(), 10),
		fieldMethod, e.method,
		fieldURI, e.uri,
		fieldHost, e.host,
		fieldProto, e.proto,
		fieldRemote, e.remote,
		fieldHeaders, e.headers,
		fieldBodySHA256, hex.EncodeToString(e.bodyHash[:]),
	)
	if e.hasBody {
		f = append(f, fieldBody, e.body)
	}
	if e.redacted {
		f = append(f, fieldRedacted, "body")
	}
	return f
}

// ownBody copies the body out of the request's pooled buffer, for an
// entry that outlives the request.
func (e *archiveEntry) ownBody() {
	if e.hasBody && !e.ownsBody {
		e.body = append([]byte(nil), e.body...)
		e.ownsBody = true
	}
}

// The request path.

// trackStatus wraps the response writer so that the archive learns the
// status of whatever answers the request.
func (rs *requestState) trackStatus() {
	rs.status = &statusWriter{ResponseWriterWrapper: &caddyhttp.ResponseWriterWrapper{ResponseWriter: rs.w}}
	rs.w = rs.status
}

// archiveEntry builds the archive event of this request: its body is
// redacted (or not kept), its headers redacted.
func (rs *requestState) archiveEntry(result string, status int) *archiveEntry {
	a := rs.h.archive
	r := rs.r
	proto, remote := requestOrigin(r)
	e := &archiveEntry{
		received: rs.start,
		source:   a.source,
		key:      rs.keyValue,
		result:   result,
		status:   status,
		duration: time.Since(rs.start),
		method:   r.Method,
		uri:      a.redact.uri(r.RequestURI),
		host:     r.Host,
		proto:    proto,
		remote:   remote,
		headers:  headerBlock(r.Header, skipArchiveHeader, a.redact),
		bodyHash: rs.bodyHash,
	}
	if a.bodies && result != resultReplayed {
		body, changed, ok := a.redact.body(rs.body.buf)
		switch {
		case !ok:
			a.warn("redacting an archived body failed; the event is archived without its body", errors.New("a redacted JSON value was not where it was found"))
		case changed:
			e.body, e.hasBody, e.redacted, e.ownsBody = body, true, true, true
		default:
			e.body, e.hasBody = body, true
		}
	}
	e.sizeBytes = len(e.headers) + len(e.body) + 256
	return e
}

// archive appends the request's event in the background, unless it went
// out with the key's completion.
func (rs *requestState) archive() {
	if rs.archived || rs.result == "" {
		return
	}
	rs.archived = true
	rs.h.archive.queue.add(rs.archiveEntry(rs.result, rs.status.code))
}

// statusWriter remembers the status of the answer it passes on.
type statusWriter struct {
	*caddyhttp.ResponseWriterWrapper
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 && (code >= 200 || code == 101) {
		w.code = code
	}
	w.ResponseWriterWrapper.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.code == 0 {
		w.code = 200
	}
	return w.ResponseWriterWrapper.Write(p)
}

// ReadFrom copies through Write, so an answer without WriteHeader counts
// as 200.
func (w *statusWriter) ReadFrom(src io.Reader) (int64, error) {
	if w.code == 0 {
		w.code = 200
	}
	return w.ResponseWriterWrapper.ReadFrom(src)
}
