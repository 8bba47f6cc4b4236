// Package redisstore is the redis store, module
// `http.webhook_idempotency.stores.redis`: idempotency keys in Redis
// (standalone, Cluster or Sentinel), so that several Caddy instances
// deduplicate as one (docs/stores.md). It also offers the inbox and the
// archive their streams (streams.go: Streams).
package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/redis/go-redis/v9"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/cfparse"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/usage"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
	"go.uber.org/zap"
)

func init() {
	caddy.RegisterModule(Store{})
}

// Store keeps idempotency keys in Redis, so that several Caddy
// instances deduplicate as one. One address is a standalone server, several
// are the seed nodes of a Redis Cluster, and `master_name` makes the
// addresses Sentinels that name the master.
//
// Every idempotency key is one Redis key, `<key_prefix>:<source>:<value>`,
// so Redis Cluster needs no cross-slot operation. Claiming is one round
// trip: a SET with NX and GET for an absent or a completed key, a Lua
// script for a key and its guard (see store_redis_claim.go); completion,
// release and lease renewal are owner-checked Lua scripts. Clients are
// shared across config reloads.
type Store struct {
	// A `redis://` or `rediss://` URL, e.g.
	// `redis://user:password@host:6379/0`. Its host is the first address;
	// its user, password, database and scheme (`rediss` = TLS) apply
	// unless the fields below set them. Placeholders such as `{env.REDIS_URL}`
	// are resolved at provision time. Default: none.
	URL string `json:"url,omitempty"`

	// Addresses (`host:port`): one for a standalone server, several for
	// Redis Cluster seed nodes, or the Sentinels when `master_name` is set.
	// Default: the URL's host, else `localhost:6379`.
	Addresses []string `json:"addresses,omitempty"`

	// The ACL user name. Default: the URL's, else none.
	Username string `json:"username,omitempty"`

	// The password, usually a placeholder such as `{env.REDIS_PASSWORD}`
	// or `{file./run/secrets/redis}`, resolved at provision time. With
	// Sentinel it is the data nodes' password. Default: the URL's, else
	// none.
	Password string `json:"password,omitempty"`

	// The database number (standalone and Sentinel only; Redis Cluster
	// has database 0 only). Default: the URL's, else 0.
	DB int `json:"db,omitempty"`

	// The Sentinel master name. When set, the addresses are Sentinels.
	// Default: none.
	MasterName string `json:"master_name,omitempty"`

	// Connect with TLS. Default: false, or true with a `rediss://` URL.
	TLS bool `json:"tls,omitempty"`

	// The first part of every key. Default: `idem`.
	Prefix string `json:"key_prefix,omitempty"`

	// The bound of every store call, connection set-up included. A call
	// that takes longer fails and the handler applies its `fail` policy.
	// Default: 500ms.
	Timeout caddy.Duration `json:"timeout,omitempty"`

	// The largest number of connections per Redis node. Default: 10 per
	// CPU (go-redis's default).
	PoolSize int `json:"pool_size,omitempty"`

	// The number of replicas that must acknowledge (WAIT) an inbox
	// acceptance, and with `replicas_completions` every completion,
	// before it is answered: an acceptance fewer replicas acknowledged
	// within `replicas_timeout` is refused with 503 (docs/stores.md,
	// "Failover"). Default: 0, nothing waited for.
	Replicas int `json:"replicas,omitempty"`

	// How long an acceptance or a completion waits for `replicas`.
	// Default: `timeout`.
	ReplicasTimeout caddy.Duration `json:"replicas_timeout,omitempty"`

	// Completions wait for `replicas` too; one that fewer replicas
	// acknowledged is recorded on the master only: the answer is sent,
	// and the shortfall counted and logged. Default: false.
	ReplicasCompletions bool `json:"replicas_completions,omitempty"`

	client  *redisClient
	ref     usage.Ref // on client
	timeout time.Duration
	logger  *zap.Logger
}

// CaddyModule returns the Caddy module information.
func (Store) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.webhook_idempotency.stores.redis",
		New: func() caddy.Module { return new(Store) },
	}
}

// Defaults of the redis store.
const (
	defaultRedisAddress = "localhost:6379"
	defaultRedisTimeout = 500 * time.Millisecond
	// redisClientName is the name the store's connections carry in
	// CLIENT LIST.
	redisClientName = "caddy-webhook-idempotency"
	// redisPingTimeoutMax bounds the ping at provision time.
	redisPingTimeoutMax = 2 * time.Second
)

// completionCtx is the context of the calls that give back what a failed
// claim took: they must run whatever became of the caller, and every call
// is bounded by the store's timeout.
var completionCtx = context.Background()

// Provision resolves placeholders, sets defaults and attaches the store to
// a shared client. A Redis that does not answer is logged, not fatal: the
// handler's `fail` policy applies until it is back.
func (s *Store) Provision(ctx caddy.Context) error {
	return s.provisionWith(ctx.Logger())
}

// provisionWith is Provision with the logger given (tests watch what it
// logs).
func (s *Store) provisionWith(logger *zap.Logger) error {
	s.logger = logger
	if s.Prefix == "" {
		s.Prefix = store.DefaultKeyPrefix
	}
	if s.Timeout == 0 {
		s.Timeout = caddy.Duration(defaultRedisTimeout)
	}
	s.timeout = time.Duration(s.Timeout)
	if s.ReplicasTimeout == 0 {
		s.ReplicasTimeout = s.Timeout
	}
	if err := s.Validate(); err != nil {
		return err
	}
	conn, err := s.resolve()
	if err != nil {
		return err
	}
	if len(conn.addrs) > 1 && conn.masterName == "" && conn.db != 0 {
		return fmt.Errorf("redis store: db %d is not available with Redis Cluster (several addresses): Cluster has database 0 only", conn.db)
	}

	key := conn.key()
	val, loaded, err := redisPool.LoadOrNew(key, func() (caddy.Destructor, error) {
		return newRedisClient(conn, s.logger), nil
	})
	if err != nil {
		return fmt.Errorf("redis store: %v", err)
	}
	s.client = val.(*redisClient)
	s.ref = usage.NewRef(redisPool, key)
	if !loaded {
		s.client.checkReachable(min(s.timeout, redisPingTimeoutMax))
	}
	return nil
}

// Validate checks the configuration.
func (s *Store) Validate() error {
	if s.DB < 0 {
		return fmt.Errorf("redis store: db must not be negative, got %d", s.DB)
	}
	if s.PoolSize < 0 {
		return fmt.Errorf("redis store: pool_size must not be negative, got %d", s.PoolSize)
	}
	if s.Timeout < 0 {
		return fmt.Errorf("redis store: timeout must not be negative, got %s", time.Duration(s.Timeout))
	}
	if s.Replicas < 0 || s.ReplicasTimeout < 0 {
		return fmt.Errorf("redis store: replicas and replicas_timeout must not be negative, got %d and %s", s.Replicas, time.Duration(s.ReplicasTimeout))
	}
	if s.ReplicasCompletions && s.Replicas == 0 {
		return errors.New("redis store: replicas_completions needs replicas")
	}
	if err := store.CheckKeyPrefix(s.Prefix); err != nil {
		return fmt.Errorf("redis store: %v", err)
	}
	return nil
}

// Cleanup releases this configuration's use of the shared client; the
// client is closed when no configuration uses it any more.
//
// On a reload Caddy cleans up the old configuration while its last
// requests may still be running, so the store stays usable: the client
// lives on while the new configuration shares it, and otherwise closes once
// the claims taken through it are completed or released (see Destruct).
func (s *Store) Cleanup() error { return s.ref.Release() }

// KeyPrefix implements store.Prefixer: the first part of every key.
func (s *Store) KeyPrefix() string { return s.Prefix }

// Complete implements store.Store.
func (s *Store) Complete(ctx context.Context, key, owner string, record []byte, ttl time.Duration) error {
	return s.completeThen(ctx, key, "", owner, record, ttl, nil)
}

// completeThen completes key and, unless guard is "", its guard (see
// store_redis_guard.go), with then, when not nil, sent in the same
// pipeline (see redisThen).
func (s *Store) completeThen(ctx context.Context, key, guard, owner string, record []byte, ttl time.Duration, then *redisThen) error {
	defer s.client.claimDone()
	var err error
	if s.ReplicasCompletions {
		err = s.completeReplicated(ctx, key, guard, owner, record, ttl, then)
	} else {
		err = s.ownerOpGuarded(ctx, "complete", redisCompleteScript, then, key, guard, owner, record, redisMillisArg(ttl))
	}
	s.keepRecent(err, record, ttl, key, guard)
	return err
}

// Release implements store.Store.
func (s *Store) Release(ctx context.Context, key, owner string) error {
	defer s.client.claimDone()
	return s.ownerOp(ctx, "release", redisReleaseScript, nil, []string{key}, owner)
}

// Renew implements store.Store.
func (s *Store) Renew(ctx context.Context, key, owner string, lease time.Duration) error {
	return s.ownerOp(ctx, "renew", redisRenewScript, nil, []string{key}, owner, redisMillisArg(lease))
}

// ownerOp runs an owner-checked script that answers 1 or 0 for keys[0],
// with then (if any) in the same pipeline.
func (s *Store) ownerOp(ctx context.Context, op string, script *redis.Script, then *redisThen, keys []string, args ...any) error {
	v, err := s.runThen(ctx, op, script, then, keys, args...)
	if err != nil {
		return err
	}
	if v == int64(1) {
		return nil
	}
	return store.ErrNotOwner
}

// run runs a script within the store's timeout, through the breaker and
// the batcher, or with a nil script the command args. EVALSHA falls back to
// EVAL when Redis does not know the script. A nil reply is (nil, nil).
func (s *Store) run(ctx context.Context, op string, script *redis.Script, keys []string, args ...any) (any, error) {
	return s.runThen(ctx, op, script, nil, keys, args...)
}

// runThen is run with then, when not nil, sent in the same pipeline; when
// the call is not sent, then's error says why.
func (s *Store) runThen(ctx context.Context, op string, script *redis.Script, then *redisThen, keys []string, args ...any) (any, error) {
	n, err := s.callable(ctx, op, callKey(keys, args), then)
	if err != nil {
		return nil, err
	}
	v, err := n.batch.run(ctx, s.timeout, script, keys, args, then)
	if errors.Is(err, redis.Nil) {
		v, err = nil, nil // a nil reply
	}
	if err = s.settle(ctx, n, op, err); err != nil {
		return nil, err
	}
	return v, nil
}

// callKey is the key a call acts on: a script's first key, or a
// command's (its second argument), which decides its node.
func callKey(keys []string, args []any) string {
	if len(keys) > 0 {
		return keys[0]
	}
	if len(args) > 1 {
		k, _ := args[1].(string)
		return k
	}
	return ""
}

// UnmarshalCaddyfile sets up the redis store from Caddyfile tokens:
//
//	store redis [<redis url>] {
//		address     <host:port>...
//		username    <user>
//		password    <password>
//		db          <n>
//		master_name <sentinel master>
//		tls
//		key_prefix  <prefix>
//		timeout     <duration>
//		pool_size   <n>
//		replicas    <n> [<timeout>] [completions]
//	}
func (s *Store) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // "redis"
	if args := d.RemainingArgs(); len(args) > 0 {
		u, err := cfparse.OneValue(d, "store redis", args)
		if err != nil {
			return err
		}
		if !cfparse.HasPlaceholder(u) && !strings.HasPrefix(u, "redis://") && !strings.HasPrefix(u, "rediss://") {
			return d.Errf("invalid redis url '%s': want redis:// or rediss://", redisRedactURL(u))
		}
		s.URL = u
	}
	return cfparse.Block(d, "redis store", redisOptions, s.setOption)
}

// redisOptions are the subdirectives of the redis store's block and the
// values each takes.
var redisOptions = map[string]cfparse.Arity{
	"address": cfparse.Some, "username": cfparse.One, "password": cfparse.One, "db": cfparse.One,
	"master_name": cfparse.One, "tls": cfparse.None, "key_prefix": cfparse.One, "timeout": cfparse.One,
	"pool_size": cfparse.One, "replicas": cfparse.Some,
}

// setOption applies a subdirective of the block, its values checked by the
// parser (v is the first).
func (s *Store) setOption(name, v string, args []string) (err error) {
	switch name {
	case "address":
		for _, a := range args {
			if _, _, err := net.SplitHostPort(a); err != nil && !cfparse.HasPlaceholder(a) {
				return fmt.Errorf("invalid redis address '%s': want host:port", a)
			}
		}
		s.Addresses = append(s.Addresses, args...)
	case "username":
		s.Username = v
	case "password":
		s.Password = v
	case "db", "pool_size":
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || (name == "pool_size" && n == 0) {
			return fmt.Errorf("invalid %s '%s': want a non-negative integer", name, v)
		}
		if name == "db" {
			s.DB = n
		} else {
			s.PoolSize = n
		}
	case "master_name":
		s.MasterName = v
	case "tls":
		s.TLS = true
	case "key_prefix":
		if err := store.CheckKeyPrefix(v); err != nil {
			return err
		}
		s.Prefix = v
	case "timeout":
		s.Timeout, err = cfparse.PositiveDuration("timeout", v)
	case "replicas":
		return s.setReplicas(args)
	}
	return err
}

// Interface guards
var (
	_ store.Store             = (*Store)(nil)
	_ store.Prefixer          = (*Store)(nil)
	_ store.RecentRecords     = (*Store)(nil)
	_ store.DurabilityWatcher = (*Store)(nil)
	_ caddy.Provisioner       = (*Store)(nil)
	_ caddy.Validator         = (*Store)(nil)
	_ caddy.CleanerUpper      = (*Store)(nil)
	_ caddyfile.Unmarshaler   = (*Store)(nil)
)
