package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// The redis store's side of the admin API's key routes (admin_keys.go).

// ARGV: "1" to forget. Returns {0} for an absent key, {1, pttl} for a key
// in flight, or {2, pttl, value} for a completed (or foreign) key, which
// is deleted when forgetting.
var redisKeyInfoScript = luaScript(`
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' then
	v = '' -- a key of another type: foreign
end
if not v then
	return {0}
end
local t = redis.call('PTTL', KEYS[1])
if string.sub(v, 1, 2) == $IN_FLIGHT then
	return {1, t}
end
if ARGV[1] == '1' then
	redis.call('DEL', KEYS[1])
end
return {2, t, v}
`)

// ARGV: a value. Deletes the key if it holds that value; returns 1 when it
// did, else 0.
var redisForgetIfScript = luaScript(`
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
	redis.call('DEL', KEYS[1])
	return 1
end
return 0
`)

// Inspect implements store.KeyAdmin.
func (s *Store) Inspect(ctx context.Context, key string) (store.KeyInfo, error) {
	return s.keyInfo(ctx, key, "0")
}

// Forget implements store.KeyAdmin. This instance's copy of the key's record
// (store_redis_recent.go) goes too, unless the key is in flight.
func (s *Store) Forget(ctx context.Context, key string) (store.KeyInfo, error) {
	info, err := s.keyInfo(ctx, key, "1")
	if err == nil && info.State != store.KeyInFlight {
		s.forgetRecent(key)
	}
	return info, err
}

// ForgetIf implements store.KeyAdmin; this instance's copy of the record goes
// with the key.
func (s *Store) ForgetIf(ctx context.Context, key string, record []byte) (bool, error) {
	if s.client == nil {
		return false, fmt.Errorf("redis store: store is not provisioned")
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	v, err := redisForgetIfScript.Run(ctx, s.client.client, []string{key}, record).Result()
	if err != nil {
		return false, fmt.Errorf("redis store: %w", err)
	}
	if v != int64(1) {
		return false, nil
	}
	s.forgetRecent(key)
	return true, nil
}

func (s *Store) keyInfo(ctx context.Context, key, forget string) (store.KeyInfo, error) {
	if s.client == nil {
		return store.KeyInfo{}, fmt.Errorf("redis store: store is not provisioned")
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	v, err := redisKeyInfoScript.Run(ctx, s.client.client, []string{key}, forget).Result()
	if err != nil {
		return store.KeyInfo{}, fmt.Errorf("redis store: %w", err)
	}
	reply, _ := v.([]any)
	if len(reply) == 0 {
		return store.KeyInfo{}, fmt.Errorf("redis store: unexpected reply %T", v)
	}
	var left time.Duration = -1
	if len(reply) > 1 {
		if ms, ok := reply[1].(int64); ok && ms >= 0 {
			left = time.Duration(ms) * time.Millisecond
		}
	}
	switch reply[0] {
	case int64(0):
		return store.KeyInfo{State: store.KeyAbsent}, nil
	case int64(1):
		return store.KeyInfo{State: store.KeyInFlight, Left: left}, nil
	}
	info := store.KeyInfo{State: store.KeyCompleted, Left: left}
	if len(reply) > 2 {
		rec, _ := reply[2].(string)
		info.Record = []byte(rec)
	}
	return info, nil
}

// Interface guard
var _ store.KeyAdmin = (*Store)(nil)

// Import writes a value carried over from another store (a completed key's
// record, or a note's first key) under key for ttl, unless the key holds
// something already; it reports whether it wrote.
func (s *Store) Import(ctx context.Context, key string, value []byte, ttl time.Duration) (bool, error) {
	if s.client == nil {
		return false, fmt.Errorf("redis store: store is not provisioned")
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	ok, err := s.client.client.SetNX(ctx, key, value, ttl).Result()
	if err != nil {
		return false, fmt.Errorf("redis store: %w", err)
	}
	return ok, nil
}
