package webhookidempotency

import (
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// recorder records the next handler's answer: headers at WriteHeader, then
// the body up to max_response, held back from the client until the key is
// completed or released (sendBuffered). A body that grows past max_response
// is sent on at once and streamed from then on, and recorded without it.
type recorder struct {
	*caddyhttp.ResponseWriterWrapper
	maxBody   int64
	bodyHash  *[32]byte
	status    int
	record    []byte // the encoded record, its body growing with each write
	headerEnd int
	streaming bool // the client has the status and what was written so far
	writeErr  error
}

func newRecorder(w http.ResponseWriter, maxBody int64, bodyHash *[32]byte) *recorder {
	return &recorder{
		ResponseWriterWrapper: &caddyhttp.ResponseWriterWrapper{ResponseWriter: w},
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
	rec.record = encodeRecord(make([]byte, 0, size), status, rec.Header(), rec.bodyHash)
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

// The record codec, shared by every store: stores keep records as opaque
// bytes.
//
// A record is the response recorded for a completed key, plus the SHA-256 of
// the request body that produced it (for `mismatch`). Layout, version 1:
//
//	byte 0      recordVersion (1)
//	byte 1      flags (bit 0: the body was larger than max_response and is absent)
//	bytes 2-3   status, big endian
//	bytes 4-35  SHA-256 of the request body
//	uvarint     length of the header block, then the header block:
//	            repeated (uvarint len, name, uvarint len, value)
//	rest        the response body
const (
	recordVersion      = 1
	recordFlagNoBody   = 1 << 0
	recordFixedLen     = 36
	recordMaxHeaderLen = 1 << 20
)

var errCorruptRecord = errors.New("corrupt or foreign idempotency record")

// record is a decoded view over an encoded record; its slices point into the
// encoded bytes.
type record struct {
	status   int
	noBody   bool
	bodyHash []byte
	headers  []byte
	body     []byte
}

// encodeRecord appends a record of status and header to dst and returns
// it; the body is appended to the result as it is written.
func encodeRecord(dst []byte, status int, header http.Header, bodyHash *[32]byte) []byte {
	dst = append(dst, recordVersion, 0, byte(status>>8), byte(status))
	dst = append(dst, bodyHash[:]...)
	hlen := 0
	for name, values := range header {
		if skipRecordedHeader(name) {
			continue
		}
		for _, v := range values {
			hlen += uvarintLen(len(name)) + len(name) + uvarintLen(len(v)) + len(v)
		}
	}
	dst = binary.AppendUvarint(dst, uint64(hlen))
	for name, values := range header {
		if skipRecordedHeader(name) {
			continue
		}
		for _, v := range values {
			dst = binary.AppendUvarint(dst, uint64(len(name)))
			dst = append(dst, name...)
			dst = binary.AppendUvarint(dst, uint64(len(v)))
			dst = append(dst, v...)
		}
	}
	return dst
}

// decodeRecord parses an encoded record without copying.
func decodeRecord(b []byte) (record, error) {
	if len(b) < recordFixedLen+1 || b[0] != recordVersion {
		return record{}, errCorruptRecord
	}
	rec := record{
		status:   int(b[2])<<8 | int(b[3]),
		noBody:   b[1]&recordFlagNoBody != 0,
		bodyHash: b[4:recordFixedLen],
	}
	if rec.status < 100 || rec.status > 999 {
		return record{}, errCorruptRecord
	}
	hlen, n := binary.Uvarint(b[recordFixedLen:])
	if n <= 0 || hlen > recordMaxHeaderLen || hlen > uint64(len(b)-recordFixedLen-n) {
		return record{}, errCorruptRecord
	}
	start := recordFixedLen + n
	rec.headers = b[start : start+int(hlen)]
	rec.body = b[start+int(hlen):]
	// validate the header block once so writing it cannot fail halfway
	for h := rec.headers; len(h) > 0; {
		for range 2 {
			l, n := binary.Uvarint(h)
			if n <= 0 || l > uint64(len(h)-n) {
				return record{}, errCorruptRecord
			}
			h = h[n+int(l):]
		}
	}
	return rec, nil
}

// writeReplayHeaders sets the recorded headers in dst, then
// `Idempotent-Replayed: true` and, unless contentLength is empty,
// Content-Length (else it removes Content-Length). All names and values
// share one string allocation, and values one slice allocation.
func (rec record) writeReplayHeaders(dst http.Header, contentLength string) {
	s := string(rec.headers)
	count := 0
	for i := 0; i < len(s); count++ {
		for range 2 {
			l, n := binary.Uvarint(rec.headers[i:])
			i += n + int(l)
		}
	}
	values := make([]string, count+2)
	for i, j := 0, 0; i < len(s); j++ {
		l, n := binary.Uvarint(rec.headers[i:])
		name := s[i+n : i+n+int(l)]
		i += n + int(l)
		l, n = binary.Uvarint(rec.headers[i:])
		values[j] = s[i+n : i+n+int(l)]
		i += n + int(l)
		if prev, ok := dst[name]; ok && j > 0 && len(prev) > 0 && &prev[len(prev)-1] == &values[j-1] {
			dst[name] = values[j-len(prev) : j+1 : j+1]
		} else {
			dst[name] = values[j : j+1 : j+1]
		}
	}
	values[count] = "true"
	dst[replayedHeader] = values[count : count+1 : count+1]
	if contentLength != "" {
		values[count+1] = contentLength
		dst["Content-Length"] = values[count+1 : count+2 : count+2]
	} else {
		delete(dst, "Content-Length")
	}
}

// skipRecordedHeader reports whether a response header is left out of a
// record: hop-by-hop headers, Date, and our own replay marker.
func skipRecordedHeader(name string) bool {
	switch name {
	case "Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
		"Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
		"Date", "Alt-Svc", replayedHeader:
		return true
	}
	return strings.HasPrefix(name, http.TrailerPrefix)
}

func uvarintLen(x int) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

// Interface guards
var (
	_ http.ResponseWriter = (*recorder)(nil)
	_ io.ReaderFrom       = (*recorder)(nil)
)
