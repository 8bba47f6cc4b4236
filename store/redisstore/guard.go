package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// A key and its guard in Redis (see guard.go). On a standalone or Sentinel
// Redis both are one script call: claimed all or none, atomically, in one
// round trip. Redis Cluster keeps the two keys on different slots, which no
// script may span: there each key gets its own script call, both sent in
// one pipeline (each node gets its part at once, so it is still one round
// trip), and a claim that took one key but not the other gives it back.

// ClaimGuarded implements store.GuardedStore.
func (s *Store) ClaimGuarded(ctx context.Context, key, guard, owner string, lease time.Duration) (store.ClaimResult, error) {
	if guard == "" {
		return s.Claim(ctx, key, owner, lease)
	}
	if !s.client.cluster() {
		return s.claimKeys(ctx, []string{key, guard}, owner, lease)
	}
	leaseMs := redisMillis(lease)
	vals, err := s.runApart(ctx, "claim", redisClaimScript, nil, key, guard, owner, leaseMs)
	if err != nil {
		s.giveBack(vals, key, guard, owner)
		return store.ClaimResult{}, err
	}
	var res [2]store.ClaimResult
	for i, v := range vals {
		if claimed(v) {
			res[i] = store.ClaimResult{State: store.StateClaimed}
			continue
		}
		var ok bool
		if res[i], ok = keyStateResult(v); !ok {
			// a corrupt value (logged): the key is claimed as a key
			// without a guard is, which treats it as absent
			s.giveBack(vals, key, guard, owner)
			return s.claimKeys(ctx, []string{key}, owner, lease)
		}
	}
	if res[0].State == store.StateClaimed && res[1].State == store.StateClaimed {
		s.client.claims.Add(1)
		return res[0], nil
	}
	s.giveBack(vals, key, guard, owner)
	if res[0].State != store.StateClaimed {
		return res[0], nil
	}
	return res[1], nil
}

// claimed reports whether a claim script's reply is a claim.
func claimed(v any) bool { return v == int64(-1) || v == int64(-2) }

// giveBack releases the keys of a Cluster claim that took only some of
// them.
func (s *Store) giveBack(vals [2]any, key, guard, owner string) {
	for i, k := range [2]string{key, guard} {
		if claimed(vals[i]) {
			_, _ = s.run(completionCtx, "release", redisReleaseScript, []string{k}, owner)
		}
	}
}

// CompleteGuarded implements store.GuardedStore.
func (s *Store) CompleteGuarded(ctx context.Context, key, guard, owner string, record []byte, ttl time.Duration) error {
	return s.completeThen(ctx, key, guard, owner, record, ttl, nil)
}

// ReleaseGuarded implements store.GuardedStore.
func (s *Store) ReleaseGuarded(ctx context.Context, key, guard, owner string) error {
	defer s.client.claimDone()
	return s.ownerOpGuarded(ctx, "release", redisReleaseScript, nil, key, guard, owner)
}

// RenewGuarded implements store.GuardedStore.
func (s *Store) RenewGuarded(ctx context.Context, key, guard, owner string, lease time.Duration) error {
	return s.ownerOpGuarded(ctx, "renew", redisRenewScript, nil, key, guard, owner, redisMillis(lease))
}

// ownerOpGuarded runs an owner-checked script on a key and its guard (""
// for none), with then (if any) in the same pipeline; it answers for the
// key.
func (s *Store) ownerOpGuarded(ctx context.Context, op string, script *redis.Script, then *redisThen, key, guard string, args ...any) error {
	if guard == "" {
		return s.ownerOp(ctx, op, script, then, []string{key}, args...)
	}
	if !s.client.cluster() {
		return s.ownerOp(ctx, op, script, then, []string{key, guard}, args...)
	}
	vals, err := s.runApart(ctx, op, script, then, key, guard, args...)
	if err != nil {
		return err
	}
	if vals[0] == int64(1) {
		return nil
	}
	return store.ErrNotOwner
}

// runApart runs script once on key and once on guard with the same
// arguments, both calls in one pipeline (then, when not nil, right after
// the key's), within the store's timeout and through the breaker. It
// returns both replies, and the errors of the calls that failed (the other
// call's reply is still returned).
func (s *Store) runApart(ctx context.Context, op string, script *redis.Script, then *redisThen, key, guard string, args ...any) ([2]any, error) {
	return s.runPair(ctx, op, then, [2]scriptCall{{script, []string{key}, args}, {script, []string{guard}, args}})
}

// scriptCall is a script to run with its keys, on the node of the first.
type scriptCall struct {
	script *redis.Script
	keys   []string
	args   []any
}

// runPair runs two script calls, each on its own key (Redis Cluster may
// keep them on different slots), in one pipeline, as runApart does.
func (s *Store) runPair(ctx context.Context, op string, then *redisThen, pair [2]scriptCall) ([2]any, error) {
	var vals [2]any
	var errs [2]error
	var nodes [2]*redisNode
	for i, p := range pair {
		n, err := s.callable(ctx, op, p.keys[0], then)
		if err != nil {
			return vals, err
		}
		nodes[i] = n
	}
	s.sendApart(ctx, op, then, nodes[:], pair[:], vals[:], errs[:])
	return vals, errors.Join(errs[0], errs[1])
}

// sendApart sends calls, calls[i] to nodes[i], in one pipeline through the
// cluster client, which sends each node its part at once (one round trip
// of latency, however many nodes), within the store's timeout; then, when
// not nil, rides right after the first call. It sets each call's reply
// and error in vals and errs, and tells each node's breaker how its call
// went.
func (s *Store) sendApart(ctx context.Context, op string, then *redisThen, nodes []*redisNode, calls []scriptCall, vals []any, errs []error) {
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var pairBuf [2]*redisCall
	rcs := pairBuf[:0]
	for _, c := range calls {
		rc := redisCallPool.Get().(*redisCall)
		rc.ctx, rc.script, rc.keys, rc.args = cctx, c.script, c.keys, c.args
		rcs = append(rcs, rc)
	}
	if then != nil {
		then.err = errRedisNotSent
		rcs[0].then = then
	}
	nodes[0].batch.send(rcs, nil)
	for i, rc := range rcs {
		<-rc.done
		vals[i], errs[i] = rc.val, rc.err
		if rc.val != nil {
			// the node answered: the error is another node's, which
			// go-redis, retrying that node's part until the pipeline's
			// time is up, sets on every command of the pipeline
			errs[i] = nil
		}
		rc.settleThen()
		rc.recycle()
		errs[i] = s.settle(ctx, nodes[i], op, errs[i])
	}
}

// ClaimNoted implements store.GuardedStore: on a standalone or Sentinel
// Redis one script claims the key and reads (and, when free, takes) the
// note; on Redis Cluster the claim script and the note script are two calls
// in one pipeline.
func (s *Store) ClaimNoted(ctx context.Context, key, note, owner string, lease, noteTTL time.Duration) (store.ClaimResult, string, error) {
	leaseMs, noteMs := redisMillis(lease), redisMillis(noteTTL)
	if !s.client.cluster() {
		v, err := s.run(ctx, "claim", redisClaimNotedScript, []string{key, note}, owner, leaseMs, noteMs)
		if err != nil {
			return store.ClaimResult{}, "", err
		}
		reply, ok := v.([]any)
		if !ok || len(reply) != 2 {
			return store.ClaimResult{}, "", fmt.Errorf("redis store: claim: unexpected reply %T", v)
		}
		prev, _ := reply[1].(string)
		res, err := s.claimReply(ctx, []string{key}, owner, leaseMs, reply[0])
		return res, prev, err
	}
	vals, err := s.runPair(ctx, "claim", nil, [2]scriptCall{
		{redisClaimScript, []string{key}, []any{owner, leaseMs}},
		{redisNoteScript, []string{note}, []any{key, noteMs}},
	})
	if err != nil {
		if claimed(vals[0]) {
			_, _ = s.run(completionCtx, "release", redisReleaseScript, []string{key}, owner)
		}
		return store.ClaimResult{}, "", err
	}
	prev, _ := vals[1].(string)
	res, err := s.claimReply(ctx, []string{key}, owner, leaseMs, vals[0])
	return res, prev, err
}

// cluster reports whether the client talks to a Redis Cluster.
func (c *redisClient) cluster() bool {
	_, ok := c.client.(*redis.ClusterClient)
	return ok
}

// Interface guard
var _ store.GuardedStore = (*Store)(nil)
