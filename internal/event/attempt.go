package event

import (
	"encoding/base64"
	"encoding/binary"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/redact"
)

// Attempts: what became of each time an event was handed to the
// application (docs/archive.md#attempts). In dedup mode the one attempt is
// the application's answer to the request, kept with the archived event;
// in inbox mode each delivery attempt, to any of the event's destinations,
// is kept with the event in the inbox and read with its archived event.

// MaxAttempts is the most attempts an event keeps: the newest, the oldest
// dropped; History.Total counts them all.
const MaxAttempts = 20

// DefaultKeepResponse is what is kept of each answer by default (the
// handler's keep_response): its headers, then its body, 4 KiB together.
const DefaultKeepResponse = 4 << 10

// NextHandler is the destination of an attempt in dedup mode: the route's
// next handler, which answered the request itself.
const NextHandler = "next"

// Attempt is one attempt: when it started, where it went, the answer's
// status (0 for none) and how long it took, what is kept of the answer
// (its headers, redacted, then its body, within keep_response), and the
// error of an attempt that got no answer.
type Attempt struct {
	At          time.Time
	Destination string
	// Number is the attempt's number at its destination, as it was sent
	// (Webhook-Attempt); 1 in dedup mode.
	Number  int
	Status  int
	Latency time.Duration
	// Headers are the answer's headers as "Name: value\r\n" lines
	// (HeaderBlock), those the route redacts written as redact.Value.
	Headers string
	Body    []byte
	// Truncated tells that the answer's headers or body did not fit in
	// keep_response and were cut.
	Truncated bool
	Error     string
}

// Fields of an encoded attempt.
const (
	attemptAt          = "t" // unix microseconds
	attemptDestination = "d"
	attemptNumber      = "n"
	attemptStatus      = "s"
	attemptLatency     = "l" // microseconds
	attemptHeaders     = "h"
	attemptBody        = "b"
	attemptTruncated   = "c" // "1" when cut
	attemptError       = "e"
)

// AppendAttempt appends a's encoding to b: its fields as AppendField
// writes them, those without a value left out.
func AppendAttempt(b []byte, a *Attempt) []byte {
	var num [20]byte
	b = AppendField(b, attemptAt, strconv.AppendInt(num[:0], a.At.UnixMicro(), 10))
	if a.Destination != "" {
		b = appendStringField(b, attemptDestination, a.Destination)
	}
	b = AppendField(b, attemptNumber, strconv.AppendInt(num[:0], int64(a.Number), 10))
	b = AppendField(b, attemptStatus, strconv.AppendInt(num[:0], int64(a.Status), 10))
	b = AppendField(b, attemptLatency, strconv.AppendInt(num[:0], a.Latency.Microseconds(), 10))
	if a.Headers != "" {
		b = appendStringField(b, attemptHeaders, a.Headers)
	}
	if len(a.Body) > 0 {
		b = AppendField(b, attemptBody, a.Body)
	}
	if a.Truncated {
		b = appendStringField(b, attemptTruncated, "1")
	}
	if a.Error != "" {
		b = appendStringField(b, attemptError, a.Error)
	}
	return b
}

// appendStringField is AppendField of a string value, without converting
// it to a byte slice.
func appendStringField(b []byte, name, value string) []byte {
	b = binary.AppendUvarint(b, uint64(len(name)))
	b = append(b, name...)
	b = binary.AppendUvarint(b, uint64(len(value)))
	return append(b, value...)
}

// ParseAttempt decodes what AppendAttempt wrote.
func ParseAttempt(b []byte) (Attempt, error) {
	var a Attempt
	for len(b) > 0 {
		name, value, rest, err := nextField(b)
		if err != nil {
			return Attempt{}, err
		}
		b = rest
		switch string(name) {
		case attemptAt:
			us, _ := strconv.ParseInt(string(value), 10, 64)
			a.At = time.UnixMicro(us).UTC()
		case attemptDestination:
			a.Destination = string(value)
		case attemptNumber:
			a.Number, _ = strconv.Atoi(string(value))
		case attemptStatus:
			a.Status, _ = strconv.Atoi(string(value))
		case attemptLatency:
			us, _ := strconv.ParseInt(string(value), 10, 64)
			a.Latency = time.Duration(us) * time.Microsecond
		case attemptHeaders:
			a.Headers = string(value)
		case attemptBody:
			a.Body = append([]byte(nil), value...)
		case attemptTruncated:
			a.Truncated = string(value) == "1"
		case attemptError:
			a.Error = string(value)
		}
	}
	return a, nil
}

// nextField splits the first field AppendField wrote off b.
func nextField(b []byte) (name, value, rest []byte, err error) {
	var parts [2][]byte
	for i := range parts {
		l, n := binary.Uvarint(b)
		if n <= 0 || l > uint64(len(b)-n) {
			return nil, nil, nil, ErrCorruptFields
		}
		parts[i] = b[n : n+int(l)]
		b = b[n+int(l):]
	}
	return parts[0], parts[1], b, nil
}

// History is an event's attempts: the newest MaxAttempts, oldest first,
// and the number of all it has had.
type History struct {
	Total    int
	Attempts []Attempt
}

// Add appends a, dropping the oldest attempt beyond MaxAttempts.
func (h *History) Add(a Attempt) {
	h.Total++
	if len(h.Attempts) == MaxAttempts {
		copy(h.Attempts, h.Attempts[1:])
		h.Attempts = h.Attempts[:MaxAttempts-1]
	}
	h.Attempts = append(h.Attempts, a)
}

// Then returns h followed by later, a history kept apart (an archived
// event's redeliveries, after its own attempt): the count of both, and the
// newest MaxAttempts attempts of both. Neither is changed.
func (h History) Then(later History) History {
	if later.Total == 0 {
		return h
	}
	all := make([]Attempt, 0, len(h.Attempts)+len(later.Attempts))
	all = append(append(all, h.Attempts...), later.Attempts...)
	return History{Total: h.Total + later.Total, Attempts: all[max(len(all)-MaxAttempts, 0):]}
}

// PushAttemptLua defines, for a Redis script that keeps a history as a
// list (ListedHistory), push_attempt(list, attempt, most): it appends an
// attempt (AppendAttempt's encoding) numbered after the list's last,
// keeps the newest most, and returns the attempt's count.
const PushAttemptLua = `
local function push_attempt(list, attempt, most)
	local last = redis.call('LINDEX', list, -1)
	local n = 1
	if last then
		n = (tonumber(string.match(last, '^(%d+)\n')) or 0) + 1
	end
	redis.call('RPUSH', list, n .. '\n' .. attempt)
	redis.call('LTRIM', list, -tonumber(most), -1)
	return n
end
`

// ListedHistory decodes a history kept as a list (on Redis), oldest
// first, each element "<n>\n<attempt>": n counts every attempt of the
// history up to this one, and the attempt is AppendAttempt's
// (PushAttemptLua writes them). An element that does not decode is left
// out.
func ListedHistory(elems []string) History {
	var h History
	for _, el := range elems {
		num, enc, ok := strings.Cut(el, "\n")
		if !ok {
			continue
		}
		a, err := ParseAttempt([]byte(enc))
		if err != nil {
			continue
		}
		h.Attempts = append(h.Attempts, a)
		h.Total, _ = strconv.Atoi(num)
	}
	return h
}

// AppendHistory appends h's encoding to b: the total, then each attempt,
// its length first.
func AppendHistory(b []byte, h *History) []byte {
	b = binary.AppendUvarint(b, uint64(h.Total))
	for i := range h.Attempts {
		start := len(b)
		b = AppendAttempt(b, &h.Attempts[i])
		var l [binary.MaxVarintLen64]byte
		w := binary.PutUvarint(l[:], uint64(len(b)-start))
		b = slices.Insert(b, start, l[:w]...)
	}
	return b
}

// ParseHistory decodes what AppendHistory wrote; an empty b is no
// history.
func ParseHistory(b []byte) (History, error) {
	if len(b) == 0 {
		return History{}, nil
	}
	total, n := binary.Uvarint(b)
	if n <= 0 {
		return History{}, ErrCorruptFields
	}
	b = b[n:]
	h := History{Total: int(total)}
	for len(b) > 0 {
		l, n := binary.Uvarint(b)
		if n <= 0 || l > uint64(len(b)-n) {
			return History{}, ErrCorruptFields
		}
		a, err := ParseAttempt(b[n : n+int(l)])
		if err != nil {
			return History{}, err
		}
		h.Attempts = append(h.Attempts, a)
		b = b[n+int(l):]
	}
	return h, nil
}

// ErrorLine is an attempt's error text as it is kept: on one line, at
// most 300 bytes.
func ErrorLine(s string) string {
	s = strings.NewReplacer("\r", " ", "\n", " ").Replace(s)
	if len(s) > 300 {
		s = s[:300]
	}
	return s
}

// KeptHeaders writes an answer's headers as lines (HeaderBlock), those
// redacted names redacted, in name order, within limit bytes: whole lines,
// as many as fit. It reports whether some were left out.
func KeptHeaders(h http.Header, redacted func(string) bool, limit int) (string, bool) {
	if limit <= 0 || len(h) == 0 {
		return "", len(h) > 0
	}
	var buf [16]string // an answer's headers, most often: no allocation
	names := buf[:0]
	for name := range h {
		if !SkipArchiveHeader(name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	size, cut := 0, false
	line := func(name, v string) bool {
		if size+len(name)+len(v)+4 > limit {
			cut = true
			return false
		}
		size += len(name) + len(v) + 4
		return true
	}
	for _, name := range names {
		red := redacted != nil && redacted(name)
		for _, v := range h[name] {
			if red {
				v = redact.Value
			}
			line(name, v)
		}
	}
	var b strings.Builder
	b.Grow(size)
	size = 0
	for _, name := range names {
		red := redacted != nil && redacted(name)
		for _, v := range h[name] {
			if red {
				v = redact.Value
			}
			if line(name, v) {
				b.WriteString(name)
				b.WriteString(": ")
				b.WriteString(v)
				b.WriteString("\r\n")
			}
		}
	}
	return b.String(), cut
}

// KeptBody returns what is kept of an answer's body within limit bytes,
// and whether it was cut.
func KeptBody(body []byte, limit int) ([]byte, bool) {
	if len(body) <= limit {
		return body, false
	}
	return body[:max(limit, 0)], true
}

// AttemptView is an attempt as the admin API shows it (docs/admin.md, the
// attempt shape): its answer's headers and body only when shown whole.
type AttemptView struct {
	At          time.Time `json:"at"`
	Destination string    `json:"destination"`
	Attempt     int       `json:"attempt"`
	Status      int       `json:"status"`
	LatencyMs   float64   `json:"latency_ms"`
	Error       string    `json:"error,omitempty"`
	// Truncated tells that the answer was cut to keep_response.
	Truncated    bool                `json:"truncated,omitempty"`
	Headers      map[string][]string `json:"headers,omitempty"`
	Body         *string             `json:"body,omitempty"`
	BodyEncoding string              `json:"body_encoding,omitempty"` // "base64" when the body is not UTF-8
}

// HistoryView is a history as the admin API shows it (docs/admin.md, the
// history shape): the count of every attempt, and the newest attempts,
// oldest first.
type HistoryView struct {
	Total    int           `json:"total"`
	Attempts []AttemptView `json:"attempts"`
}

// ShowHistory returns h as the admin API shows it, nil when it holds no
// attempt; whole adds the answers' headers and bodies.
func ShowHistory(h History, whole bool) *HistoryView {
	if h.Total == 0 {
		return nil
	}
	out := &HistoryView{Total: h.Total, Attempts: make([]AttemptView, len(h.Attempts))}
	for i, a := range h.Attempts {
		v := AttemptView{
			At: a.At, Destination: a.Destination, Attempt: a.Number, Status: a.Status,
			LatencyMs: float64(a.Latency.Microseconds()) / 1000, Error: a.Error, Truncated: a.Truncated,
		}
		if whole {
			if a.Headers != "" {
				v.Headers = ParseHeaderBlock(a.Headers)
			}
			if len(a.Body) > 0 {
				b := string(a.Body)
				if !utf8.ValidString(b) {
					b, v.BodyEncoding = base64.StdEncoding.EncodeToString(a.Body), "base64"
				}
				v.Body = &b
			}
		}
		out.Attempts[i] = v
	}
	return out
}
