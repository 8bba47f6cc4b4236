package webhookidempotency

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"go.uber.org/zap"
)

func init() {
	caddy.RegisterModule(RedisStore{})
}

// RedisStore keeps idempotency keys in Redis, so that several Caddy
// instances deduplicate as one. One address is a standalone server, several
// are the seed nodes of a Redis Cluster, and `master_name` makes the
// addresses Sentinels that name the master.
//
// Every idempotency key is one Redis key, `<key_prefix>:<source>:<value>`,
// so Redis Cluster needs no cross-slot operation. Claiming is one round
// trip (a Lua script); completion, release and lease renewal are
// owner-checked Lua scripts. Clients are shared across config reloads.
type RedisStore struct {
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

	client   *redisClient
	poolKey  string
	released bool
	timeout  time.Duration
	logger   *zap.Logger
}

// CaddyModule returns the Caddy module information.
func (RedisStore) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.webhook_idempotency.stores.redis",
		New: func() caddy.Module { return new(RedisStore) },
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

// redisPool shares clients across config reloads, keyed by every
// connection setting.
var redisPool = caddy.NewUsagePool()

// redisConn is the resolved connection settings: the pool key is built
// from all of them.
type redisConn struct {
	addrs      []string
	username   string
	password   string
	db         int
	masterName string
	tls        bool
	poolSize   int
	timeout    time.Duration
}

// key identifies a client; it holds a hash of the password, not the
// password.
func (c *redisConn) key() string {
	pw := sha256.Sum256([]byte(c.password))
	return fmt.Sprintf("redis|addrs=%q|db=%d|user=%q|password=%s|tls=%t|master=%q|pool=%d|timeout=%s",
		c.addrs, c.db, c.username, hex.EncodeToString(pw[:]), c.tls, c.masterName, c.poolSize, c.timeout)
}

// Provision resolves placeholders, sets defaults and attaches the store to
// a shared client. A Redis that does not answer is logged, not fatal: the
// handler's `fail` policy applies until it is back.
func (s *RedisStore) Provision(ctx caddy.Context) error {
	return s.provision(ctx.Logger())
}

func (s *RedisStore) provision(logger *zap.Logger) error {
	s.logger = logger
	if s.Prefix == "" {
		s.Prefix = defaultKeyPrefix
	}
	if s.Timeout == 0 {
		s.Timeout = caddy.Duration(defaultRedisTimeout)
	}
	s.timeout = time.Duration(s.Timeout)
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

	s.poolKey = conn.key()
	val, loaded, err := redisPool.LoadOrNew(s.poolKey, func() (caddy.Destructor, error) {
		return newRedisClient(conn, s.logger), nil
	})
	if err != nil {
		return fmt.Errorf("redis store: %v", err)
	}
	s.client = val.(*redisClient)
	if !loaded {
		s.client.checkReachable(min(s.timeout, redisPingTimeoutMax))
	}
	return nil
}

// resolve resolves placeholders and merges the URL with the fields.
func (s *RedisStore) resolve() (*redisConn, error) {
	repl := caddy.NewReplacer()
	conn := &redisConn{
		username:   repl.ReplaceKnown(s.Username, ""),
		password:   repl.ReplaceKnown(s.Password, ""),
		db:         s.DB,
		masterName: repl.ReplaceKnown(s.MasterName, ""),
		tls:        s.TLS,
		poolSize:   s.PoolSize,
		timeout:    s.timeout,
	}
	if s.URL != "" {
		u := repl.ReplaceKnown(s.URL, "")
		if !strings.HasPrefix(u, "redis://") && !strings.HasPrefix(u, "rediss://") {
			return nil, errors.New("redis store: url must start with redis:// or rediss://")
		}
		if strings.ContainsRune(u, '?') {
			return nil, errors.New("redis store: url query parameters are not supported: use the store's subdirectives")
		}
		opts, err := redis.ParseURL(u)
		if err != nil {
			// the error may quote the URL, which may hold a password
			return nil, errors.New("redis store: invalid url: want redis[s]://[user[:password]@]host[:port][/db] without query parameters")
		}
		conn.addrs = append(conn.addrs, opts.Addr)
		if conn.username == "" {
			conn.username = opts.Username
		}
		if conn.password == "" {
			conn.password = opts.Password
		}
		if conn.db == 0 {
			conn.db = opts.DB
		}
		conn.tls = conn.tls || opts.TLSConfig != nil
	}
	for _, a := range s.Addresses {
		a = repl.ReplaceKnown(a, "")
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, fmt.Errorf("redis store: invalid address %q: want host:port", a)
		}
		conn.addrs = append(conn.addrs, a)
	}
	if len(conn.addrs) == 0 {
		conn.addrs = []string{defaultRedisAddress}
	}
	return conn, nil
}

// Validate checks the configuration.
func (s *RedisStore) Validate() error {
	if s.DB < 0 {
		return fmt.Errorf("redis store: db must not be negative, got %d", s.DB)
	}
	if s.PoolSize < 0 {
		return fmt.Errorf("redis store: pool_size must not be negative, got %d", s.PoolSize)
	}
	if s.Timeout < 0 {
		return fmt.Errorf("redis store: timeout must not be negative, got %s", time.Duration(s.Timeout))
	}
	if strings.ContainsAny(s.Prefix, " \t\r\n") {
		return fmt.Errorf("redis store: key_prefix must not contain white space, got %q", s.Prefix)
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
func (s *RedisStore) Cleanup() error {
	if s.client == nil || s.released {
		return nil
	}
	s.released = true
	_, err := redisPool.Delete(s.poolKey)
	return err
}

// KeyPrefix returns the first part of every key.
func (s *RedisStore) KeyPrefix() string { return s.Prefix }

// Values stored under a key.
//
// A completed key holds the encoded record (encodeRecord), whose first byte
// is the record version, 1. An in-flight key holds the two bytes 0x00 0x01
// (in-flight marker, version 1) followed by the owner token. Anything else
// is corrupt or foreign: it is logged and overwritten by the next claim.
//
// The scripts take the key as KEYS[1] and durations in milliseconds.

var (
	// ARGV: owner, lease.
	// Returns -1 when claimed, -2 when claimed over a corrupt value, the
	// PTTL (>= 0) of an in-flight key, or the record of a completed key.
	redisClaimScript = redis.NewScript(luaKeyState + `
local r, foreign = keyState(KEYS[1], ARGV[1], ARGV[2])
if r then
	return r
end
redis.call('SET', KEYS[1], '\0\1' .. ARGV[1], 'PX', ARGV[2])
if foreign then
	return -2
end
return -1
`)

	// ARGV: owner, lease, the corrupt value seen.
	// Claims a key whose value Lua could not tell from a record but Go
	// could not decode, if it still holds that value. Returns 1 when
	// claimed, 0 otherwise.
	redisReclaimScript = redis.NewScript(`
if redis.pcall('GET', KEYS[1]) == ARGV[3] then
	redis.call('SET', KEYS[1], '\0\1' .. ARGV[1], 'PX', ARGV[2])
	return 1
end
return 0
`)

	// ARGV: owner, record, ttl. Returns 1 when completed (or already
	// completed with this record, a retried call), 0 when not the owner.
	redisCompleteScript = redis.NewScript(`
local v = redis.pcall('GET', KEYS[1])
if v == '\0\1' .. ARGV[1] then
	redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
	return 1
end
if v == ARGV[2] then
	return 1
end
return 0
`)

	// ARGV: owner. Returns 1 when released, 0 when not the owner.
	redisReleaseScript = redis.NewScript(`
if redis.pcall('GET', KEYS[1]) == '\0\1' .. ARGV[1] then
	redis.call('DEL', KEYS[1])
	return 1
end
return 0
`)

	// ARGV: owner, lease. Returns 1 when renewed, 0 when not the owner.
	redisRenewScript = redis.NewScript(`
if redis.pcall('GET', KEYS[1]) == '\0\1' .. ARGV[1] then
	redis.call('PEXPIRE', KEYS[1], ARGV[2])
	return 1
end
return 0
`)
)

// luaKeyState is the Lua every claim starts with: keyState(key, owner,
// lease) returns the record of a completed key, the PTTL of a key in flight
// for another owner, or -1 for a key in flight for this owner (its lease
// renewed); else nil, and true when the key held a corrupt or foreign value.
const luaKeyState = `
local function keyState(key, owner, lease)
	local v = redis.pcall('GET', key)
	if type(v) == 'table' then
		v = '' -- a key of another type: foreign
	end
	if not v then
		return nil, false
	end
	local b = string.byte(v, 1)
	if b == 1 and string.len(v) > 36 then
		return v
	end
	if b == 0 and string.byte(v, 2) == 1 then
		if string.sub(v, 3) == owner then
			redis.call('PEXPIRE', key, lease)
			return -1
		end
		local t = redis.call('PTTL', key)
		if t >= 0 then
			return t
		end
	end
	return nil, true
end
`

// errRedisBreakerOpen is returned while the breaker is open.
var errRedisBreakerOpen = errors.New("redis store unreachable (circuit breaker open)")

// Claim implements Store in one round trip.
func (s *RedisStore) Claim(ctx context.Context, key, owner string, lease time.Duration) (ClaimResult, error) {
	leaseMs := redisMillis(lease)
	v, err := s.run(ctx, "claim", redisClaimScript, key, owner, leaseMs)
	if err != nil {
		return ClaimResult{}, err
	}
	switch v := v.(type) {
	case int64:
		switch {
		case v == -1:
			s.client.claims.Add(1)
			return ClaimResult{State: Claimed}, nil
		case v == -2:
			s.logger.Warn("corrupt or foreign value under an idempotency key: treated as absent and claimed", zap.String("key", key))
			s.client.claims.Add(1)
			return ClaimResult{State: Claimed}, nil
		case v >= 0:
			return ClaimResult{State: InFlight, LeaseLeft: time.Duration(v) * time.Millisecond}, nil
		}
	case string:
		rec := []byte(v)
		if _, err := decodeRecord(rec); err == nil {
			return ClaimResult{State: Completed, Record: rec}, nil
		}
		s.logger.Warn("corrupt or foreign value under an idempotency key: treated as absent", zap.String("key", key))
		ok, err := s.run(ctx, "claim", redisReclaimScript, key, owner, leaseMs, v)
		if err != nil {
			return ClaimResult{}, err
		}
		if ok == int64(1) {
			s.client.claims.Add(1)
			return ClaimResult{State: Claimed}, nil
		}
		// someone else changed the key meanwhile: it is theirs
		return ClaimResult{State: InFlight}, nil
	}
	return ClaimResult{}, fmt.Errorf("redis store: claim: unexpected reply %T", v)
}

// Complete implements Store.
func (s *RedisStore) Complete(ctx context.Context, key, owner string, record []byte, ttl time.Duration) error {
	defer s.client.claimDone()
	return s.ownerOp(ctx, "complete", redisCompleteScript, key, owner, record, redisMillis(ttl))
}

// Release implements Store.
func (s *RedisStore) Release(ctx context.Context, key, owner string) error {
	defer s.client.claimDone()
	return s.ownerOp(ctx, "release", redisReleaseScript, key, owner)
}

// Renew implements Store.
func (s *RedisStore) Renew(ctx context.Context, key, owner string, lease time.Duration) error {
	return s.ownerOp(ctx, "renew", redisRenewScript, key, owner, redisMillis(lease))
}

// ownerOp runs an owner-checked script that answers 1 or 0.
func (s *RedisStore) ownerOp(ctx context.Context, op string, script *redis.Script, key string, args ...any) error {
	v, err := s.run(ctx, op, script, key, args...)
	if err != nil {
		return err
	}
	if v == int64(1) {
		return nil
	}
	return ErrNotOwner
}

// run runs a script on key within the store's timeout, through the
// breaker. EVALSHA falls back to EVAL when Redis does not know the script.
func (s *RedisStore) run(ctx context.Context, op string, script *redis.Script, key string, args ...any) (any, error) {
	return s.runKeys(ctx, op, script, []string{key}, args...)
}

// runKeys is run with several keys.
func (s *RedisStore) runKeys(ctx context.Context, op string, script *redis.Script, keys []string, args ...any) (any, error) {
	c := s.client
	if c == nil {
		return nil, fmt.Errorf("redis store: %s: store is not provisioned", op)
	}
	if !c.breaker.allow() {
		return nil, errRedisBreakerOpen
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	v, err := c.batch.run(cctx, script, keys, args)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			// the caller is still there: Redis failed or timed out
			c.breaker.failure()
		}
		return nil, fmt.Errorf("redis store: %s: %w", op, err)
	}
	c.breaker.success()
	return v, nil
}

// redisMillis converts a duration to whole milliseconds, at least 1.
func redisMillis(d time.Duration) string {
	return strconv.FormatInt(max(d.Milliseconds(), 1), 10)
}

// redisClient is a go-redis client shared across config reloads, with the
// breaker that guards it.
type redisClient struct {
	client  redis.UniversalClient
	batch   *redisBatcher // the request path's script calls go through it
	breaker *breaker
	logger  *zap.Logger

	// claims counts the keys claimed through this client and not yet
	// completed or released, so a client whose last configuration was
	// cleaned up stays open for the requests that configuration is still
	// finishing.
	claims    atomic.Int64
	closing   atomic.Bool
	closeOnce sync.Once
	closeErr  error
	mu        sync.Mutex
	drain     *time.Timer // guarded by mu
}

// redisDrainMax bounds how long a client outlives its last configuration
// while claims taken through it are outstanding.
const redisDrainMax = 2 * time.Minute

func newRedisClient(conn *redisConn, logger *zap.Logger) *redisClient {
	opts := &redis.UniversalOptions{
		Addrs:                 conn.addrs,
		ClientName:            redisClientName,
		DB:                    conn.db,
		Username:              conn.username,
		Password:              conn.password,
		MasterName:            conn.masterName,
		PoolSize:              conn.poolSize,
		DialTimeout:           conn.timeout,
		ReadTimeout:           conn.timeout,
		WriteTimeout:          conn.timeout,
		PoolTimeout:           conn.timeout,
		ContextTimeoutEnabled: true,
		MaxRetries:            1,
		// RESP2: the store needs no push notifications, and reading
		// replies then skips looking for them
		Protocol:      2,
		DialerRetries: 1,
		// no CLIENT MAINT_NOTIFICATIONS handshake: plain Redis rejects it
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
	if conn.tls {
		// the server name comes from each node's address
		opts.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	c := &redisClient{client: redis.NewUniversalClient(opts), logger: logger}
	// the requests' script calls go out in shared pipelines
	c.batch = newRedisBatcher(c.client, conn.timeout)
	c.breaker = newBreaker(func(ctx context.Context) error {
		return c.client.Ping(ctx).Err()
	}, conn.timeout, logger)
	return c
}

// checkReachable pings Redis once; a failure is logged and opens the
// breaker, so requests do not wait for a Redis that is down.
func (c *redisClient) checkReachable(timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := c.client.Ping(ctx).Err(); err != nil {
		c.logger.Warn("redis store unreachable at provision time; requests follow the handler's fail policy until it answers",
			zap.Error(err))
		c.breaker.open()
	}
}

// Destruct stops the breaker's probe when the last configuration using the
// client is cleaned up, and closes the client at once, or when the claims
// still outstanding are completed or released (at most redisDrainMax later).
func (c *redisClient) Destruct() error {
	c.breaker.close()
	c.closing.Store(true)
	if c.claims.Load() <= 0 {
		c.close()
		return c.closeErr
	}
	c.mu.Lock()
	c.drain = time.AfterFunc(redisDrainMax, c.close)
	c.mu.Unlock()
	if c.claims.Load() <= 0 { // the last claim ended meanwhile
		c.close()
	}
	return nil
}

// claimDone records the end of a claim: completed or released.
func (c *redisClient) claimDone() {
	if c.claims.Add(-1) <= 0 && c.closing.Load() {
		c.close()
	}
}

func (c *redisClient) close() {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		if c.drain != nil {
			c.drain.Stop()
		}
		c.mu.Unlock()
		c.batch.close()
		c.closeErr = c.client.Close()
	})
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
//	}
func (s *RedisStore) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // "redis"
	if d.NextArg() {
		u := d.Val()
		if !strings.Contains(u, "{") && !strings.HasPrefix(u, "redis://") && !strings.HasPrefix(u, "rediss://") {
			return d.Errf("invalid redis url '%s': want redis:// or rediss://", redisRedactURL(u))
		}
		s.URL = u
		if d.NextArg() {
			return d.ArgErr()
		}
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		switch d.Val() {
		case "address":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return d.ArgErr()
			}
			for _, a := range args {
				if _, _, err := net.SplitHostPort(a); err != nil && !strings.Contains(a, "{") {
					return d.Errf("invalid redis address '%s': want host:port", a)
				}
			}
			s.Addresses = append(s.Addresses, args...)
		case "username":
			if err := redisOneArg(d, &s.Username); err != nil {
				return err
			}
		case "password":
			if err := redisOneArg(d, &s.Password); err != nil {
				return err
			}
		case "master_name":
			if err := redisOneArg(d, &s.MasterName); err != nil {
				return err
			}
		case "key_prefix":
			if err := redisOneArg(d, &s.Prefix); err != nil {
				return err
			}
		case "db", "pool_size":
			name := d.Val()
			var v string
			if err := redisOneArg(d, &v); err != nil {
				return err
			}
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || (name == "pool_size" && n == 0) {
				return d.Errf("invalid %s '%s': want a non-negative integer", name, v)
			}
			if name == "db" {
				s.DB = n
			} else {
				s.PoolSize = n
			}
		case "tls":
			if d.NextArg() {
				return d.ArgErr()
			}
			s.TLS = true
		case "timeout":
			var v string
			if err := redisOneArg(d, &v); err != nil {
				return err
			}
			dur, err := parsePositiveDuration(v)
			if err != nil {
				return d.Errf("invalid timeout '%s': %v", v, err)
			}
			s.Timeout = dur
		default:
			return d.Errf("unrecognized redis store subdirective '%s'", d.Val())
		}
	}
	return nil
}

// redisOneArg reads exactly one argument into dst.
func redisOneArg(d *caddyfile.Dispenser, dst *string) error {
	if !d.NextArg() {
		return d.ArgErr()
	}
	*dst = d.Val()
	if d.NextArg() {
		return d.ArgErr()
	}
	return nil
}

// redisRedactURL hides the password of a URL for error messages.
func redisRedactURL(u string) string {
	if at := strings.LastIndexByte(u, '@'); at >= 0 {
		return "…@" + u[at+1:]
	}
	return u
}

// Interface guards
var (
	_ Store                 = (*RedisStore)(nil)
	_ caddy.Provisioner     = (*RedisStore)(nil)
	_ caddy.Validator       = (*RedisStore)(nil)
	_ caddy.CleanerUpper    = (*RedisStore)(nil)
	_ caddyfile.Unmarshaler = (*RedisStore)(nil)
	_ caddy.Destructor      = (*redisClient)(nil)
)
