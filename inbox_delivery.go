package webhookidempotency

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/textproto"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/inbox"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/query"
)

// The inbox's delivery control (docs/inbox.md#delivery-control): the rules
// of order_by, rate and partitions, and the group of an event.

// parseOrderBy parses the key sources of order_by: `header:<Name>`,
// `json:<path>` or `query:<name>`. `body` is refused: a body's hash would
// put every event in a group of its own, which orders nothing.
func parseOrderBy(list []string) ([]keySource, error) {
	out := make([]keySource, 0, len(list))
	for _, s := range list {
		if s == "body" {
			return nil, fmt.Errorf("invalid inbox order_by source 'body': each body would be a group of its own; want header:<name>, json:<path> or query:<name>")
		}
		ks, err := parseKeySource(s)
		if err != nil {
			return nil, fmt.Errorf("invalid inbox order_by source: %v", err)
		}
		out = append(out, ks)
	}
	return out, nil
}

// parseInboxRate parses `rate <n>/<s|m|h>`.
func parseInboxRate(v string) (inbox.Rate, error) { return inbox.ParseRate(v) }

// checkPartitions accepts 1 to inbox.MaxPartitions.
func checkPartitions(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > inbox.MaxPartitions {
		return 0, fmt.Errorf("invalid inbox partitions '%s': want a number from 1 to %d", v, inbox.MaxPartitions)
	}
	return n, nil
}

// maxGroupLen is the longest group value kept as it is; longer ones, and
// those that are not printable ASCII, are grouped by their SHA-256.
const maxGroupLen = 200

// groupResolver returns the group of a stored event: the value of the
// first source that has one (eventValue), "" when none has.
func groupResolver(sources []keySource) func(ev *event.Request) string {
	return func(ev *event.Request) string {
		for _, ks := range sources {
			if v := eventValue(ks, ev); v != "" {
				return groupValue(v)
			}
		}
		return ""
	}
}

// eventValue is the value of a key source in a stored event: a JSON value
// (a string, or a number, boolean or JSON value as written), a header's
// first value trimmed, or a query parameter; "" when it has none.
func eventValue(ks keySource, ev *event.Request) string {
	switch ks.kind {
	case keyHeader:
		return headerValue(ev.Headers, ks.arg)
	case keyJSON:
		switch res := gjson.GetBytes(ev.Body, ks.arg); res.Type {
		case gjson.String:
			return res.Str
		case gjson.Number, gjson.True, gjson.False, gjson.JSON:
			return res.Raw
		}
	case keyQuery:
		if _, raw, ok := strings.Cut(ev.URI, "?"); ok {
			return query.Value(raw, ks.arg)
		}
	}
	return ""
}

// headerValue is the first value of a header in a stored header block
// ("Name: value\r\n" lines), trimmed; name is canonical.
func headerValue(block, name string) string {
	for line := range strings.SplitSeq(block, "\r\n") {
		if n, v, ok := strings.Cut(line, ": "); ok && textproto.CanonicalMIMEHeaderKey(n) == name {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// groupValue keeps a short printable value as it is, and writes any other
// as `sha256:<hex>` of it: a group is a field name in Redis and a line of
// the admin API.
func groupValue(v string) string {
	ok := len(v) <= maxGroupLen
	for i := 0; ok && i < len(v); i++ {
		ok = v[i] >= 0x20 && v[i] <= 0x7e
	}
	if ok {
		return v
	}
	sum := sha256.Sum256([]byte(v))
	return "sha256:" + hex.EncodeToString(sum[:])
}
