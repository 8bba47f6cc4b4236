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

// redisArchiveReadTimeout bounds one read of the archive by the admin API.
const redisArchiveReadTimeout = 5 * time.Second

// redisArchive is the archive of a handler on the redis store.
type redisArchive struct {
	store   *RedisStore
	rc      *redisClient // a reference of our own, held until close
	release func()
	stream  string
	maxLen  string // max_events
	a       *archive
}

func newRedisArchive(s *RedisStore, a *archive) (*redisArchive, error) {
	// a reference of our own: the store may be cleaned up before the queue
	// has appended its last events
	rc, release, err := s.acquireClient()
	if err != nil {
		return nil, err
	}
	return &redisArchive{store: s, rc: rc, release: release, stream: s.archiveKey(a.source), maxLen: strconv.Itoa(a.maxEvents), a: a}, nil
}

// archiveKey returns the Redis key of a source's archive. It shares the
// hash tag of the source's inbox streams.
func (s *RedisStore) archiveKey(source string) string {
	return "{" + s.Prefix + ":" + source + "}:archive"
}

// appendCall returns the commands that append e: XADD, trimming the
// stream to about max_events, then XTRIM to retention (both by whole stream
// nodes, as `~` allows, so trimming stays cheap). XADD takes one trimming
// strategy, so retention is a command of its own.
func (b *redisArchive) appendCall(e *archiveEntry) *redisThen {
	xadd := append(make([]any, 0, 6+archiveFieldCount), "XADD", b.stream, "MAXLEN", "~", b.maxLen, "*")
	xadd = e.appendFields(xadd)
	minID := strconv.FormatInt(max(now().Add(-b.a.retention).UnixMilli(), 0), 10)
	return &redisThen{cmds: [][]any{xadd, {"XTRIM", b.stream, "MINID", "~", minID}}}
}

func (b *redisArchive) completeAndAppend(ctx context.Context, key, guard, owner string, record []byte, ttl time.Duration, e *archiveEntry) (err, appendErr error) {
	then := b.appendCall(e)
	err = b.store.completeThen(ctx, key, guard, owner, record, ttl, then)
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
	cmds := make([]*redis.Cmd, len(es))
	for i, e := range es {
		call := b.appendCall(e)
		cmds[i] = pipe.Do(ctx, call.cmds[0]...)
		if i == len(es)-1 { // one trim for the batch
			pipe.Do(ctx, call.cmds[1]...)
		}
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
