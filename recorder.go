package webhookidempotency

import (
	"io"
	"net/http"
	"strconv"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/record"
)

// recorder records the next handler's answer: headers at WriteHeader, then
// the body up to max_response, held back from the client until the key is
// completed or released (sendBuffered). A body that grows past max_response
// is sent on at once and streamed from then on, and recorded without it.
type recorder struct {
	caddyhttp.ResponseWriterWrapper
	maxBody   int64
	bodyHash  *[32]byte
	status    int
	record    []byte // the encoded record, its body growing with each write
	headerEnd int
	streaming bool // the client has the status and what was written so far
	writeErr  error
}

// start makes rec, a request's own, the recorder of an answer to w.
func (rec *recorder) start(w http.ResponseWriter, maxBody int64, bodyHash *[32]byte) {
	*rec = recorder{
		ResponseWriterWrapper: caddyhttp.ResponseWriterWrapper{ResponseWriter: w},
		maxBody:               maxBody,
		bodyHash:              bodyHash,
	}
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
	// an answer without Content-Length (chunked) is common: ParseInt of ""
	// would allocate its error
	if v := rec.Header().Get("Content-Length"); v != "" {
		if cl, err := strconv.ParseInt(v, 10, 64); err == nil && cl > 0 && cl <= rec.maxBody {
			size += int(cl)
		}
	}
	rec.record = record.Encode(make([]byte, 0, size), status, rec.Header(), rec.bodyHash)
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
	record.MarkNoBody(rec.record)
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

// Interface guards
var (
	_ http.ResponseWriter = (*recorder)(nil)
	_ io.ReaderFrom       = (*recorder)(nil)
)
