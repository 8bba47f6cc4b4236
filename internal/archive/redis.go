package archive

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/store/redisstore"
)

// The redis store's archive (docs/archive.md): per source, a stream of
// events without their bodies, `{<key_prefix>:<source>}:archive`, and a
// stream of their bodies under the same ids,
// `{<key_prefix>:<source>}:archive:body`, so that a list reads no body.
// Both share the source's hash tag (one Redis Cluster slot) and are written
// by one script, which trims them to max_events and retention and sets
// their TTL to retention. Redeliveries are kept beside them
// (redis_redeliveries.go).

// redisReadTimeout bounds one read of the archive by the admin API (or the
// store's timeout, when that is longer). Reads go through a client that
// shares the store's connections with this read timeout: the store's own,
// short for the request path, would cut a read of large bodies short.
const redisReadTimeout = 5 * time.Second

// redisAppendLua appends one event. KEYS: the event stream, the body
// stream. ARGV: max_events, the minimum id retention keeps, retention in
// milliseconds, "1" when a body is kept, the body, then the event's fields
// and values. The event stream is trimmed to about max_events (MAXLEN ~)
// and retention (MINID ~, a command of its own: XADD takes one trimming
// strategy), both by whole stream nodes, so trimming costs next to
// nothing; the body stream is trimmed to the oldest event left, so no body
// outlives its event. Both streams expire retention after the last append:
// an idle source's archive goes once all of it is older than retention,
// and a volatile-* maxmemory-policy may evict it, as it may the keys.
const redisAppendLua = `
local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', unpack(ARGV, 6))
redis.call('XTRIM', KEYS[1], 'MINID', '~', ARGV[2])
if ARGV[4] == '1' then
	-- the body stream takes the event stream's ids, in order; should it
	-- hold a later one (the event stream deleted by hand), the event is
	-- kept without its body
	redis.pcall('XADD', KEYS[2], id, 'b', ARGV[5])
end
local first = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)[1]
if first then
	redis.call('XTRIM', KEYS[2], 'MINID', first[1])
end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return id
`

// redisBodyField is the field of a body stream entry.
const redisBodyField = "b"

// redisBackend is the archive of a handler on the redis store.
type redisBackend struct {
	streams redisstore.Streams
	client  redis.UniversalClient // a reference of our own, held until close
	release func()
	stream  string // the events
	bodyKey string // their bodies
	maxLen  string // max_events
	a       *Archive
	memory  *memoryGuard

	readerOnce sync.Once
	reader     *redis.Client // standalone and Sentinel: the client with the read timeout
}

func newRedisBackend(streams redisstore.Streams, a *Archive) (*redisBackend, error) {
	// a reference of our own: the store may be cleaned up before the queue
	// has appended its last events
	client, release, err := streams.Client()
	if err != nil {
		return nil, err
	}
	stream := streams.Keys(a.cfg.Source).Archive
	if a.cfg.Kind != "" {
		stream = strings.TrimSuffix(stream, "archive") + a.cfg.Kind
	}
	b := &redisBackend{
		streams: streams, client: client, release: release,
		stream: stream, bodyKey: stream + ":body", maxLen: strconv.Itoa(a.cfg.MaxEvents), a: a,
	}
	b.memory = newMemoryGuard(b)
	return b, nil
}

// appendCmd returns the command that appends e (redisAppendLua).
func (b *redisBackend) appendCmd(e *Entry) []any {
	cmd := append(make([]any, 0, 10+fieldCount), "EVAL", redisAppendLua, 2, b.stream, b.bodyKey,
		b.maxLen, b.a.cutoff().String(), max(b.a.cfg.Retention.Milliseconds(), 1))
	if e.HasBody {
		cmd = append(cmd, "1", e.Body)
	} else {
		cmd = append(cmd, "0", "")
	}
	return e.appendFields(cmd)
}

func (b *redisBackend) completeAndAppend(ctx context.Context, key, guard, owner string, record []byte, ttl time.Duration, e *Entry) (err, appendErr error) {
	if e == nil { // refused by admit: the completion alone
		return b.streams.Store().CompleteGuarded(ctx, key, guard, owner, record, ttl), nil
	}
	then, err := b.streams.CompleteThen(ctx, key, guard, owner, record, ttl, [][]any{b.appendCmd(e)})
	return err, appendResult(then.Val, then.Err)
}

// appendResult checks the reply of an append.
func appendResult(v any, err error) error {
	if err != nil {
		return fmt.Errorf("redis store: archive: %w", err)
	}
	if _, ok := v.(string); !ok {
		return fmt.Errorf("redis store: archive: unexpected reply %T", v)
	}
	return nil
}

func (b *redisBackend) appendBatch(ctx context.Context, es []*Entry) error {
	pipe := b.client.Pipeline()
	cmds := make([]*redis.Cmd, len(es))
	for i, e := range es {
		cmds[i] = pipe.Do(ctx, b.appendCmd(e)...)
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	var first error
	for _, cmd := range cmds {
		if err := appendResult(cmd.Result()); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// admit implements memoryWatcher.
func (b *redisBackend) admit(e *Entry) bool { return b.memory.admit(int64(e.size())) }

// read returns the client an admin read goes through, on the node of the
// archive's slot with Redis Cluster, and its context.
func (b *redisBackend) read(ctx context.Context) (redis.Cmdable, context.Context, context.CancelFunc, error) {
	timeout := max(redisReadTimeout, b.streams.Timeout())
	ctx, cancel := context.WithTimeout(ctx, timeout)
	switch c := b.client.(type) {
	case *redis.Client:
		b.readerOnce.Do(func() { b.reader = c.WithTimeout(timeout) })
		return b.reader, ctx, cancel, nil
	case *redis.ClusterClient:
		node, err := c.MasterForKey(ctx, b.stream)
		if err != nil {
			cancel()
			return nil, nil, nil, err
		}
		return node.WithTimeout(timeout), ctx, cancel, nil
	}
	return b.client, ctx, cancel, nil
}

func (b *redisBackend) page(ctx context.Context, hi, lo event.ID, count int) ([]Event, error) {
	c, ctx, cancel, err := b.read(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	pipe := c.Pipeline()
	page := pipe.XRevRangeN(ctx, b.stream, hi.String(), lo.String(), int64(count))
	indexed := b.indexedRedeliveries(ctx, pipe, hi, lo, count)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	msgs := page.Val()
	out := make([]Event, len(msgs))
	for i, m := range msgs {
		out[i] = messageEvent(m, false)
	}
	return out, b.addRedeliveries(ctx, c, out, indexed.Val())
}

func (b *redisBackend) event(ctx context.Context, id event.ID) (Event, bool, error) {
	c, ctx, cancel, err := b.read(ctx)
	if err != nil {
		return Event{}, false, err
	}
	defer cancel()
	pipe := c.Pipeline()
	meta := pipe.XRangeN(ctx, b.stream, id.String(), id.String(), 1)
	body := pipe.XRangeN(ctx, b.bodyKey, id.String(), id.String(), 1)
	redelivered := pipe.LRange(ctx, b.redeliveryList(redeliveryMember(id)), 0, -1)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return Event{}, false, err
	}
	msgs := meta.Val()
	if len(msgs) == 0 {
		return Event{}, false, nil
	}
	ev := messageEvent(msgs[0], true)
	ev.addRedeliveries(redelivered.Val())
	if ev.BodyStored && !ev.bodyRead {
		ev.setBody(bodyOf(body.Val()))
	}
	return ev, true, nil
}

func (b *redisBackend) bodies(ctx context.Context, evs []*Event) error {
	c, ctx, cancel, err := b.read(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	pipe := c.Pipeline()
	cmds := make([]*redis.XMessageSliceCmd, len(evs))
	for i, ev := range evs {
		switch {
		case !ev.BodyStored:
		case ev.BodySize == nil: // archived with its body among its fields
			cmds[i] = pipe.XRangeN(ctx, b.stream, ev.ID, ev.ID, 1)
		default:
			cmds[i] = pipe.XRangeN(ctx, b.bodyKey, ev.ID, ev.ID, 1)
		}
	}
	if pipe.Len() == 0 {
		return nil
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	for i, ev := range evs {
		switch {
		case cmds[i] == nil:
		case ev.BodySize == nil:
			var body []byte
			if msgs := cmds[i].Val(); len(msgs) > 0 {
				body = messageEvent(msgs[0], true).body
			}
			ev.setBody(body)
		default:
			ev.setBody(bodyOf(cmds[i].Val()))
		}
	}
	return nil
}

// bodyOf returns the body of a body stream's entry, nil when there is
// none.
func bodyOf(msgs []redis.XMessage) []byte {
	if len(msgs) == 0 {
		return nil
	}
	s, ok := msgs[0].Values[redisBodyField].(string)
	if !ok {
		return nil
	}
	return []byte(s)
}

// messageEvent decodes a stream entry of the archive.
func messageEvent(m redis.XMessage, withBody bool) Event {
	return eventFromFields(m.ID, func(name string) (string, bool) {
		v, ok := m.Values[name]
		s, _ := v.(string)
		return s, ok
	}, withBody)
}

// size trims both streams to cutoff exactly (an idle source has no append
// to trim them), then counts the events.
func (b *redisBackend) size(ctx context.Context, cutoff event.ID) (int64, error) {
	c, ctx, cancel, err := b.read(ctx)
	if err != nil {
		return 0, err
	}
	defer cancel()
	pipe := c.Pipeline()
	pipe.XTrimMinID(ctx, b.stream, cutoff.String())
	pipe.XTrimMinID(ctx, b.bodyKey, cutoff.String())
	n := pipe.XLen(ctx, b.stream)
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, err
	}
	return n.Val(), nil
}

func (b *redisBackend) timeout() time.Duration { return b.streams.Timeout() }

func (b *redisBackend) close() {
	b.memory.close()
	if b.release != nil {
		b.release()
		b.release = nil
	}
}

// Interface guards
var (
	_ backend       = (*redisBackend)(nil)
	_ memoryWatcher = (*redisBackend)(nil)
)
