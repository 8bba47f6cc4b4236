package webhookidempotency

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/archive"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/cfparse"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/redact"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/results"
	"github.com/webhookguard/caddy-webhook-idempotency/providers"
)

// The archive (docs/archive.md): every delivery that passed verification
// and got a key is appended to a per-source archive, for audit and
// reprocessing. This file holds its configuration, the archive built from
// it (internal/archive), the route's redaction rules, and what the request
// path does.

// ArchiveConfig keeps every verified delivery of the route: time received,
// source, key, result, method, URI, headers, client address, body, the
// answer's status and the handling time. With the file store the events
// are a bucket per source in its file, kept across restarts; with the
// redis store a Redis Stream per source, `{<key_prefix>:<source>}:archive`,
// their bodies in `{<key_prefix>:<source>}:archive:body` and their
// redeliveries in `{<key_prefix>:<source>}:archive:attempts…`
// (docs/archive.md#attempts); with the memory store, a ring per source
// that a restart empties.
type ArchiveConfig struct {
	// How long an event is kept. Default: 30d.
	Retention caddy.Duration `json:"retention,omitempty"`

	// The most events kept per source; older ones are dropped first.
	// Default: 1000000 with the file and redis stores (on Redis, about
	// 250 bytes plus the headers plus 1.2 times the body each:
	// docs/stores.md, Sizing), 10000 with the memory store.
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
	return cfparse.Block(d, "archive", archiveOptions, ac.setOption)
}

// archiveOptions are the subdirectives of the archive block and the values
// each takes.
var archiveOptions = map[string]cfparse.Arity{
	"retention": cfparse.One, "max_events": cfparse.One, "bodies": cfparse.One, "redact": cfparse.Some,
	"redeliver_to": cfparse.One,
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
			if _, _, err := redact.ParseRule(a); err != nil {
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

// newArchive resolves the archive's configuration with the parser's rules
// and builds it on the handler's store.
func (h *Handler) newArchive() (*archive.Archive, error) {
	cfg := h.Archive
	ac := archive.Config{
		Source:       h.Source,
		Retention:    time.Duration(cfg.Retention),
		MaxEvents:    cfg.MaxEvents,
		KeepResponse: h.keepResponse,
		Logger:       h.logger,
	}
	if ac.Retention == 0 {
		ac.Retention = archive.DefaultRetention
	} else if ac.Retention < 0 {
		return nil, fmt.Errorf("invalid archive retention '%s': must be positive", ac.Retention)
	}
	if ac.MaxEvents < 0 {
		return nil, fmt.Errorf("invalid archive max_events '%d': want a positive integer", ac.MaxEvents)
	}
	bodies := cfg.Bodies
	if bodies == "" {
		bodies = "on"
	}
	var err error
	if ac.Bodies, err = parseArchiveBodies(bodies); err != nil {
		return nil, err
	}
	if cfg.RedeliverTo != "" {
		ac.RedeliverTo = caddy.NewReplacer().ReplaceKnown(cfg.RedeliverTo, "")
		if err := checkRedeliverTo(ac.RedeliverTo); err != nil {
			return nil, err
		}
	}
	if ac.Redact, err = h.redactor(cfg.Redact); err != nil {
		return nil, err
	}
	if err := checkKeyNotRedacted(ac.Redact, h.keys); err != nil {
		return nil, err
	}
	return archive.New(ac, h.store.backend)
}

// checkKeyNotRedacted refuses a key taken from a redacted header or JSON
// path: the key is stored (as the store key and in every event), so the
// redacted value would be stored after all.
func checkKeyNotRedacted(rd *redact.Redactor, keys []keySource) error {
	for _, ks := range keys {
		switch ks.kind {
		case keyHeader:
			if rd.RedactsHeader(ks.arg) {
				return fmt.Errorf("archive redacts header %s, which is a key source: the key is stored, so the header's value would be too; key on another value or stop redacting it", ks.arg)
			}
		case keyJSON:
			probe := []byte(`{}`)
			if path, err := redact.SplitPath(ks.arg); err == nil {
				probe = jsonProbe(path)
			}
			if _, changed, _ := rd.Body(probe); changed {
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

// secretPlaces are the headers and query parameters a route always
// redacts: redact.SecretHeaders, the headers it forwards with values of
// its own, and where its verify scheme reads a token
// (providers.TokenPlaces).
func (h *Handler) secretPlaces() (headers, query []string) {
	headers = append(append([]string(nil), redact.SecretHeaders...), h.forwardHeaders()...)
	if h.Verify == nil {
		return headers, nil
	}
	cfg := *h.Verify
	cfg.Scheme = h.scheme()
	tokenHeaders, query := providers.TokenPlaces(cfg)
	return append(headers, tokenHeaders...), query
}

// redactor builds the route's redactor: its secret headers, the
// credentials its preset's provider puts in bodies (providers.go) and its
// rules (`redact` entries, nil for none). The headers and query parameters
// the route takes its key from are never redacted for their name alone:
// the key is stored anyway (a key taken from a header redacted by name, in
// secretHeaders or a rule, is refused by the archive).
func (h *Handler) redactor(rules []string) (*redact.Redactor, error) {
	rules = append(slices.Clip(rules), providers.Redactions(h.Provider)...)
	if scheme := h.scheme(); scheme != h.Provider {
		rules = append(rules, providers.Redactions(scheme)...)
	}
	headers, query := h.secretPlaces()
	rd, err := redact.New(rules, headers...)
	if err != nil {
		return nil, err
	}
	for _, q := range query {
		rd.RedactQuery(q)
	}
	for _, ks := range h.keys {
		switch ks.kind {
		case keyHeader:
			rd.KeepHeader(ks.arg)
		case keyQuery:
			rd.KeepQuery(ks.arg)
		}
	}
	return rd, nil
}

// The request path.

// trackStatus wraps the response writer so that the archive learns the
// status of whatever answers the request.
func (rs *requestState) trackStatus() {
	rs.status = &statusWriter{ResponseWriterWrapper: &caddyhttp.ResponseWriterWrapper{ResponseWriter: rs.w}}
	rs.w = rs.status
}

// archiveEntry builds the archive event of this request: its body is
// redacted (or not kept), its URI and headers redacted.
func (rs *requestState) archiveEntry(result string, status int) *archive.Entry {
	a := rs.h.archive
	cfg := a.Config()
	r := rs.r
	proto, remote := event.Origin(r)
	e := &archive.Entry{
		Request: event.Request{
			Source:   cfg.Source,
			Key:      rs.keyValue,
			Method:   r.Method,
			URI:      cfg.Redact.URI(r.RequestURI),
			Host:     r.Host,
			Proto:    proto,
			Remote:   remote,
			Headers:  event.HeaderBlock(rs.receivedHeader(), event.SkipArchiveHeader, cfg.Redact.RedactsHeader),
			Received: rs.start,
			Trace:    rs.traceContext(),
		},
		Result:   result,
		Status:   status,
		Duration: time.Since(rs.start),
		BodyHash: rs.bodyHash,
	}
	if rs.attempt[0].Number > 0 {
		e.Attempts = event.History{Total: 1, Attempts: rs.attempt[:]}
	}
	if bs := rs.batch; bs != nil {
		e.Items = make([]archive.Item, len(bs.values))
		for i, v := range bs.values {
			e.Items[i] = archive.Item{Key: v, New: bs.isNew[i]}
		}
	}
	if cfg.Bodies && result != results.Replayed {
		body, changed, err := cfg.Redact.Body(rs.body.buf)
		switch {
		case errors.Is(err, redact.ErrNotStrictJSON):
			// what a lenient parser reads, the rules cannot see: the event
			// says why it has no body
			e.Omitted = err.Error()
		case err != nil:
			e.Omitted = "redaction failed: " + err.Error()
			a.Warn("redacting an archived body failed; the event is archived without its body", err)
		case changed:
			e.Body, e.HasBody, e.Redacted, e.BodyOwned = body, true, true, true
		default:
			e.Body, e.HasBody = body, true
		}
	}
	return e
}

// answered records the application's answer to the request, the one
// attempt of dedup mode, kept with the archived event
// (docs/archive.md#attempts): its status (0 when the next handler failed
// without one), how long it took, its headers and body within
// keep_response, and the next handler's error. A body streamed past
// max_response is not held, and not kept.
func (rs *requestState) answered(rec *recorder, err error, handed time.Time) {
	a := &rs.attempt[0]
	*a = event.Attempt{At: handed, Destination: event.NextHandler, Number: 1, Status: rec.status, Latency: time.Since(handed)}
	if err != nil {
		a.Error = err.Error()
	}
	keep := rs.h.keepResponse
	if keep == 0 || rec.status == 0 {
		return
	}
	a.Headers, a.Truncated = event.KeptHeaders(rec.Header(), rs.h.archive.Config().Redact.RedactsHeader, keep)
	if rec.streaming {
		a.Truncated = true
		return
	}
	var cut bool
	a.Body, cut = event.KeptBody(rec.record[rec.headerEnd:], keep-len(a.Headers))
	a.Truncated = a.Truncated || cut
}

// archive appends the request's event in the background, unless it went
// out with the key's completion. err is what ServeHTTP returns: when
// nothing answered the request, Caddy answers with the error's status
// (502 for an upstream reverse_proxy could not reach), and so does the
// event.
func (rs *requestState) archive(err error) {
	if rs.archived || rs.result == "" {
		return
	}
	rs.archived = true
	status := rs.status.code
	if status == 0 && err != nil {
		status = errorStatus(err)
	}
	rs.h.archive.Add(rs.archiveEntry(rs.result, status))
}

// errorStatus is the status Caddy answers a handler's error with.
func errorStatus(err error) int {
	if he, ok := errors.AsType[caddyhttp.HandlerError](err); ok && he.StatusCode != 0 {
		return he.StatusCode
	}
	return http.StatusInternalServerError
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
