package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/redis/go-redis/v9"

	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// Streams is a redis store as the inbox (internal/inbox), the archive
// (internal/archive) and the series (internal/series) use it, and nothing
// more: the keys of a source's streams beside the store's keys, the shared
// client, the call timeout, claim-and-append, and a completion with
// commands of their own in the same pipeline. Nothing outside this package
// reads the store's fields.
type Streams struct{ s *Store }

// Streams returns the store's side for the inbox and the archive; the
// store must be provisioned.
func (s *Store) Streams() Streams { return Streams{s} }

// SourceKeys are the Redis keys of a source's inbox and archive. They
// share one hash tag, `{<key_prefix>:<source>}`, so Redis Cluster keeps
// them on one slot.
type SourceKeys struct {
	Inbox   string // the stream of events
	Retry   string // the sorted set of scheduled retries
	Dead    string // the dead-letter stream
	Archive string // the archive stream
}

// Keys returns the Redis keys of a source.
func (st Streams) Keys(source string) SourceKeys {
	tag := "{" + st.s.Prefix + ":" + source + "}"
	return SourceKeys{Inbox: tag + ":inbox", Retry: tag + ":retry", Dead: tag + ":dead", Archive: tag + ":archive"}
}

// Client returns the store's shared client with a reference of the
// caller's own, which release gives back: the store may be cleaned up
// before the caller is done with the client (a reload while an inbox
// finishes its deliveries).
func (st Streams) Client() (client redis.UniversalClient, release func(), err error) {
	key := st.s.ref.Key()
	val, _, err := redisPool.LoadOrNew(key, func() (caddy.Destructor, error) {
		return nil, errors.New("redis client gone")
	})
	if err != nil {
		return nil, nil, err
	}
	return val.(*redisClient).client, func() { _, _ = redisPool.Delete(key) }, nil
}

// Timeout is the bound of one call.
func (st Streams) Timeout() time.Duration { return st.s.timeout }

// Cluster reports whether the store talks to a Redis Cluster.
func (st Streams) Cluster() bool { return st.s.client != nil && st.s.client.cluster() }

// Store returns the store itself, for the calls of the store contract.
func (st Streams) Store() store.GuardedStore { return st.s }

// SourceTag returns the hash tag of a source's keys,
// `{<key_prefix>:<source>}`, or with part not "" the tag of a part of the
// source, `{<key_prefix>:<source>:<part>}` (an inbox partition), which
// Redis Cluster may keep on another node.
func (st Streams) SourceTag(source, part string) string {
	if part == "" {
		return "{" + st.s.Prefix + ":" + source + "}"
	}
	return "{" + st.s.Prefix + ":" + source + ":" + part + "}"
}

// Appended is what ClaimAndAppend did.
type Appended struct {
	// ID is what the append step returned (the event's stream id), ""
	// when the key was taken.
	ID string
	// Noted is the key the note held before, "" for none (see
	// store.GuardedStore's ClaimNoted).
	Noted string
}

// AppendScript is a claim-and-append script whose append step is the
// caller's Lua (NewAppendScript).
type AppendScript struct{ script *redis.Script }

// NewAppendScript builds the script of ClaimAndAppend around appendLua,
// the source of a Lua function `append(keys, args, fields)` that stores
// an event (fields: a table of its field names and values) under the
// caller's keys, with the caller's args, and returns its id as a string.
func NewAppendScript(appendLua string) AppendScript {
	return AppendScript{luaScript(appendLua + luaKeyState + luaNote + redisClaimAppendLua)}
}

// ClaimAndAppend completes an absent key with record, kept for ttl, and
// runs script's append step on keys with args and the event's fields and
// values, in one round trip; or reports the key's state, as Claim does.
// With a guard (noted false) the guard is claimed with the key, all or
// none; with a note (noted true) the note is taken for the key when free,
// kept for noteTTL, and when it holds another key the event gets a
// `suspected` field with that key. guard is "" for neither. The keys must
// be on one node (not Redis Cluster).
func (st Streams) ClaimAndAppend(ctx context.Context, key, guard string, noted bool, script AppendScript, keys []string, args []any, record []byte, ttl, noteTTL time.Duration, event []any) (store.ClaimResult, Appended, error) {
	return st.claimAndAppend(ctx, false, key, guard, noted, script, keys, args, record, ttl, noteTTL, event)
}

// AppendItem is an item of ClaimAndAppendBatch: its key, the record that
// completes it, and its append step's keys, args and event fields.
type AppendItem struct {
	Key    string
	Record []byte
	Keys   []string
	Args   []any
	Event  []any
}

// AppendBatchScript is the batch form of an AppendScript
// (NewAppendBatchScript).
type AppendBatchScript struct{ script *redis.Script }

// NewAppendBatchScript builds the script of ClaimAndAppendBatch around
// appendLua, as NewAppendScript does.
func NewAppendBatchScript(appendLua string) AppendBatchScript {
	return AppendBatchScript{luaScript(appendLua + luaKeyState + redisClaimAppendBatchLua)}
}

// ClaimAndAppendBatch is ClaimAndAppend for the items of one request,
// without guards, in one round trip: each item whose key is absent has its
// key completed with its record, kept for ttl, and its event appended by
// script's append step; the key of any other is reported as Claim does.
// It returns each item's result and, for an item appended, what the append
// step returned ("" for the others), in the order of items. The keys must
// be on one node (not Redis Cluster).
func (st Streams) ClaimAndAppendBatch(ctx context.Context, script AppendBatchScript, items []AppendItem, ttl time.Duration) ([]store.ClaimResult, []string, error) {
	if len(items) == 0 {
		return nil, nil, nil
	}
	nkeys, nargs := 0, 2
	for _, it := range items {
		nkeys += 1 + len(it.Keys)
		nargs += 4 + len(it.Args) + len(it.Event)
	}
	keys := make([]string, 0, nkeys)
	argv := make([]any, 0, nargs)
	argv = append(argv, redisMillis(ttl), len(items))
	for _, it := range items {
		keys = append(keys, it.Key)
		keys = append(keys, it.Keys...)
		argv = append(argv, len(it.Keys), len(it.Args), len(it.Event), it.Record)
		argv = append(argv, it.Args...)
		argv = append(argv, it.Event...)
	}
	v, err := st.s.run(ctx, "claim", script.script, keys, argv...)
	if err != nil {
		return nil, nil, err
	}
	reply, ok := v.([]any)
	if !ok || len(reply) != len(items) {
		return nil, nil, fmt.Errorf("redis store: accept: unexpected reply %T", v)
	}
	res := make([]store.ClaimResult, len(items))
	ids := make([]string, len(items))
	for i, r := range reply {
		if appended, ok := r.([]any); ok && len(appended) == 1 {
			ids[i], _ = appended[0].(string)
			res[i] = store.ClaimResult{State: store.StateClaimed}
			continue
		}
		if res[i], ok = keyStateResult(r); !ok {
			return nil, nil, fmt.Errorf("redis store: accept: unexpected reply %T for item %d", r, i)
		}
	}
	return res, ids, nil
}

// ClaimAndAppendReplicated is ClaimAndAppend for a store with `replicas`:
// the key (and its guard) are claimed for owner, in flight for lease,
// rather than completed, and the call returns once the store's replicas
// acknowledged it. The caller then completes the key; or, when the error
// wraps ErrNotReplicated (the claim and the Appended are returned with
// it), withdraws the event and releases the key, so that the provider's
// retry is accepted anew rather than answered as a duplicate.
func (st Streams) ClaimAndAppendReplicated(ctx context.Context, key, guard string, noted bool, owner string, lease time.Duration, script AppendScript, keys []string, args []any, noteTTL time.Duration, event []any) (store.ClaimResult, Appended, error) {
	res, a, err := st.claimAndAppend(ctx, true, key, guard, noted, script, keys, args, []byte(inFlightMarker+owner), lease, noteTTL, event)
	if res.State == store.StateClaimed && (err == nil || errors.Is(err, ErrNotReplicated)) {
		st.s.client.claims.Add(1) // completed or released by the caller
	}
	return res, a, err
}

// claimAndAppend runs a claim-and-append script that writes value under
// the key (and its guard) for ttl; replicated, it waits for the store's
// replicas.
func (st Streams) claimAndAppend(ctx context.Context, replicated bool, key, guard string, noted bool, script AppendScript, keys []string, args []any, value []byte, ttl, noteTTL time.Duration, event []any) (store.ClaimResult, Appended, error) {
	mode := ""
	all := make([]string, 0, 2+len(keys))
	all = append(all, key)
	if guard != "" {
		all = append(all, guard)
		mode = "g"
		if noted {
			mode = "n"
		}
	}
	all = append(all, keys...)
	argv := make([]any, 0, 5+len(args)+len(event))
	argv = append(argv, value, redisMillis(ttl), mode, redisMillis(noteTTL), len(args))
	argv = append(argv, args...)
	argv = append(argv, event...)
	var v any
	var err error
	if replicated {
		v, err = st.s.runReplicated(ctx, "accept", script.script, all, argv...)
	} else {
		v, err = st.s.run(ctx, "claim", script.script, all, argv...)
	}
	if err != nil && v == nil {
		return store.ClaimResult{}, Appended{}, err
	}
	if reply, ok := v.([]any); ok && len(reply) == 2 {
		var a Appended
		a.ID, _ = reply[0].(string)
		a.Noted, _ = reply[1].(string)
		return store.ClaimResult{State: store.StateClaimed}, a, err
	}
	if err != nil {
		return store.ClaimResult{}, Appended{}, err
	}
	if res, ok := keyStateResult(v); ok {
		return res, Appended{}, nil
	}
	return store.ClaimResult{}, Appended{}, fmt.Errorf("redis store: accept: unexpected reply %T", v)
}

// Then is the reply of the commands that rode with a completion: the first
// command's reply, and the first error of any (why they were not sent, when
// the completion was not).
type Then struct {
	Val any
	Err error
}

// CompleteThen completes key and, unless guard is "", its guard, as
// store.GuardedStore's CompleteGuarded does, with cmds (each a command and
// its arguments) sent right after it in the same pipeline; their keys may
// be on another Cluster slot. It returns the completion's error and what
// became of cmds.
func (st Streams) CompleteThen(ctx context.Context, key, guard, owner string, record []byte, ttl time.Duration, cmds [][]any) (Then, error) {
	then := &redisThen{cmds: cmds}
	err := st.s.completeThen(ctx, key, guard, owner, record, ttl, then)
	return Then{Val: then.val, Err: then.err}, err
}
