package webhookidempotency

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// replayedHeader marks a replayed response.
const replayedHeader = "Idempotent-Replayed"

// Results, as in the `{http.webhook_idempotency.result}` placeholder.
const (
	resultNew              = "new"
	resultReplayed         = "replayed"
	resultConflict         = "conflict"
	resultMismatch         = "mismatch"
	resultInvalidSignature = "invalid_signature"
	resultTooLarge         = "too_large"
	resultBypassed         = "bypassed"
	resultUnavailable      = "unavailable"
	resultSkipped          = "skipped"
)

// Placeholder names.
const (
	placeholderSource = "http.webhook_idempotency.source"
	placeholderKey    = "http.webhook_idempotency.key"
	placeholderResult = "http.webhook_idempotency.result"
)

// storeRetryAfter is the Retry-After of a 503 when the store is down.
const storeRetryAfter = "5"

// ServeHTTP implements caddyhttp.MiddlewareHandler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	rs := requestState{h: h, r: r}
	rs.repl, _ = r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	rs.extra, _ = r.Context().Value(caddyhttp.ExtraLogFieldsCtxKey).(*caddyhttp.ExtraLogFields)
	if rs.repl != nil {
		rs.repl.Set(placeholderSource, h.sourceValue)
	}
	if rs.extra != nil {
		rs.extra.Set(zap.String(placeholderSource[len("http."):], h.Source))
	}

	if !slices.Contains(h.methods, r.Method) {
		rs.setResult(resultSkipped)
		return next.ServeHTTP(w, r)
	}

	body, err := rs.readBody()
	defer rs.releaseBody()
	if err != nil {
		var maxErr *http.MaxBytesError
		if errors.As(err, &maxErr) || errors.Is(err, errBodyTooLarge) {
			rs.setResult(resultTooLarge)
			return writeError(w, http.StatusRequestEntityTooLarge, msgTooLarge, "")
		}
		var he caddyhttp.HandlerError
		if errors.As(err, &he) {
			return err
		}
		return caddyhttp.Error(http.StatusBadRequest, err)
	}

	// verification runs on the raw bytes, before any store access
	if h.verifier != nil {
		if err := h.verifier.Verify(r, body); err != nil {
			rs.setResult(resultInvalidSignature)
			reason := signature.ErrInvalid.Reason
			var ve *signature.Error
			if errors.As(err, &ve) {
				reason = ve.Reason
			}
			if ce := h.logger.Check(zap.DebugLevel, "rejected delivery"); ce != nil {
				ce.Write(zap.String("source", h.Source), zap.String("reason", reason))
			}
			return writeError(w, http.StatusUnauthorized, reason, "")
		}
	}

	rs.bodyHash = sha256.Sum256(body)
	value, fromBody := resolveKey(h.keys, r, body, &rs.bodyHash)
	rs.keyFromBody = fromBody
	rs.set(placeholderKey, value)
	rs.key = h.keyPrefix + value
	rs.owner = newOwner()
	if h.inbox != nil {
		return rs.accept(w, next, body, value)
	}

	start := time.Now()
	res, err := h.store.Claim(r.Context(), rs.key, rs.owner, time.Duration(h.Lease))
	h.metrics.observeStore(opClaim, start, err)
	if err != nil {
		return rs.storeFailed(w, next, opClaim, err)
	}
	if res.State == InFlight && h.InFlight == inFlightWait {
		res, err = rs.wait(res)
		if err != nil {
			return rs.storeFailed(w, next, opClaim, err)
		}
	}

	switch res.State {
	case Completed:
		return rs.replay(w, next, res.Record)
	case InFlight:
		if h.InFlight == inFlightProceed {
			rs.setResult(resultNew)
			rs.handOn()
			return next.ServeHTTP(w, r)
		}
		return rs.conflict(w, res)
	}
	return rs.process(w, next)
}

// conflict answers a duplicate of a delivery still in flight.
func (rs *requestState) conflict(w http.ResponseWriter, res ClaimResult) error {
	rs.setResult(resultConflict)
	return writeError(w, http.StatusConflict, msgInFlight, retryAfterSeconds(res.LeaseLeft, time.Duration(rs.h.Lease)))
}

// requestState is the state of one request through the handler.
type requestState struct {
	h           *Handler
	r           *http.Request
	repl        *caddy.Replacer
	extra       *caddyhttp.ExtraLogFields
	body        *pooledBody
	bodyHash    [32]byte
	keyFromBody bool
	key         string // the store key
	owner       string
}

func (rs *requestState) set(name, value string) {
	if rs.repl != nil {
		rs.repl.Set(name, value)
	}
	if rs.extra != nil {
		rs.extra.Set(zap.String(name[len("http."):], value))
	}
}

func (rs *requestState) setResult(result string) {
	rs.set(placeholderResult, result)
	rs.h.metrics.countResult(result)
	if ce := rs.h.logger.Check(zap.DebugLevel, "handled delivery"); ce != nil {
		ce.Write(zap.String("source", rs.h.Source), zap.String("key", rs.key), zap.String("result", result))
	}
}

// process hands a claimed delivery to the next handler, records its answer
// and completes the key, or releases the key when the answer must not be
// replayed.
func (rs *requestState) process(w http.ResponseWriter, next caddyhttp.Handler) error {
	h := rs.h
	rs.setResult(resultNew)
	rn := h.startRenewal(rs.key, rs.owner)
	rec := &recorder{
		ResponseWriterWrapper: &caddyhttp.ResponseWriterWrapper{ResponseWriter: w},
		maxBody:               h.MaxResponse,
		bodyHash:              &rs.bodyHash,
	}
	// A panic in next must still stop the renewal and release the key, or
	// the key stays in flight, renewed for ever, and every retry gets 409:
	// reverse_proxy panics with http.ErrAbortHandler when the upstream's
	// response is cut short after its headers were sent.
	returned := false
	defer func() {
		if !returned {
			rn.stop()
			rs.release(completionCtx)
		}
	}()
	rs.handOn()
	err := next.ServeHTTP(rec, rs.r)
	returned = true
	rn.stop()

	// completion and release run even when the client went away
	// (completionCtx is never cancelled)
	status := rec.status
	if status == 0 && err == nil && rec.writeErr == nil && rs.r.Context().Err() == nil {
		// nothing written: net/http answers 200 with an empty body
		rec.WriteHeader(http.StatusOK)
		status = http.StatusOK
	}
	cacheable := err == nil && rec.writeErr == nil && rs.r.Context().Err() == nil && h.cacheable.has(status)
	if cacheable {
		start := time.Now()
		cerr := h.store.Complete(completionCtx, rs.key, rs.owner, rec.record, time.Duration(h.TTL))
		h.metrics.observeStore(opComplete, start, cerr)
		if cerr != nil {
			h.logger.Warn("recording response failed; duplicates will be processed again",
				zap.String("source", h.Source), zap.String("key", rs.key), zap.Int("status", status), zap.Error(cerr))
		}
	} else {
		rs.release(completionCtx)
	}
	// the answer goes out only now that the store knows its fate, so a
	// duplicate sent after the client has it finds the key completed
	if err == nil {
		rec.sendBuffered()
	}
	return err
}

// accept stores a new delivery in the inbox and answers at once; a
// duplicate gets the same answer as a replay. Nothing is answered 2xx
// before it is stored: a store failure is 503 whatever the fail policy.
func (rs *requestState) accept(w http.ResponseWriter, next caddyhttp.Handler, body []byte, value string) error {
	h := rs.h
	ib := h.inbox
	record := ib.acceptRecord(&rs.bodyHash)
	start := time.Now()
	res, err := ib.accept(rs.r.Context(), rs.key, rs.owner, record, eventFields(rs.r, body, h.Source, value, rs.key))
	h.metrics.observeStore(opClaim, start, err)
	if err != nil {
		return rs.storeFailed(w, next, opClaim, err)
	}
	switch res.State {
	case Completed:
		return rs.replay(w, next, res.Record)
	case InFlight:
		return rs.conflict(w, res.ClaimResult)
	}
	rs.setResult(resultNew)
	if ce := h.logger.Check(zap.DebugLevel, "inbox event accepted"); ce != nil {
		ce.Write(zap.String("source", h.Source), zap.String("key", rs.key), zap.String("id", res.id))
	}
	if bodyAllowed(ib.respond) {
		w.Header().Set("Content-Length", "0")
	}
	w.WriteHeader(ib.respond)
	return nil
}

// release deletes this request's claim so the provider's retry is processed.
func (rs *requestState) release(ctx context.Context) {
	h := rs.h
	start := time.Now()
	rerr := h.store.Release(ctx, rs.key, rs.owner)
	h.metrics.observeStore(opRelease, start, rerr)
	if rerr != nil && !errors.Is(rerr, ErrNotOwner) {
		h.logger.Warn("releasing idempotency key failed; duplicates get 409 until its lease expires",
			zap.String("source", h.Source), zap.String("key", rs.key), zap.Error(rerr))
	}
}

// replay writes a recorded response.
// A record that cannot be decoded is a store failure (SPEC §3.7).
func (rs *requestState) replay(w http.ResponseWriter, next caddyhttp.Handler, encoded []byte) error {
	h := rs.h
	rec, err := decodeRecord(encoded)
	if err != nil {
		h.metrics.storeErrors[opReplay].Inc()
		return rs.storeFailed(w, next, opReplay, err)
	}
	if !rs.keyFromBody && !bytes.Equal(rec.bodyHash, rs.bodyHash[:]) {
		if h.rejectDiffs {
			rs.setResult(resultMismatch)
			return writeError(w, http.StatusUnprocessableEntity, msgMismatch, "")
		}
		h.logger.Warn("duplicate delivery has a different body than the recorded one; replaying the recorded response",
			zap.String("source", h.Source), zap.String("key", rs.key))
	}
	rs.setResult(resultReplayed)
	hdr := w.Header()
	contentLength := ""
	if bodyAllowed(rec.status) {
		contentLength = strconv.Itoa(len(rec.body))
	}
	rec.writeReplayHeaders(hdr, contentLength)
	w.WriteHeader(rec.status)
	if bodyAllowed(rec.status) && len(rec.body) > 0 && rs.r.Method != http.MethodHead {
		_, _ = w.Write(rec.body)
	}
	return nil
}

// wait polls the store until an in-flight key is completed or released (it
// then claims it), or until wait_timeout.
func (rs *requestState) wait(res ClaimResult) (ClaimResult, error) {
	h := rs.h
	deadline := time.Now().Add(time.Duration(h.WaitTimeout))
	interval := 10 * time.Millisecond
	timer := time.NewTimer(interval)
	defer timer.Stop()
	for res.State == InFlight {
		left := time.Until(deadline)
		if left <= 0 {
			return res, nil
		}
		timer.Reset(min(interval, left))
		select {
		case <-rs.r.Context().Done():
			return res, nil
		case <-timer.C:
		}
		interval = min(interval*3/2, 250*time.Millisecond)
		var err error
		start := time.Now()
		res, err = h.store.Claim(rs.r.Context(), rs.key, rs.owner, time.Duration(h.Lease))
		h.metrics.observeStore(opClaim, start, err)
		if err != nil {
			return res, err
		}
	}
	return res, nil
}

// storeFailed applies the `fail` policy (SPEC §3.7).
func (rs *requestState) storeFailed(w http.ResponseWriter, next caddyhttp.Handler, op string, err error) error {
	h := rs.h
	h.logger.Warn("store error",
		zap.String("source", h.Source), zap.String("op", op), zap.Bool("fail_closed", h.failClosed), zap.Error(err))
	if h.failClosed {
		rs.setResult(resultUnavailable)
		return writeError(w, http.StatusServiceUnavailable, msgUnavailable, storeRetryAfter)
	}
	rs.setResult(resultBypassed)
	rs.handOn()
	return next.ServeHTTP(w, rs.r)
}

// Error bodies, prebuilt.
const (
	msgTooLarge    = "request body too large"
	msgInFlight    = "a delivery with this idempotency key is being processed"
	msgMismatch    = "idempotency key reused with a different body"
	msgUnavailable = "idempotency store unavailable"
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
	_, err := io.WriteString(w, body)
	if err != nil {
		return caddyhttp.Error(status, err)
	}
	return nil
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

// Body buffering.

var errBodyTooLarge = errors.New("request body too large")

// pooledBody is a pooled request-body buffer. It goes back to the pool only
// when every reader handed to later handlers has been closed, because
// http.Transport may still read a request body after RoundTrip returns.
type pooledBody struct {
	buf  []byte
	open atomic.Int32
}

var bodyPool = sync.Pool{New: func() any { return new(pooledBody) }}

// maxPooledBody keeps very large buffers out of the pool.
const maxPooledBody = 4 << 20

// completionCtx is the context of Complete and Release: they must run even
// when the client went away, and every store bounds its own calls.
var completionCtx = context.Background()

// readBody reads the whole body, up to max_body, and hands an identical
// body on to the next handler.
func (rs *requestState) readBody() ([]byte, error) {
	r := rs.r
	limit := rs.h.MaxBody
	if r.ContentLength > limit {
		return nil, errBodyTooLarge
	}
	pb := bodyPool.Get().(*pooledBody)
	rs.body = pb
	buf := pb.buf[:0]
	if r.ContentLength > 0 && int64(cap(buf)) <= r.ContentLength {
		buf = make([]byte, 0, r.ContentLength+1)
	}
	var err error
	if r.Body != nil && r.Body != http.NoBody {
		for {
			if len(buf) == cap(buf) {
				buf = append(buf, 0)[:len(buf)]
			}
			var n int
			n, err = r.Body.Read(buf[len(buf):cap(buf)])
			buf = buf[:len(buf)+n]
			if int64(len(buf)) > limit {
				err = errBodyTooLarge
				break
			}
			if err == io.EOF {
				err = nil
				break
			}
			if err != nil {
				break
			}
		}
		_ = r.Body.Close()
	}
	pb.buf = buf
	if err != nil {
		return nil, err
	}
	r.ContentLength = int64(len(buf))
	r.TransferEncoding = nil
	return buf, nil
}

// handOn gives the next handler the buffered body: exactly the bytes that
// were received and verified, with a known length, so reverse_proxy sends
// them as they are. It is called only on paths that call the next handler:
// a reader handed on is closed by whoever consumes it, and the buffer goes
// back to the pool only once every such reader is closed.
func (rs *requestState) handOn() {
	pb := rs.body
	if pb == nil {
		return
	}
	rs.r.Body = pb.reader()
	rs.r.GetBody = pb.getBody
}

// releaseBody returns the body buffer to the pool when nothing reads it.
func (rs *requestState) releaseBody() {
	pb := rs.body
	if pb == nil || pb.open.Load() != 0 || cap(pb.buf) > maxPooledBody {
		return
	}
	pb.buf = pb.buf[:0]
	bodyPool.Put(pb)
}

func (pb *pooledBody) getBody() (io.ReadCloser, error) { return pb.reader(), nil }

func (pb *pooledBody) reader() io.ReadCloser {
	pb.open.Add(1)
	br := &bodyReader{pb: pb}
	br.Reset(pb.buf)
	return br
}

// bodyReader reads a pooled body; Close marks it done.
type bodyReader struct {
	bytes.Reader
	pb     *pooledBody
	closed atomic.Bool
}

func (br *bodyReader) Close() error {
	if br.closed.CompareAndSwap(false, true) {
		br.pb.open.Add(-1)
	}
	return nil
}

// recorder records the next handler's answer: headers at WriteHeader, then
// the body up to max_response, held back from the client until the key is
// completed or released (sendBuffered). A body that grows past max_response
// is sent on at once and streamed from then on, and recorded without it.
type recorder struct {
	*caddyhttp.ResponseWriterWrapper
	maxBody   int64
	bodyHash  *[32]byte
	status    int
	record    []byte
	headerEnd int
	streaming bool // the client has the status and what was written so far
	writeErr  error
}

func (rec *recorder) WriteHeader(status int) {
	if rec.status != 0 {
		return
	}
	if status < 200 && status != http.StatusSwitchingProtocols {
		rec.ResponseWriterWrapper.WriteHeader(status) // informational
		return
	}
	rec.status = status
	size := 256
	if cl, err := strconv.ParseInt(rec.Header().Get("Content-Length"), 10, 64); err == nil && cl > 0 && cl <= rec.maxBody {
		size += int(cl)
	}
	rec.record = encodeRecord(make([]byte, 0, size), status, rec.Header(), nil, false, rec.bodyHash)
	rec.headerEnd = len(rec.record)
	if status == http.StatusSwitchingProtocols {
		rec.stream()
	}
}

func (rec *recorder) Write(p []byte) (int, error) {
	if rec.status == 0 {
		rec.WriteHeader(http.StatusOK)
	}
	if !rec.streaming {
		if int64(len(rec.record)-rec.headerEnd+len(p)) <= rec.maxBody {
			rec.record = append(rec.record, p...)
			return len(p), nil
		}
		rec.stream()
	}
	n, err := rec.ResponseWriterWrapper.Write(p)
	if err != nil && rec.writeErr == nil {
		rec.writeErr = err
	}
	return n, err
}

// stream sends the status and the buffered body to the client, drops the
// body from the record, and passes every later write straight through.
func (rec *recorder) stream() {
	rec.streaming = true
	rec.ResponseWriterWrapper.WriteHeader(rec.status)
	if body := rec.record[rec.headerEnd:]; len(body) > 0 {
		if _, err := rec.ResponseWriterWrapper.Write(body); err != nil && rec.writeErr == nil {
			rec.writeErr = err
		}
	}
	rec.record = rec.record[:rec.headerEnd]
	rec.record[1] |= recordFlagNoBody
}

// sendBuffered sends a held-back answer to the client.
func (rec *recorder) sendBuffered() {
	if rec.streaming || rec.status == 0 {
		return
	}
	rec.ResponseWriterWrapper.WriteHeader(rec.status)
	if body := rec.record[rec.headerEnd:]; len(body) > 0 {
		_, _ = rec.ResponseWriterWrapper.Write(body)
	}
}

// FlushError flushes a streaming answer; a held-back answer has nothing to
// flush yet. (reverse_proxy flushes through http.ResponseController.)
func (rec *recorder) FlushError() error {
	if !rec.streaming {
		return nil
	}
	return http.NewResponseController(rec.ResponseWriterWrapper.ResponseWriter).Flush()
}

// ReadFrom copies through Write so the body is recorded.
func (rec *recorder) ReadFrom(src io.Reader) (int64, error) {
	return io.Copy(writerOnly{rec}, src)
}

type writerOnly struct{ io.Writer }

// renewal keeps a claim's lease alive while the request is handled.
type renewal struct {
	h          *Handler
	key, owner string
	mu         sync.Mutex
	timer      *time.Timer
	stopped    bool
}

func (h *Handler) startRenewal(key, owner string) *renewal {
	rn := &renewal{h: h, key: key, owner: owner}
	rn.mu.Lock()
	rn.timer = time.AfterFunc(time.Duration(h.Lease)/3, rn.fire)
	rn.mu.Unlock()
	return rn
}

func (rn *renewal) fire() {
	lease := time.Duration(rn.h.Lease)
	start := time.Now()
	err := rn.h.store.Renew(context.Background(), rn.key, rn.owner, lease)
	rn.h.metrics.observeStore(opRenew, start, err)
	rn.mu.Lock()
	defer rn.mu.Unlock()
	if rn.stopped {
		return
	}
	if errors.Is(err, ErrNotOwner) {
		rn.h.logger.Warn("lease on idempotency key lost while the request was still being handled; a duplicate may be processed concurrently",
			zap.String("source", rn.h.Source), zap.String("key", rn.key))
		return
	}
	if err != nil {
		rn.h.logger.Warn("renewing lease failed", zap.String("source", rn.h.Source), zap.String("key", rn.key), zap.Error(err))
	}
	rn.timer.Reset(lease / 3)
}

func (rn *renewal) stop() {
	rn.mu.Lock()
	rn.stopped = true
	rn.timer.Stop()
	rn.mu.Unlock()
}

// Interface guards
var (
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
	_ http.ResponseWriter         = (*recorder)(nil)
	_ io.ReaderFrom               = (*recorder)(nil)
)
