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
	"slices"
	"strconv"
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
	"github.com/webhookguard/caddy-webhook-idempotency/internal/series"
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
	TLS *tls.Config
	// Series counts each delivery's outcome, the application's answer
	// time, the delivery lag and the backlog, kept in the store with the
	// route's (internal/series); nil counts nothing.
	Series *series.Recorder
	Logger *zap.Logger

	// Routes are the source's destinations besides DeliverTo, in the
	// order of the configuration: an event goes to every route that
	// matches it, each delivering it with its own attempts, order, rate
	// and dead letters; to DeliverTo when none matches
	// (docs/inbox.md#routes).
	Routes []Route
	// AnswerWithin is `respond app within`: the first attempt of an event
	// is made as it is accepted, and the application's 2xx answer, when
	// it comes within AnswerWithin, is the provider's answer and the
	// key's record; 0 for off (docs/inbox.md#the-applications-answer).
	AnswerWithin time.Duration
	// MaxAnswer is the largest body of the application's answer that is
	// recorded (the handler's max_response); a larger one is not passed on.
	MaxAnswer int64
	// Breaker stops the deliveries to a destination that keeps failing;
	// zero Of for none (docs/inbox.md#breaker).
	Breaker Breaker
	// NewerThan resolves the value of an event that is compared with the
	// largest its group has delivered (newer_than); nil for none. It
	// needs GroupOf.
	NewerThan func(ev *event.Request) string
	// Archive archives an event the inbox ended without delivering it
	// (results.Stale); nil when the route has no archive.
	Archive func(ev *event.Request, result string)

	// KeepResponse is what is kept of each answer with its attempt: its
	// headers, then its body, this many bytes together; 0 for neither
	// (keep_response, docs/inbox.md#attempts).
	KeepResponse int
	// AttemptsLife is how long an event's history lives after its last
	// attempt, when longer than its key's accept ttl (the archive's
	// retention); AttemptsMax bounds the source's histories (the
	// archive's max_events), 0 for no bound besides their life.
	AttemptsLife time.Duration
	AttemptsMax  int
}

// Route is a destination of a source's events besides deliver_to, and the
// events it takes.
type Route struct {
	// URL is where its events are delivered.
	URL string
	// Rule is the route's rule as configured (`json:type=invoice.*`),
	// shown by the admin API.
	Rule string
	// Match reports whether an event goes to this route.
	Match func(ev *event.Request) bool
	// Retries are its waits between attempts; nil for the inbox's.
	Retries []time.Duration
	// Rate is its rate limit; zero N for none (the inbox's rate is
	// deliver_to's).
	Rate Rate
	// OrderBy and GroupOf group its events; nil for the inbox's.
	OrderBy []string
	GroupOf func(ev *event.Request) string
	// TLS is its TLS configuration; nil for the system's (the inbox's is
	// deliver_to's).
	TLS *tls.Config
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

// Inbox is a source's inbox: acceptance on the request path, the workers
// that deliver to deliver_to, and what the admin API reads and does. Each
// other destination of the source (a route, or the route of an earlier
// configuration whose queue still holds events) is delivered by an Inbox
// of its own, with its own queue, workers, rate, breaker and dead letters
// (destination.go): the source's Inbox holds those and drives them; they
// are never handed out.
type Inbox struct {
	cfg       Config        // a destination's: DeliverTo is its URL, the options are its own
	dest      dest          // the destination delivered to
	src       *Inbox        // the source's inbox: this one, or the one holding it
	acceptTTL time.Duration // ttl of an accepted key: ttl plus the longest retry horizon
	q         queue
	ctl       control // pause and breaker state in the store (control.go)
	gate      gate    // that state, as last read
	http      *http.Client
	logger    *zap.Logger
	metrics   *inboxMetrics
	consumer  string
	limit     limiter      // nil without a rate
	readers   atomic.Int32 // the lanes read
	probing   atomic.Bool  // this instance's breaker probe is under way
	st        store.Store  // the route's store, for the destinations of other configurations

	mu      sync.Mutex
	started bool
	stopped bool
	ctx     context.Context // the workers', until Stop
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	slots   chan struct{}
	// answering are the slots of attempts at acceptance (respond app
	// within), concurrency of them
	answering chan struct{}
	warned    time.Time // last background error logged
	// routes are the source's other destinations: its configured routes,
	// then those of earlier configurations (the source's inbox only).
	routes []*Inbox
}

// New builds an inbox on the handler's store; workers start with Start.
// Inbox mode needs a store that keeps a durable queue: the file store (one
// instance) or the redis store (several).
func New(cfg Config, s store.Store) (*Inbox, error) {
	if err := Supports(s); err != nil {
		return nil, err
	}
	if _, ok := s.(*filestore.Store); ok && cfg.Partitions > 1 {
		return nil, errors.New("inbox partitions spread a source over Redis streams (and Redis Cluster nodes); the file store keeps one queue per source: remove partitions, or use the redis store")
	}
	consumer := consumerName()
	ib, err := newDestination(cfg, s, dest{url: cfg.DeliverTo, id: destID(cfg.DeliverTo)}, nil, consumer)
	if err != nil {
		return nil, err
	}
	ib.st = s
	for _, r := range cfg.Routes {
		if r.URL == cfg.DeliverTo || slices.ContainsFunc(ib.routes, func(o *Inbox) bool { return o.dest.url == r.URL }) {
			continue // one destination per URL: deliver_to's, or the first route's
		}
		rib, err := newDestination(routeConfig(cfg, r), s, dest{url: r.URL, queue: destID(r.URL), id: destID(r.URL), rule: r.Rule}, ib, consumer)
		if err != nil {
			ib.Stop()
			return nil, err
		}
		ib.routes = append(ib.routes, rib)
	}
	// an accepted key outlives every retry of its event, to any destination
	ib.acceptTTL = ib.horizon()
	for _, r := range ib.routes {
		ib.acceptTTL = max(ib.acceptTTL, r.horizon())
	}
	for _, d := range ib.all() {
		d.acceptTTL = ib.acceptTTL
		d.q.setTTLs(ib.acceptTTL, cfg.TTL)
	}
	return ib, nil
}

// routeConfig is the configuration of a route's inbox: the source's, with
// the route's URL and options.
func routeConfig(cfg Config, r Route) Config {
	rc := cfg
	rc.DeliverTo, rc.Routes, rc.Rate, rc.TLS = r.URL, nil, r.Rate, r.TLS
	if r.Retries != nil {
		rc.Retries = r.Retries
	}
	if r.GroupOf != nil {
		rc.OrderBy, rc.GroupOf = r.OrderBy, r.GroupOf
	}
	return rc
}

// newDestination builds the inbox of one destination of a source; src is
// the source's inbox, nil for deliver_to's (which is the source's).
func newDestination(cfg Config, s store.Store, d dest, src *Inbox, consumer string) (*Inbox, error) {
	ib := &Inbox{
		cfg:      cfg,
		dest:     d,
		src:      src,
		logger:   cfg.Logger,
		metrics:  newInboxMetrics(cfg.Source, cfg.Redact.URI(d.url)),
		consumer: consumer,
	}
	if src == nil {
		ib.src = ib
	}
	if d.queue != "" {
		ib.logger = ib.logger.With(zap.String("destination", cfg.Redact.URI(d.url)))
	}
	ib.acceptTTL = ib.horizon()
	var err error
	switch s := s.(type) {
	case *redisstore.Store:
		ib.q, err = newRedisQueue(s.Streams(), ib)
	case *filestore.Store:
		ib.q, err = newFileQueue(s.File(), ib)
	}
	if err != nil {
		return nil, fmt.Errorf("inbox: %v", err)
	}
	ib.ctl = ib.q.control()
	if cfg.Rate.N > 0 {
		ib.limit = ib.q.limiter(cfg.Rate)
		if d.queue == "" {
			ib.metrics.rate = metrics.InboxRate.WithLabelValues(cfg.Source)
		}
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

// horizon is how long an accepted event may wait for its last attempt to
// this destination, plus the handler's ttl: every wait at its longest with
// jitter, and a timeout per attempt.
func (ib *Inbox) horizon() time.Duration {
	h := time.Duration(len(ib.cfg.Retries)+1) * ib.cfg.Timeout
	for _, d := range ib.cfg.Retries {
		h += time.Duration(float64(d) * (1 + ib.cfg.Jitter))
	}
	return ib.cfg.TTL + h
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
// The event is stored for each destination it goes to (routes). The
// claim's guard is taken with the key, or its note (see
// store.GuardedStore): a note that holds another key marks the event as a
// suspected replay, delivered with Webhook-Replay-Suspected.
func (ib *Inbox) Accept(ctx context.Context, c store.Claim, bodyHash *[32]byte, ev *event.Request) (store.ClaimResult, error) {
	res, _, err := ib.accept(ctx, c, bodyHash, ev, nil)
	return res, err
}

// BatchItem is an item of a request, accepted by AcceptBatch as an event
// of its own.
type BatchItem struct {
	Claim    store.Claim // its key, without a guard
	BodyHash *[32]byte   // of the item's own body
	Event    *event.Request
}

// AcceptBatch accepts the items of one request as Accept does each: in one
// round trip where the store allows it (the file store: one commit; Redis:
// one script), else each in its own, up to maxConcurrentAccepts at once
// (Redis Cluster, whose keys are on several nodes; a store with
// `replicas`). It returns each item's result, in order; with an error, the
// result of an item the store did not answer for is zero.
func (ib *Inbox) AcceptBatch(ctx context.Context, items []BatchItem) ([]store.ClaimResult, error) {
	acc := make([]acceptance, len(items))
	for i, it := range items {
		acc[i], _ = ib.acceptanceOf(it.Claim, it.BodyHash, it.Event)
	}
	res, ids, ok, err := ib.q.acceptBatch(ctx, acc)
	if ok {
		if err != nil {
			return make([]store.ClaimResult, len(items)), err
		}
		if ce := ib.logger.Check(zap.DebugLevel, "inbox events accepted"); ce != nil {
			n := 0
			for _, a := range ids {
				if len(a) > 0 {
					n++
				}
			}
			ce.Write(zap.Int("items", len(items)), zap.Int("accepted", n))
		}
		return res, nil
	}
	// each in its own round trip: the items that share a group at a
	// destination one after the other, in the request's order, so that
	// the group's events are in that order too; the others at once
	res = make([]store.ClaimResult, len(items))
	errs := make([]error, len(items))
	lanes := orderedLanes(acc)
	var wg sync.WaitGroup
	next := make(chan []int)
	for range min(len(lanes), maxConcurrentAccepts) {
		wg.Go(func() {
			for lane := range next {
				for _, i := range lane {
					a := acc[i]
					res[i], _, errs[i] = ib.q.accept(ctx, a.c, a.record, a.ev, a.extra, a.to)
					if errs[i] != nil {
						// the group's later items wait for the
						// provider's retry, behind this one
						res[i] = store.ClaimResult{}
						break
					}
				}
			}
		})
	}
	for _, lane := range lanes {
		next <- lane
	}
	close(next)
	wg.Wait()
	return res, errors.Join(errs...)
}

// orderedLanes parts the items of acc into lanes, each a list of items in
// their order: two items that share a group at one of their destinations
// are in one lane, every other item is in a lane of its own.
func orderedLanes(acc []acceptance) [][]int {
	lane := make([]int, len(acc)) // each item's representative (union-find)
	for i := range lane {
		lane[i] = i
	}
	find := func(i int) int {
		for lane[i] != i {
			lane[i] = lane[lane[i]]
			i = lane[i]
		}
		return i
	}
	type place struct {
		q     queue
		group string
	}
	first := map[place]int{}
	for i, a := range acc {
		for _, t := range a.to {
			if t.group == "" {
				continue
			}
			p := place{t.q, t.group}
			if j, ok := first[p]; ok {
				// the lane of the earlier item takes this one's
				lane[find(i)] = find(j)
			} else {
				first[p] = i
			}
		}
	}
	var out [][]int
	index := map[int]int{} // representative -> its lane in out
	for i := range acc {
		r := find(i)
		k, ok := index[r]
		if !ok {
			k = len(out)
			index[r] = k
			out = append(out, nil)
		}
		out[k] = append(out[k], i)
	}
	return out
}

// maxConcurrentAccepts bounds the items of one request AcceptBatch accepts
// at once, each in its own round trip.
const maxConcurrentAccepts = 16

// accept stores ev for each of its destinations with its key; with
// first, the first destination's copy is stored as in delivery
// (admission.answer) when it may be delivered now.
func (ib *Inbox) accept(ctx context.Context, c store.Claim, bodyHash *[32]byte, ev *event.Request, first *Inbox) (store.ClaimResult, []admitted, error) {
	a, targets := ib.acceptanceOf(c, bodyHash, ev)
	if first != nil && targets[0] == first {
		a.to[0].answer = time.Now().Add(first.reclaimAfter())
	}
	res, ids, err := ib.q.accept(ctx, a.c, a.record, a.ev, a.extra, a.to)
	if err == nil && res.State == store.StateClaimed {
		if ce := ib.logger.Check(zap.DebugLevel, "inbox event accepted"); ce != nil {
			ce.Write(zap.String("key", c.Key), zap.Int("destinations", len(ids)), zap.String("id", ids[0].id))
		}
	}
	return res, ids, err
}

// acceptanceOf is what accepting ev under c takes: the admission of each
// of its destinations (targets), in its group there, its key's record and
// its extra fields.
func (ib *Inbox) acceptanceOf(c store.Claim, bodyHash *[32]byte, ev *event.Request) (a acceptance, targets []*Inbox) {
	targets = ib.targets(ev)
	to := make([]admission, len(targets))
	for i, d := range targets {
		to[i] = admission{q: d.q, group: d.groupOf(ev)}
	}
	return acceptance{c: c, record: ib.acceptRecord(bodyHash), ev: ev, extra: ib.extraFields(ev, len(targets)), to: to}, targets
}

// extraFields are the fields an event is stored with besides the
// request's: the number of its destinations, n, when more than one, and
// its newer_than value.
func (ib *Inbox) extraFields(ev *event.Request, n int) []any {
	var extra []any
	if n > 1 {
		extra = append(extra, fieldFanout, strconv.Itoa(n))
	}
	if v := ib.newerOf(ev); v != "" {
		extra = append(extra, fieldNewer, v)
	}
	return extra
}

// acceptRecord is the record of an accepted key: the inbox's respond.
func (ib *Inbox) acceptRecord(bodyHash *[32]byte) []byte {
	var hdr http.Header
	if ib.cfg.RespondType != "" {
		hdr = http.Header{"Content-Type": {ib.cfg.RespondType}}
	}
	return append(record.Encode(make([]byte, 0, record.FixedLen+1+len(ib.cfg.RespondBody)), ib.cfg.Respond, hdr, bodyHash), ib.cfg.RespondBody...)
}

// groupOf is the group of an event, "" for none.
func (ib *Inbox) groupOf(ev *event.Request) string {
	if ib.cfg.GroupOf == nil {
		return ""
	}
	return ib.cfg.GroupOf(ev)
}

// reclaimAfter is how long an event may stay in delivery before another
// worker takes it over: reclaimAfter delivery timeouts.
func (ib *Inbox) reclaimAfter() time.Duration {
	return time.Duration(reclaimAfter) * ib.cfg.Timeout
}

// Start starts the workers of every destination: a reader of each lane of
// its queue, one scheduler (due retries, reclaiming, the partitions of
// other configurations, gauges) and up to concurrency deliveries at once;
// and the loop that reads the source's pause and breaker state.
func (ib *Inbox) Start() {
	for _, d := range ib.all() {
		// a destination paused, or broken, before a restart or a reload
		// delivers nothing meanwhile
		d.readControl(context.Background())
		d.start()
	}
	ib.mu.Lock()
	if ib.started && !ib.stopped {
		ib.wg.Add(1)
		go ib.controlLoop(ib.ctx)
	}
	ib.mu.Unlock()
	register(ib)
}

// start starts one destination's workers.
func (ib *Inbox) start() {
	ib.mu.Lock()
	defer ib.mu.Unlock()
	if ib.started || ib.stopped {
		return
	}
	ib.started = true
	ib.slots = make(chan struct{}, ib.cfg.Concurrency)
	ib.answering = make(chan struct{}, ib.cfg.Concurrency)
	ctx, cancel := context.WithCancel(context.Background())
	ib.cancel = cancel
	ib.ctx = ctx
	ib.startReaders()
	ib.wg.Add(1)
	go ib.scheduleLoop(ctx)
	ib.logger.Info("inbox started", zap.String("deliver_to", ib.cfg.Redact.URI(ib.cfg.DeliverTo)), zap.String("consumer", ib.consumer))
}

// Stop stops reading, waits for the deliveries in progress (each bounded by
// the timeout) and releases what the inbox holds of its store, for every
// destination side by side. It is idempotent.
func (ib *Inbox) Stop() {
	var wg sync.WaitGroup
	for _, d := range ib.all() {
		wg.Go(d.stop)
	}
	wg.Wait()
	unregister(ib)
}

// stop stops one destination's workers.
func (ib *Inbox) stop() {
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
		ib.http.CloseIdleConnections()
	}
	ib.q.close(started)
}

// all returns the inbox and the inboxes of its other destinations.
func (ib *Inbox) all() []*Inbox {
	ib.mu.Lock()
	defer ib.mu.Unlock()
	return append([]*Inbox{ib}, ib.routes...)
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
		labels := prometheus.Labels{"source": ib.cfg.Source}
		metrics.InboxEvents.DeletePartialMatch(labels)
		metrics.InboxRate.DeleteLabelValues(ib.cfg.Source)
		metrics.InboxPaused.DeletePartialMatch(labels)
		metrics.InboxBreakerOpen.DeletePartialMatch(labels)
	}
}

// inboxMetrics holds one destination's resolved series; the counters and
// the source's gauges are shared by its destinations.
type inboxMetrics struct {
	delivered, retried, deadLettered, stale prometheus.Counter
	pending, scheduled, dead                prometheus.Gauge
	lag                                     prometheus.Observer
	answer                                  prometheus.Observer
	paused, breakerOpen                     prometheus.Gauge // the destination's
	rate                                    prometheus.Gauge // only deliver_to's, with a rate
}

func newInboxMetrics(source, destination string) *inboxMetrics {
	return &inboxMetrics{
		lag:          metrics.InboxDeliveryLag.WithLabelValues(source),
		answer:       metrics.AnswerSeconds.WithLabelValues(source),
		delivered:    metrics.InboxDeliveries.WithLabelValues(source, "delivered"),
		retried:      metrics.InboxDeliveries.WithLabelValues(source, "retried"),
		deadLettered: metrics.InboxDeliveries.WithLabelValues(source, "dead_lettered"),
		stale:        metrics.InboxDeliveries.WithLabelValues(source, "stale"),
		pending:      metrics.InboxEvents.WithLabelValues(source, "pending"),
		scheduled:    metrics.InboxEvents.WithLabelValues(source, "scheduled"),
		dead:         metrics.InboxEvents.WithLabelValues(source, "dead"),
		paused:       metrics.InboxPaused.WithLabelValues(source, destination),
		breakerOpen:  metrics.InboxBreakerOpen.WithLabelValues(source, destination),
	}
}

func (m *inboxMetrics) setCounts(c Counts) {
	m.pending.Set(float64(c.Pending))
	m.scheduled.Set(float64(c.Scheduled))
	m.dead.Set(float64(c.Dead))
}
