package webhookidempotency

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// Claiming a key in Redis.
//
// A claim is one command, `SET <key> <marker><owner> PX <lease> NX GET`: it
// claims an absent key, or changes nothing and returns the key's value, a
// completed key's record (the replay, in the same round trip). Only when
// the value is something else (another request's claim, a corrupt or
// foreign value, a key of another type) does the claim take a second round
// trip, the claim script, which reads the time left on another request's
// lease (for Retry-After) or claims over a corrupt value. A Redis older than
// 7.0 rejects NX with GET: the store then claims with the script alone.

// Claim implements store: one round trip for an absent or a completed key.
func (s *RedisStore) Claim(ctx context.Context, key, owner string, lease time.Duration) (claimResult, error) {
	leaseMs := redisMillis(lease)
	if !s.client.setGetUnsupported.Load() {
		v, err := s.run(ctx, "claim", nil, nil, "set", key, inFlightMarker+owner, "px", leaseMs, "nx", "get")
		switch {
		case err == nil && v == nil:
			s.client.claims.Add(1)
			return claimResult{State: stateClaimed}, nil
		case err == nil:
			if res, ok := keyStateResult(v); ok && res.State == stateCompleted {
				return res, nil
			}
		case redis.HasErrorPrefix(err, "syntax error"):
			s.client.setGetUnsupported.Store(true)
			s.logger.Info("redis rejects SET with NX and GET (Redis < 7.0): claiming with a script")
		case !redis.HasErrorPrefix(err, "WRONGTYPE"):
			return claimResult{}, err
		}
	}
	return s.claimScript(ctx, key, owner, leaseMs)
}

// redisAnswerError reports whether err is Redis's answer to a claim that
// the claim script then handles, not a failure of Redis.
func redisAnswerError(err error) bool {
	return redis.HasErrorPrefix(err, "WRONGTYPE") || redis.HasErrorPrefix(err, "syntax error")
}

// claimScript claims with the claim script: absent, corrupt or foreign
// values are claimed, and a key in flight reports its lease left.
func (s *RedisStore) claimScript(ctx context.Context, key, owner, leaseMs string) (claimResult, error) {
	v, err := s.run(ctx, "claim", redisClaimScript, []string{key}, owner, leaseMs)
	if err != nil {
		return claimResult{}, err
	}
	if v == int64(-1) || v == int64(-2) {
		if v == int64(-2) {
			s.logger.Warn("corrupt or foreign value under an idempotency key: treated as absent and claimed", zap.String("key", key))
		}
		s.client.claims.Add(1)
		return claimResult{State: stateClaimed}, nil
	}
	res, ok := keyStateResult(v)
	if !ok {
		if rec, isString := v.(string); isString {
			return s.reclaim(ctx, key, owner, leaseMs, rec)
		}
		return claimResult{}, fmt.Errorf("redis store: claim: unexpected reply %T", v)
	}
	return res, nil
}

// keyStateResult reads the reply of luaKeyState for a key this caller did
// not claim: a decodable record, or the PTTL of a key in flight.
func keyStateResult(v any) (claimResult, bool) {
	switch v := v.(type) {
	case int64:
		if v >= 0 {
			return claimResult{State: stateInFlight, LeaseLeft: time.Duration(v) * time.Millisecond}, true
		}
	case string:
		rec := []byte(v)
		if _, err := decodeRecord(rec); err == nil {
			return claimResult{State: stateCompleted, Record: rec}, true
		}
	}
	return claimResult{}, false
}

// reclaim claims a key whose value looked like a record to Lua but does
// not decode, unless someone changed it meanwhile.
func (s *RedisStore) reclaim(ctx context.Context, key, owner, leaseMs, seen string) (claimResult, error) {
	s.logger.Warn("corrupt or foreign value under an idempotency key: treated as absent", zap.String("key", key))
	ok, err := s.run(ctx, "claim", redisReclaimScript, []string{key}, owner, leaseMs, seen)
	if err != nil {
		return claimResult{}, err
	}
	if ok == int64(1) {
		s.client.claims.Add(1)
		return claimResult{State: stateClaimed}, nil
	}
	// someone else changed the key meanwhile: it is theirs
	return claimResult{State: stateInFlight}, nil
}
