package inbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/store/redisstore"
)

// The redis store's queue. A source's inbox is one partition or more
// (partitions), each a Redis Stream read by a consumer group shared by
// every instance, with its retry set, dead letters and the held events of
// its groups under a hash tag of its own (redis_lua.go): one partition is
// under the source's tag, `{<prefix>:<source>}`; n of them under
// `{<prefix>:<source>:<i>}`, which Redis Cluster spreads over its nodes.
// An event in delivery is a pending entry of the group: a worker that
// dies leaves it pending, and another reclaims it.
//
// An event without a group goes to a partition at random; a group always
// to the same one (an FNV hash of its value, modulo n). The numbers of
// partitions in use are a set under the source's tag (the registry): an
// instance started with another number reads the partitions of every
// number in it until those its own does not use are drained, and an event
// of a group still pending in one of them joins its group there, so that
// changing the number loses and reorders nothing.

// group is the consumer group of every inbox stream.
const group = "webhook_idempotency"

// fieldSuspected holds Event.Suspected in a stream entry.
const fieldSuspected = "suspected"

// MaxPartitions is the most partitions a source's inbox may have.
const MaxPartitions = 64

// layoutEvery is how often an instance renews its number of partitions in
// the registry and looks for the partitions of others.
var layoutEvery = 5 * time.Second

// partition is one stream of a source's inbox and its keys, in the order
// of partKeys.
type partition struct {
	keys   []string
	prefix string // what its keys start with: its tag, and the route's name
	// index is unique among a source's partitions: the partition's
	// number, or MaxPartitions for the one of an unpartitioned inbox. It
	// tells dead-letter ids apart (deadIDStride).
	index   int
	lane    int         // its place among the queue's partitions
	grouped atomic.Bool // the consumer group is known to exist
	retired atomic.Bool // no longer read: its layout has drained
}

func (p *partition) stream() string { return p.keys[0] }
func (p *partition) retry() string  { return p.keys[1] }
func (p *partition) dead() string   { return p.keys[2] }
func (p *partition) held() string   { return p.keys[3] }
func (p *partition) heads() string  { return p.keys[5] }
func (p *partition) answering() string {
	return p.keys[7]
}

// newestKey is the key of a group's newest newer_than value.
func (p *partition) newestKey(group string) string { return p.prefix + ":newest:" + group }

// redisQueue is an inbox's queue on the redis store: one destination's.
type redisQueue struct {
	streams redisstore.Streams
	client  redis.UniversalClient // a reference of our own, held until close
	release func()
	timeout time.Duration // the store's call timeout
	cluster bool
	source  string
	// dest names a route's keys after the partition's tag: `:to:<id>`;
	// "" for deliver_to's, the source's own.
	dest     string
	destID   string // the destination's id, in the pause and breaker state
	n        int    // the partitions of this configuration
	registry string // the set of the numbers of partitions in use
	rateKey  string
	consumer string
	logger   *zap.Logger
	// accepting bounds a Cluster claim's lease: the key's claim lasts as
	// long as storing the event may take.
	accepting time.Duration
	acceptTTL time.Duration // an accepted key's ttl
	noteTTL   time.Duration // a note's ttl: the handler's

	mu      sync.Mutex
	parts   []*partition   // every partition read; never removed, only retired
	byTag   map[string]int // index in parts by hash tag
	layouts map[int]bool   // the other numbers of partitions in the registry
	handed  int            // parts[:handed] have a reader
}

func newRedisQueue(streams redisstore.Streams, ib *Inbox) (*redisQueue, error) {
	// a reference of our own: the store may be cleaned up before the
	// workers have finished their deliveries
	client, release, err := streams.Client()
	if err != nil {
		return nil, err
	}
	src := ib.cfg.Source
	dest := ""
	if ib.dest.queue != "" {
		dest = ":to:" + ib.dest.queue
	}
	q := &redisQueue{
		streams: streams, client: client, release: release,
		timeout: streams.Timeout(), cluster: streams.Cluster(), source: src, dest: dest, destID: ib.dest.id, n: max(ib.cfg.Partitions, 1),
		registry: streams.SourceTag(src, "") + dest + ":partitions", rateKey: streams.SourceTag(src, "") + dest + ":rate",
		consumer: ib.consumer, logger: ib.logger,
		accepting: ib.cfg.Timeout + streams.Timeout(),
		acceptTTL: ib.acceptTTL, noteTTL: ib.cfg.TTL,
		byTag: make(map[string]int), layouts: make(map[int]bool),
	}
	for i := range q.n {
		q.partOf(q.n, i)
	}
	return q, nil
}

// partOf returns partition i of a layout of n partitions, added to the
// partitions read if new. Called with q.mu held, or before the queue is
// shared.
func (q *redisQueue) partOf(n, i int) *partition {
	part, index := strconv.Itoa(i), i
	if n == 1 {
		part, index = "", MaxPartitions
	}
	tag := q.streams.SourceTag(q.source, part)
	if k, ok := q.byTag[tag]; ok {
		p := q.parts[k]
		p.retired.Store(false)
		return p
	}
	prefix := tag + q.dest
	p := &partition{index: index, lane: len(q.parts), prefix: prefix, keys: []string{
		prefix + ":inbox", prefix + ":retry", prefix + ":dead", prefix + ":held", prefix + ":order", prefix + ":heads", prefix + ":groups",
		prefix + ":answering",
	}}
	q.byTag[tag] = len(q.parts)
	q.parts = append(q.parts, p)
	return p
}

// partitionOf is the partition of a group among n.
func partitionOf(group string, n int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(group))
	return int(h.Sum32() % uint32(n))
}

// route returns the partition of this configuration an event goes to (a
// group's, or one at random), and for a group the partitions of the other
// layouts in the registry that may still hold its pending events.
func (q *redisQueue) route(group string) (*partition, []*partition) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if group == "" {
		return q.partOf(q.n, rand.IntN(q.n)), nil
	}
	target := q.partOf(q.n, partitionOf(group, q.n))
	var follow []*partition
	for _, m := range slices.Sorted(maps.Keys(q.layouts)) {
		if p := q.partOf(m, partitionOf(group, m)); p != target && !slices.Contains(follow, p) {
			follow = append(follow, p)
		}
	}
	return target, follow
}

// snapshot returns the partitions read now.
func (q *redisQueue) snapshot() []*partition {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := make([]*partition, 0, len(q.parts))
	for _, p := range q.parts {
		if !p.retired.Load() {
			out = append(out, p)
		}
	}
	return out
}

// part returns a lane's partition.
func (q *redisQueue) part(lane int) *partition {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.parts[lane]
}

// call bounds one call by the store's timeout.
func (q *redisQueue) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, q.timeout)
}

// fields builds the stream entry of an event.
func fields(ev *event.Request, attempts, base, group string) []any {
	f := []any{
		event.FieldSource, ev.Source,
		event.FieldKey, ev.Key,
		event.FieldStoreKey, ev.StoreKey,
		event.FieldMethod, ev.Method,
		event.FieldURI, ev.URI,
		event.FieldHost, ev.Host,
		event.FieldProto, ev.Proto,
		event.FieldRemote, ev.Remote,
		event.FieldHeaders, ev.Headers,
		event.FieldBody, ev.Body,
		event.FieldReceived, event.Millis(ev.Received),
		event.FieldAttempts, attempts,
		event.FieldBase, base,
	}
	if group != "" {
		f = append(f, fieldGroup, group)
	}
	if ev.Trace.Parent != "" {
		f = append(f, event.FieldTraceParent, ev.Trace.Parent, event.FieldTraceState, ev.Trace.State)
	}
	return f
}

// fromMessage decodes a stream entry.
func fromMessage(m redis.XMessage) Event {
	return fromFields(m.ID, func(name string) string { s, _ := m.Values[name].(string); return s })
}

// fromFields decodes an event from its stored fields.
func fromFields(id string, f func(name string) string) Event {
	attempts, _ := strconv.Atoi(f(event.FieldAttempts))
	base, _ := strconv.Atoi(f(event.FieldBase))
	status, _ := strconv.Atoi(f(event.FieldLastStatus))
	fanout, _ := strconv.Atoi(f(fieldFanout))
	return Event{
		Request: event.Request{
			Source: f(event.FieldSource), Key: f(event.FieldKey), StoreKey: f(event.FieldStoreKey),
			Method: f(event.FieldMethod), URI: f(event.FieldURI), Host: f(event.FieldHost),
			Proto: f(event.FieldProto), Remote: f(event.FieldRemote), Headers: f(event.FieldHeaders),
			Body: []byte(f(event.FieldBody)), Received: event.UnixMilli(f(event.FieldReceived)),
			Trace: event.Trace{Parent: f(event.FieldTraceParent), State: f(event.FieldTraceState)},
		},
		ID: id, Attempts: attempts, Base: base, LastStatus: status,
		LastError: f(event.FieldLastError), Failed: event.UnixMilli(f(event.FieldFailed)),
		Suspected: f(fieldSuspected), Group: f(fieldGroup), OrderBroken: f(fieldOrderBroken),
		Newer: f(fieldNewer), Fanout: fanout,
	}
}

// keysOf lists the keys of the partitions, in order.
func keysOf(parts ...*partition) []string {
	keys := make([]string, 0, partKeys*len(parts))
	for _, p := range parts {
		keys = append(keys, p.keys...)
	}
	return keys
}

func (q *redisQueue) setTTLs(acceptTTL, noteTTL time.Duration) {
	q.acceptTTL, q.noteTTL = acceptTTL, noteTTL
}

// ensureGroup creates a partition's stream and its consumer group if
// needed.
func (q *redisQueue) ensureGroup(ctx context.Context, p *partition) error {
	ctx, cancel := q.call(ctx)
	defer cancel()
	err := q.client.XGroupCreateMkStream(ctx, p.stream(), group, "0").Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("creating the inbox consumer group: %w", err)
	}
	p.grouped.Store(true)
	return nil
}

// lanes returns the partitions that have no reader yet.
func (q *redisQueue) lanes() []int {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []int
	for ; q.handed < len(q.parts); q.handed++ {
		out = append(out, q.handed)
	}
	return out
}

// retired reports whether a lane's partition is no longer read (its
// layout has drained); it may be read again if the layout comes back.
func (q *redisQueue) retired(lane int) bool { return q.part(lane).retired.Load() }

func (q *redisQueue) next(ctx context.Context, lane int, n int, wait time.Duration) ([]message, error) {
	p := q.part(lane)
	if !p.grouped.Load() {
		if err := q.ensureGroup(ctx, p); err != nil {
			return nil, err
		}
	}
	block := time.Duration(-1) // no BLOCK
	if wait >= 0 {
		block = wait
	}
	rctx, cancel := context.WithTimeout(ctx, max(wait, 0)+q.timeout)
	defer cancel()
	streams, err := q.client.XReadGroup(rctx, &redis.XReadGroupArgs{
		Group: group, Consumer: q.consumer, Streams: []string{p.stream(), ">"}, Count: int64(n), Block: block,
	}).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return nil, nil
	case err != nil && strings.HasPrefix(err.Error(), "NOGROUP"):
		p.grouped.Store(false) // the stream was deleted: made again next time
		return nil, nil
	case err != nil:
		return nil, err
	case len(streams) == 0:
		return nil, nil
	}
	msgs := make([]message, len(streams[0].Messages))
	for i, m := range streams[0].Messages {
		msgs[i] = message{lane: lane, id: m.ID, ev: fromMessage(m), deliveries: 1}
	}
	return msgs, nil
}

func (q *redisQueue) reclaimable(ctx context.Context, minIdle time.Duration) ([]int, error) {
	parts := q.snapshot()
	rctx, cancel := q.call(ctx)
	defer cancel()
	pipe := q.client.Pipeline()
	cmds := make([]*redis.XPendingExtCmd, len(parts))
	for i, p := range parts {
		cmds[i] = pipe.XPendingExt(rctx, &redis.XPendingExtArgs{Stream: p.stream(), Group: group, Idle: minIdle, Start: "-", End: "+", Count: 1})
	}
	_, _ = pipe.Exec(rctx) // a stream without its group yet holds nothing to reclaim
	var lanes []int
	for i, c := range cmds {
		pending, err := c.Result()
		switch {
		case err == nil && len(pending) > 0:
			lanes = append(lanes, parts[i].lane)
		case err != nil && !errors.Is(err, redis.Nil) && !strings.HasPrefix(err.Error(), "NOGROUP"):
			return lanes, err
		}
	}
	return lanes, nil
}

func (q *redisQueue) reclaim(ctx context.Context, lane int, minIdle time.Duration) (message, bool, error) {
	return q.reclaimFrom(ctx, q.part(lane), minIdle)
}

// reclaimFrom takes over an entry of p idle for minIdle.
func (q *redisQueue) reclaimFrom(ctx context.Context, p *partition, minIdle time.Duration) (message, bool, error) {
	rctx, cancel := q.call(ctx)
	msgs, _, err := q.client.XAutoClaim(rctx, &redis.XAutoClaimArgs{
		Stream: p.stream(), Group: group, Consumer: q.consumer, MinIdle: minIdle, Start: "0-0", Count: 1,
	}).Result()
	cancel()
	if errors.Is(err, redis.Nil) || err != nil && strings.HasPrefix(err.Error(), "NOGROUP") {
		return message{}, false, nil
	}
	if err != nil || len(msgs) == 0 {
		return message{}, false, err
	}
	// every earlier delivery of this entry was an attempt that a dead
	// worker never recorded
	deliveries := int64(2)
	rctx, cancel = q.call(ctx)
	if pe, err := q.client.XPendingExt(rctx, &redis.XPendingExtArgs{
		Stream: p.stream(), Group: group, Start: msgs[0].ID, End: msgs[0].ID, Count: 1,
	}).Result(); err == nil && len(pe) == 1 {
		deliveries = pe[0].RetryCount
	}
	cancel()
	return message{lane: p.lane, id: msgs[0].ID, ev: fromMessage(msgs[0]), deliveries: deliveries}, true, nil
}

// touch keeps events this worker holds from looking abandoned: their idle
// time starts again (the delivery count stays).
func (q *redisQueue) touch(ctx context.Context, msgs []message) error {
	if len(msgs) == 0 {
		return nil
	}
	ctx, cancel := q.call(ctx)
	defer cancel()
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.id
	}
	return q.client.XClaimJustID(ctx, &redis.XClaimArgs{
		Stream: q.part(msgs[0].lane).stream(), Group: group, Consumer: q.consumer, Messages: ids,
	}).Err()
}

func (q *redisQueue) moveDue(ctx context.Context, now time.Time) error {
	ctx, cancel := q.call(ctx)
	defer cancel()
	parts := q.snapshot()
	if len(parts) > 1 {
		// the partitions with a retry due, in one round trip
		pipe := q.client.Pipeline()
		cmds := make([]*redis.StringSliceCmd, len(parts))
		for i, p := range parts {
			cmds[i] = pipe.ZRangeByScore(ctx, p.retry(), &redis.ZRangeBy{Min: "-inf", Max: strconv.FormatInt(now.UnixMilli(), 10), Count: 1})
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		var due []*partition
		for i, c := range cmds {
			if len(c.Val()) > 0 {
				due = append(due, parts[i])
			}
		}
		parts = due
	}
	for _, p := range parts {
		if err := moveScript.Run(ctx, q.client, p.keys, now.UnixMilli(), 100).Err(); err != nil {
			return err
		}
	}
	return nil
}

func (q *redisQueue) delivered(ctx context.Context, m message, d done) error {
	q.logAttempt(ctx, m)
	ctx, cancel := q.call(ctx)
	defer cancel()
	p := q.part(m.lane)
	storeKey := m.ev.StoreKey
	keys := append(slices.Clip(p.keys), p.stream())
	if d.newest != "" {
		keys[partKeys] = p.newestKey(m.ev.Group)
	}
	if !q.cluster && storeKey != "" {
		keys = append(keys, storeKey)
		if d.record != nil && d.guard != "" {
			keys = append(keys, d.guard)
		}
	}
	ms := strconv.FormatInt(d.ttl.Milliseconds(), 10)
	if d.ttl > 0 {
		ms = strconv.FormatInt(max(d.ttl.Milliseconds(), 1), 10)
	}
	if err := ackScript.Run(ctx, q.client, keys, group, m.id, ms, m.ev.Group,
		d.newest, max(d.newestTTL.Milliseconds(), 1), d.record, answeringMember(m)).Err(); err != nil {
		return err
	}
	if q.cluster && storeKey != "" {
		// the key is on another slot: calls of its own
		var err error
		if d.record != nil {
			err = recordScript.Run(ctx, q.client, []string{storeKey}, d.record, ms).Err()
			if err == nil && d.guard != "" {
				err = recordScript.Run(ctx, q.client, []string{d.guard}, d.record, 0).Err()
			}
		} else if d.ttl > 0 {
			err = q.client.PExpire(ctx, storeKey, d.ttl).Err()
		}
		if err != nil {
			q.logger.Warn("updating a delivered event's key failed; it keeps the accept answer and expires later", zap.String("key", storeKey), zap.Error(err))
		}
	}
	return nil
}

// answeringMember is the retry-set member of m when it is in the answering
// stream (its attempt at acceptance), "" when it is in the stream.
func answeringMember(m message) string {
	if m.answer == nil {
		return ""
	}
	return answeringPrefix + m.id + "\n0\n0\n"
}

func (q *redisQueue) newest(ctx context.Context, m message) (string, error) {
	ctx, cancel := q.call(ctx)
	defer cancel()
	v, err := q.client.Get(ctx, q.part(m.lane).newestKey(m.ev.Group)).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return v, err
}

func (q *redisQueue) schedule(ctx context.Context, m message, attempts, status int, reason string, due time.Time) error {
	q.logAttempt(ctx, m)
	ctx, cancel := q.call(ctx)
	defer cancel()
	p := q.part(m.lane)
	id := m.id
	if m.answer != nil {
		id = answeringPrefix + m.id // it stays in the answering stream until due
	}
	member := id + "\n" + strconv.Itoa(attempts) + "\n" + strconv.Itoa(status) + "\n" + reason
	return scheduleScript.Run(ctx, q.client, []string{p.stream(), p.retry()},
		group, m.id, (due.UnixNano()+int64(time.Millisecond)-1)/int64(time.Millisecond), member, answeringMember(m)).Err()
}

func (q *redisQueue) deadLetter(ctx context.Context, m message, attempts, status int, reason string, failed time.Time) error {
	q.logAttempt(ctx, m)
	ctx, cancel := q.call(ctx)
	defer cancel()
	p := q.part(m.lane)
	return deadScript.Run(ctx, q.client, p.keys,
		group, m.id, attempts, status, reason, failed.UnixMilli(), p.index, answeringMember(m)).Err()
}

func (q *redisQueue) counts(ctx context.Context) (Counts, error) {
	ctx, cancel := q.call(ctx)
	defer cancel()
	parts := q.snapshot()
	p := q.client.Pipeline()
	cmds := make([][5]*redis.IntCmd, len(parts))
	for i, part := range parts {
		cmds[i] = [5]*redis.IntCmd{p.XLen(ctx, part.stream()), p.ZCard(ctx, part.retry()), p.XLen(ctx, part.dead()), p.XLen(ctx, part.held()),
			p.XLen(ctx, part.answering())}
	}
	if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return Counts{}, err
	}
	var c Counts
	for _, cmd := range cmds {
		// an event of the answering stream has a member in the retry set:
		// it counts as pending
		scheduled := max(cmd[1].Val()-cmd[4].Val(), 0)
		c.Pending += max(cmd[0].Val()-scheduled, 0) + cmd[3].Val() + cmd[4].Val()
		c.Scheduled += scheduled
		c.Dead += cmd[2].Val()
	}
	return c, nil
}

func (q *redisQueue) groups(ctx context.Context, count int) (Groups, error) {
	ctx, cancel := q.call(ctx)
	defer cancel()
	var out Groups
	for _, p := range q.snapshot() {
		v, err := groupsScript.Run(ctx, q.client, p.keys, count).Slice()
		if err != nil {
			return Groups{}, err
		}
		if len(v) != 3 {
			return Groups{}, fmt.Errorf("groups: unexpected reply of %d values", len(v))
		}
		n, _ := v[0].(int64)
		held, _ := v[1].(int64)
		out.Pending += n
		out.Held += held
		rows, _ := v[2].([]any)
		for _, r := range rows {
			f, _ := r.([]any)
			if len(f) != 9 {
				continue
			}
			num := func(i int) int64 {
				if n, ok := f[i].(int64); ok {
					return n
				}
				n, _ := strconv.ParseInt(str(f[i]), 10, 64)
				return n
			}
			g := GroupState{Group: str(f[0]), Pending: 1 + num(3), Since: time.UnixMilli(num(1)).UTC(), Head: HeadState{
				ID: str(f[2]), State: str(f[4]), Attempts: int(num(6)), LastStatus: int(num(7)), LastError: str(f[8]),
			}}
			if due := num(5); due > 0 {
				t := time.UnixMilli(due).UTC()
				g.Head.Due = &t
			}
			out.Longest = append(out.Longest, g)
		}
	}
	out.sortAndCut(count)
	return out, nil
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

func (q *redisQueue) dead(ctx context.Context, start string, count int64) ([]Event, error) {
	ctx, cancel := q.call(ctx)
	defer cancel()
	parts := q.snapshot()
	pipe := q.client.Pipeline()
	cmds := make([]*redis.XMessageSliceCmd, len(parts))
	for i, p := range parts {
		cmds[i] = pipe.XRangeN(ctx, p.dead(), start, "+", count)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	var out []Event
	for _, c := range cmds {
		for _, m := range c.Val() {
			out = append(out, fromMessage(m))
		}
	}
	slices.SortFunc(out, func(a, b Event) int { return event.CompareIDs(a.ID, b.ID) })
	if int64(len(out)) > count {
		out = out[:count]
	}
	return out, nil
}

func (q *redisQueue) newestDead(ctx context.Context) (string, bool, error) {
	ctx, cancel := q.call(ctx)
	defer cancel()
	parts := q.snapshot()
	pipe := q.client.Pipeline()
	cmds := make([]*redis.XMessageSliceCmd, len(parts))
	for i, p := range parts {
		cmds[i] = pipe.XRevRangeN(ctx, p.dead(), "+", "-", 1)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return "", false, err
	}
	newest := ""
	for _, c := range cmds {
		if v := c.Val(); len(v) > 0 && (newest == "" || event.CompareIDs(v[0].ID, newest) > 0) {
			newest = v[0].ID
		}
	}
	return newest, newest != "", nil
}

// findDead returns the partition whose dead letters hold id, and the dead
// letter.
func (q *redisQueue) findDead(ctx context.Context, id string) (*partition, redis.XMessage, error) {
	parts := q.snapshot()
	pipe := q.client.Pipeline()
	cmds := make([]*redis.XMessageSliceCmd, len(parts))
	for i, p := range parts {
		cmds[i] = pipe.XRangeN(ctx, p.dead(), id, id, 1)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, redis.XMessage{}, err
	}
	for i, c := range cmds {
		if v := c.Val(); len(v) == 1 {
			return parts[i], v[0], nil
		}
	}
	return nil, redis.XMessage{}, ErrNoDeadEvent
}

func (q *redisQueue) redeliver(ctx context.Context, id string) (string, error) {
	ctx, cancel := q.call(ctx)
	defer cancel()
	from, m, err := q.findDead(ctx, id)
	if err != nil {
		return "", err
	}
	grp := str(m.Values[fieldGroup])
	target, follow := q.route(grp)
	if !q.cluster {
		keys := append([]string{from.dead()}, keysOf(append([]*partition{target}, follow...)...)...)
		newID, err := redeliverScript.Run(ctx, q.client, keys, id).Text()
		if errors.Is(err, redis.Nil) {
			return "", ErrNoDeadEvent
		}
		return newID, err
	}
	// on Redis Cluster the dead letter and its new place may be on two
	// nodes: it is stored again, then deleted (a crash between the two
	// leaves a copy among the dead letters, never a loss)
	entry := make([]any, 0, 2*len(m.Values)+2)
	for name, v := range m.Values {
		switch name {
		case event.FieldBase, event.FieldFailed, fieldOrderBroken:
			continue
		}
		entry = append(entry, name, v)
	}
	attempts := str(m.Values[event.FieldAttempts])
	entry = append(entry, event.FieldBase, cmp.Or(attempts, "0"))
	newID, _, _, err := q.appendTo(ctx, grp, entry, target, follow, false, "")
	if err != nil {
		return "", err
	}
	if err := q.client.XDel(ctx, from.dead(), id).Err(); err != nil {
		q.logger.Warn("deleting a redelivered dead letter failed; it stays listed", zap.String("id", id), zap.Error(err))
	}
	return newID, nil
}

func (q *redisQueue) discard(ctx context.Context, id string) (bool, error) {
	ctx, cancel := q.call(ctx)
	defer cancel()
	parts := q.snapshot()
	pipe := q.client.Pipeline()
	cmds := make([]*redis.IntCmd, len(parts))
	for i, p := range parts {
		cmds[i] = pipe.XDel(ctx, p.dead(), id)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return false, err
	}
	var n int64
	for _, c := range cmds {
		n += c.Val()
	}
	return n > 0, nil
}

func (q *redisQueue) enqueue(ctx context.Context, ev *event.Request, grp string, extra []any) (string, error) {
	target, follow := q.route(grp)
	id, _, _, err := q.appendTo(ctx, grp, append(fields(ev, "0", "0", grp), extra...), target, follow, false, "")
	return id, err
}

// refresh renews this configuration's number of partitions in the
// registry, starts reading the partitions of the other numbers there, and
// takes out of the registry (and stops reading) those whose partitions
// this configuration does not use have drained.
func (q *redisQueue) refresh(ctx context.Context) error {
	ctx, cancel := q.call(ctx)
	defer cancel()
	pipe := q.client.Pipeline()
	pipe.SAdd(ctx, q.registry, q.n)
	members := pipe.SMembers(ctx, q.registry)
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	in := make(map[int]bool)
	for _, s := range members.Val() {
		if m, err := strconv.Atoi(s); err == nil && m >= 1 && m <= MaxPartitions && m != q.n {
			in[m] = true
		}
	}
	q.mu.Lock()
	for m := range in {
		if !q.layouts[m] {
			q.layouts[m] = true
			for i := range m {
				q.partOf(m, i)
			}
		}
	}
	for m := range q.layouts {
		if !in[m] {
			delete(q.layouts, m) // drained, as another instance found
		}
	}
	layouts := slices.Sorted(maps.Keys(q.layouts))
	q.mu.Unlock()
	for _, m := range layouts {
		drained, err := q.drained(ctx, m)
		if err != nil {
			return err
		}
		if drained {
			if err := q.client.SRem(ctx, q.registry, m).Err(); err != nil {
				return err
			}
			q.mu.Lock()
			delete(q.layouts, m)
			q.mu.Unlock()
			q.logger.Info("inbox partitions of an earlier configuration drained", zap.Int("partitions", m), zap.Int("now", q.n))
		}
	}
	q.retire()
	return nil
}

// drained reports whether the partitions of a layout of m have nothing
// left that this configuration's routing would not find: those it does
// not use are empty (dead letters included), and every group pending in
// those it uses is in the partition this configuration gives it.
func (q *redisQueue) drained(ctx context.Context, m int) (bool, error) {
	q.mu.Lock()
	var own, other []*partition
	for i := range m {
		p := q.partOf(m, i)
		if q.ownsLocked(p) {
			own = append(own, p)
		} else {
			other = append(other, p)
		}
	}
	q.mu.Unlock()
	pipe := q.client.Pipeline()
	var cmds []*redis.IntCmd
	for _, p := range other {
		cmds = append(cmds, pipe.XLen(ctx, p.stream()), pipe.ZCard(ctx, p.retry()), pipe.XLen(ctx, p.held()), pipe.XLen(ctx, p.dead()),
			pipe.XLen(ctx, p.answering()))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return false, err
	}
	for _, c := range cmds {
		if c.Val() > 0 {
			return false, nil
		}
	}
	for _, p := range own {
		var cursor uint64
		for {
			groups, next, err := q.client.HScan(ctx, p.heads(), cursor, "", 1000).Result()
			if err != nil {
				return false, err
			}
			for i := 0; i < len(groups); i += 2 {
				if q.partOf(q.n, partitionOf(groups[i], q.n)) != p {
					return false, nil
				}
			}
			if cursor = next; cursor == 0 {
				break
			}
		}
	}
	return true, nil
}

// ownsLocked reports whether p is a partition of this configuration.
func (q *redisQueue) ownsLocked(p *partition) bool {
	for i := range q.n {
		if q.partOf(q.n, i) == p {
			return true
		}
	}
	return false
}

// retire stops reading the partitions of no layout in use.
func (q *redisQueue) retire() {
	q.mu.Lock()
	defer q.mu.Unlock()
	used := make(map[*partition]bool)
	for i := range q.n {
		used[q.partOf(q.n, i)] = true
	}
	for m := range q.layouts {
		for i := range m {
			used[q.partOf(m, i)] = true
		}
	}
	for _, p := range q.parts {
		if !used[p] {
			p.retired.Store(true)
		}
	}
}

func (q *redisQueue) limiter(r Rate) limiter { return &redisLimiter{q: q, rate: r} }

// close deletes this worker set from the consumer group of each partition
// where it holds no pending event (deleting it otherwise would lose them),
// and gives the client back.
func (q *redisQueue) close(started bool) {
	if started {
		for _, p := range q.snapshot() {
			if !p.grouped.Load() {
				continue
			}
			ctx, cancel := q.call(context.Background())
			pending, err := q.client.XPendingExt(ctx, &redis.XPendingExtArgs{
				Stream: p.stream(), Group: group, Start: "-", End: "+", Count: 1, Consumer: q.consumer,
			}).Result()
			if err == nil && len(pending) == 0 {
				_ = q.client.XGroupDelConsumer(ctx, p.stream(), group, q.consumer).Err()
			}
			cancel()
		}
	}
	q.release()
}

// redisLimiter is the limiter of a source shared by every instance on its
// Redis: one hash under the source's tag (rateScript).
type redisLimiter struct {
	q    *redisQueue
	rate Rate
}

func (l *redisLimiter) run(ctx context.Context, op string, n int) ([]any, error) {
	ctx, cancel := l.q.call(ctx)
	defer cancel()
	return rateScript.Run(ctx, l.q.client, []string{l.q.rateKey}, op, l.rate.interval().Microseconds(),
		slowEvery.Microseconds(), slowStep.Microseconds(), maxSlowLevel, n).Slice()
}

func (l *redisLimiter) reserve(ctx context.Context, n int) (time.Duration, time.Duration, error) {
	v, err := l.run(ctx, "reserve", n)
	if err != nil || len(v) != 3 {
		return 0, 0, cmp.Or(err, errors.New("rate: unexpected reply"))
	}
	wait, _ := v[0].(int64)
	step, _ := v[2].(int64)
	return time.Duration(wait) * time.Microsecond, time.Duration(step) * time.Microsecond, nil
}

func (l *redisLimiter) slowDown(ctx context.Context) error {
	_, err := l.run(ctx, "slow", 0)
	return err
}

func (l *redisLimiter) state(ctx context.Context) (RateState, error) {
	v, err := l.run(ctx, "read", 0)
	if err != nil || len(v) != 4 {
		return RateState{}, cmp.Or(err, errors.New("rate: unexpected reply"))
	}
	num := func(i int) int64 {
		if n, ok := v[i].(int64); ok {
			return n
		}
		n, _ := strconv.ParseInt(str(v[i]), 10, 64)
		return n
	}
	g := gcra{tat: num(0), level: int(num(1)), at: num(2)}
	return g.view(num(3), l.rate), nil
}

// Interface guards
var (
	_ queue   = (*redisQueue)(nil)
	_ limiter = (*redisLimiter)(nil)
)
