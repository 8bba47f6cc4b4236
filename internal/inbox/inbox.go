// Package inbox is inbox mode's subsystem (docs/inbox.md): a verified, new
// delivery is stored with its key in one round trip and answered at once;
// background workers deliver it to the application, retry failures on a
// schedule and move what cannot be delivered to a dead-letter list, which
// the admin API lists and redelivers. An inbox is built from a resolved
// configuration and the handler's store; the store's side of the queue is a
// backend behind the queue interface (redis.go).
package inbox

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/forward"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/metrics"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/record"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/redact"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
	"github.com/webhookguard/caddy-webhook-idempotency/store/filestore"
	"github.com/webhookguard/caddy-webhook-idempotency/store/redisstore"
)

// Config is an inbox's resolved configuration: every value set and
// checked (the handler's InboxConfig applies the defaults and rules).
type Config struct {
	Source    string
	DeliverTo string // the URL every event is delivered to
	Respond   int    // the status that answers an accepted event
	// RespondBody and RespondType are its body and content type (the
	// provider's expected answer, Adyen's `[accepted]`); "" for none.
	RespondBody, RespondType string
	Retries                  []time.Duration // the waits between attempts after the first
	Jitter                   float64         // how much each wait varies, as a fraction
	Timeout                  time.Duration   // the bound of one delivery attempt
	Concurrency              int             // deliveries in progress at once
	TTL                      time.Duration   // how long a delivered event's key answers duplicates
	// Namespace is the route's key namespace, `<key_prefix>:<source>`,
	// added to every delivery's Webhook-Via (event.ViaHeader).
	Namespace string
	// OrderBy are the key sources of an event's group, as configured (the
	// admin API shows them); GroupOf resolves them on an event, "" for no
	// group. Events of one group are delivered one at a time, in
	// acceptance order; without GroupOf every event is unordered.
	OrderBy []string
	GroupOf func(ev *event.Request) string
	// Rate is the most deliveries to DeliverTo per unit of time, across
	// every instance sharing the store; zero N for no limit.
	Rate Rate
	// Partitions is the number of streams the source's inbox is spread
	// over on Redis (Redis Cluster spreads them over its nodes); 0 or 1
	// for one.
	Partitions int
	// Redact is what the admin API shows of the events redacted with.
	Redact *redact.Redactor
	// Forward prepares each attempt for the application: the provider's
	// signature kept, re-signed, replaced or removed, and the route's
	// outbound headers (internal/forward). Nil passes the event on as it
	// was stored.
	Forward *forward.Forwarder
	// TLS is the TLS configuration toward an https deliver_to (a private
	// CA, a client certificate, a server name); nil for the system's.
	TLS    *tls.Config
	Logger *zap.Logger
}

// Timing of every inbox.
var (
	// fetchBlock is how long one read of the queue waits for an event; it
	// bounds how long stopping waits for an idle reader.
	fetchBlock = 250 * time.Millisecond
	// reclaimAfter is how many delivery timeouts an event may stay in
	// delivery before another worker reclaims it.
	reclaimAfter = 3
)

// Inbox is one handler's inbox: acceptance on the request path, the
// workers that deliver, and what the admin API reads and does.
type Inbox struct {
	cfg       Config
	acceptTTL time.Duration // ttl of an accepted key: ttl plus the retry horizon
	q         queue
	http      *http.Client
	logger    *zap.Logger
	metrics   *inboxMetrics
	consumer  string
	limit     limiter      // nil without a rate
	readers   atomic.Int32 // the lanes read

	mu      sync.Mutex
	started bool
	stopped bool
	ctx     context.Context // the workers', until Stop
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	slots   chan struct{}
	warned  time.Time // last background error logged
}

// New builds an inbox on the handler's store; workers start with Start.
// Inbox mode needs a store that keeps a durable queue: the file store (one
// instance) or the redis store (several).
func New(cfg Config, s store.Store) (*Inbox, error) {
	ib := &Inbox{
		cfg:      cfg,
		logger:   cfg.Logger,
		metrics:  newInboxMetrics(cfg.Source),
		consumer: consumerName(),
	}
	// an accepted key outlives every retry of its event
	horizon := time.Duration(len(cfg.Retries)+1) * cfg.Timeout
	for _, d := range cfg.Retries {
		horizon += time.Duration(float64(d) * (1 + cfg.Jitter))
	}
	ib.acceptTTL = cfg.TTL + horizon
	if err := Supports(s); err != nil {
		return nil, err
	}
	var err error
	switch s := s.(type) {
	case *redisstore.Store:
		ib.q, err = newRedisQueue(s.Seam(), ib)
	case *filestore.Store:
		if cfg.Partitions > 1 {
			return nil, errors.New("inbox partitions spread a source over Redis streams (and Redis Cluster nodes); the file store keeps one queue per source: remove partitions, or use the redis store")
		}
		ib.q, err = newFileQueue(s.Seam(), ib)
	}
	if err != nil {
		return nil, fmt.Errorf("inbox: %v", err)
	}
	if cfg.Rate.N > 0 {
		ib.limit = ib.q.limiter(cfg.Rate)
		ib.metrics.rate = metrics.InboxRate.WithLabelValues(cfg.Source)
	}
	ib.http = &http.Client{
		Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: cfg.Timeout, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConnsPerHost: cfg.Concurrency,
			IdleConnTimeout:     90 * time.Second,
			TLSHandshakeTimeout: cfg.Timeout,
			TLSClientConfig:     cfg.TLS,
			ForceAttemptHTTP2:   true,
		},
		// a redirect is an answer: it is not followed
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return ib, nil
}

// Supports is the rule of which stores hold an inbox: those that keep a
// durable queue, the file store (one instance) and the redis store
// (several). The Caddyfile parser asks it of a store module's zero value,
// provisioning of the store itself; an accepted event must survive a
// restart.
func Supports(s store.Store) error {
	switch s.(type) {
	case *redisstore.Store, *filestore.Store:
		return nil
	}
	name := fmt.Sprintf("%T", s)
	if m, ok := s.(interface{ CaddyModule() caddy.ModuleInfo }); ok {
		name = m.CaddyModule().ID.Name()
	}
	return fmt.Errorf("inbox mode needs a store that keeps accepted events across restarts, not %s: the file store (the default, for one Caddy) or the redis store (for several)", name)
}

// Source returns the inbox's source.
func (ib *Inbox) Source() string { return ib.cfg.Source }

// Respond returns the status that answers an accepted event, and its body
// and content type ("" for none).
func (ib *Inbox) Respond() (status int, body, contentType string) {
	return ib.cfg.Respond, ib.cfg.RespondBody, ib.cfg.RespondType
}

// AcceptTTL returns how long an accepted event's key is kept before it is
// delivered: the handler's ttl plus the retry horizon.
func (ib *Inbox) AcceptTTL() time.Duration { return ib.acceptTTL }

// Accept stores a new event and takes its key in one round trip, or
// reports the key's state as a claim does; the handler answers at once.
// The claim's guard is taken with the key, or its note (see
// store.GuardedStore): a note that holds another key marks the event as a
// suspected replay, delivered with Webhook-Replay-Suspected.
func (ib *Inbox) Accept(ctx context.Context, c store.Claim, bodyHash *[32]byte, ev *event.Request) (store.ClaimResult, error) {
	var hdr http.Header
	if ib.cfg.RespondType != "" {
		hdr = http.Header{"Content-Type": {ib.cfg.RespondType}}
	}
	rec := append(record.Encode(make([]byte, 0, record.FixedLen+1+len(ib.cfg.RespondBody)), ib.cfg.Respond, hdr, bodyHash), ib.cfg.RespondBody...)
	res, id, err := ib.q.accept(ctx, c, rec, ev, ib.groupOf(ev))
	if err == nil && res.State == store.StateClaimed {
		if ce := ib.logger.Check(zap.DebugLevel, "inbox event accepted"); ce != nil {
			ce.Write(zap.String("key", c.Key), zap.String("id", id))
		}
	}
	return res, err
}

// groupOf is the group of an event, "" for none.
func (ib *Inbox) groupOf(ev *event.Request) string {
	if ib.cfg.GroupOf == nil {
		return ""
	}
	return ib.cfg.GroupOf(ev)
}

// Start starts the workers: a reader of each lane of the queue, one
// scheduler (due retries, reclaiming, the partitions of other
// configurations, gauges) and up to concurrency deliveries at once.
func (ib *Inbox) Start() {
	ib.mu.Lock()
	defer ib.mu.Unlock()
	if ib.started || ib.stopped {
		return
	}
	ib.started = true
	ib.slots = make(chan struct{}, ib.cfg.Concurrency)
	ctx, cancel := context.WithCancel(context.Background())
	ib.cancel = cancel
	ib.ctx = ctx
	ib.startReaders()
	ib.wg.Add(1)
	go ib.scheduleLoop(ctx)
	register(ib)
	ib.logger.Info("inbox started", zap.String("deliver_to", ib.cfg.DeliverTo), zap.String("consumer", ib.consumer))
}

// Stop stops reading, waits for the deliveries in progress (each bounded by
// the timeout) and releases what the inbox holds of its store. It is
// idempotent.
func (ib *Inbox) Stop() {
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
		unregister(ib)
		ib.http.CloseIdleConnections()
	}
	ib.q.close(started)
}

// consumerName names this worker set among the workers of every instance.
func consumerName() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// warn logs a background error at most once every 30 seconds.
func (ib *Inbox) warn(msg string, err error, fields ...zap.Field) {
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

// The inboxes running in this process, by source: on a reload the new
// configuration's inbox takes its source over, and only the last inbox of a
// source removes its gauges when it stops, so a removed inbox leaves no
// stale counts.
var (
	runningMu sync.Mutex
	running   = make(map[string]*Inbox)
)

func register(ib *Inbox) {
	runningMu.Lock()
	running[ib.cfg.Source] = ib
	runningMu.Unlock()
}

func unregister(ib *Inbox) {
	runningMu.Lock()
	defer runningMu.Unlock()
	if running[ib.cfg.Source] == ib {
		delete(running, ib.cfg.Source)
		metrics.InboxEvents.DeletePartialMatch(prometheus.Labels{"source": ib.cfg.Source})
		metrics.InboxRate.DeleteLabelValues(ib.cfg.Source)
	}
}

// inboxMetrics holds one inbox's resolved series.
type inboxMetrics struct {
	delivered, retried, deadLettered prometheus.Counter
	pending, scheduled, dead         prometheus.Gauge
	lag                              prometheus.Observer
	rate                             prometheus.Gauge // only with a rate
}

func newInboxMetrics(source string) *inboxMetrics {
	return &inboxMetrics{
		lag:          metrics.InboxDeliveryLag.WithLabelValues(source),
		delivered:    metrics.InboxDeliveries.WithLabelValues(source, "delivered"),
		retried:      metrics.InboxDeliveries.WithLabelValues(source, "retried"),
		deadLettered: metrics.InboxDeliveries.WithLabelValues(source, "dead_lettered"),
		pending:      metrics.InboxEvents.WithLabelValues(source, "pending"),
		scheduled:    metrics.InboxEvents.WithLabelValues(source, "scheduled"),
		dead:         metrics.InboxEvents.WithLabelValues(source, "dead"),
	}
}

func (m *inboxMetrics) setCounts(c Counts) {
	m.pending.Set(float64(c.Pending))
	m.scheduled.Set(float64(c.Scheduled))
	m.dead.Set(float64(c.Dead))
}
