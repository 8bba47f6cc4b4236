package webhookidempotency

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// InboxConfig turns the handler into an inbox (SPEC §7): a verified, new
// delivery is stored in a Redis Stream and answered at once; background
// workers deliver it to `deliver_to`, retry failures on a schedule and move
// events that cannot be delivered to a dead-letter stream. It requires the
// redis store.
type InboxConfig struct {
	// The URL every event is delivered to, e.g.
	// `http://app:3000/webhooks/stripe`. Placeholders such as `{env.APP}`
	// are resolved at provision time. Required.
	DeliverTo string `json:"deliver_to,omitempty"`

	// The status that answers an accepted event (and its duplicates),
	// 200-299. Default: 202.
	Respond int `json:"respond,omitempty"`

	// The waits between attempts after the first, immediate one: one
	// retry per entry. Default: `30s 1m 5m 30m 2h 12h`.
	Retries []caddy.Duration `json:"retries,omitempty"`

	// How much each wait varies at random, as a percentage (`10%`, `0%`).
	// Default: `10%`.
	Jitter string `json:"jitter,omitempty"`

	// The bound of one delivery attempt; an attempt that takes longer is
	// retried. Default: 10s.
	Timeout caddy.Duration `json:"timeout,omitempty"`

	// The number of deliveries in progress at once, per Caddy instance.
	// Default: 4.
	Concurrency int `json:"concurrency,omitempty"`
}

// Defaults of SPEC §7.
const (
	defaultInboxRespond     = http.StatusAccepted
	defaultInboxJitter      = "10%"
	defaultInboxTimeout     = 10 * time.Second
	defaultInboxConcurrency = 4
)

var defaultInboxRetries = []time.Duration{
	30 * time.Second, time.Minute, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 12 * time.Hour,
}

// Inbox timing.
var (
	// inboxFetchBlock is how long one read of the stream blocks; it bounds
	// how long stopping waits for an idle reader.
	inboxFetchBlock = 250 * time.Millisecond
	// inboxReclaimAfter is how many delivery timeouts an event may stay
	// unacknowledged before another worker reclaims it.
	inboxReclaimAfter = 3
)

// Stream entry fields of an event.
const (
	fieldSource     = "source"
	fieldKey        = "key"       // the resolved key value (Idempotency-Key)
	fieldStoreKey   = "store_key" // <key_prefix>:<source>:<value>
	fieldMethod     = "method"
	fieldURI        = "uri"
	fieldHost       = "host"
	fieldProto      = "proto"  // http or https
	fieldRemote     = "remote" // the client's IP
	fieldHeaders    = "headers"
	fieldBody       = "body"
	fieldReceived   = "received" // unix milliseconds
	fieldAttempts   = "attempts" // attempts made so far
	fieldBase       = "base"     // attempts made before the last redelivery
	fieldLastStatus = "last_status"
	fieldLastError  = "last_error"
	fieldFailed     = "failed" // unix milliseconds, dead-lettered events
)

// inboxGroup is the consumer group of every inbox stream.
const inboxGroup = "webhook_idempotency"

// inbox is the runtime of one handler's inbox: acceptance on the request
// path, and the workers that deliver.
type inbox struct {
	source      string
	deliverTo   string
	respond     int
	retries     []time.Duration
	jitter      float64
	timeout     time.Duration
	concurrency int
	ttl         time.Duration // the handler's ttl
	acceptTTL   time.Duration // ttl of an accepted key: ttl plus the retry horizon

	store    *RedisStore
	rc       *redisClient // a reference of our own, held until stop
	cluster  bool
	stream   string
	retry    string
	dead     string
	consumer string

	http    *http.Client
	logger  *zap.Logger
	metrics *inboxMetrics

	mu      sync.Mutex
	started bool
	stopped bool
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	slots   chan struct{}
	warned  time.Time // last background error logged
}

// newInbox resolves the configuration; workers start with start.
func newInbox(cfg *InboxConfig, h *Handler) (*inbox, error) {
	rs, ok := h.store.(*RedisStore)
	if !ok {
		return nil, errors.New("inbox mode requires the redis store: an accepted event must survive a restart and be shared by every Caddy instance (configure 'store redis')")
	}
	repl := caddy.NewReplacer()
	ib := &inbox{
		source:      h.Source,
		deliverTo:   repl.ReplaceKnown(cfg.DeliverTo, ""),
		respond:     cfg.Respond,
		timeout:     time.Duration(cfg.Timeout),
		concurrency: cfg.Concurrency,
		ttl:         time.Duration(h.TTL),
		store:       rs,
		logger:      h.logger.With(zap.String("source", h.Source)),
		metrics:     newInboxMetrics(h.Source),
	}
	if ib.respond == 0 {
		ib.respond = defaultInboxRespond
	}
	if ib.respond < 200 || ib.respond > 299 {
		return nil, fmt.Errorf("inbox respond must be a 2xx status, got %d", ib.respond)
	}
	u, err := url.Parse(ib.deliverTo)
	if ib.deliverTo == "" {
		return nil, errors.New("inbox needs deliver_to: the URL events are delivered to")
	}
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return nil, fmt.Errorf("inbox deliver_to must be an http:// or https:// URL with a host, got %q", ib.deliverTo)
	}
	ib.retries = defaultInboxRetries
	if len(cfg.Retries) > 0 {
		ib.retries = make([]time.Duration, len(cfg.Retries))
		for i, d := range cfg.Retries {
			if d <= 0 {
				return nil, fmt.Errorf("inbox retries must be positive durations, got %s", time.Duration(d))
			}
			ib.retries[i] = time.Duration(d)
		}
	}
	jitter := cfg.Jitter
	if jitter == "" {
		jitter = defaultInboxJitter
	}
	if ib.jitter, err = parsePercent(jitter); err != nil {
		return nil, fmt.Errorf("inbox jitter: %v", err)
	}
	if ib.timeout == 0 {
		ib.timeout = defaultInboxTimeout
	}
	if ib.timeout < 0 {
		return nil, fmt.Errorf("inbox timeout must be positive, got %s", ib.timeout)
	}
	if ib.concurrency == 0 {
		ib.concurrency = defaultInboxConcurrency
	}
	if ib.concurrency < 0 {
		return nil, fmt.Errorf("inbox concurrency must be positive, got %d", ib.concurrency)
	}
	// an accepted key outlives every retry of its event
	horizon := time.Duration(len(ib.retries)+1) * ib.timeout
	for _, d := range ib.retries {
		horizon += time.Duration(float64(d) * (1 + ib.jitter))
	}
	ib.acceptTTL = ib.ttl + horizon

	// one slot for all of a source's keys, so Redis Cluster runs every
	// inbox script on one node
	tag := "{" + rs.Prefix + ":" + h.Source + "}"
	ib.stream, ib.retry, ib.dead = tag+":inbox", tag+":retry", tag+":dead"

	// a reference of our own: the store may be cleaned up before the
	// workers have finished their deliveries
	val, _, err := redisPool.LoadOrNew(rs.poolKey, func() (caddy.Destructor, error) {
		return nil, errors.New("redis client gone")
	})
	if err != nil {
		return nil, fmt.Errorf("inbox: %v", err)
	}
	ib.rc = val.(*redisClient)
	_, ib.cluster = ib.rc.client.(*redis.ClusterClient)

	ib.http = &http.Client{
		Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: ib.timeout, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConnsPerHost: ib.concurrency,
			IdleConnTimeout:     90 * time.Second,
			TLSHandshakeTimeout: ib.timeout,
			ForceAttemptHTTP2:   true,
		},
		// a redirect is an answer: it is not followed
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return ib, nil
}

// parsePercent parses `10%` (or `10`) into 0.10.
func parsePercent(s string) (float64, error) {
	v, err := strconv.ParseFloat(strings.TrimSuffix(s, "%"), 64)
	if err != nil || v < 0 || v > 100 || math.IsNaN(v) {
		return 0, fmt.Errorf("want a percentage from 0%% to 100%%, got %q", s)
	}
	return v / 100, nil
}

// Acceptance.

// Lua shared by the inbox scripts: fields(entry, skip) copies a stream
// entry's field list without the fields named in skip.
const luaFields = `
local function fields(f, skip)
	local out = {}
	for i = 1, #f, 2 do
		if not skip[f[i]] then
			out[#out+1] = f[i]
			out[#out+1] = f[i+1]
		end
	end
	return out
end
local function add(out, ...)
	local a = {...}
	for i = 1, #a do out[#out+1] = a[i] end
	return out
end
`

var (
	// KEYS: idempotency key, stream. ARGV: record, ttl, the event's
	// fields and values. Claims the key and stores the event in one step.
	// Returns the record of a completed key, the PTTL of an in-flight key,
	// or {id} of the stored event.
	inboxAcceptScript = redis.NewScript(luaKeyState + `
local r = keyState(KEYS[1], '', 0)
if r then
	return r
end
local id = redis.call('XADD', KEYS[2], '*', unpack(ARGV, 3))
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {id}
`)

	// KEYS: stream [, idempotency key]. ARGV: group, id, ttl. A delivered
	// event leaves the stream, and its key (when given) is kept for ttl.
	inboxAckScript = redis.NewScript(`
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
if KEYS[2] then
	redis.call('PEXPIRE', KEYS[2], ARGV[3])
end
return redis.call('XDEL', KEYS[1], ARGV[2])
`)

	// KEYS: stream, retry set. ARGV: group, id, due (ms), member. The event
	// stays in the stream, acknowledged, until it is due.
	inboxScheduleScript = redis.NewScript(`
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[4])
return redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
`)

	// KEYS: stream, retry set. ARGV: now (ms), limit. Moves due events back
	// into the stream as new entries carrying their attempt count.
	inboxMoveScript = redis.NewScript(luaFields + `
local skip = {attempts = true, last_status = true, last_error = true}
local due = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
for _, m in ipairs(due) do
	local id, attempts, status, err = string.match(m, '^([^\n]*)\n([^\n]*)\n([^\n]*)\n(.*)$')
	if id then
		local e = redis.call('XRANGE', KEYS[1], id, id)
		if e[1] then
			local out = add(fields(e[1][2], skip), 'attempts', attempts, 'last_status', status, 'last_error', err)
			redis.call('XADD', KEYS[1], '*', unpack(out))
			redis.call('XDEL', KEYS[1], id)
		end
	end
	redis.call('ZREM', KEYS[2], m)
end
return #due
`)

	// KEYS: stream, dead stream. ARGV: group, id, attempts, status, error,
	// failed (ms). Moves an event to the dead-letter stream.
	inboxDeadScript = redis.NewScript(luaFields + `
local skip = {attempts = true, last_status = true, last_error = true, failed = true}
local e = redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[2])
if e[1] then
	local out = add(fields(e[1][2], skip), 'attempts', ARGV[3], 'last_status', ARGV[4], 'last_error', ARGV[5], 'failed', ARGV[6])
	redis.call('XADD', KEYS[2], '*', unpack(out))
end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
return redis.call('XDEL', KEYS[1], ARGV[2])
`)

	// KEYS: dead stream, stream. ARGV: id. Moves a dead event back into
	// the stream with a fresh retry schedule; returns its new id, or false
	// when there is no such dead event.
	inboxRedeliverScript = redis.NewScript(luaFields + `
local e = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])
if not e[1] then
	return false
end
local f = e[1][2]
local attempts = '0'
for i = 1, #f, 2 do
	if f[i] == 'attempts' then attempts = f[i+1] end
end
local out = add(fields(f, {base = true, failed = true}), 'base', attempts)
local id = redis.call('XADD', KEYS[2], '*', unpack(out))
redis.call('XDEL', KEYS[1], ARGV[1])
return id
`)
)

// acceptResult is what accept found or did.
type acceptResult struct {
	ClaimResult        // Claimed: the event was stored
	id          string // the stream id of a stored event
}

// accept stores a new event and claims its key as accepted, in one round
// trip; or reports the key's state. With Redis Cluster the key and the
// stream live on different nodes: the key is claimed, the event stored,
// and the key then completed.
func (ib *inbox) accept(ctx context.Context, key, owner string, record []byte, event []any) (acceptResult, error) {
	s := ib.store
	if ib.cluster {
		return ib.acceptCluster(ctx, key, owner, record, event)
	}
	args := make([]any, 0, 2+len(event))
	args = append(args, record, redisMillis(ib.acceptTTL))
	args = append(args, event...)
	v, err := s.runKeys(ctx, "claim", inboxAcceptScript, []string{key, ib.stream}, args...)
	if err != nil {
		return acceptResult{}, err
	}
	switch v := v.(type) {
	case []any:
		if len(v) == 1 {
			id, _ := v[0].(string)
			return acceptResult{ClaimResult: ClaimResult{State: Claimed}, id: id}, nil
		}
	case int64:
		return acceptResult{ClaimResult: ClaimResult{State: InFlight, LeaseLeft: time.Duration(v) * time.Millisecond}}, nil
	case string:
		return acceptResult{ClaimResult: ClaimResult{State: Completed, Record: []byte(v)}}, nil
	}
	return acceptResult{}, fmt.Errorf("redis store: accept: unexpected reply %T", v)
}

func (ib *inbox) acceptCluster(ctx context.Context, key, owner string, record []byte, event []any) (acceptResult, error) {
	s := ib.store
	res, err := s.Claim(ctx, key, owner, ib.timeout+defaultRedisTimeout)
	if err != nil || res.State != Claimed {
		return acceptResult{ClaimResult: res}, err
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	id, err := ib.rc.client.XAdd(cctx, &redis.XAddArgs{Stream: ib.stream, Values: event}).Result()
	cancel()
	if err != nil {
		_ = s.Release(completionCtx, key, owner)
		return acceptResult{}, fmt.Errorf("redis store: storing event: %w", err)
	}
	if err := s.Complete(completionCtx, key, owner, record, ib.acceptTTL); err != nil {
		// the event is stored, so it is accepted; only a duplicate arriving
		// after the lease could be accepted again
		ib.logger.Warn("recording an accepted event's key failed; a duplicate may be accepted again",
			zap.String("key", key), zap.Error(err))
	}
	return acceptResult{ClaimResult: res, id: id}, nil
}

// eventFields builds the stream entry of a new event: the request as the
// application needs it, without hop-by-hop headers.
func eventFields(r *http.Request, body []byte, source, keyValue, storeKey string) []any {
	var hdr strings.Builder
	for name, values := range r.Header {
		if skipEventHeader(name) {
			continue
		}
		for _, v := range values {
			hdr.WriteString(name)
			hdr.WriteString(": ")
			hdr.WriteString(v)
			hdr.WriteString("\r\n")
		}
	}
	proto := "http"
	if r.TLS != nil {
		proto = "https"
	}
	// the client's address as Caddy determined it (trusted_proxies applied)
	remote, _ := caddyhttp.GetVar(r.Context(), caddyhttp.ClientIPVarKey).(string)
	if remote == "" {
		var err error
		if remote, _, err = net.SplitHostPort(r.RemoteAddr); err != nil {
			remote = r.RemoteAddr
		}
	}
	return []any{
		fieldSource, source,
		fieldKey, keyValue,
		fieldStoreKey, storeKey,
		fieldMethod, r.Method,
		fieldURI, r.RequestURI,
		fieldHost, r.Host,
		fieldProto, proto,
		fieldRemote, remote,
		fieldHeaders, hdr.String(),
		fieldBody, body,
		fieldReceived, strconv.FormatInt(now().UnixMilli(), 10),
		fieldAttempts, "0",
		fieldBase, "0",
	}
}

// skipEventHeader reports whether a request header is left out of an event:
// hop-by-hop headers, and the ones a delivery sets itself.
func skipEventHeader(name string) bool {
	switch name {
	case "Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
		"Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
		"Content-Length", "Host", "Webhook-Attempt", "Idempotency-Key",
		"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto":
		return true
	}
	return false
}

// Workers.

// start starts the workers: one reader of the stream, one scheduler (due
// retries, reclaiming, gauges) and up to concurrency deliveries at once.
func (ib *inbox) start() {
	ib.mu.Lock()
	defer ib.mu.Unlock()
	if ib.started || ib.stopped {
		return
	}
	ib.started = true
	ib.consumer = inboxConsumerName()
	ib.slots = make(chan struct{}, ib.concurrency)
	ctx, cancel := context.WithCancel(context.Background())
	ib.cancel = cancel
	ib.wg.Add(2)
	go ib.readLoop(ctx)
	go ib.scheduleLoop(ctx)
	registerInbox(ib)
	ib.logger.Info("inbox started", zap.String("deliver_to", ib.deliverTo), zap.String("consumer", ib.consumer))
}

// stop stops reading, waits for the deliveries in progress (each bounded by
// the timeout) and releases the Redis client. It is idempotent.
func (ib *inbox) stop() {
	ib.mu.Lock()
	if ib.stopped {
		ib.mu.Unlock()
		return
	}
	ib.stopped = true
	started := ib.started
	if ib.cancel != nil {
		ib.cancel()
	}
	ib.mu.Unlock()
	if started {
		ib.wg.Wait()
		unregisterInbox(ib)
		ib.removeConsumer()
		ib.http.CloseIdleConnections()
	}
	_, _ = redisPool.Delete(ib.store.poolKey)
}

// inboxConsumerName names this worker set in the consumer group.
func inboxConsumerName() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// bg returns a context bounded by the store timeout for a background call.
func (ib *inbox) bg() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), ib.store.timeout)
}

// ensureGroup creates the stream and its consumer group if needed.
func (ib *inbox) ensureGroup() {
	ctx, cancel := ib.bg()
	defer cancel()
	err := ib.rc.client.XGroupCreateMkStream(ctx, ib.stream, inboxGroup, "0").Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		ib.warn("creating the inbox consumer group failed; retrying", err)
	}
}

// warn logs a background error at most once every 30 seconds.
func (ib *inbox) warn(msg string, err error, fields ...zap.Field) {
	ib.mu.Lock()
	t := time.Now()
	quiet := t.Sub(ib.warned) < 30*time.Second
	if !quiet {
		ib.warned = t
	}
	ib.mu.Unlock()
	if !quiet {
		ib.logger.Warn(msg, append(fields, zap.Error(err))...)
	}
}

// readLoop reads new events, one per free delivery slot.
func (ib *inbox) readLoop(ctx context.Context) {
	defer ib.wg.Done()
	ib.ensureGroup()
	for {
		select {
		case ib.slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		rctx, cancel := context.WithTimeout(context.Background(), inboxFetchBlock+ib.store.timeout)
		streams, err := ib.rc.client.XReadGroup(rctx, &redis.XReadGroupArgs{
			Group:    inboxGroup,
			Consumer: ib.consumer,
			Streams:  []string{ib.stream, ">"},
			Count:    1,
			Block:    inboxFetchBlock,
		}).Result()
		cancel()
		if err != nil || len(streams) == 0 || len(streams[0].Messages) == 0 {
			<-ib.slots
			if err != nil && !errors.Is(err, redis.Nil) {
				if strings.HasPrefix(err.Error(), "NOGROUP") {
					ib.ensureGroup()
					continue
				}
				ib.warn("reading the inbox stream failed; retrying", err)
				sleepCtx(ctx, time.Second)
			}
			continue
		}
		ib.wg.Add(1)
		go ib.deliver(streams[0].Messages[0], 1)
	}
}

// scheduleLoop moves due retries back into the stream, reclaims events a
// dead worker left unacknowledged, and updates the gauges.
func (ib *inbox) scheduleLoop(ctx context.Context) {
	defer ib.wg.Done()
	poll := ib.pollInterval()
	reclaimEvery := min(max(ib.timeout, 250*time.Millisecond), 5*time.Second)
	ticker := time.NewTicker(poll)
	defer ticker.Stop()
	var lastReclaim, lastGauges time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		ib.moveDue()
		t := time.Now()
		if t.Sub(lastReclaim) >= reclaimEvery {
			lastReclaim = t
			ib.reclaim(ctx)
		}
		if t.Sub(lastGauges) >= time.Second {
			lastGauges = t
			if c, err := ib.counts(context.Background()); err == nil {
				ib.metrics.setCounts(c)
			}
		}
	}
}

// pollInterval is how often due retries are looked for: a quarter of the
// shortest wait, between 20ms and 500ms.
func (ib *inbox) pollInterval() time.Duration {
	shortest := ib.retries[0]
	for _, d := range ib.retries {
		shortest = min(shortest, d)
	}
	return min(max(shortest/4, 20*time.Millisecond), 500*time.Millisecond)
}

// moveDue moves the retries that are due back into the stream.
func (ib *inbox) moveDue() {
	ctx, cancel := ib.bg()
	defer cancel()
	err := inboxMoveScript.Run(ctx, ib.rc.client, []string{ib.stream, ib.retry}, now().UnixMilli(), 100).Err()
	if err != nil {
		ib.warn("moving due inbox retries failed; retrying", err)
	}
}

// reclaim takes over events that have stayed unacknowledged for several
// delivery timeouts: their worker died. One event per free slot.
func (ib *inbox) reclaim(ctx context.Context) {
	minIdle := time.Duration(inboxReclaimAfter) * ib.timeout
	for ctx.Err() == nil {
		select {
		case ib.slots <- struct{}{}:
		default:
			return
		}
		rctx, cancel := ib.bg()
		msgs, _, err := ib.rc.client.XAutoClaim(rctx, &redis.XAutoClaimArgs{
			Stream:   ib.stream,
			Group:    inboxGroup,
			Consumer: ib.consumer,
			MinIdle:  minIdle,
			Start:    "0-0",
			Count:    1,
		}).Result()
		cancel()
		if err != nil || len(msgs) == 0 {
			<-ib.slots
			if err != nil && !errors.Is(err, redis.Nil) && !strings.HasPrefix(err.Error(), "NOGROUP") {
				ib.warn("reclaiming inbox events failed; retrying", err)
			}
			return
		}
		// every earlier delivery of this entry was an attempt that a dead
		// worker never recorded
		deliveries := int64(2)
		rctx, cancel = ib.bg()
		if p, err := ib.rc.client.XPendingExt(rctx, &redis.XPendingExtArgs{
			Stream: ib.stream, Group: inboxGroup, Start: msgs[0].ID, End: msgs[0].ID, Count: 1,
		}).Result(); err == nil && len(p) == 1 {
			deliveries = p[0].RetryCount
		}
		cancel()
		ib.logger.Info("reclaimed an unacknowledged inbox event", zap.String("id", msgs[0].ID), zap.Int64("deliveries", deliveries))
		ib.wg.Add(1)
		go ib.deliver(msgs[0], deliveries)
	}
}

// deliver makes one delivery attempt and records its outcome. deliveries
// is the number of times the consumer group has handed this stream entry
// out, this time included: more than one means workers died delivering it.
func (ib *inbox) deliver(msg redis.XMessage, deliveries int64) {
	defer ib.wg.Done()
	defer func() { <-ib.slots }()
	ev := msg.Values
	attempts, _ := strconv.Atoi(str(ev[fieldAttempts]))
	base, _ := strconv.Atoi(str(ev[fieldBase]))
	attempt := attempts + int(max(deliveries, 1))
	logger := ib.logger.With(zap.String("id", msg.ID), zap.String("key", str(ev[fieldKey])), zap.Int("attempt", attempt))

	// an event whose deliveries keep killing their worker is not tried for ever
	if attempt-base > len(ib.retries)+1 {
		if err := ib.deadLetter(msg.ID, attempt-1, 0, "retries exhausted: the worker delivering it stopped without an answer"); err != nil {
			logger.Warn("dead-lettering an inbox event failed; it will be reclaimed", zap.Error(err))
		}
		return
	}
	status, derr := ib.post(ev, attempt)

	var err error
	switch {
	case derr == nil && status >= 200 && status <= 299:
		err = ib.delivered(msg.ID, str(ev[fieldStoreKey]))
		if err == nil {
			ib.metrics.delivered.Inc()
			logger.Debug("inbox event delivered", zap.Int("status", status))
		}
	case derr == nil && permanentFailure(status):
		err = ib.deadLetter(msg.ID, attempt, status, "permanent failure: HTTP "+strconv.Itoa(status))
		if err == nil {
			logger.Warn("inbox event dead-lettered: the application refused it", zap.Int("status", status))
		}
	default:
		reason := "HTTP " + strconv.Itoa(status)
		if derr != nil {
			reason = derr.Error()
		}
		if n := attempt - base - 1; n < len(ib.retries) {
			due := now().Add(ib.withJitter(ib.retries[n]))
			err = ib.schedule(msg.ID, attempt, status, reason, due)
			if err == nil {
				ib.metrics.retried.Inc()
				logger.Info("inbox delivery failed; retry scheduled", zap.Int("status", status), zap.String("error", reason), zap.Time("due", due))
			}
		} else {
			err = ib.deadLetter(msg.ID, attempt, status, "retries exhausted: "+reason)
			if err == nil {
				logger.Warn("inbox event dead-lettered: retries exhausted", zap.Int("status", status), zap.String("error", reason))
			}
		}
	}
	if err != nil {
		// the event stays pending and is reclaimed: delivered again, never lost
		logger.Warn("recording an inbox delivery's outcome failed; the event will be reclaimed and attempted again", zap.Error(err))
	}
}

// permanentFailure reports whether a status means the application refuses
// the event for good: a 4xx other than 408, 425 and 429.
func permanentFailure(status int) bool {
	return status >= 400 && status <= 499 && status != http.StatusRequestTimeout &&
		status != http.StatusTooEarly && status != http.StatusTooManyRequests
}

// post sends one attempt to deliver_to and returns its status.
func (ib *inbox) post(ev map[string]any, attempt int) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), ib.timeout)
	defer cancel()
	body := str(ev[fieldBody])
	req, err := http.NewRequestWithContext(ctx, str(ev[fieldMethod]), ib.deliverTo, strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(str(ev[fieldHeaders]), "\r\n") {
		if name, value, ok := strings.Cut(line, ": "); ok {
			req.Header.Add(name, value)
		}
	}
	if _, ok := req.Header["User-Agent"]; !ok {
		req.Header["User-Agent"] = nil // no Go default
	}
	req.Header.Set("Webhook-Attempt", strconv.Itoa(attempt))
	req.Header.Set("Idempotency-Key", str(ev[fieldKey]))
	req.Header.Set("X-Forwarded-For", str(ev[fieldRemote]))
	req.Header.Set("X-Forwarded-Host", str(ev[fieldHost]))
	req.Header.Set("X-Forwarded-Proto", str(ev[fieldProto]))
	resp, err := ib.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return 0, fmt.Errorf("timeout after %s", ib.timeout)
		}
		return 0, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// withJitter varies d at random by up to the jitter fraction either way.
func (ib *inbox) withJitter(d time.Duration) time.Duration {
	if ib.jitter == 0 {
		return d
	}
	return time.Duration(float64(d) * (1 + ib.jitter*(2*mrand.Float64()-1)))
}

// delivered acknowledges a delivered event and completes its key: its
// duplicates are answered for ttl from now.
func (ib *inbox) delivered(id, storeKey string) error {
	ctx, cancel := ib.bg()
	defer cancel()
	keys := []string{ib.stream, storeKey}
	if ib.cluster || storeKey == "" {
		keys = keys[:1] // the key is on another slot: a call of its own
	}
	ttl := redisMillis(ib.ttl)
	if err := inboxAckScript.Run(ctx, ib.rc.client, keys, inboxGroup, id, ttl).Err(); err != nil {
		return err
	}
	if len(keys) == 1 && storeKey != "" {
		if err := ib.rc.client.PExpire(ctx, storeKey, ib.ttl).Err(); err != nil {
			ib.logger.Warn("shortening a delivered event's key to ttl failed; it expires later", zap.String("key", storeKey), zap.Error(err))
		}
	}
	return nil
}

// schedule acknowledges a failed attempt and schedules the next one.
func (ib *inbox) schedule(id string, attempts, status int, reason string, due time.Time) error {
	ctx, cancel := ib.bg()
	defer cancel()
	member := id + "\n" + strconv.Itoa(attempts) + "\n" + strconv.Itoa(status) + "\n" + oneLine(reason)
	return inboxScheduleScript.Run(ctx, ib.rc.client, []string{ib.stream, ib.retry},
		inboxGroup, id, (due.UnixNano()+int64(time.Millisecond)-1)/int64(time.Millisecond), member).Err()
}

// deadLetter moves an event to the dead-letter stream.
func (ib *inbox) deadLetter(id string, attempts, status int, reason string) error {
	ctx, cancel := ib.bg()
	defer cancel()
	err := inboxDeadScript.Run(ctx, ib.rc.client, []string{ib.stream, ib.dead},
		inboxGroup, id, attempts, status, oneLine(reason), now().UnixMilli()).Err()
	if err == nil {
		ib.metrics.deadLettered.Inc()
	}
	return err
}

// removeConsumer deletes this worker set from the consumer group when it
// holds no pending event (deleting it otherwise would lose them).
func (ib *inbox) removeConsumer() {
	ctx, cancel := ib.bg()
	defer cancel()
	pending, err := ib.rc.client.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: ib.stream, Group: inboxGroup, Start: "-", End: "+", Count: 1, Consumer: ib.consumer,
	}).Result()
	if err == nil && len(pending) == 0 {
		_ = ib.rc.client.XGroupDelConsumer(ctx, ib.stream, inboxGroup, ib.consumer).Err()
	}
}

// inboxCounts is the number of a source's events in each state.
type inboxCounts struct {
	Pending   int64 `json:"pending"`   // waiting for or in delivery
	Scheduled int64 `json:"scheduled"` // waiting for a retry
	Dead      int64 `json:"dead"`      // dead-lettered
}

// counts reads the number of events in each state.
func (ib *inbox) counts(ctx context.Context) (inboxCounts, error) {
	ctx, cancel := context.WithTimeout(ctx, ib.store.timeout)
	defer cancel()
	p := ib.rc.client.Pipeline()
	stream := p.XLen(ctx, ib.stream)
	retry := p.ZCard(ctx, ib.retry)
	dead := p.XLen(ctx, ib.dead)
	if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return inboxCounts{}, err
	}
	return inboxCounts{
		Pending:   max(stream.Val()-retry.Val(), 0),
		Scheduled: retry.Val(),
		Dead:      dead.Val(),
	}, nil
}

// deadEvent is one dead-lettered event, as the admin API lists it.
type deadEvent struct {
	ID         string    `json:"id"`
	Key        string    `json:"key"`
	Method     string    `json:"method"`
	URI        string    `json:"uri"`
	Attempts   int       `json:"attempts"`
	LastStatus int       `json:"last_status"`
	LastError  string    `json:"last_error"`
	Received   time.Time `json:"received"`
	Failed     time.Time `json:"failed"`
}

// deadEvents lists up to count dead-lettered events, oldest first, from
// the id start on ("-" for the first).
func (ib *inbox) deadEvents(ctx context.Context, start string, count int64) ([]deadEvent, error) {
	ctx, cancel := context.WithTimeout(ctx, ib.store.timeout)
	defer cancel()
	msgs, err := ib.rc.client.XRangeN(ctx, ib.dead, start, "+", count).Result()
	if err != nil {
		return nil, err
	}
	out := make([]deadEvent, 0, len(msgs))
	for _, m := range msgs {
		ev := m.Values
		attempts, _ := strconv.Atoi(str(ev[fieldAttempts]))
		status, _ := strconv.Atoi(str(ev[fieldLastStatus]))
		out = append(out, deadEvent{
			ID:         m.ID,
			Key:        str(ev[fieldKey]),
			Method:     str(ev[fieldMethod]),
			URI:        str(ev[fieldURI]),
			Attempts:   attempts,
			LastStatus: status,
			LastError:  str(ev[fieldLastError]),
			Received:   unixMilli(str(ev[fieldReceived])),
			Failed:     unixMilli(str(ev[fieldFailed])),
		})
	}
	return out, nil
}

// errNoDeadEvent is returned by redeliver for an id that is not dead.
var errNoDeadEvent = errors.New("no dead-lettered event with this id")

// redeliver moves a dead-lettered event back into the stream, with a fresh
// retry schedule, and returns its new id.
func (ib *inbox) redeliver(ctx context.Context, id string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, ib.store.timeout)
	defer cancel()
	v, err := inboxRedeliverScript.Run(ctx, ib.rc.client, []string{ib.dead, ib.stream}, id).Result()
	if errors.Is(err, redis.Nil) {
		return "", errNoDeadEvent
	}
	if err != nil {
		return "", err
	}
	newID, _ := v.(string)
	return newID, nil
}

// The inboxes running in this process, by source, for the admin API. On a
// reload the new configuration's inbox replaces the old one.
var (
	inboxesMu sync.Mutex
	inboxes   = make(map[string]*inbox)
)

func registerInbox(ib *inbox) {
	inboxesMu.Lock()
	inboxes[ib.source] = ib
	inboxesMu.Unlock()
}

// unregisterInbox removes a stopped inbox; when no newer one took its
// source over, its gauges go too, so a removed inbox leaves no stale counts.
func unregisterInbox(ib *inbox) {
	inboxesMu.Lock()
	defer inboxesMu.Unlock()
	if inboxes[ib.source] == ib {
		delete(inboxes, ib.source)
		metricInboxEvents.DeletePartialMatch(prometheus.Labels{"source": ib.source})
	}
}

// inboxFor returns the running inbox of a source, or nil.
func inboxFor(source string) *inbox {
	inboxesMu.Lock()
	defer inboxesMu.Unlock()
	return inboxes[source]
}

// Small helpers.

func str(v any) string {
	s, _ := v.(string)
	return s
}

func unixMilli(s string) time.Time {
	ms, err := strconv.ParseInt(s, 10, 64)
	if err != nil || ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

// oneLine keeps an error text on one line, at most 300 bytes.
func oneLine(s string) string {
	s = strings.NewReplacer("\r", " ", "\n", " ").Replace(s)
	if len(s) > 300 {
		s = s[:300]
	}
	return s
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// acceptRecord is the record an accepted event's key holds, so that
// duplicates get the same answer.
func (ib *inbox) acceptRecord(bodyHash *[32]byte) []byte {
	return encodeRecord(make([]byte, 0, recordFixedLen+1), ib.respond, nil, nil, false, bodyHash)
}
