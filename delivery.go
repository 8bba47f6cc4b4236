package webhookidempotency

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// An event on its way out: the request an inbox delivers to deliver_to, or
// the admin API to an archive's redeliver_to, and the Retry-After of the
// answer.

// retryAfter reads a Retry-After value, seconds or an HTTP date, as the
// wait from t it asks for; 0 when it is absent or unreadable.
func retryAfter(v string, t time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		return time.Duration(min(secs, int64(365*24*3600))) * time.Second
	}
	if when, err := http.ParseTime(v); err == nil {
		return max(when.Sub(t), 0)
	}
	return 0
}

// outgoingEvent is an event as it is delivered: to an inbox's deliver_to,
// or by the admin API to an archive's redeliver_to.
type outgoingEvent struct {
	method, headers, body, key, remote, host, proto string
}

// outgoingFromFields reads an inbox event's stream fields.
func outgoingFromFields(ev map[string]any) outgoingEvent {
	return outgoingEvent{
		method: str(ev[fieldMethod]), headers: str(ev[fieldHeaders]), body: str(ev[fieldBody]),
		key: str(ev[fieldKey]), remote: str(ev[fieldRemote]), host: str(ev[fieldHost]), proto: str(ev[fieldProto]),
	}
}

// unredactedHeaders returns the header lines without those whose value
// was redacted.
func (o outgoingEvent) unredactedHeaders() string {
	if !strings.Contains(o.headers, ": "+redactedValue) {
		return o.headers
	}
	var b strings.Builder
	for line := range strings.SplitSeq(o.headers, "\r\n") {
		if line != "" && !strings.HasSuffix(line, ": "+redactedValue) {
			b.WriteString(line)
			b.WriteString("\r\n")
		}
	}
	return b.String()
}

// request builds the request that delivers the event to target: its method,
// headers and body, with Idempotency-Key and X-Forwarded-* set. A header
// whose value was redacted is left out.
func (o outgoingEvent) request(ctx context.Context, target string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, o.method, target, strings.NewReader(o.body))
	if err != nil {
		return nil, err
	}
	req.Header = parseHeaderBlock(o.unredactedHeaders())
	if _, ok := req.Header["User-Agent"]; !ok {
		req.Header["User-Agent"] = nil // no Go default
	}
	req.Header.Set("Idempotency-Key", o.key)
	req.Header.Set("X-Forwarded-For", o.remote)
	req.Header.Set("X-Forwarded-Host", o.host)
	req.Header.Set("X-Forwarded-Proto", o.proto)
	return req, nil
}
