package webhookidempotency

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Store keeps the state of every idempotency key: absent, in flight
// (claimed by an owner, with a lease) or completed (a recorded response).
// Implementations must be safe for concurrent use, and every method is
// one round trip to the backing store.
//
// Keys arrive fully resolved (`<key_prefix>:<source>:<value>`); records
// arrive encoded (see encodeRecord) and are returned as stored: callers
// must not modify a returned record.
type Store interface {
	// Claim atomically claims key for owner with the given lease when the
	// key is absent. Otherwise it reports the key's state: InFlight, with
	// the time left on the current owner's lease, or Completed, with the
	// recorded response.
	Claim(ctx context.Context, key, owner string, lease time.Duration) (ClaimResult, error)

	// Complete replaces the claim with the encoded record, kept for ttl,
	// if owner still owns the key; otherwise it returns ErrNotOwner and
	// changes nothing.
	Complete(ctx context.Context, key, owner string, record []byte, ttl time.Duration) error

	// Release deletes the claim if owner still owns the key, so the next
	// delivery is processed; otherwise it returns ErrNotOwner.
	Release(ctx context.Context, key, owner string) error

	// Renew extends owner's lease on an in-flight key; it returns
	// ErrNotOwner when the key is no longer owned by owner.
	Renew(ctx context.Context, key, owner string, lease time.Duration) error
}

// ClaimState is the state of a key as seen by Claim.
type ClaimState uint8

const (
	// Claimed means the caller now owns the key and must complete or
	// release it.
	Claimed ClaimState = iota
	// InFlight means another request owns the key and has not answered yet.
	InFlight
	// Completed means a response was recorded for the key.
	Completed
)

// String returns the state's name.
func (s ClaimState) String() string {
	switch s {
	case Claimed:
		return "claimed"
	case InFlight:
		return "in_flight"
	case Completed:
		return "completed"
	}
	return "unknown(" + strconv.Itoa(int(s)) + ")"
}

// ClaimResult is what Claim found or did.
type ClaimResult struct {
	// State of the key.
	State ClaimState
	// Record is the encoded response when State is Completed. It is
	// shared and must not be modified.
	Record []byte
	// LeaseLeft is the time left on the owner's lease when State is
	// InFlight (zero when the store cannot tell).
	LeaseLeft time.Duration
}

// ErrNotOwner is returned by Complete, Release and Renew when the key is no
// longer owned by the caller: its lease expired and the key was released,
// completed or claimed again by another request.
var ErrNotOwner = errors.New("idempotency key is no longer owned by this request")

// newOwner returns an owner token unique to one request across processes:
// a random per-process prefix and a counter.
func newOwner() string {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], ownerCounter.Add(1))
	var b [ownerPrefixLen + 16]byte
	copy(b[:], ownerPrefix)
	hex.Encode(b[ownerPrefixLen:], n[:])
	return string(b[:])
}

const ownerPrefixLen = 24

var (
	ownerCounter atomic.Uint64
	ownerPrefix  = func() string {
		var b [ownerPrefixLen / 2]byte
		if _, err := rand.Read(b[:]); err != nil {
			panic("webhook_idempotency: reading random owner prefix: " + err.Error())
		}
		return hex.EncodeToString(b[:])
	}()
)

// Record encoding, shared by every store.
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

// encodeRecord appends the encoded record to dst and returns it.
func encodeRecord(dst []byte, status int, header http.Header, body []byte, noBody bool, bodyHash *[32]byte) []byte {
	var flags byte
	if noBody {
		flags |= recordFlagNoBody
		body = nil
	}
	dst = append(dst, recordVersion, flags, byte(status>>8), byte(status))
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
	return append(dst, body...)
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
	// validate the header block once so writeHeaders cannot fail halfway
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

// writeHeaders sets the recorded headers in dst.
func (rec record) writeHeaders(dst http.Header) { rec.writeHeadersWith(dst, false, "") }

// writeReplayHeaders sets the recorded headers in dst, then
// `Idempotent-Replayed: true` and, unless contentLength is empty,
// Content-Length (else it removes Content-Length).
func (rec record) writeReplayHeaders(dst http.Header, contentLength string) {
	rec.writeHeadersWith(dst, true, contentLength)
}

// writeHeadersWith does the work of writeHeaders and writeReplayHeaders: all
// names and values share one string allocation, and values one slice
// allocation.
func (rec record) writeHeadersWith(dst http.Header, replay bool, contentLength string) {
	s := string(rec.headers)
	count := 0
	for i := 0; i < len(s); count++ {
		for range 2 {
			l, n := binary.Uvarint(rec.headers[i:])
			i += n + int(l)
		}
	}
	if count == 0 && !replay {
		return
	}
	extra := 0
	if replay {
		extra = 2
	}
	values := make([]string, count+extra)
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
	if replay {
		values[count] = "true"
		dst[replayedHeader] = values[count : count+1 : count+1]
		if contentLength != "" {
			values[count+1] = contentLength
			dst["Content-Length"] = values[count+1 : count+2 : count+2]
		} else {
			delete(dst, "Content-Length")
		}
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
