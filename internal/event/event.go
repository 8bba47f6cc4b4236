// Package event is the vocabulary the inbox and the archive share: a
// stored request (what a receiver needs to process a delivery again), the
// names of its fields in a store, its header block, and the request that
// delivers it to an application.
package event

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/redact"
)

// Field names of a stored event, in a Redis stream entry (and the file
// store's records).
const (
	FieldSource     = "source"
	FieldKey        = "key"       // the resolved key value (Idempotency-Key)
	FieldStoreKey   = "store_key" // <key_prefix>:<source>:<value>
	FieldMethod     = "method"
	FieldURI        = "uri"
	FieldHost       = "host"
	FieldProto      = "proto"  // http or https
	FieldRemote     = "remote" // the client's IP
	FieldHeaders    = "headers"
	FieldBody       = "body"
	FieldReceived   = "received" // unix milliseconds
	FieldAttempts   = "attempts" // inbox: attempts made so far
	FieldBase       = "base"     // inbox: attempts made before the last redelivery
	FieldLastStatus = "last_status"
	FieldLastError  = "last_error"
	FieldFailed     = "failed"      // inbox: unix milliseconds, dead-lettered events
	FieldResult     = "result"      // archive
	FieldStatus     = "status"      // archive: the answer's status
	FieldDurationUS = "duration_us" // archive
	FieldBodySHA256 = "body_sha256" // archive
	FieldRedacted   = "redacted"    // archive: "body" when values of the body were redacted
	FieldHistory    = "history"     // the attempts (AppendHistory)
)

// Request is a delivery as it is stored: the request as the application
// needs it.
type Request struct {
	Source   string
	Key      string // the resolved key value, sent as Idempotency-Key
	StoreKey string // <key_prefix>:<source>:<value>; inbox events only
	Method   string
	URI      string
	Host     string
	Proto    string // http or https
	Remote   string // the client's IP, as Caddy determined it
	Headers  string // "Name: value\r\n" lines (HeaderBlock)
	Body     []byte
	Received time.Time
	// Secret is the index of the route's secret that verified the
	// delivery, for re-signing it with that one (internal/forward).
	Secret int
	// Trace is the span context of the request that accepted the
	// delivery (trace.go); zero when it was not traced.
	Trace Trace
}

// PublicURL is the URL the provider sent the request to.
func (e *Request) PublicURL() string { return e.Proto + "://" + e.Host + e.URI }

// FromHTTP returns the stored form of a request whose body is body:
// headers without those skip names, received now.
func FromHTTP(r *http.Request, body []byte, skip func(string) bool, received time.Time) Request {
	proto, remote := Origin(r)
	return Request{
		Method: r.Method, URI: r.RequestURI, Host: r.Host, Proto: proto, Remote: remote,
		Headers: HeaderBlock(r.Header, skip, nil), Body: body, Received: received,
	}
}

// Origin returns the request's scheme (http or https) and the client's
// address as Caddy determined it (trusted_proxies applied).
func Origin(r *http.Request) (proto, remote string) {
	proto = "http"
	if r.TLS != nil {
		proto = "https"
	}
	remote, _ = caddyhttp.GetVar(r.Context(), caddyhttp.ClientIPVarKey).(string)
	if remote == "" {
		var err error
		if remote, _, err = net.SplitHostPort(r.RemoteAddr); err != nil {
			remote = r.RemoteAddr
		}
	}
	return proto, remote
}

// HeaderBlock writes a request's headers as "Name: value\r\n" lines,
// leaving out those skip names and writing redact.Value for the values of
// those redacted names (redacted may be nil).
func HeaderBlock(h http.Header, skip, redacted func(string) bool) string {
	var b strings.Builder
	for name, values := range h {
		if skip(name) {
			continue
		}
		red := redacted != nil && redacted(name)
		for _, v := range values {
			if red {
				v = redact.Value
			}
			b.WriteString(name)
			b.WriteString(": ")
			b.WriteString(v)
			b.WriteString("\r\n")
		}
	}
	return b.String()
}

// ParseHeaderBlock parses the "Name: value\r\n" lines HeaderBlock wrote,
// names kept as written.
func ParseHeaderBlock(lines string) http.Header {
	h := make(http.Header)
	for line := range strings.SplitSeq(lines, "\r\n") {
		if name, value, ok := strings.Cut(line, ": "); ok {
			h[name] = append(h[name], value)
		}
	}
	return h
}

// SkipInboxHeader reports whether a request header is left out of an inbox
// event: hop-by-hop headers, and the ones a delivery sets itself.
func SkipInboxHeader(name string) bool {
	switch name {
	case "Webhook-Attempt", "Idempotency-Key", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto":
		return true
	}
	return SkipArchiveHeader(name)
}

// SkipArchiveHeader reports whether a request header is left out of an
// archived event: hop-by-hop headers, Content-Length and Host (which has a
// field of its own).
func SkipArchiveHeader(name string) bool {
	switch name {
	case "Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
		"Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
		"Content-Length", "Host":
		return true
	}
	return false
}

// UnredactedHeaders returns the header lines without those whose value
// was redacted.
func UnredactedHeaders(lines string) string {
	if !strings.Contains(lines, ": "+redact.Value) {
		return lines
	}
	var b strings.Builder
	for line := range strings.SplitSeq(lines, "\r\n") {
		if line != "" && !strings.HasSuffix(line, ": "+redact.Value) {
			b.WriteString(line)
			b.WriteString("\r\n")
		}
	}
	return b.String()
}

// NewRequest builds the request that delivers the event to target: its
// method, headers and body, with Idempotency-Key and X-Forwarded-* set. A
// header whose value was redacted is left out.
func (e *Request) NewRequest(ctx context.Context, target string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, e.Method, target, bytes.NewReader(e.Body))
	if err != nil {
		return nil, err
	}
	req.Header = ParseHeaderBlock(UnredactedHeaders(e.Headers))
	if _, ok := req.Header["User-Agent"]; !ok {
		req.Header["User-Agent"] = nil // no Go default
	}
	req.Header.Set("Idempotency-Key", e.Key)
	req.Header.Set("X-Forwarded-For", e.Remote)
	req.Header.Set("X-Forwarded-Host", e.Host)
	req.Header.Set("X-Forwarded-Proto", e.Proto)
	return req, nil
}

// ViaHeader names, on every request the module sends itself (an inbox's
// delivery, an archive's redelivery), the key namespace of each route that
// sent it on its way, `<key_prefix>:<source>`, one per hop in the order of
// the hops, as HTTP's Via does for proxies (docs/inbox.md: Loops). A route
// that finds its own namespace there answers 508: the request came back to
// it, and processing it again would start a loop.
const ViaHeader = "Webhook-Via"

// AddVia adds namespace as the last hop of h's Webhook-Via.
func AddVia(h http.Header, namespace string) {
	h.Add(ViaHeader, namespace)
}

// HasVia reports whether h's Webhook-Via names namespace among its hops,
// in any of its lines.
func HasVia(h http.Header, namespace string) bool {
	for _, line := range h[ViaHeader] {
		for hop := range strings.SplitSeq(line, ",") {
			if strings.TrimSpace(hop) == namespace {
				return true
			}
		}
	}
	return false
}

// RetryAfter reads a Retry-After value, seconds or an HTTP date, as the
// wait from t it asks for; 0 when it is absent or unreadable.
func RetryAfter(v string, t time.Time) time.Duration {
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

// UnixMilli reads a field of unix milliseconds; zero is no time.
func UnixMilli(s string) time.Time {
	ms, err := strconv.ParseInt(s, 10, 64)
	if err != nil || ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

// Millis writes a time as a field of unix milliseconds.
func Millis(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }
