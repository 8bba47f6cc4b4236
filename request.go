package webhookidempotency

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/forward"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/inbox"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/record"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/results"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// requestState is one delivery on its way through the handler. Its steps
// are below in the order ServeHTTP takes them.
type requestState struct {
	h    *Handler
	w    http.ResponseWriter
	r    *http.Request
	next caddyhttp.Handler
	repl *caddy.Replacer

	body        *pooledBody // see body.go
	reserved    int64       // what body counts against the body budget (body.go)
	event       []byte      // the verified content of a sealed delivery (body.go)
	bodyHash    [32]byte
	keyValue    string         // the resolved key value, as in the key placeholder
	keyFromBody bool           // the key is the body hash
	keyKind     keyKind        // the kind of the source the key came from, once resolved
	claim       store.Claim    // the store key (<key_prefix>:<source>:<value>), its guard or note (guard.go), the owner
	received    http.Header    // the headers as received, when the next handler gets others (forward.go)
	suspected   string         // the first key of the delivery's signed bytes, when seen under another id (guard.go)
	stored      *event.Request // the request as the inbox stores it, once built (inboxEvent)
	answer      *inbox.Answer  // the attempt at acceptance, with respond app within
	batch       *batchState    // the items of a batch (batch.go); nil for one delivery

	start  time.Time // when the handler got the request
	result string    // the result, once set

	// with an archive (archive.go)
	status   *statusWriter // learns the answer's status
	archived bool          // the event was archived
	// the application's answer, the one attempt of dedup mode (set
	// when the next handler has answered; Number 0 before)
	attempt [1]event.Attempt

	trace   *requestTrace // nil unless the request is traced (tracing.go)
	serving *serving      // what serve needs; nil before it
}

// serving is what a delivery handed to the next handler under its claim
// needs besides the request's state, in one allocation that a replay does
// not make.
type serving struct {
	lease  renewal    // the claim's renewal while the next handler works (lease.go)
	rec    recorder   // records the next handler's answer (recorder.go)
	handed bodyReader // the reader of the body handed on (body.go)
}

// Placeholder names.
const (
	placeholderSource = "http.webhook_idempotency.source"
	placeholderKey    = "http.webhook_idempotency.key"
	placeholderResult = "http.webhook_idempotency.result"
)

// storeRetryAfter is the Retry-After of a 503 when the store is down.
const storeRetryAfter = "5"

// completionCtx is the context of Complete and Release: they must run even
// when the client went away, and every store bounds its own calls.
var completionCtx = context.Background()

// newRequest starts a delivery: the source placeholder and log field are
// set for every request the handler sees.
func (h *Handler) newRequest(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) *requestState {
	rs := &requestState{h: h, w: w, r: r, next: next}
	rs.repl, _ = r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	logged := false // a webhook handler before this one logs the request's fields
	if rs.repl != nil {
		_, logged = rs.repl.Get(placeholderSource)
		rs.repl.Set(placeholderSource, h.sourceValue)
	}
	if extra, ok := r.Context().Value(caddyhttp.ExtraLogFieldsCtxKey).(*caddyhttp.ExtraLogFields); ok && !logged {
		extra.Add(zap.Inline((*logFields)(rs)))
	}
	rs.start = now()
	rs.startTrace()
	return rs
}

// logFields writes a request's placeholders into its access-log line,
// under their names without "http.": one of Caddy's extra log fields,
// read when the line is written, where a field set for each placeholder
// as it is set cost the request three copies of the fields' list. The
// values are the replacer's, so the line of a request that went through
// two such handlers gives the last one's, once.
type logFields requestState

// MarshalLogObject implements zapcore.ObjectMarshaler.
func (f *logFields) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	rs := (*requestState)(f)
	source, key, result := rs.h.Source, rs.keyValue, rs.result
	if rs.repl != nil {
		source, _ = rs.repl.GetString(placeholderSource)
		key, _ = rs.repl.GetString(placeholderKey)
		result, _ = rs.repl.GetString(placeholderResult)
	}
	enc.AddString(placeholderSource[len("http."):], source)
	if key != "" {
		enc.AddString(placeholderKey[len("http."):], key)
	}
	if result != "" {
		enc.AddString(placeholderResult[len("http."):], result)
	}
	return nil
}

// handled counts the handling time of a delivery, when the request was
// one (not skipped, nor a handshake, and with a result).
func (rs *requestState) handled() {
	switch rs.result {
	case "", results.Skipped, results.Handshake:
		return
	}
	rs.h.series.Handled(time.Since(rs.start))
}

// callNext hands the request to the next handler, the application, and
// counts the time it took to answer.
func (rs *requestState) callNext(w http.ResponseWriter) error {
	return rs.callNextSince(w, time.Now())
}

// callNextSince is callNext for a caller that took the time it hands the
// request on (start).
func (rs *requestState) callNextSince(w http.ResponseWriter, start time.Time) error {
	err := rs.next.ServeHTTP(w, rs.r)
	rs.h.series.App(time.Since(start))
	return err
}

// resultValues are the results, boxed once for the replacer.
var resultValues = func() (v [len(results.All)]any) {
	for i, r := range results.All {
		v[i] = r
	}
	return v
}()

// setResult records the request's result: placeholder (and so the
// access-log field), trace, metric.
func (rs *requestState) setResult(result string) {
	rs.result = result
	i := results.Index(result)
	if rs.repl != nil {
		if i >= 0 {
			rs.repl.Set(placeholderResult, resultValues[i])
		} else {
			rs.repl.Set(placeholderResult, result)
		}
	}
	rs.traceResult(result)
	rs.h.metrics.countResult(i)
	if ce := rs.h.logger.Check(zap.DebugLevel, "handled delivery"); ce != nil {
		ce.Write(zap.String("key", rs.claim.Key), zap.String("result", result))
	}
}

// skip passes a request whose method is not processed on untouched. The
// key placeholder is set, empty, so a header_up that sends it sends
// nothing rather than the placeholder's text.
func (rs *requestState) skip() error {
	if rs.repl != nil {
		rs.repl.Set(placeholderKey, "")
	}
	rs.setResult(results.Skipped)
	return rs.next.ServeHTTP(rs.w, rs.r)
}

// looped reports whether the request was sent by this route's own inbox or
// archive, or came through this route before: its Webhook-Via names the
// route's key namespace (docs/inbox.md: Loops).
func (rs *requestState) looped() bool {
	return len(rs.r.Header[event.ViaHeader]) > 0 && event.HasVia(rs.r.Header, rs.h.namespace())
}

// loop answers a request that came back to the route it went through:
// 508, before its body is read. An inbox dead-letters the event at once.
func (rs *requestState) loop() error {
	rs.setResult(results.Loop)
	rs.refused(http.StatusLoopDetected, "delivery loop: sent back by this route's own inbox or redelivery")
	rs.h.logger.Warn("request sent back to the route it came through (Webhook-Via names this route); answering 508: deliver_to and redeliver_to must lead to the application, not to this route",
		zap.Strings("webhook_via", rs.r.Header[event.ViaHeader]))
	return writeError(rs.w, http.StatusLoopDetected, msgLoop, "")
}

// bodyFailed answers a body that could not be read: 413 when it is too
// large; 503 with Retry-After when the body budget has no room for it;
// 408 when it did not arrive within body_timeout (the connection, whose
// body is half read, is then closed); the error of an earlier handler
// (such as request_body's 413) as it is; else 400. A body that never
// arrived has no result: it is not a delivery.
func (rs *requestState) bodyFailed(err error) error {
	var maxErr *http.MaxBytesError
	if errors.As(err, &maxErr) || errors.Is(err, errBodyTooLarge) {
		rs.setResult(results.TooLarge)
		rs.tooLarge(rs.r.ContentLength)
		return rs.answerTooLarge()
	}
	if errors.Is(err, errOverBudget) {
		// the rest of the body stays unread: the connection goes
		rs.setResult(results.OverBudget)
		rs.refused(http.StatusServiceUnavailable, errOverBudget.Error())
		rs.w.Header().Set("Connection", "close")
		return writeError(rs.w, http.StatusServiceUnavailable, errOverBudget.Error(), budgetRetryAfter(rs.h))
	}
	if errors.Is(err, errBodyTimeout) {
		if ce := rs.h.logger.Check(zap.DebugLevel, "request body not received in time"); ce != nil {
			ce.Write(zap.Duration("body_timeout", time.Duration(rs.h.BodyTimeout)))
		}
		rs.w.Header().Set("Connection", "close")
		return writeError(rs.w, http.StatusRequestTimeout, errBodyTimeout.Error(), "")
	}
	var he caddyhttp.HandlerError
	if errors.As(err, &he) {
		return err
	}
	return caddyhttp.Error(http.StatusBadRequest, err)
}

// verify checks the signature on the raw bytes, before any store access.
// A sealed delivery (Stone's) keeps its content: the key and the body hash
// are taken from the event, not from an envelope that is encrypted anew
// for each attempt.
func (rs *requestState) verify() error {
	v := rs.h.verification
	if v == nil {
		return nil
	}
	content, err := v.Open(rs.r, rs.body.buf)
	if err != nil {
		return err
	}
	if content != nil {
		rs.event = content
		if v.Decrypt() {
			rs.r.Header.Set("Content-Type", "application/json")
			rs.r.Header.Set("Content-Length", strconv.Itoa(len(content)))
		}
	}
	return nil
}

// unauthorized answers a delivery whose signature failed: 401 with the
// reason; 503 when it cannot be verified yet.
func (rs *requestState) unauthorized(err error) error {
	if errors.Is(err, signature.ErrUnavailable) {
		// the keys are not loaded yet: the sender retries once they are
		rs.setResult(results.Unavailable)
		rs.refused(http.StatusServiceUnavailable, signature.ErrUnavailable.Reason)
		return writeError(rs.w, http.StatusServiceUnavailable, signature.ErrUnavailable.Reason, rs.h.verification.RetryAfter())
	}
	if errors.Is(err, signature.ErrAmbiguous) {
		return rs.ambiguous(err)
	}
	rs.setResult(results.InvalidSignature)
	reason := signature.ErrInvalid.Reason
	var ve *signature.Error
	if errors.As(err, &ve) {
		reason = ve.Reason
	}
	if ce := rs.h.logger.Check(zap.DebugLevel, "rejected delivery"); ce != nil {
		ce.Write(zap.String("reason", reason))
	}
	rs.refused(http.StatusUnauthorized, reason)
	return writeError(rs.w, http.StatusUnauthorized, reason, "")
}

// resolveKey resolves the key (see keys.go) and sets its placeholder. A
// key path that reads a JSON member given twice is an ambiguous delivery:
// the error is an *ambiguousError, and nothing is set.
func (rs *requestState) resolveKey() error {
	h := rs.h
	rs.bodyHash = sha256.Sum256(rs.content())
	var from keySource
	var err error
	if rs.keyValue, from, err = resolveKey(h.keys, rs.r, rs.content(), &rs.bodyHash); err != nil {
		return err
	}
	rs.keyFromBody = from.kind == keyBody || isBodyKey(rs.keyValue)
	rs.keyKind = from.kind
	rs.traceKeyKind()
	if rs.repl != nil {
		rs.repl.Set(placeholderKey, rs.keyValue)
	}
	rs.claim.Key = h.keyPrefix + rs.keyValue
	if from.unsigned {
		switch {
		case h.guardMode == guardReject && !rs.keyFromBody:
			// (a key that is the body hash is its own guard)
			rs.claim.Guard = h.guardKey(bodyHashPrefix, &rs.bodyHash)
		case h.guardMode == guardFlag:
			rs.claim.Guard, rs.claim.Noted = h.guardKey(notePrefix, &rs.bodyHash), true
		}
	}
	if h.nonce != nil {
		if err := rs.nonceGuard(); err != nil {
			return err
		}
	}
	rs.claim.Owner = store.NewOwner()
	return nil
}

// ambiguous answers a delivery whose JSON gives a member the handler reads
// twice (a key path's, or Stone's envelope's): 400, before any store
// access. One reader of the body would take the first, another the last;
// such a delivery is no provider's (docs/caddyfile.md: Keys).
func (rs *requestState) ambiguous(err error) error {
	rs.setResult(results.Ambiguous)
	rs.refused(http.StatusBadRequest, err.Error())
	if ce := rs.h.logger.Check(zap.DebugLevel, "refused ambiguous delivery"); ce != nil {
		ce.Write(zap.Error(err))
	}
	return writeError(rs.w, http.StatusBadRequest, err.Error(), "")
}

// claimKey claims the key in one store round trip, or in inbox mode accepts
// the event with its key in that one trip; with `in_flight wait` it then
// waits for a key in flight.
func (rs *requestState) claimKey() (store.ClaimResult, error) {
	h := rs.h
	if ib := h.inbox; ib != nil {
		ev := rs.inboxEvent()
		if h.answerWithin > 0 {
			res, ans, err := h.store.acceptAnswering(rs.r.Context(), ib, rs.claim, &rs.bodyHash, ev)
			rs.answer = ans
			return res, err
		}
		return h.store.accept(rs.r.Context(), ib, rs.claim, &rs.bodyHash, ev)
	}
	res, err := rs.claimOnce()
	if err == nil && res.State == store.StateInFlight && h.inFlight == inFlightWait {
		res, err = rs.wait(res)
	}
	return res, err
}

// claimOnce makes one claim of the key (with its guard or note); a note
// that holds another key marks the delivery as a suspected replay.
func (rs *requestState) claimOnce() (store.ClaimResult, error) {
	h := rs.h
	res, prev, err := h.store.claim(rs.r.Context(), rs.claim, time.Duration(h.Lease), time.Duration(h.TTL))
	if err == nil && res.State == store.StateClaimed && prev != "" && prev != rs.claim.Key {
		rs.suspect(prev)
	}
	return res, err
}

// suspect marks a delivery whose signed bytes came before under the store
// key first (replay_guard flag): it is processed all the same, and the
// application is told.
func (rs *requestState) suspect(first string) {
	firstKey := strings.TrimPrefix(first, rs.h.keyPrefix)
	rs.suspected = firstKey // told the application by handOnForward
	rs.h.metrics.suspected.Inc()
	rs.h.logger.Warn("delivery's signed bytes were seen within ttl under another id; processing it, marked Webhook-Replay-Suspected",
		zap.String("key", rs.claim.Key), zap.String("first_key", firstKey))
}

// inboxEvent is the request as an inbox stores it: without the
// provider's credentials unless the route forwards them as they came
// (docs/inbox.md: What the application receives), with the index of the
// secret that verified it when deliveries are re-signed. It is built once.
func (rs *requestState) inboxEvent() *event.Request {
	if rs.stored == nil {
		ev := rs.buildInboxEvent()
		rs.stored = &ev
	}
	return rs.stored
}

// buildInboxEvent builds inboxEvent.
func (rs *requestState) buildInboxEvent() event.Request {
	f := rs.h.fwd.later
	skip := event.SkipInboxHeader
	if f != nil && f.Mode() != forward.Keep {
		skip = func(name string) bool { return event.SkipInboxHeader(name) || !f.Stores(name) }
	}
	ev := event.FromHTTP(rs.r, rs.forwarded(), skip, time.Now())
	if f != nil && f.Mode() != forward.Keep && len(f.CredentialQuery()) > 0 {
		ev.URI = withoutQuery(ev.URI, f.CredentialQuery())
	}
	ev.Source, ev.Key, ev.StoreKey = rs.h.Source, rs.keyValue, rs.claim.Key
	ev.Trace = rs.traceContext()
	if f != nil && f.Mode() == forward.Resign {
		ev.Secret = rs.h.verification.SecretIndex(rs.r, rs.body.buf)
	}
	return ev
}

// wait polls the store until an in-flight key is completed or released (it
// then claims it), or until wait_timeout.
func (rs *requestState) wait(res store.ClaimResult) (store.ClaimResult, error) {
	err := rs.poll(func() (bool, error) {
		var err error
		res, err = rs.claimOnce()
		return err == nil && res.State == store.StateInFlight, err
	})
	return res, err
}

// poll calls claim again, backing off, while it reports a key in flight,
// until wait_timeout or the client goes away: `in_flight wait`.
func (rs *requestState) poll(claim func() (inFlight bool, err error)) error {
	deadline := time.Now().Add(time.Duration(rs.h.WaitTimeout))
	interval := 10 * time.Millisecond
	timer := time.NewTimer(interval)
	defer timer.Stop()
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return nil
		}
		timer.Reset(min(interval, left))
		select {
		case <-rs.r.Context().Done():
			return nil
		case <-timer.C:
		}
		interval = min(interval*3/2, 250*time.Millisecond)
		if inFlight, err := claim(); err != nil || !inFlight {
			return err
		}
	}
}

// dispatch answers according to what the claim found: a replay, a
// conflict (or, with `in_flight proceed`, the next handler unguarded), an
// accepted inbox event, or the first delivery, processed.
func (rs *requestState) dispatch(res store.ClaimResult) error {
	switch res.State {
	case store.StateCompleted:
		return rs.replay(res.Record)
	case store.StateInFlight:
		if rs.h.inFlight == inFlightProceed && rs.h.inbox == nil {
			rs.setResult(results.New)
			rs.handOn()
			return rs.callNext(rs.w)
		}
		return rs.conflict(res)
	}
	if rs.h.inbox != nil {
		return rs.accepted()
	}
	return rs.process()
}

// replay writes a recorded response. A record that cannot be decoded is a
// store failure.
func (rs *requestState) replay(encoded []byte) error {
	h := rs.h
	rec, err := record.Decode(encoded)
	if err != nil {
		h.metrics.storeErrors[opReplay].Inc()
		return rs.storeFailed(opReplay, err)
	}
	if !rs.keyFromBody && !bytes.Equal(rec.BodyHash, rs.bodyHash[:]) {
		if h.rejectDiffs {
			h.logger.Warn("duplicate delivery has a different body than the recorded one; refused with 422",
				zap.String("key", rs.claim.Key))
			rs.setResult(results.Mismatch)
			rs.refused(http.StatusUnprocessableEntity, msgMismatch)
			return writeError(rs.w, http.StatusUnprocessableEntity, msgMismatch, "")
		}
		h.logger.Warn("duplicate delivery has a different body than the recorded one; replaying the recorded response",
			zap.String("key", rs.claim.Key))
	}
	rs.setResult(results.Replayed)
	return rs.writeRecord(rec, true)
}

// writeRecord writes a record: a replay, marked Idempotent-Replayed, or
// the application's answer recorded as it came.
func (rs *requestState) writeRecord(rec record.Record, replayed bool) error {
	w := rs.w
	contentLength := ""
	if bodyAllowed(rec.Status) {
		contentLength = strconv.Itoa(len(rec.Body))
	}
	rec.WriteReplayHeaders(w.Header(), contentLength)
	if !replayed {
		w.Header().Del(record.ReplayedHeader)
	}
	w.WriteHeader(rec.Status)
	if bodyAllowed(rec.Status) && len(rec.Body) > 0 && rs.r.Method != http.MethodHead {
		_, _ = w.Write(rec.Body)
	}
	return nil
}

// conflict answers a duplicate of a delivery still in flight.
func (rs *requestState) conflict(res store.ClaimResult) error {
	rs.setResult(results.Conflict)
	return writeError(rs.w, http.StatusConflict, msgInFlight, retryAfterSeconds(res.LeaseLeft, time.Duration(rs.h.Lease)))
}

// accepted answers an event the inbox has stored: `respond`, at once; or
// with respond app within, the application's answer to its first attempt
// when it comes in time, recorded under the key already.
func (rs *requestState) accepted() error {
	rs.setResult(results.New)
	if rs.answer != nil {
		if encoded := rs.answer.Wait(rs.r.Context(), rs.h.answerWithin); encoded != nil {
			if rec, err := record.Decode(encoded); err == nil {
				return rs.writeRecord(rec, false)
			}
		}
	}
	return rs.respond()
}

// dropped reports whether a drop rule of the inbox matches the request.
func (rs *requestState) dropped() bool {
	if len(rs.h.drops) == 0 {
		return false
	}
	ev := rs.inboxEvent()
	for _, match := range rs.h.drops {
		if match(ev) {
			return true
		}
	}
	return false
}

// filtered answers a request a drop rule matched: `respond`, nothing
// stored, nothing delivered.
func (rs *requestState) filtered() error {
	rs.setResult(results.Filtered)
	return rs.respond()
}

// respond writes the inbox's respond.
func (rs *requestState) respond() error {
	respond, body, contentType := rs.h.inbox.Respond()
	if contentType != "" {
		rs.w.Header().Set("Content-Type", contentType)
	}
	if bodyAllowed(respond) {
		rs.w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	}
	rs.w.WriteHeader(respond)
	if body != "" && bodyAllowed(respond) {
		_, _ = io.WriteString(rs.w, body)
	}
	return nil
}

// process hands a claimed delivery to the next handler, records its answer
// and completes the key, or releases the key when the answer must not be
// replayed.
func (rs *requestState) process() error {
	rs.setResult(results.New)
	return rs.serve(rs)
}

// claimed is a claim serve hands on: one key's (the requestState itself),
// or a batch's (batch.go).
type claimed interface {
	name() string                                         // the claim in the log: its key, or a batch's first
	renew(ctx context.Context, lease time.Duration) error // renews its lease
	completes(status int) bool                            // whether an answer with this status is recorded
	complete(record []byte, status int) error             // records the answer
	release()                                             // gives the claim back
}

func (rs *requestState) name() string { return rs.claim.Key }

func (rs *requestState) renew(ctx context.Context, lease time.Duration) error {
	return rs.h.store.renew(ctx, rs.claim, lease)
}

func (rs *requestState) completes(status int) bool { return rs.h.cacheable.has(status) }

// serve hands a claimed delivery to the next handler, renewing the claim
// meanwhile, then completes it with the answer's record, or releases it
// when the answer must not be replayed.
func (rs *requestState) serve(c claimed) error {
	h := rs.h
	rs.serving = new(serving)
	rn, rec := &rs.serving.lease, &rs.serving.rec
	handed := time.Now()
	h.startRenewal(rn, c, handed)
	rec.start(rs.w, h.MaxResponse, &rs.bodyHash)
	// A panic in next must still stop the renewal and release the key, or
	// the key stays in flight, renewed for ever, and every retry gets 409:
	// reverse_proxy panics with http.ErrAbortHandler when the upstream's
	// response is cut short after its headers were sent.
	returned := false
	defer func() {
		if !returned {
			rn.stop()
			c.release()
		}
	}()
	rs.handOn()
	err := rs.callNextSince(rec, handed)
	returned = true
	rn.stop()
	rs.traceStep(spanComplete)

	// completion and release run even when the client went away
	// (completionCtx is never cancelled)
	gone := rs.r.Context().Err() != nil
	status := rec.status
	if status == 0 && err == nil && rec.writeErr == nil && !gone {
		// nothing written: net/http answers 200 with an empty body
		rec.WriteHeader(http.StatusOK)
		status = http.StatusOK
	}
	if h.archive != nil {
		rs.answered(rec, err, handed)
	}
	if err == nil && rec.writeErr == nil && !gone && c.completes(status) {
		if cerr := rn.complete(func() error { return c.complete(rec.record, status) }); cerr != nil {
			h.logger.Warn("recording response failed; duplicates will be processed again",
				zap.String("key", c.name()), zap.Int("status", status), zap.Error(cerr))
		}
	} else {
		c.release()
	}
	rs.traceEnd()
	// the answer goes out only now that the store knows its fate, so a
	// duplicate sent after the client has it finds the key completed
	if err == nil {
		rec.sendBuffered()
	}
	return err
}

// complete records the answer under the key; with an archive, the event is
// appended in the same round trip.
func (rs *requestState) complete(rec []byte, status int) error {
	h := rs.h
	if h.archive == nil {
		return h.store.complete(completionCtx, rs.claim, rec, time.Duration(h.TTL))
	}
	rs.archived = true
	start := time.Now()
	err := h.archive.CompleteAndAppend(completionCtx, rs.claim, rec, time.Duration(h.TTL), rs.archiveEntry(results.New, status))
	h.store.observe(opComplete, start, err)
	return err
}

// release deletes this request's claim so the provider's retry is processed.
func (rs *requestState) release() {
	err := rs.h.store.release(completionCtx, rs.claim)
	if err != nil && !errors.Is(err, store.ErrNotOwner) {
		rs.h.logger.Warn("releasing idempotency key failed; duplicates get 409 until its lease expires",
			zap.String("key", rs.claim.Key), zap.Error(err))
	}
}

// storeFailed applies the `fail` policy: 503, or the next handler without
// deduplication. A claim that failed for a delivery this instance recorded
// lately is answered from its local copy of the record instead (docs/stores.md).
func (rs *requestState) storeFailed(op storeOp, err error) error {
	h := rs.h
	if op == opClaim && h.inbox == nil {
		if rec, ok := h.store.recentRecord(rs.claim.Key, rs.claim.CompletionGuard()); ok {
			h.logger.Warn("store error; answering a duplicate with this instance's copy of its record",
				zap.Stringer("op", op), zap.String("key", rs.claim.Key), zap.Error(err))
			return rs.replay(rec)
		}
	}
	h.logger.Warn("store error", zap.Stringer("op", op), zap.Bool("fail_closed", h.failClosed), zap.Error(err))
	if h.failClosed {
		rs.setResult(results.Unavailable)
		rs.refused(http.StatusServiceUnavailable, msgUnavailable)
		return writeError(rs.w, http.StatusServiceUnavailable, msgUnavailable, storeRetryAfter)
	}
	rs.setResult(results.Bypassed)
	rs.handOn()
	return rs.callNext(rs.w)
}

// Error bodies.
const (
	msgTooLarge    = "request body too large"
	msgInFlight    = "a delivery with this idempotency key is being processed"
	msgMismatch    = "idempotency key reused with a different body"
	msgUnavailable = "idempotency store unavailable"
	msgLoop        = "delivery loop: this request was sent by this route's own inbox or redelivery (Webhook-Via); deliver_to and redeliver_to must lead to the application"
)

// writeError answers with a JSON error body.
func writeError(w http.ResponseWriter, status int, msg, retryAfter string) error {
	body := `{"error":` + strconv.Quote(msg) + `}`
	hdr := w.Header()
	hdr.Set("Content-Type", "application/json")
	hdr.Set("Content-Length", strconv.Itoa(len(body)))
	if retryAfter != "" {
		hdr.Set("Retry-After", retryAfter)
	}
	w.WriteHeader(status)
	if _, err := io.WriteString(w, body); err != nil {
		return caddyhttp.Error(status, err)
	}
	return nil
}

// budgetRetryAfter is the Retry-After of a body refused for the budget:
// body_timeout, by when every body being read now has arrived or been
// given up.
func budgetRetryAfter(h *Handler) string {
	return retryAfterSeconds(time.Duration(h.BodyTimeout), time.Second)
}

// retryAfterSeconds is the time left on the lease, rounded up to whole
// seconds (at least 1).
func retryAfterSeconds(left, lease time.Duration) string {
	if left <= 0 {
		left = lease
	}
	secs := int64((left + time.Second - 1) / time.Second)
	return strconv.FormatInt(max(secs, 1), 10)
}

// bodyAllowed reports whether a response with this status has a body.
func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}
