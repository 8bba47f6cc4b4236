package webhookidempotency

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// A key and its guard in Redis (see guard.go). On a standalone or Sentinel
// Redis both are one script call: claimed all or none, atomically, in one
// round trip. Redis Cluster keeps the two keys on different slots, which no
// script may span: there each key gets its own script call, both sent in
// one pipeline (each node gets its part at once, so it is still one round
// trip), and a claim that took one key but not the other gives it back.

// ClaimGuarded implements guardedStore.
func (s *RedisStore) ClaimGuarded(ctx context.Context, key, guard, owner string, lease time.Duration) (claimResult, error) {
	if guard == "" {
		return s.Claim(ctx, key, owner, lease)
	}
	if !s.client.cluster() {
		return s.claim(ctx, []string{key, guard}, owner, lease)
	}
	leaseMs := redisMillis(lease)
	vals, err := s.runApart(ctx, "claim", redisClaimScript, nil, key, guard, owner, leaseMs)
	if err != nil {
		s.giveBack(vals, key, guard, owner)
		return claimResult{}, err
	}
	var res [2]claimResult
	for i, v := range vals {
		if claimed(v) {
			res[i] = claimResult{State: stateClaimed}
			continue
		}
		var ok bool
		if res[i], ok = keyStateResult(v); !ok {
			// a corrupt value (logged): the key is claimed as a key
			// without a guard is, which treats it as absent
			s.giveBack(vals, key, guard, owner)
			return s.claim(ctx, []string{key}, owner, lease)
		}
	}
	if res[0].State == stateClaimed && res[1].State == stateClaimed {
		s.client.claims.Add(1)
		return res[0], nil
	}
	s.giveBack(vals, key, guard, owner)
	if res[0].State != stateClaimed {
		return res[0], nil
	}
	return res[1], nil
}

// claimed reports whether a claim script's reply is a claim.
func claimed(v any) bool { return v == int64(-1) || v == int64(-2) }

// giveBack releases the keys of a Cluster claim that took only some of
// them.
func (s *RedisStore) giveBack(vals [2]any, key, guard, owner string) {
	for i, k := range [2]string{key, guard} {
		if claimed(vals[i]) {
			_, _ = s.run(completionCtx, "release", redisReleaseScript, []string{k}, owner)
		}
	}
}

// CompleteGuarded implements guardedStore.
func (s *RedisStore) CompleteGuarded(ctx context.Context, key, guard, owner string, record []byte, ttl time.Duration) error {
	return s.completeThen(ctx, key, guard, owner, record, ttl, nil)
}

// ReleaseGuarded implements guardedStore.
func (s *RedisStore) ReleaseGuarded(ctx context.Context, key, guard, owner string) error {
	defer s.client.claimDone()
	return s.ownerOpGuarded(ctx, "release", redisReleaseScript, nil, key, guard, owner)
}

// RenewGuarded implements guardedStore.
func (s *RedisStore) RenewGuarded(ctx context.Context, key, guard, owner string, lease time.Duration) error {
	return s.ownerOpGuarded(ctx, "renew", redisRenewScript, nil, key, guard, owner, redisMillis(lease))
}

// ownerOpGuarded runs an owner-checked script on a key and its guard (""
// for none), with then (if any) in the same pipeline; it answers for the
// key.
func (s *RedisStore) ownerOpGuarded(ctx context.Context, op string, script *redis.Script, then *redisThen, key, guard string, args ...any) error {
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
	return errNotOwner
}

// runApart runs script once on key and once on guard with the same
// arguments, both calls in one pipeline (then, when not nil, right after
// the key's), within the store's timeout and through the breaker. It
// returns both replies, and the errors of the calls that failed (the other
// call's reply is still returned).
func (s *RedisStore) runApart(ctx context.Context, op string, script *redis.Script, then *redisThen, key, guard string, args ...any) ([2]any, error) {
	var vals [2]any
	c, err := s.callable(op, then)
	if err != nil {
		return vals, err
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var calls [2]*redisCall
	for i, k := range [2]string{key, guard} {
		calls[i] = redisCallPool.Get().(*redisCall)
		calls[i].ctx, calls[i].script, calls[i].keys, calls[i].args = cctx, script, []string{k}, args
	}
	if then != nil {
		then.err = errRedisNotSent
		calls[0].then = then
	}
	c.batch.send(calls[:], nil)
	var errs [2]error
	for i, call := range calls {
		<-call.done
		vals[i], errs[i] = call.val, call.err
		call.settleThen()
		call.recycle()
	}
	return vals, s.settle(ctx, op, errors.Join(errs[0], errs[1]))
}

// cluster reports whether the client talks to a Redis Cluster.
func (c *redisClient) cluster() bool {
	_, ok := c.client.(*redis.ClusterClient)
	return ok
}

// Interface guard
var _ guardedStore = (*RedisStore)(nil)
