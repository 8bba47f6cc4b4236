package webhookidempotency

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// Inbox mode (docs/inbox.md). This file holds its configuration, its
// lifecycle and the registry of running inboxes; acceptance on the request
// path is in inbox_accept.go, delivery in inbox_worker.go, and what the
// admin API reads in inbox_query.go.

// InboxConfig turns the handler into an inbox: a verified, new delivery is
// stored in a Redis Stream and answered at once; background workers deliver
// it to `deliver_to`, retry failures on a schedule and move events that
// cannot be delivered to a dead-letter stream. It requires the redis store.
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

// Defaults of the inbox's options.
const (
	defaultInboxRespond     = http.StatusAccepted
	defaultInboxJitter      = "10%"
	defaultInboxTimeout     = 10 * time.Second
	defaultInboxConcurrency = 4
)

var defaultInboxRetries = []caddy.Duration{
	caddy.Duration(30 * time.Second), caddy.Duration(time.Minute), caddy.Duration(5 * time.Minute),
	caddy.Duration(30 * time.Minute), caddy.Duration(2 * time.Hour), caddy.Duration(12 * time.Hour),
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

	store       *RedisStore
	rc          *redisClient // a reference of our own, held until stop
	release     func()       // gives that reference back
	callTimeout time.Duration
	cluster     bool
	stream      string
	retry       string
	dead        string
	consumer    string

	http    *http.Client
	redact  *redactor   // what the admin API shows of its events is redacted with it
	logger  *zap.Logger // carries the source
	metrics *inboxMetrics

	mu      sync.Mutex
	started bool
	stopped bool
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	slots   chan struct{}
	warned  time.Time // last background error logged
}

// unmarshalCaddyfile parses the inbox block; the dispenser is on `inbox`:
//
//	inbox [<deliver_to>] {
//		deliver_to  <url>
//		respond     <status>
//		retries     <duration>...
//		jitter      <percent>
//		timeout     <duration>
//		concurrency <n>
//	}
func (ib *InboxConfig) unmarshalCaddyfile(d *caddyfile.Dispenser) error {
	// made here, so that it names the line of `inbox`, not the end of its block
	errNoURL := d.Errf("%v", errNoDeliverTo)
	if args := d.RemainingArgs(); len(args) > 1 {
		return d.Errf("inbox takes one deliver_to URL, got extra argument '%s'", args[1])
	} else if len(args) == 1 {
		if err := ib.setDeliverTo(args[0]); err != nil {
			return d.Errf("%v", err)
		}
	}
	if err := parseBlock(d, "inbox", inboxOptions, ib.setOption); err != nil {
		return err
	}
	if ib.DeliverTo == "" {
		return errNoURL
	}
	return nil
}

// inboxOptions are the subdirectives of the inbox block and the values each
// takes.
var inboxOptions = map[string]arity{
	"deliver_to": takesOne, "respond": takesOne, "retries": takesSome, "jitter": takesOne,
	"timeout": takesOne, "concurrency": takesOne,
}

// setOption applies a subdirective of the inbox block, its values checked
// by the parser (v is the first).
func (ib *InboxConfig) setOption(name, v string, args []string) (err error) {
	switch name {
	case "deliver_to":
		err = ib.setDeliverTo(v)
	case "respond":
		ib.Respond, err = checkInboxRespond(v)
	case "retries":
		ib.Retries = ib.Retries[:0]
		for _, a := range args {
			dur, err := parsePositiveDuration("inbox retry", a)
			if err != nil {
				return err
			}
			ib.Retries = append(ib.Retries, dur)
		}
	case "jitter":
		ib.Jitter = v
		_, err = parseJitter(v)
	case "timeout":
		ib.Timeout, err = parsePositiveDuration("inbox timeout", v)
	case "concurrency":
		ib.Concurrency, err = checkConcurrency(v)
	}
	return err
}

// setDeliverTo sets deliver_to, given on the inbox line or in its block
// (once).
func (ib *InboxConfig) setDeliverTo(v string) error {
	if err := checkDeliverTo(v); err != nil {
		return err
	}
	if ib.DeliverTo != "" {
		return fmt.Errorf("inbox deliver_to given twice: '%s' and '%s'", ib.DeliverTo, v)
	}
	ib.DeliverTo = v
	return nil
}

// newInbox resolves the configuration with the parser's rules; workers
// start with start.
func newInbox(cfg *InboxConfig, h *Handler) (*inbox, error) {
	rs, ok := h.store.store.(*RedisStore)
	if !ok {
		return nil, checkInboxStore("memory")
	}
	ib := &inbox{
		source:      h.Source,
		deliverTo:   caddy.NewReplacer().ReplaceKnown(cfg.DeliverTo, ""),
		respond:     cfg.Respond,
		timeout:     time.Duration(cfg.Timeout),
		concurrency: cfg.Concurrency,
		ttl:         time.Duration(h.TTL),
		store:       rs,
		callTimeout: rs.callTimeout(),
		logger:      h.logger,
		metrics:     newInboxMetrics(h.Source),
	}
	if ib.deliverTo == "" {
		return nil, errNoDeliverTo
	}
	if err := checkDeliverTo(ib.deliverTo); err != nil {
		return nil, err
	}
	if ib.respond == 0 {
		ib.respond = defaultInboxRespond
	}
	if _, err := checkInboxRespond(strconv.Itoa(ib.respond)); err != nil {
		return nil, err
	}
	retries := cfg.Retries
	if len(retries) == 0 {
		retries = defaultInboxRetries
	}
	for _, d := range retries {
		if err := checkPositive("retry", d); err != nil {
			return nil, err
		}
		ib.retries = append(ib.retries, time.Duration(d))
	}
	jitter := cfg.Jitter
	if jitter == "" {
		jitter = defaultInboxJitter
	}
	var err error
	if ib.jitter, err = parseJitter(jitter); err != nil {
		return nil, err
	}
	// the admin API shows events redacted as the archive stores them
	var rules []string
	if h.Archive != nil {
		rules = h.Archive.Redact
	}
	if ib.redact, err = h.redactor(rules); err != nil {
		return nil, err
	}
	if cfg.Timeout == 0 {
		ib.timeout = defaultInboxTimeout
	} else if err := checkPositive("timeout", cfg.Timeout); err != nil {
		return nil, err
	}
	if ib.concurrency == 0 {
		ib.concurrency = defaultInboxConcurrency
	}
	if _, err := checkConcurrency(strconv.Itoa(ib.concurrency)); err != nil {
		return nil, err
	}
	// an accepted key outlives every retry of its event
	horizon := time.Duration(len(ib.retries)+1) * ib.timeout
	for _, d := range ib.retries {
		horizon += time.Duration(float64(d) * (1 + ib.jitter))
	}
	ib.acceptTTL = ib.ttl + horizon
	ib.stream, ib.retry, ib.dead = rs.streamKeys(h.Source)

	// a reference of our own: the store may be cleaned up before the
	// workers have finished their deliveries
	if ib.rc, ib.release, err = rs.acquireClient(); err != nil {
		return nil, fmt.Errorf("inbox: %v", err)
	}
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

// Lifecycle.

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
	ib.release()
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
	return context.WithTimeout(context.Background(), ib.callTimeout)
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

// runningInboxes returns the inboxes running in this process, sorted by
// source.
func runningInboxes() []*inbox {
	inboxesMu.Lock()
	running := make([]*inbox, 0, len(inboxes))
	for _, ib := range inboxes {
		running = append(running, ib)
	}
	inboxesMu.Unlock()
	slices.SortFunc(running, func(a, b *inbox) int { return strings.Compare(a.source, b.source) })
	return running
}

// inboxFor returns the running inbox of a source, or nil.
func inboxFor(source string) *inbox {
	inboxesMu.Lock()
	defer inboxesMu.Unlock()
	return inboxes[source]
}
