package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// A request's items (store.BatchStore; not to be confused with batch.go,
// the pipelines that concurrent calls share): many keys claimed,
// completed, released or renewed for one owner with one script call per
// Redis node, every node's call in one pipeline, so a batch costs one
// round trip of latency whatever its size.
//
// On a standalone or Sentinel Redis the script takes every key as KEYS.
// On a Redis Cluster the keys of a batch hash to many slots, which no
// script may take together as KEYS: they are grouped by the master that
// serves them, and each master's script takes the first key of its group
// as KEYS[1] (which routes the call, and which Redis checks it serves)
// and the others after its arguments. Redis lets a script without flags
// reach keys of other slots on its own node; a key its node does not
// serve (a slot moved since go-redis read the slot map, or is moving) is
// an error. Every script reads all its keys before it writes any, so such
// a call fails whole: nothing written, the batch an error (the handler's
// fail policy applies), and the slot map read again for the next call.
//
// A batch claim reads every key's state, then claims the absent ones. With
// store.BatchUnlessInFlight a key in flight for another owner holds the
// whole batch back: each node's script claims nothing when it finds one,
// and on a Cluster, where another node's script may have claimed its
// absent keys meanwhile, those claims are given back at once (one more
// round trip, only when a batch is held back). A batch claim that fails on
// one node gives back what the others claimed, so a failed claim leaves
// no item claimed for the lease.

// ClaimBatch implements store.BatchStore.
func (s *Store) ClaimBatch(ctx context.Context, keys []string, owner string, lease time.Duration, mode store.BatchMode) (store.BatchResult, error) {
	if err := store.CheckBatch(keys); err != nil {
		return store.BatchResult{}, fmt.Errorf("redis store: %w", err)
	}
	if len(keys) == 0 {
		return store.BatchResult{}, nil
	}
	leaseMs := redisMillis(lease)
	held := "0"
	if mode == store.BatchUnlessInFlight {
		held = "1"
	}
	groups, replies, err := s.runGroups(ctx, "claim", redisClaimBatchScript, keys, func(keyGroup) []any {
		return []any{owner, leaseMs, held}
	})
	items := make([]store.ClaimResult, len(keys))
	var claimed, corrupt []int
	var corruptVals []string
	busy := false
	for gi, g := range groups {
		if replies[gi].err != nil {
			continue
		}
		vals, ok := replies[gi].val.([]any)
		if !ok || len(vals) != len(g.idx) {
			replies[gi].err = fmt.Errorf("redis store: claim: unexpected reply %T", replies[gi].val)
			err = errors.Join(err, replies[gi].err)
			continue
		}
		for j, v := range vals {
			i := g.idx[j]
			switch {
			case v == int64(-1) || v == int64(-2):
				if v == int64(-2) {
					s.logger.Warn("corrupt or foreign value under an idempotency key: treated as absent and claimed", zap.String("key", keys[i]))
				}
				items[i] = store.ClaimResult{State: store.StateClaimed}
				claimed = append(claimed, i)
			case v == int64(-3):
				items[i] = store.ClaimResult{State: store.StateAbsent}
			case v == int64(-4): // owner's already: not given back, not counted again
				items[i] = store.ClaimResult{State: store.StateClaimed}
			default:
				res, ok := keyStateResult(v)
				if !ok {
					// a value Lua took for a record that does not decode
					seen, _ := v.(string)
					corrupt, corruptVals = append(corrupt, i), append(corruptVals, seen)
					continue
				}
				items[i] = res
				busy = busy || res.State == store.StateInFlight
			}
		}
	}
	heldBack := busy && mode == store.BatchUnlessInFlight
	if err != nil || heldBack {
		// what a node claimed goes back: the batch claims nothing
		s.giveBackKeys(keys, claimed, owner)
		if err != nil {
			return store.BatchResult{}, err
		}
		for _, i := range append(claimed, corrupt...) {
			items[i] = store.ClaimResult{State: store.StateAbsent}
		}
		return store.NewBatchResult(items), nil
	}
	for j, i := range corrupt {
		res, err := s.reclaim(ctx, keys[i:i+1], owner, leaseMs, corruptVals[j])
		if err != nil {
			s.giveBackKeys(keys, claimed, owner)
			return store.BatchResult{}, err
		}
		items[i] = res
	}
	res := store.NewBatchResult(items)
	s.client.claims.Add(int64(len(claimed)))
	return res, nil
}

// giveBackKeys releases the keys at positions index that a batch claim
// took and does not keep.
func (s *Store) giveBackKeys(keys []string, index []int, owner string) {
	if len(index) == 0 {
		return
	}
	back := make([]string, len(index))
	for j, i := range index {
		back[j] = keys[i]
	}
	_ = s.ownedOp(completionCtx, "release", redisReleaseBatchScript, back, func(keyGroup) []any { return []any{owner} })
}

// CompleteBatch implements store.BatchStore.
func (s *Store) CompleteBatch(ctx context.Context, keys []string, owner string, records [][]byte, ttl time.Duration) error {
	if err := store.CheckBatchRecords(keys, records); err != nil {
		return fmt.Errorf("redis store: %w", err)
	}
	if len(keys) == 0 {
		return nil
	}
	defer s.client.claimsDone(int64(len(keys)))
	ttlMs := redisMillis(ttl)
	args := func(g keyGroup) []any {
		if len(records) == 1 {
			return []any{owner, ttlMs, "1", records[0]}
		}
		a := make([]any, 0, 3+len(g.idx))
		a = append(a, owner, ttlMs, strconv.Itoa(len(g.idx)))
		for _, i := range g.idx {
			a = append(a, records[i])
		}
		return a
	}
	var err error
	if s.ReplicasCompletions {
		err = s.ownedOpReplicated(ctx, "complete", redisCompleteBatchScript, keys, args)
	} else {
		err = s.ownedOp(ctx, "complete", redisCompleteBatchScript, keys, args)
	}
	// a copy of each record, as keepRecent keeps one, but for the keys
	// another request owns (a failure of Redis keeps every one: the
	// application has answered)
	var skip []int
	if e := (*store.NotOwnerError)(nil); errors.As(err, &e) {
		skip = e.Index
	}
	for i, k := range keys {
		if len(skip) > 0 && skip[0] == i {
			skip = skip[1:]
			continue
		}
		s.client.recent.put(k, store.BatchRecord(records, i), ttl)
	}
	return err
}

// ReleaseBatch implements store.BatchStore.
func (s *Store) ReleaseBatch(ctx context.Context, keys []string, owner string) error {
	if err := store.CheckBatch(keys); err != nil {
		return fmt.Errorf("redis store: %w", err)
	}
	if len(keys) == 0 {
		return nil
	}
	defer s.client.claimsDone(int64(len(keys)))
	return s.ownedOp(ctx, "release", redisReleaseBatchScript, keys, func(keyGroup) []any { return []any{owner} })
}

// RenewBatch implements store.BatchStore.
func (s *Store) RenewBatch(ctx context.Context, keys []string, owner string, lease time.Duration) error {
	if err := store.CheckBatch(keys); err != nil {
		return fmt.Errorf("redis store: %w", err)
	}
	if len(keys) == 0 {
		return nil
	}
	leaseMs := redisMillis(lease)
	return s.ownedOp(ctx, "renew", redisRenewBatchScript, keys, func(keyGroup) []any { return []any{owner, leaseMs} })
}

// ownedOp runs an owner-checked batch script on keys, once per node, and
// returns the keys it found not owned as a *store.NotOwnerError.
func (s *Store) ownedOp(ctx context.Context, op string, script *redis.Script, keys []string, args func(keyGroup) []any) error {
	groups, replies, err := s.runGroups(ctx, op, script, keys, args)
	if err != nil {
		return err
	}
	return notOwnedOf(op, groups, replies)
}

// ownedOpReplicated is ownedOp waiting for the store's replicas after each
// node's script (runReplicated), the nodes at once.
func (s *Store) ownedOpReplicated(ctx context.Context, op string, script *redis.Script, keys []string, args func(keyGroup) []any) error {
	groups, err := s.groupKeys(ctx, op, keys)
	if err != nil {
		return err
	}
	replies := make([]groupReply, len(groups))
	var wg sync.WaitGroup
	for gi, g := range groups {
		wg.Go(func() {
			c := s.groupCall(script, keys, g, args(g))
			v, err := s.runReplicated(ctx, op, script, c.keys, c.args...)
			if errors.Is(err, ErrNotReplicated) {
				err = nil // recorded on the master: counted and logged
			}
			replies[gi] = groupReply{v, err}
		})
	}
	wg.Wait()
	var errs []error
	for _, r := range replies {
		errs = append(errs, r.err)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return notOwnedOf(op, groups, replies)
}

// notOwnedOf reads the replies of an owner-checked batch script: each
// group's positions (from 1) of the keys not owned.
func notOwnedOf(op string, groups []keyGroup, replies []groupReply) error {
	var index []int
	for gi, g := range groups {
		vals, ok := replies[gi].val.([]any)
		if !ok {
			return fmt.Errorf("redis store: %s: unexpected reply %T", op, replies[gi].val)
		}
		for _, v := range vals {
			p, ok := v.(int64)
			if !ok || p < 1 || int(p) > len(g.idx) {
				return fmt.Errorf("redis store: %s: unexpected reply %v", op, v)
			}
			index = append(index, g.idx[p-1])
		}
	}
	slices.Sort(index)
	return store.NotOwned(index)
}

// keyGroup is the keys of a batch that one node serves: their positions in
// the batch, in order.
type keyGroup struct {
	node *redisNode
	idx  []int
}

// groupReply is a group's script reply.
type groupReply struct {
	val any
	err error
}

// groupKeys groups keys by the node that serves them: one group on a
// standalone or Sentinel Redis, one per master a Cluster's keys fall on.
// A node whose breaker is open fails the batch before any call is made.
func (s *Store) groupKeys(ctx context.Context, op string, keys []string) ([]keyGroup, error) {
	n, err := s.callable(ctx, op, keys[0], nil)
	if err != nil {
		return nil, err
	}
	if !s.client.cluster() {
		idx := make([]int, len(keys))
		for i := range idx {
			idx[i] = i
		}
		return []keyGroup{{node: n, idx: idx}}, nil
	}
	groups := []keyGroup{{node: n, idx: []int{0}}}
	for i, k := range keys[1:] {
		if n, err = s.callable(ctx, op, k, nil); err != nil {
			return nil, err
		}
		gi := slices.IndexFunc(groups, func(g keyGroup) bool { return g.node == n })
		if gi < 0 {
			groups = append(groups, keyGroup{node: n})
			gi = len(groups) - 1
		}
		groups[gi].idx = append(groups[gi].idx, i+1)
	}
	return groups, nil
}

// groupCall is the script call of group g of keys, with its arguments
// first: on one node every key as KEYS, on a Cluster the group's first key
// as KEYS and the others after the arguments (see above).
func (s *Store) groupCall(script *redis.Script, keys []string, g keyGroup, args []any) scriptCall {
	if !s.client.cluster() {
		return scriptCall{script, keys, args}
	}
	for _, i := range g.idx[1:] {
		args = append(args, keys[i])
	}
	return scriptCall{script, keys[g.idx[0] : g.idx[0]+1], args}
}

// runGroups runs script once per node on the keys it serves, with the
// arguments args returns for each group: on one node through its batcher,
// on a Cluster every node's call in one pipeline. It returns the groups
// and their replies, and the errors of those that failed (the others'
// replies are returned all the same).
func (s *Store) runGroups(ctx context.Context, op string, script *redis.Script, keys []string, args func(keyGroup) []any) ([]keyGroup, []groupReply, error) {
	groups, err := s.groupKeys(ctx, op, keys)
	if err != nil {
		return nil, nil, err
	}
	replies := make([]groupReply, len(groups))
	if !s.client.cluster() {
		v, err := s.run(ctx, op, script, keys, args(groups[0])...)
		replies[0] = groupReply{v, err}
		return groups, replies, err
	}
	calls := make([]scriptCall, len(groups))
	nodes := make([]*redisNode, len(groups))
	for gi, g := range groups {
		calls[gi] = s.groupCall(script, keys, g, args(g))
		nodes[gi] = g.node
	}
	vals := make([]any, len(groups))
	errs := make([]error, len(groups))
	s.sendApart(ctx, op, nil, nodes, calls, vals, errs)
	moved := false
	for gi := range groups {
		replies[gi] = groupReply{vals[gi], errs[gi]}
		moved = moved || (errs[gi] != nil && strings.Contains(errs[gi].Error(), "non local key"))
	}
	if moved {
		// a slot moved: the next call asks the new master
		s.client.nodes.cluster.ReloadState(ctx)
	}
	return groups, replies, errors.Join(errs...)
}

// The batch scripts. KEYS, then ARGV after the script's own arguments,
// are the batch's keys (see above): batchKeys(n) gathers them, n being the
// number of the script's own arguments. Every script reads each key before
// it writes any: a key of another node fails the call with nothing
// written.
const luaBatchKeys = `
local function batchKeys(n)
	local keys = {}
	for i = 1, #KEYS do keys[#keys+1] = KEYS[i] end
	for i = n + 1, #ARGV do keys[#keys+1] = ARGV[i] end
	return keys
end
local function read(key)
	local v = redis.pcall('GET', key)
	if type(v) == 'table' then
		if v.err and not string.find(v.err, 'WRONGTYPE', 1, true) then
			error(v)
		end
		return '' -- a key of another type: foreign
	end
	return v
end
`

var (
	// ARGV: owner, lease, '1' to claim nothing when a key is in flight for
	// another owner, keys. Returns for each key -1 (claimed), -2 (claimed
	// over a corrupt or foreign value), -3 (absent, left so: the batch is
	// held back), -4 (the owner's already, its lease renewed unless the
	// batch is held back), the PTTL (>= 0) of a key in flight, or the
	// record of a completed key.
	redisClaimBatchScript = luaScript(luaBatchKeys + `
local keys = batchKeys(3)
local mine = $IN_FLIGHT .. ARGV[1]
local out, busy = {}, false
for i = 1, #keys do
	local v = read(keys[i])
	if not v then
		out[i] = -1
	elseif v == mine then
		out[i] = -4
	elseif string.byte(v, 1) == $RECORD_VERSION and string.len(v) > $RECORD_MIN_LEN then
		out[i] = v
	else
		out[i] = -2
		if string.sub(v, 1, 2) == $IN_FLIGHT then
			local t = redis.call('PTTL', keys[i])
			if t >= 0 then
				out[i], busy = t, true
			end
		end
	end
end
if busy and ARGV[3] == '1' then
	for i = 1, #keys do
		if out[i] == -1 or out[i] == -2 then out[i] = -3 end
	end
	return out
end
for i = 1, #keys do
	if out[i] == -1 or out[i] == -2 or out[i] == -4 then
		redis.call('SET', keys[i], mine, 'PX', ARGV[2])
	end
end
return out
`)

	// ARGV: owner, ttl, the number of records (1: one for every key),
	// the records, keys. Completes every key the owner holds with its
	// record. Returns the positions (from 1) of the keys not owned that do
	// not hold their record already (a retried call).
	redisCompleteBatchScript = luaScript(luaBatchKeys + `
local nrec = tonumber(ARGV[3])
local keys = batchKeys(3 + nrec)
local mine = $IN_FLIGHT .. ARGV[1]
local vals, out = {}, {}
for i = 1, #keys do vals[i] = read(keys[i]) end
for i = 1, #keys do
	local rec = ARGV[4]
	if nrec > 1 then rec = ARGV[3 + i] end
	if vals[i] == mine then
		redis.call('SET', keys[i], rec, 'PX', ARGV[2])
	elseif vals[i] ~= rec then
		out[#out+1] = i
	end
end
return out
`)

	// ARGV: owner, keys. Releases every key the owner holds. Returns the
	// positions (from 1) of the others.
	redisReleaseBatchScript = luaScript(luaOwnedBatch(1, `redis.call('DEL', keys[i])`))

	// ARGV: owner, lease, keys. Renews every key the owner holds. Returns
	// the positions (from 1) of the others.
	redisRenewBatchScript = luaScript(luaOwnedBatch(2, `redis.call('PEXPIRE', keys[i], ARGV[2])`))
)

// luaOwnedBatch is the Lua of a batch script with n arguments of its own
// that runs call on every key the owner (ARGV[1]) holds in flight, keys[i],
// and returns the positions of the others.
func luaOwnedBatch(n int, call string) string {
	return luaBatchKeys + `
local keys = batchKeys(` + strconv.Itoa(n) + `)
local mine = $IN_FLIGHT .. ARGV[1]
local owned, out = {}, {}
for i = 1, #keys do owned[i] = read(keys[i]) == mine end
for i = 1, #keys do
	if owned[i] then
		` + call + `
	else
		out[#out+1] = i
	end
end
return out
`
}

// Interface guard
var _ store.BatchStore = (*Store)(nil)
