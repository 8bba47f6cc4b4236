package webhookidempotency

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/metrics"
)

// The request body: read once, bounded by max_body, into a pooled buffer
// that is verified, hashed, and handed on to the next handler as it is.

var errBodyTooLarge = errors.New("request body too large")

// pooledBody is a pooled request-body buffer. It goes back to the pool only
// when every reader handed to later handlers has been closed, because
// http.Transport may still read a request body after RoundTrip returns.
type pooledBody struct {
	buf     []byte
	open    atomic.Int32
	getBody func() (io.ReadCloser, error) // a new reader: the request's GetBody
}

var bodyPool = sync.Pool{New: func() any {
	pb := new(pooledBody)
	pb.getBody = func() (io.ReadCloser, error) { return pb.reader(new(bodyReader)), nil }
	return pb
}}

// maxPooledBody keeps very large buffers out of the pool.
const maxPooledBody = 4 << 20

// bodyChunk is the most memory a body's buffer takes ahead of the bytes
// that have arrived, at first: a buffer starts with room for the announced
// Content-Length up to bodyChunk, and doubles as it fills (never more than
// twice what has arrived), so a client that announces a large body and
// sends little of it costs little.
const bodyChunk = 32 << 10

// errBodyTimeout is the error of a body that did not arrive within
// body_timeout.
var errBodyTimeout = errors.New("request body not received within body_timeout")

// errOverBudget is the error of a body that would take the bodies being
// buffered past the process's body_budget.
var errOverBudget = errors.New("too many request bodies are being received at once; retry later")

// The body budget (the global option's body_budget, docs/caddyfile.md:
// Memory): every handler of the process counts, in metrics.BufferedBodies,
// the bytes its buffers may hold for the requests it is reading or
// handling, and a body that would take the count past the budget is
// refused before more of it is read. A buffer is counted as it fills (the
// window it reads into: bodyChunk, then twice as much each time it is
// full), not by the length a client announces: a client that announces
// much and sends little costs the budget little.

// reserve counts n more bytes of this request's buffer against the
// budget, or reports that the budget has no room for them.
func (rs *requestState) reserve(n int64) bool {
	total := metrics.BufferedBodies.Add(n)
	if budget := rs.h.bodyBudget; budget > 0 && total > budget {
		metrics.BufferedBodies.Add(-n)
		return false
	}
	rs.reserved += n
	return true
}

// readBody reads the whole body, up to max_body and within body_timeout,
// into rs.body, within the process's body budget.
func (rs *requestState) readBody() error {
	r := rs.r
	limit := rs.h.MaxBody
	if r.ContentLength > limit {
		return errBodyTooLarge
	}
	pb := bodyPool.Get().(*pooledBody)
	rs.body = pb
	buf := pb.buf[:0]
	var err error
	if r.Body != nil && r.Body != http.NoBody {
		// the most the buffer can need: the announced length, else
		// max_body, and one byte more to see the end
		most := limit + 1
		if r.ContentLength > 0 {
			most = r.ContentLength + 1
		}
		rc := http.NewResponseController(rs.w)
		if rc.SetReadDeadline(rs.bodyDeadline()) == nil {
			// the deadline is the body's alone: lifted once it is read,
			// or a slow application would find its request cancelled
			defer func() { _ = rc.SetReadDeadline(time.Time{}) }()
		}
		// the body is read into a window that starts at bodyChunk (or
		// less, when less is announced) and doubles each time it is
		// full: a fresh buffer grows to each window in turn, a pooled
		// one is used as far as the window goes, and the budget counts
		// the window
		var end int64
		for {
			if int64(len(buf)) == end {
				end = min(max(2*end, bodyChunk), most)
				if !rs.reserve(end - rs.reserved) {
					err = errOverBudget
					break
				}
				if int64(cap(buf)) < end {
					buf = growBody(buf, end)
				}
			}
			var n int
			n, err = r.Body.Read(buf[len(buf):end])
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
				if errors.Is(err, os.ErrDeadlineExceeded) {
					err = errBodyTimeout
				}
				break
			}
		}
		_ = r.Body.Close()
	}
	pb.buf = buf
	if err != nil {
		return err
	}
	r.ContentLength = int64(len(buf))
	r.TransferEncoding = nil
	return nil
}

// unreadLinger is how long an HTTP/1 connection stays open after the 413
// of a body left unread, discarding what the client still sends: closed at
// once, with the client still sending, it would be reset, and the client
// might never read the answer. net/http waits as long (rstAvoidanceDelay)
// for a body of its own, not for one Caddy wrapped.
const unreadLinger = 500 * time.Millisecond

// answerTooLarge answers a body over max_body, the rest of it (all of it, when
// its length was announced over the limit) unread: over HTTP/1 the answer
// goes out at once with `Connection: close`, so that the server neither
// reads nor waits for the body before it answers, and never asks for it
// with 100 Continue; then the connection lingers (unreadLinger) and closes
// (docs/caddyfile.md, max_body).
func (rs *requestState) answerTooLarge() error {
	r := rs.r
	if r.ProtoMajor != 1 {
		// HTTP/2 and 3 end the stream alone
		return writeError(rs.w, http.StatusRequestEntityTooLarge, msgTooLarge, "")
	}
	rc := http.NewResponseController(rs.w)
	_ = rc.EnableFullDuplex() // the body is read after the answer
	rs.w.Header().Set("Connection", "close")
	if err := writeError(rs.w, http.StatusRequestEntityTooLarge, msgTooLarge, ""); err != nil {
		return err
	}
	if r.Body == nil || r.Body == http.NoBody || strings.EqualFold(r.Header.Get("Expect"), "100-continue") {
		return nil // nothing comes: a client waiting for 100 Continue sends no body
	}
	if rc.Flush() == nil && rc.SetReadDeadline(time.Now().Add(unreadLinger)) == nil {
		_, _ = io.Copy(io.Discard, r.Body)
	}
	return nil
}

// bodyDeadline is when the body must have arrived: body_timeout from the
// request's start, or earlier when the server's own read timeout (Caddy's
// `read_body`) is shorter. A handler belongs to one server, whose read
// timeout does not change: the bound is looked up in the request's
// context once, on the first request that carries the server, and kept.
func (rs *requestState) bodyDeadline() time.Time {
	h := rs.h
	d := time.Duration(h.bodyWait.Load())
	if d == 0 {
		d = time.Duration(h.BodyTimeout)
		if srv, ok := rs.r.Context().Value(http.ServerContextKey).(*http.Server); ok {
			if srv.ReadTimeout > 0 {
				d = min(d, srv.ReadTimeout)
			}
			h.bodyWait.Store(int64(d))
		}
	}
	return rs.start.Add(d)
}

// growBody returns buf in a new buffer of capacity size.
func growBody(buf []byte, size int64) []byte {
	grown := make([]byte, len(buf), size)
	copy(grown, buf)
	return grown
}

// handOn gives the next handler the buffered body: exactly the bytes that
// were received and verified, with a known length, so reverse_proxy sends
// them as they are. It is called only on paths that call the next handler:
// a reader handed on is closed by whoever consumes it, and the buffer goes
// back to the pool only once every such reader is closed.
func (rs *requestState) handOn() {
	rs.traceStep(spanApp)
	rs.handOnForward()
	pb := rs.body
	if pb == nil || rs.handOnReplaced() {
		return
	}
	var br *bodyReader
	if s := rs.serving; s != nil && s.handed.pb == nil {
		br = &s.handed // serve's, made with the rest of what it needs
	} else {
		br = new(bodyReader)
	}
	rs.r.Body = pb.reader(br)
	rs.r.GetBody = pb.getBody
}

// releaseBody gives back what the body counted against the budget, and
// returns its buffer to the pool when nothing reads it.
func (rs *requestState) releaseBody() {
	if rs.reserved != 0 {
		metrics.BufferedBodies.Add(-rs.reserved)
		rs.reserved = 0
	}
	pb := rs.body
	if pb == nil || pb.open.Load() != 0 || cap(pb.buf) > maxPooledBody {
		return
	}
	pb.buf = pb.buf[:0]
	bodyPool.Put(pb)
}

// reader makes br, a new reader, read the body.
func (pb *pooledBody) reader(br *bodyReader) io.ReadCloser {
	pb.open.Add(1)
	br.pb = pb
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

// content is what the key and body hash are taken from: the verified
// content of a sealed delivery (Stone's event), else the raw body.
func (rs *requestState) content() []byte {
	if rs.event != nil {
		return rs.event
	}
	return rs.body.buf
}

// forwarded is the body the next handler (or the inbox) gets: another
// than the raw body (replacement), else the raw body.
func (rs *requestState) forwarded() []byte {
	if b := rs.replacement(); b != nil {
		return b
	}
	return rs.body.buf
}

// replacement is the body the application gets instead of the raw one: a
// batch's envelope of its new items, or the opened content with
// `decrypt`; nil for none.
func (rs *requestState) replacement() []byte {
	if rs.batch != nil && rs.batch.body != nil {
		return rs.batch.body
	}
	if rs.event != nil && rs.h.verification.Decrypt() {
		return rs.event
	}
	return nil
}

// handOnReplaced gives the next handler the replacement body, when there
// is one, and reports whether it did.
func (rs *requestState) handOnReplaced() bool {
	body := rs.replacement()
	if body == nil {
		return false
	}
	rs.r.Body = io.NopCloser(bytes.NewReader(body))
	rs.r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	rs.r.ContentLength = int64(len(body))
	rs.r.TransferEncoding = nil
	if rs.batch != nil {
		rs.r.Header.Set("Content-Length", strconv.Itoa(len(body)))
	}
	return true
}
