package redisstore

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
	"syscall"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"go.uber.org/zap"
)

// The connection to Redis: settings resolved from the store's
// configuration, and the client that every configuration with those
// settings shares across reloads.

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

// resolve resolves placeholders and merges the URL with the fields.
func (s *Store) resolve() (*redisConn, error) {
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

// redisClient is a go-redis client shared across config reloads, with its
// nodes, each guarded by a breaker (node.go).
type redisClient struct {
	client redis.UniversalClient
	nodes  *redisNodes    // the request path's script calls go through their batchers
	recent *recentRecords // store_redis_recent.go
	health *redisHealth   // store_redis_health.go
	logger *zap.Logger

	// claims counts the keys claimed through this client and not yet
	// completed or released, so a client whose last configuration was
	// cleaned up stays open for the requests that configuration is still
	// finishing.
	claims atomic.Int64
	// setGetUnsupported is set once Redis rejects SET with NX and GET
	// (Redis < 7.0): claims then use the claim script alone.
	setGetUnsupported atomic.Bool
	closing           atomic.Bool
	closeOnce         sync.Once
	closeErr          error
	mu                sync.Mutex
	drain             *time.Timer // guarded by mu
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
	opts.Dialer = redisDialer(conn.timeout, opts.TLSConfig)
	node := conn.addrs[0]
	if conn.masterName != "" {
		node = "master " + conn.masterName
	}
	health := newRedisHealth(node, conn.timeout, logger)
	opts.OnConnect = health.onConnect
	c := &redisClient{client: redis.NewUniversalClient(opts), recent: newRecentRecords(), health: health, logger: logger}
	health.start(c.client)
	// the requests' script calls go out in shared pipelines, per node
	c.nodes = newRedisNodes(c.client, node, conn.timeout, logger)
	return c
}

// redisDialer dials a node as go-redis's own dialer does (the same TCP
// keep-alive, TLS when configured), and hands go-redis a connection whose
// health check is free while the connection is busy. go-redis's pool checks
// a connection each time it hands one out, once per pipeline the batcher
// sends: a non-blocking MSG_PEEK read of the socket, one system call of the
// four a batch costs Caddy (BENCHMARKS.md). What the check finds is a
// connection Redis closed (its `timeout`, a proxy's idle limit, a restart),
// which go-redis then drops instead of failing a request with it. A
// connection that read a reply less than redisBusy ago was not idle long
// enough for an idle limit (Redis's is a second at the least), and a Redis
// that went away in that moment is not back yet: its check is skipped. Any
// other connection is checked as before.
func redisDialer(timeout time.Duration, tlsConfig *tls.Config) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		d := &net.Dialer{Timeout: timeout, KeepAliveConfig: redisKeepAlive}
		if tlsConfig != nil {
			// go-redis does not inspect a *tls.Conn
			return (&tls.Dialer{NetDialer: d, Config: tlsConfig}).DialContext(ctx, network, addr)
		}
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		sc, ok := c.(syscall.Conn)
		if !ok {
			return c, nil
		}
		raw, err := sc.SyscallConn()
		if err != nil {
			return c, nil
		}
		return &redisBusyConn{Conn: c, raw: raw}, nil
	}
}

// redisKeepAlive is go-redis's TCP keep-alive for the connections it dials.
var redisKeepAlive = net.KeepAliveConfig{Enable: true, Idle: 30 * time.Second, Interval: 5 * time.Second, Count: 3}

// redisBusy is how recently a connection must have read a reply for its
// health check to be skipped.
const redisBusy = 10 * time.Millisecond

// redisEpoch is the origin of redisBusyConn's monotonic times.
var redisEpoch = time.Now()

// redisBusyConn is a connection that knows when it last read a reply
// (see redisDialer).
type redisBusyConn struct {
	net.Conn
	raw      syscall.RawConn
	lastRead atomic.Int64 // since redisEpoch
}

func (c *redisBusyConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.lastRead.Store(int64(time.Since(redisEpoch)))
	}
	return n, err
}

// SyscallConn is what go-redis's health check reads the socket through.
func (c *redisBusyConn) SyscallConn() (syscall.RawConn, error) { return redisBusyRaw{c}, nil }

// redisBusyRaw skips a read of the socket (the check's) while its
// connection is busy.
type redisBusyRaw struct{ c *redisBusyConn }

func (r redisBusyRaw) Read(f func(fd uintptr) bool) error {
	if time.Since(redisEpoch)-time.Duration(r.c.lastRead.Load()) < redisBusy {
		return nil
	}
	return r.c.raw.Read(f)
}

func (r redisBusyRaw) Write(f func(fd uintptr) bool) error { return r.c.raw.Write(f) }

func (r redisBusyRaw) Control(f func(fd uintptr)) error { return r.c.raw.Control(f) }

// checkReachable pings Redis once; a failure is logged and opens the
// breaker, so requests do not wait for a Redis that is down.
func (c *redisClient) checkReachable(timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := c.client.Ping(ctx).Err(); err != nil {
		c.logger.Warn("redis store unreachable at provision time; requests follow the handler's fail policy until it answers",
			zap.Error(err))
		c.nodes.unreachable()
	}
}

// callable returns the node that serves key, or why no call may be made:
// the store is not provisioned, or the node's breaker is open. The
// follow-up then (nil for none) that would ride with the call gets that
// error too: it is not sent either.
func (s *Store) callable(ctx context.Context, op, key string, then *redisThen) (*redisNode, error) {
	c := s.client
	var n *redisNode
	var err error
	if c == nil {
		err = fmt.Errorf("redis store: %s: store is not provisioned", op)
	} else if n, err = c.nodes.forKey(ctx, key); err == nil && !n.breaker.allow() {
		err = errRedisBreakerOpen
	}
	if err != nil {
		if then != nil {
			then.err = err
		}
		return nil, fmt.Errorf("redis store: %s: %w", op, err)
	}
	return n, nil
}

// settle tells node's breaker how a call made for ctx went, and returns
// its error with the operation named. An error Redis answered (a reply
// such as WRONGTYPE or CLUSTERDOWN) is an answer: the node is up.
func (s *Store) settle(ctx context.Context, n *redisNode, op string, err error) error {
	if err == nil || isRedisReply(err) {
		n.breaker.success()
	} else if ctx.Err() == nil {
		// the caller is still there: the node failed or timed out
		n.breaker.failure()
	}
	if err == nil {
		return nil
	}
	return fmt.Errorf("redis store: %s: %w", op, err)
}

// Destruct stops the breakers' probes when the last configuration using the
// client is cleaned up, and closes the client at once, or when the claims
// still outstanding are completed or released (at most redisDrainMax later).
func (c *redisClient) Destruct() error {
	c.nodes.stopProbes()
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
func (c *redisClient) claimDone() { c.claimsDone(1) }

// claimsDone records the end of n claims.
func (c *redisClient) claimsDone(n int64) {
	if c.claims.Add(-n) <= 0 && c.closing.Load() {
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
		c.nodes.close()
		c.health.close()
		c.closeErr = c.client.Close()
	})
}

// redisMillis converts a duration to whole milliseconds, at least 1.
func redisMillis(d time.Duration) string {
	return strconv.FormatInt(max(d.Milliseconds(), 1), 10)
}

// millisArg is a duration formatted by redisMillis, boxed as a command's
// argument.
type millisArg struct {
	d time.Duration
	v any
}

// millisArgs keeps the durations that commands were given lately, by a hash
// of the duration: a store is called with a few (its handlers' leases and
// ttls), each formatted and boxed once rather than for every call (two
// allocations each).
var millisArgs [16]atomic.Pointer[millisArg]

// redisMillisArg is redisMillis(d) as a command's argument.
func redisMillisArg(d time.Duration) any {
	slot := &millisArgs[(uint64(d)*0x9E3779B97F4A7C15)>>60]
	if p := slot.Load(); p != nil && p.d == d {
		return p.v
	}
	p := &millisArg{d: d, v: redisMillis(d)}
	slot.Store(p)
	return p.v
}

// redisRedactURL hides the password of a URL for error messages.
func redisRedactURL(u string) string {
	if at := strings.LastIndexByte(u, '@'); at >= 0 {
		return "…@" + u[at+1:]
	}
	return u
}

// Interface guards
var _ caddy.Destructor = (*redisClient)(nil)
