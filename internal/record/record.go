// Package record is the codec of a completed key's record: the response
// recorded for the first delivery of a key, which every store keeps as
// opaque bytes and the handler replays to every duplicate.
//
// A record is the response's status, headers and body, plus the SHA-256 of
// the request body that produced it (for `mismatch`). Layout, version 1:
//
//	byte 0      Version (1)
//	byte 1      flags (bit 0: the body was larger than max_response and is absent)
//	bytes 2-3   status, big endian
//	bytes 4-35  SHA-256 of the request body
//	uvarint     length of the header block, then the header block:
//	            repeated (uvarint len, name, uvarint len, value)
//	rest        the response body
package record

import (
	"encoding/binary"
	"errors"
	"net/http"
	"strings"
)

// Layout constants. The redis store builds its Lua scripts from them, so
// the scripts and the codec cannot disagree.
const (
	// Version is the first byte of every record.
	Version = 1
	// FixedLen is the length of the fixed part, before the header block.
	FixedLen = 36

	flagNoBody   = 1 << 0
	maxHeaderLen = 1 << 20
)

// ReplayedHeader marks a replayed response; it is never recorded.
const ReplayedHeader = "Idempotent-Replayed"

// ErrCorrupt is the error of bytes that are not a record.
var ErrCorrupt = errors.New("corrupt or foreign idempotency record")

// Record is a decoded view over an encoded record; its slices point into
// the encoded bytes.
type Record struct {
	Status   int
	NoBody   bool // the body was larger than max_response and is absent
	BodyHash []byte
	Headers  []byte // the encoded header block
	Body     []byte
}

// Encode appends a record of status and header to dst and returns it; the
// response body is appended to the result as it is written.
func Encode(dst []byte, status int, header http.Header, bodyHash *[32]byte) []byte {
	dst = append(dst, Version, 0, byte(status>>8), byte(status))
	dst = append(dst, bodyHash[:]...)
	connection := header["Connection"]
	hlen := 0
	for name, values := range header {
		if skipHeader(name) || connectionNames(connection, name) {
			continue
		}
		for _, v := range values {
			hlen += uvarintLen(len(name)) + len(name) + uvarintLen(len(v)) + len(v)
		}
	}
	dst = binary.AppendUvarint(dst, uint64(hlen))
	for name, values := range header {
		if skipHeader(name) || connectionNames(connection, name) {
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

// MarkNoBody flags an encoded record whose body was left out.
func MarkNoBody(b []byte) { b[1] |= flagNoBody }

// Decode parses an encoded record without copying.
func Decode(b []byte) (Record, error) {
	if len(b) < FixedLen+1 || b[0] != Version {
		return Record{}, ErrCorrupt
	}
	rec := Record{
		Status:   int(b[2])<<8 | int(b[3]),
		NoBody:   b[1]&flagNoBody != 0,
		BodyHash: b[4:FixedLen],
	}
	if rec.Status < 100 || rec.Status > 999 {
		return Record{}, ErrCorrupt
	}
	hlen, n := binary.Uvarint(b[FixedLen:])
	if n <= 0 || hlen > maxHeaderLen || hlen > uint64(len(b)-FixedLen-n) {
		return Record{}, ErrCorrupt
	}
	start := FixedLen + n
	rec.Headers = b[start : start+int(hlen)]
	rec.Body = b[start+int(hlen):]
	// validate the header block once so writing it cannot fail halfway
	for h := rec.Headers; len(h) > 0; {
		for range 2 {
			l, n := binary.Uvarint(h)
			if n <= 0 || l > uint64(len(h)-n) {
				return Record{}, ErrCorrupt
			}
			h = h[n+int(l):]
		}
	}
	return rec, nil
}

// WriteReplayHeaders sets the recorded headers in dst, then
// `Idempotent-Replayed: true` and, unless contentLength is empty,
// Content-Length (else it removes Content-Length). All names and values
// share one string allocation, and values one slice allocation.
func (rec Record) WriteReplayHeaders(dst http.Header, contentLength string) {
	s := string(rec.Headers)
	count := 0
	for i := 0; i < len(s); count++ {
		for range 2 {
			l, n := binary.Uvarint(rec.Headers[i:])
			i += n + int(l)
		}
	}
	values := make([]string, count+2)
	for i, j := 0, 0; i < len(s); j++ {
		l, n := binary.Uvarint(rec.Headers[i:])
		name := s[i+n : i+n+int(l)]
		i += n + int(l)
		l, n = binary.Uvarint(rec.Headers[i:])
		values[j] = s[i+n : i+n+int(l)]
		i += n + int(l)
		if prev, ok := dst[name]; ok && j > 0 && len(prev) > 0 && &prev[len(prev)-1] == &values[j-1] {
			dst[name] = values[j-len(prev) : j+1 : j+1]
		} else {
			dst[name] = values[j : j+1 : j+1]
		}
	}
	values[count] = "true"
	dst[ReplayedHeader] = values[count : count+1 : count+1]
	if contentLength != "" {
		values[count+1] = contentLength
		dst["Content-Length"] = values[count+1 : count+2 : count+2]
	} else {
		delete(dst, "Content-Length")
	}
}

// skipHeader reports whether a response header is left out of a record:
// hop-by-hop headers, Date, and the replay marker.
func skipHeader(name string) bool {
	switch name {
	case "Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
		"Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
		"Date", "Alt-Svc", ReplayedHeader:
		return true
	}
	return strings.HasPrefix(name, http.TrailerPrefix)
}

// connectionNames reports whether the values of a Connection header name
// a header: such a header is hop-by-hop too (RFC 9110, section 7.6.1,
// https://www.rfc-editor.org/rfc/rfc9110#section-7.6.1), so it is left
// out of a record like the ones skipHeader names.
func connectionNames(connection []string, name string) bool {
	for _, v := range connection {
		for option := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(option), name) {
				return true
			}
		}
	}
	return false
}

func uvarintLen(x int) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}
