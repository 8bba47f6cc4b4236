package webhookidempotency

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// The redis store's archive: one stream per source,
// `{<key_prefix>:<source>}:archive`, trimmed on every append to max_events
// and to retention (docs/archive.md).

// KEYS: archive stream. ARGV: max_events, the oldest id kept (ms), then the
// event's fields and values. Appends the event and trims the stream to
// about max_events and retention (whole stream nodes, as `~` allows, so
// trimming stays cheap). Returns the event's id.
var redisArchiveAppendScript = redis.NewScript(luaArchiveAppend)

const luaArchiveAppend = `
local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', unpack(ARGV, 3))
redis.call('XTRIM', KEYS[1], 'MINID', '~', ARGV[2])
return id
`

// redisArchiveReadTimeout bounds one read of the archive by the admin API.
const redisArchiveReadTimeout = 5 * time.Second

// redisArchive is the archive of a handler on the redis store.
type redisArchive struct {
	store   *RedisStore
	rc      *redisClient // a reference of our own, held until close
	release func()
	stream  string
	a       *archive
}

func newRedisArchive(s *RedisStore, a *archive) (*redisArchive, error) {
	// a reference of our own: the store may be cleaned up before the queue
	// has appended its last events
	rc, release, err := s.acquireClient()
	if err != nil {
		return nil, err
	}
	return &redisArchive{store: s, rc: rc, release: release, stream: s.archiveKey(a.source), a: a}, nil
}

// archiveKey returns the Redis key of a source's archive. It shares the
// hash tag of the source's inbox streams.
func (s *RedisStore) archiveKey(source string) string {
	return "{" + s.Prefix + ":" + source + "}:archive"
}

// appendCall returns the script call that appends e.
func (b *redisArchive) appendCall(e *archiveEntry) *redisThen {
	minID := max(now().Add(-b.a.retention).UnixMilli(), 0)
	fields := e.fields()
	args := make([]any, 0, 2+len(fields))
	args = append(args, strconv.Itoa(b.a.maxEvents), strconv.FormatInt(minID, 10))
	args = append(args, fields...)
	return &redisThen{script: redisArchiveAppendScript, keys: []string{b.stream}, args: args}
}

func (b *redisArchive) completeAndAppend(ctx context.Context, key, owner string, record []byte, ttl time.Duration, e *archiveEntry) (err, appendErr error) {
	then := b.appendCall(e)
	err = b.store.completeThen(ctx, key, owner, record, ttl, then)
	return err, appendResult(then.val, then.err)
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

func (b *redisArchive) appendBatch(ctx context.Context, es []*archiveEntry) error {
	pipe := b.rc.client.Pipeline()
	calls := make([]*redisThen, len(es))
	cmds := make([]*redis.Cmd, len(es))
	for i, e := range es {
		calls[i] = b.appendCall(e)
		cmds[i] = redisArchiveAppendScript.EvalSha(ctx, pipe, calls[i].keys, calls[i].args...)
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	var first error
	for i, cmd := range cmds {
		v, err := cmd.Result()
		if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			v, err = redisArchiveAppendScript.Eval(ctx, b.rc.client, calls[i].keys, calls[i].args...).Result()
		}
		if err := appendResult(v, err); err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (b *redisArchive) page(ctx context.Context, hi, lo streamID, count int) ([]archivedEvent, error) {
	ctx, cancel := context.WithTimeout(ctx, redisArchiveReadTimeout)
	defer cancel()
	msgs, err := b.rc.client.XRevRangeN(ctx, b.stream, hi.String(), lo.String(), int64(count)).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	out := make([]archivedEvent, len(msgs))
	for i, m := range msgs {
		out[i] = messageEvent(m)
	}
	return out, nil
}

func (b *redisArchive) event(ctx context.Context, id streamID) (archivedEvent, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, redisArchiveReadTimeout)
	defer cancel()
	msgs, err := b.rc.client.XRangeN(ctx, b.stream, id.String(), id.String(), 1).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return archivedEvent{}, false, err
	}
	if len(msgs) == 0 {
		return archivedEvent{}, false, nil
	}
	return messageEvent(msgs[0]), true, nil
}

// messageEvent decodes a stream entry of the archive.
func messageEvent(m redis.XMessage) archivedEvent {
	return eventFromFields(m.ID, func(name string) (string, bool) {
		v, ok := m.Values[name]
		return str(v), ok
	})
}

func (b *redisArchive) size(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, b.store.timeout)
	defer cancel()
	return b.rc.client.XLen(ctx, b.stream).Result()
}

func (b *redisArchive) timeout() time.Duration { return b.store.timeout }

func (b *redisArchive) close() {
	if b.release != nil {
		b.release()
		b.release = nil
	}
}

// Interface guard
var _ archiveBackend = (*redisArchive)(nil)
