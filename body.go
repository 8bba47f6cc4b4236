package webhookidempotency

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
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

// readBody reads the whole body, up to max_body, into rs.body.
func (rs *requestState) readBody() error {
	r := rs.r
	limit := rs.h.MaxBody
	if r.ContentLength > limit {
		return errBodyTooLarge
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
		return err
	}
	r.ContentLength = int64(len(buf))
	r.TransferEncoding = nil
	return nil
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
