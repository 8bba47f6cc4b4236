package webhookidempotency

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// The request body: read once, bounded by max_body, into a pooled buffer
// that is verified, hashed, and handed on to the next handler as it is.

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

// bodyChunk is the most memory a body's buffer takes ahead of the bytes
// that have arrived: a buffer starts with room for the announced
// Content-Length up to bodyChunk, and doubles as it fills, so a client that
// announces a large body and sends little of it costs little.
const bodyChunk = 32 << 10

// errBodyTimeout is the error of a body that did not arrive within
// body_timeout.
var errBodyTimeout = errors.New("request body not received within body_timeout")

// readBody reads the whole body, up to max_body and within body_timeout,
// into rs.body.
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
		for {
			if len(buf) == cap(buf) {
				buf = growBody(buf, most)
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

// bodyDeadline is when the body must have arrived: body_timeout from now,
// or earlier when the server's own read timeout (Caddy's `read_body`) is
// shorter. A handler belongs to one server, whose read timeout does not
// change: the bound is looked up in the request's context once, on the
// first request that carries the server, and kept.
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
	return time.Now().Add(d)
}

// growBody returns buf with room for more bytes: twice its capacity (at
// least bodyChunk/64), but never more than most.
func growBody(buf []byte, most int64) []byte {
	size := int64(max(2*cap(buf), bodyChunk/64))
	if cap(buf) == 0 {
		size = bodyChunk
	}
	size = min(size, most)
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
	pb := rs.body
	if pb == nil || rs.handOnEvent() {
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
