package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
	"go.uber.org/zap"
)

// Claiming keys in Redis.
//
// A key without a guard is claimed with one command, `SET <key>
// <marker><owner> PX <lease> NX GET`: it claims an absent key, or changes
// nothing and returns the key's value, a completed key's record (the
// replay, in the same round trip). Only when the value is something else
// (another request's claim, a corrupt or foreign value, a key of another
// type) does the claim take a second round trip, the claim script, which
// reads the time left on another request's lease (for Retry-After) or
// claims over a corrupt value. A Redis older than 7.0 rejects NX with GET:
// the store then claims with the script alone.
//
// A key with its guard (store_redis_guard.go) is claimed by the claim
// script alone, both keys all or none in one call.

// Claim implements store: one round trip for an absent or a completed key.
func (s *Store) Claim(ctx context.Context, key, owner string, lease time.Duration) (store.ClaimResult, error) {
	if c := s.client; c != nil && !c.setGetUnsupported.Load() {
		v, err := s.run(ctx, "claim", nil, nil, "set", key, inFlightMarker+owner, "px", redisMillisArg(lease), "nx", "get")
		switch {
		case err == nil && v == nil:
			c.claims.Add(1)
			return store.ClaimResult{State: store.StateClaimed}, nil
		case err == nil:
			if res, ok := keyStateResult(v); ok && res.State == store.StateCompleted {
				return res, nil
			}
		case redis.HasErrorPrefix(err, "syntax error"):
			c.setGetUnsupported.Store(true)
			s.logger.Info("redis rejects SET with NX and GET (Redis < 7.0): claiming with a script")
		case !redisAnswerError(err):
			return store.ClaimResult{}, err
		}
	}
	return s.claimKeys(ctx, []string{key}, owner, lease)
}

// redisAnswerError reports whether err is Redis's answer to a claim that
// the claim script then handles, not a failure of Redis.
func redisAnswerError(err error) bool {
	return redis.HasErrorPrefix(err, "WRONGTYPE") || redis.HasErrorPrefix(err, "syntax error")
}

// claimKeys claims keys with the claim script, all or none, in one round trip:
// a key, or a key and its guard on one node. Absent, corrupt or foreign
// values are claimed; a key in flight reports its lease left, a completed
// key its record.
func (s *Store) claimKeys(ctx context.Context, keys []string, owner string, lease time.Duration) (store.ClaimResult, error) {
	leaseMs := redisMillis(lease)
	v, err := s.run(ctx, "claim", redisClaimScript, keys, owner, leaseMs)
	if err != nil {
		return store.ClaimResult{}, err
	}
	return s.claimReply(ctx, keys, owner, leaseMs, v)
}

// claimReply reads the claim script's reply v for keys.
func (s *Store) claimReply(ctx context.Context, keys []string, owner, leaseMs string, v any) (store.ClaimResult, error) {
	if v == int64(-1) || v == int64(-2) {
		if v == int64(-2) {
			s.logger.Warn("corrupt or foreign value under an idempotency key: treated as absent and claimed", zap.Strings("key", keys))
		}
		s.client.claims.Add(1)
		return store.ClaimResult{State: store.StateClaimed}, nil
	}
	res, ok := keyStateResult(v)
	if !ok {
		if rec, isString := v.(string); isString {
			return s.reclaim(ctx, keys, owner, leaseMs, rec)
		}
		return store.ClaimResult{}, fmt.Errorf("redis store: claim: unexpected reply %T", v)
	}
	return res, nil
}

// reclaim claims keys, one of which held a value that looked like a record
// to Lua but does not decode, unless someone changed them meanwhile.
func (s *Store) reclaim(ctx context.Context, keys []string, owner, leaseMs, seen string) (store.ClaimResult, error) {
	s.logger.Warn("corrupt or foreign value under an idempotency key: treated as absent", zap.Strings("key", keys))
	ok, err := s.run(ctx, "claim", redisReclaimScript, keys, owner, leaseMs, seen)
	if err != nil {
		return store.ClaimResult{}, err
	}
	if ok == int64(1) {
		s.client.claims.Add(1)
		return store.ClaimResult{State: store.StateClaimed}, nil
	}
	// someone else changed the key meanwhile: it is theirs
	return store.ClaimResult{State: store.StateInFlight}, nil
}
