package webhookidempotency

import (
	"errors"
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/dustin/go-humanize"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/admin"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/cfparse"
)

// The rules of the handler's options. Each is one function, called by the
// Caddyfile parser (which adds the line) and by Provision (which checks
// JSON configurations), so the two cannot drift apart.

// inFlightMode is what a duplicate of an in-flight key gets.
type inFlightMode uint8

const (
	inFlightConflict inFlightMode = iota // 409 with Retry-After
	inFlightWait                         // wait for the first request, then replay
	inFlightProceed                      // call the next handler without claiming
)

// String returns the mode as it is configured.
func (m inFlightMode) String() string {
	switch m {
	case inFlightWait:
		return "wait"
	case inFlightProceed:
		return "proceed"
	}
	return "conflict"
}

// parseInFlight parses `in_flight conflict | wait [<timeout>] | proceed`;
// the timeout is zero when none is given.
func parseInFlight(args []string) (inFlightMode, caddy.Duration, error) {
	if len(args) == 0 {
		return 0, 0, errors.New("'in_flight' needs at least one value")
	}
	var mode inFlightMode
	switch args[0] {
	case "conflict":
		mode = inFlightConflict
	case "wait":
		mode = inFlightWait
	case "proceed":
		mode = inFlightProceed
	default:
		return 0, 0, fmt.Errorf("invalid in_flight '%s': want conflict, wait [<timeout>] or proceed", args[0])
	}
	if mode != inFlightWait {
		if len(args) != 1 {
			return 0, 0, fmt.Errorf("in_flight %s takes no timeout", args[0])
		}
		return mode, 0, nil
	}
	if len(args) > 2 {
		return 0, 0, errors.New("too many arguments to in_flight wait: want an optional timeout")
	}
	var timeout caddy.Duration
	if len(args) == 2 {
		var err error
		if timeout, err = cfparse.PositiveDuration("in_flight wait timeout", args[1]); err != nil {
			return 0, 0, err
		}
	}
	return mode, timeout, nil
}

// Values of `mismatch`.
const (
	mismatchReplay = "replay"
	mismatchReject = "reject"
)

// parseMismatch parses `mismatch replay | reject`; it reports whether a
// duplicate with another body is rejected.
func parseMismatch(v string) (reject bool, err error) {
	return cfparse.Keywords[bool]{{Word: mismatchReplay, Value: false}, {Word: mismatchReject, Value: true}}.Parse("mismatch", v)
}

// Values of `fail`.
const (
	failOpen   = "open"
	failClosed = "closed"
)

// defaultFail is `open`, or `closed` with an inbox: nothing is accepted
// that was not stored.
func defaultFail(inbox bool) string {
	if inbox {
		return failClosed
	}
	return failOpen
}

// parseFail parses `fail open | closed`; it reports whether the handler
// fails closed. An inbox never fails open.
func parseFail(v string, inbox bool) (closed bool, err error) {
	closed, err = cfparse.Keywords[bool]{{Word: failOpen, Value: false}, {Word: failClosed, Value: true}}.Parse("fail", v)
	if err == nil && !closed && inbox {
		return false, errors.New("inbox mode never fails open: an event that was not stored must not be accepted (remove 'fail open')")
	}
	return closed, err
}

// checkSource is the rule of `source`. Store keys are
// `<key_prefix>:<source>:<value>` and the redis store's streams carry the
// hash tag `{<key_prefix>:<source>}`: a ':' in a source would let two
// routes' keys be the same string (source `a` with key `b:k1` and source
// `a:b` with key `k1`), and a brace would move or break the hash tag
// (docs/caddyfile.md: Keys).
func checkSource(v string) error {
	if strings.ContainsAny(v, ":{}") {
		return fmt.Errorf("invalid source '%s': it must not contain ':', '{' or '}'", v)
	}
	return nil
}

// presetSourceConflict is the error for two handlers that take the same
// source from a preset (README: Keys): where says where they are.
func presetSourceConflict(preset, where string) error {
	return fmt.Errorf("the %q preset is used without a 'source' %s: both routes would share keys and replay one endpoint's answers to the other; give each a distinct 'source'", preset, where)
}

// statusSet is a set of HTTP status codes 100-999.
type statusSet [16]uint64

func (s *statusSet) add(code int) { s[code/64] |= 1 << (code % 64) }
func (s *statusSet) has(code int) bool {
	return code >= 0 && code < 1024 && s[code/64]&(1<<(code%64)) != 0
}
func (s *statusSet) addRange(lo, hi int) {
	for c := lo; c <= hi; c++ {
		s.add(c)
	}
}
func (s *statusSet) remove(codes ...int) {
	for _, c := range codes {
		s[c/64] &^= 1 << (c % 64)
	}
}

// parseStatusSet parses `cache_status` entries; nil gives the default.
func parseStatusSet(list []string) (statusSet, error) {
	var s statusSet
	if len(list) == 0 {
		s.addRange(200, 299)
		s.addRange(400, 499)
		s.remove(408, 409, 425, 429)
		return s, nil
	}
	for _, v := range list {
		if err := addStatus(&s, v); err != nil {
			return s, err
		}
	}
	return s, nil
}

func addStatus(s *statusSet, v string) error {
	lo, hi, ok := cfparse.ParseStatusSpec(v)
	if !ok {
		return fmt.Errorf("invalid cache status %q: want a code 200-499 or a class 2xx, 3xx or 4xx", v)
	}
	if lo < 200 || lo >= 500 {
		return fmt.Errorf("cache status %q is never recorded: %s", v, statusNeverRecorded)
	}
	s.addRange(lo, hi)
	return nil
}

// statusNeverRecorded says why 1xx and 5xx answers are refused in
// cache_status: a 5xx must be processed again when the provider retries,
// and a 1xx is not a final answer.
const statusNeverRecorded = "a 5xx answer must be processed again when the provider retries, and a 1xx is not a final answer"

// parseSize parses `1MiB`, `512KB` or plain bytes.
func parseSize(s string) (int64, error) {
	n, err := humanize.ParseBytes(s)
	if err != nil {
		return 0, err
	}
	if n == 0 || n > 1<<40 {
		return 0, errors.New("must be between 1 byte and 1TiB")
	}
	return int64(n), nil
}

// maxKeepResponse is the largest keep_response: an event keeps up to
// event.MaxAttempts answers.
const maxKeepResponse = 64 << 10

// parseKeepResponse parses keep_response: a size, or 0 (or off) to keep
// no answer's headers and body.
func parseKeepResponse(s string) (int64, error) {
	if s == "0" || s == "off" {
		return 0, nil
	}
	n, err := humanize.ParseBytes(s)
	if err != nil {
		return 0, fmt.Errorf("invalid keep_response '%s': want a size such as 4KiB, or 0 for none", s)
	}
	if err := checkKeepResponse(int64(min(n, 1<<62))); err != nil {
		return 0, err
	}
	return int64(n), nil
}

// checkKeepResponse is keep_response's rule: 0 to 64KiB.
func checkKeepResponse(n int64) error {
	if n < 0 || n > maxKeepResponse {
		return fmt.Errorf("invalid keep_response %d: want 0 (none) to %d bytes (64KiB)", n, maxKeepResponse)
	}
	return nil
}

// validMethod reports whether m is an HTTP method token.
func validMethod(m string) bool {
	if m == "" {
		return false
	}
	for i := 0; i < len(m); i++ {
		c := m[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z') {
			return false
		}
	}
	return true
}

// The rules of the inbox's options, shared by the Caddyfile parser and
// newInbox.

// checkInboxRespond accepts a 2xx status only: anything else makes the
// provider retry an event that was stored.
func checkInboxRespond(v string) (int, error) {
	code, err := strconv.Atoi(v)
	if err != nil || code < 200 || code > 299 {
		return 0, fmt.Errorf("invalid inbox respond '%s': want a 2xx status, so the provider stops retrying", v)
	}
	return code, nil
}

// parseJitter parses a percentage such as `10%` into 0.10.
func parseJitter(v string) (float64, error) {
	if !strings.HasSuffix(v, "%") {
		return 0, fmt.Errorf("invalid inbox jitter '%s': want a percentage such as 10%%", v)
	}
	p, err := strconv.ParseFloat(strings.TrimSuffix(v, "%"), 64)
	if err != nil || p < 0 || p > 100 || math.IsNaN(p) {
		return 0, fmt.Errorf("invalid inbox jitter '%s': want a percentage from 0%% to 100%%", v)
	}
	return p / 100, nil
}

// checkPositive refuses a zero or negative duration.
func checkPositive(what string, d caddy.Duration) error {
	if d <= 0 {
		return fmt.Errorf("invalid inbox %s '%s': must be positive", what, time.Duration(d))
	}
	return nil
}

// checkConcurrency accepts a positive integer.
func checkConcurrency(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("invalid inbox concurrency '%s': want a positive integer", v)
	}
	return n, nil
}

// errNoDeliverTo is the error of an inbox without a URL to deliver to.
var errNoDeliverTo = errors.New("inbox needs deliver_to: the URL events are delivered to")

// checkDeliverTo checks a deliver_to URL.
func checkDeliverTo(v string) error { return cfparse.CheckHTTPURL("inbox deliver_to", v) }

// The rules of the archive's options, shared by the Caddyfile parser and
// newArchive.

// parseArchiveRetention parses the archive's retention, a positive
// duration (`30d` works).
func parseArchiveRetention(v string) (caddy.Duration, error) {
	return cfparse.PositiveDuration("archive retention", v)
}

// parseMaxEvents accepts a positive integer.
func parseMaxEvents(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("invalid archive max_events '%s': want a positive integer", v)
	}
	return n, nil
}

// parseArchiveBodies parses `bodies on | off`; it reports whether bodies
// are kept.
func parseArchiveBodies(v string) (bool, error) { return cfparse.OnOff.Parse("archive bodies", v) }

// checkRedeliverTo checks a redeliver_to URL.
func checkRedeliverTo(v string) error { return cfparse.CheckHTTPURL("archive redeliver_to", v) }

// checkTraceURL checks the global trace_url: an absolute http(s) URL of a
// trace in the operator's trace viewer, with {trace_id} where the trace's
// id goes. Other placeholders ({env.X}) are checked once Provision has
// resolved them.
func checkTraceURL(v string) error {
	if !strings.Contains(v, admin.TraceIDPlaceholder) {
		return fmt.Errorf("invalid trace_url '%s': want the URL of a trace in the trace viewer, with %s where its id goes", v, admin.TraceIDPlaceholder)
	}
	sample := strings.ReplaceAll(v, admin.TraceIDPlaceholder, "0af7651916cd43dd8448eb211c80319c")
	if cfparse.HasPlaceholder(sample) {
		return nil
	}
	if u, err := url.Parse(sample); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return fmt.Errorf("invalid trace_url '%s': want an absolute http:// or https:// URL with a host", v)
	}
	return nil
}
