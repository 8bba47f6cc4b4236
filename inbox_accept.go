package webhookidempotency

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// Acceptance: an inbox stores a new event and claims its key in one round
// trip, then the handler answers at once (request.go).

// Stream entry fields of an event.
const (
	fieldSource     = "source"
	fieldKey        = "key"       // the resolved key value (Idempotency-Key)
	fieldStoreKey   = "store_key" // <key_prefix>:<source>:<value>
	fieldMethod     = "method"
	fieldURI        = "uri"
	fieldHost       = "host"
	fieldProto      = "proto"  // http or https
	fieldRemote     = "remote" // the client's IP
	fieldHeaders    = "headers"
	fieldBody       = "body"
	fieldReceived   = "received" // unix milliseconds
	fieldAttempts   = "attempts" // attempts made so far
	fieldBase       = "base"     // attempts made before the last redelivery
	fieldLastStatus = "last_status"
	fieldLastError  = "last_error"
	fieldFailed     = "failed" // unix milliseconds, dead-lettered events
)

// accept stores a new event and claims its key (and its guard, unless
// guard is "") as accepted, in one round trip; or reports the key's state,
// as a claim does. With Redis Cluster the key and the stream live on
// different nodes: the key is claimed, the event stored, and the key then
// completed.
func (ib *inbox) accept(ctx context.Context, key, guard, owner string, record []byte, event []any) (claimResult, error) {
	var res claimResult
	var id string
	var err error
	if ib.cluster {
		res, id, err = ib.acceptCluster(ctx, key, guard, owner, record, event)
	} else {
		res, id, err = ib.store.claimAndAppend(ctx, key, guard, ib.stream, record, ib.acceptTTL, event)
	}
	if err == nil && res.State == stateClaimed {
		if ce := ib.logger.Check(zap.DebugLevel, "inbox event accepted"); ce != nil {
			ce.Write(zap.String("key", key), zap.String("id", id))
		}
	}
	return res, err
}

func (ib *inbox) acceptCluster(ctx context.Context, key, guard, owner string, record []byte, event []any) (claimResult, string, error) {
	s := ib.store
	res, err := s.ClaimGuarded(ctx, key, guard, owner, ib.timeout+defaultRedisTimeout)
	if err != nil || res.State != stateClaimed {
		return res, "", err
	}
	cctx, cancel := context.WithTimeout(ctx, ib.callTimeout)
	id, err := ib.rc.client.XAdd(cctx, &redis.XAddArgs{Stream: ib.stream, Values: event}).Result()
	cancel()
	if err != nil {
		_ = s.ReleaseGuarded(completionCtx, key, guard, owner)
		return claimResult{}, "", fmt.Errorf("redis store: storing event: %w", err)
	}
	if err := s.CompleteGuarded(completionCtx, key, guard, owner, record, ib.acceptTTL); err != nil {
		// the event is stored, so it is accepted; only a duplicate arriving
		// after the lease could be accepted again
		ib.logger.Warn("recording an accepted event's key failed; a duplicate may be accepted again",
			zap.String("key", key), zap.Error(err))
	}
	return res, id, nil
}

// acceptRecord is the record an accepted event's key holds, so that
// duplicates get the same answer.
func (ib *inbox) acceptRecord(bodyHash *[32]byte) []byte {
	return encodeRecord(make([]byte, 0, recordFixedLen+1), ib.respond, nil, bodyHash)
}

// eventFields builds the stream entry of a new event: the request as the
// application needs it, without hop-by-hop headers.
func eventFields(r *http.Request, body []byte, source, keyValue, storeKey string) []any {
	proto, remote := requestOrigin(r)
	return []any{
		fieldSource, source,
		fieldKey, keyValue,
		fieldStoreKey, storeKey,
		fieldMethod, r.Method,
		fieldURI, r.RequestURI,
		fieldHost, r.Host,
		fieldProto, proto,
		fieldRemote, remote,
		fieldHeaders, headerBlock(r.Header, skipEventHeader, nil),
		fieldBody, body,
		fieldReceived, strconv.FormatInt(now().UnixMilli(), 10),
		fieldAttempts, "0",
		fieldBase, "0",
	}
}

// requestOrigin returns the request's scheme (http or https) and the
// client's address as Caddy determined it (trusted_proxies applied).
func requestOrigin(r *http.Request) (proto, remote string) {
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

// headerBlock writes a request's headers as "Name: value\r\n" lines,
// leaving out those skip names and redacting those rd redacts (rd may be
// nil).
func headerBlock(h http.Header, skip func(string) bool, rd *redactor) string {
	var b strings.Builder
	for name, values := range h {
		if skip(name) {
			continue
		}
		redacted := rd.redactsHeader(name)
		for _, v := range values {
			if redacted {
				v = redactedValue
			}
			b.WriteString(name)
			b.WriteString(": ")
			b.WriteString(v)
			b.WriteString("\r\n")
		}
	}
	return b.String()
}

// parseHeaderBlock parses the "Name: value\r\n" lines headerBlock wrote,
// names kept as written.
func parseHeaderBlock(lines string) http.Header {
	h := make(http.Header)
	for line := range strings.SplitSeq(lines, "\r\n") {
		if name, value, ok := strings.Cut(line, ": "); ok {
			h[name] = append(h[name], value)
		}
	}
	return h
}

// skipEventHeader reports whether a request header is left out of an event:
// hop-by-hop headers, and the ones a delivery sets itself.
func skipEventHeader(name string) bool {
	switch name {
	case "Webhook-Attempt", "Idempotency-Key", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto":
		return true
	}
	return skipArchiveHeader(name)
}

// skipArchiveHeader reports whether a request header is left out of an
// archived event: hop-by-hop headers, Content-Length and Host (which has a
// field of its own).
func skipArchiveHeader(name string) bool {
	switch name {
	case "Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
		"Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
		"Content-Length", "Host":
		return true
	}
	return false
}
