package webhookidempotency

import (
	"crypto/sha256"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dustin/go-humanize"
	"go.uber.org/zap"
	"golang.org/x/time/rate"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/archive"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/redact"
	"github.com/webhookguard/caddy-webhook-idempotency/providers"
)

// Refusals (docs/admin.md: Refusals): every request a route refuses (401,
// 403, 413, 422, 400, 508, 503 over the body budget or with the store or
// the keys down) is kept in a bounded list per source, in the route's
// store, so that an operator can see why a provider's dashboard says
// "failed" without a DEBUG log: when, the result and its reason, the
// client, method and path, the provider's delivery id when a header
// carries one, the body's size and SHA-256. Never a body, a signature or a
// secret. A flood of forgeries costs neither disk nor time: the list is
// written at a bounded rate, and what comes faster is counted, not listed.

// Bounds of the list of refusals.
const (
	refusalsKept      = 1000
	refusalsRetention = 7 * 24 * time.Hour
	// refusalsPerSecond and refusalsBurst bound how fast a source's
	// refusals are written to its store.
	refusalsPerSecond = 20
	refusalsBurst     = 50
	// tooLargeLogEvery is how often a 413 is logged at WARN, at most.
	tooLargeLogEvery = 10 * time.Second
)

// refusals is a route's list of refused requests.
type refusals struct {
	list     *archive.Archive
	limit    *rate.Limiter
	redact   *redact.Redactor
	idHeader []string     // headers that carry the provider's delivery id
	warned   atomic.Int64 // when a 413 was last logged (unix ns)
	quiet    atomic.Int64 // 413s not logged since
}

// newRefusals builds the route's list of refusals on its store.
func (h *Handler) newRefusals() (*refusals, error) {
	if archive.Supports(h.store.backend) != nil {
		return nil, nil // a store of another package that keeps no list
	}
	rd, err := h.redactor(nil)
	if err != nil {
		return nil, err
	}
	list, err := archive.New(archive.Config{
		Source: h.Source, Retention: refusalsRetention, MaxEvents: refusalsKept,
		Redact: rd, Logger: h.logger, Kind: archive.Refused,
	}, h.store.backend)
	if err != nil {
		return nil, err
	}
	rf := &refusals{list: list, limit: rate.NewLimiter(refusalsPerSecond, refusalsBurst), redact: rd}
	// the provider's delivery id: the headers of the preset's key chain,
	// and the route's own header keys
	if p, ok := providers.Lookup(h.Provider); ok {
		for _, k := range p.DefaultKey {
			if name, ok := strings.CutPrefix(k, "header:"); ok {
				rf.idHeader = append(rf.idHeader, name)
			}
		}
	}
	for _, ks := range h.keys {
		if ks.kind == keyHeader {
			rf.idHeader = append(rf.idHeader, ks.arg)
		}
	}
	return rf, nil
}

// stop stops the list's queue.
func (rf *refusals) stop() {
	if rf != nil {
		rf.list.Stop()
	}
}

// deliveryID is the provider's delivery id of r, from the first header of
// the route's that carries one; "" when none does.
func (rf *refusals) deliveryID(r *http.Request) string {
	for _, name := range rf.idHeader {
		if v := r.Header.Get(name); v != "" {
			if len(v) > 200 {
				v = v[:200]
			}
			return v
		}
	}
	return ""
}

// refused lists a refused request: its result (set already) and reason,
// the status it got. The body is the raw body when it was read, nil when
// it was not (its announced size is then listed).
func (rs *requestState) refused(status int, reason string) {
	rf := rs.h.refusals
	if rf == nil {
		return
	}
	if !rf.limit.Allow() {
		rf.list.Dropped()
		return
	}
	r := rs.r
	proto, remote := event.Origin(r)
	e := &archive.Entry{
		Request: event.Request{
			Source: rs.h.Source, Key: rf.deliveryID(r), Method: r.Method,
			URI: rf.redact.URI(r.RequestURI), Host: r.Host, Proto: proto, Remote: remote,
			Received: time.Now(),
		},
		Result: rs.result, Status: status, Reason: reason, Size: r.ContentLength,
	}
	if rs.body != nil && (len(rs.body.buf) > 0 || r.ContentLength == 0) {
		e.Size = int64(len(rs.body.buf))
		e.BodyHash = sha256.Sum256(rs.body.buf)
	}
	rf.list.Add(e)
}

// tooLarge lists a body over max_body and logs it at WARN, at most once
// every ten seconds with the number left out since: a provider that
// never retries a 413 (GitHub) loses that event for good.
func (rs *requestState) tooLarge(size int64) {
	reason := fmt.Sprintf("too large: %s > %s", sizeText(size), humanize.IBytes(uint64(rs.h.MaxBody)))
	rs.warnTooLarge(reason, "refused a body over max_body (413): a provider that does not retry it loses the event; raise max_body if the provider sends larger events",
		zap.Int64("max_body", rs.h.MaxBody))
}

// warnTooLarge lists a request refused with 413 for reason, and logs msg
// at WARN as tooLarge says.
func (rs *requestState) warnTooLarge(reason, msg string, fields ...zap.Field) {
	h := rs.h
	rs.refused(http.StatusRequestEntityTooLarge, reason)
	rf := h.refusals
	if rf == nil {
		return
	}
	now := time.Now().UnixNano()
	last := rf.warned.Load()
	if now-last < int64(tooLargeLogEvery) || !rf.warned.CompareAndSwap(last, now) {
		rf.quiet.Add(1)
		return
	}
	h.logger.Warn(msg, append(fields, zap.String("delivery_id", rf.deliveryID(rs.r)), zap.String("reason", reason),
		zap.Int64("not_logged_since", rf.quiet.Swap(0)))...)
}

// sizeText writes a body's size for a reason: `26.1 MB`, or `more` when
// it is not known (a chunked body cut at the limit).
func sizeText(n int64) string {
	if n < 0 {
		return "more"
	}
	return humanize.Bytes(uint64(n))
}
