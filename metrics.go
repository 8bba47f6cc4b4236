package webhookidempotency

import (
	"context"
	"errors"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"
)

// The collectors of docs/operating.md. They are built once per process and
// registered in each configuration's registry, so their values survive
// config reloads. No label carries an idempotency key.
var (
	metricRequests = newCounter("requests_total",
		"Requests handled by webhook_idempotency, by source and result.",
		"source", "result")

	metricStoreErrors = newCounter("store_errors_total",
		"Failed store calls, by source and operation.",
		"source", "op")

	metricStoreDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "caddy",
		Subsystem: "webhook_idempotency",
		Name:      "store_duration_seconds",
		Help:      "Duration of store calls, by operation.",
		Buckets:   []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
	}, []string{"op"})

	metricStoreRestarts = newCounter("store_restarts_total",
		"Times a Redis node was found to be another server process than before (a restart or a failover): what it held may be lost.",
		"address")

	metricInboxEvents = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "caddy",
		Subsystem: "webhook_idempotency",
		Name:      "inbox_events",
		Help:      "Inbox events in Redis, by source and state (pending, scheduled, dead), as last read by this instance.",
	}, []string{"source", "state"})

	metricInboxDeliveries = newCounter("inbox_deliveries_total",
		"Inbox delivery attempts by their outcome (delivered, retried, dead_lettered), by source.",
		"source", "outcome")
)

// newCounter builds a counter of the module's namespace
// (caddy_webhook_idempotency_<name>).
func newCounter(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "caddy",
		Subsystem: "webhook_idempotency",
		Name:      name,
		Help:      help,
	}, labels)
}

// inboxMetrics holds one inbox's resolved series.
type inboxMetrics struct {
	delivered, retried, deadLettered prometheus.Counter
	pending, scheduled, dead         prometheus.Gauge
}

func newInboxMetrics(source string) *inboxMetrics {
	return &inboxMetrics{
		delivered:    metricInboxDeliveries.WithLabelValues(source, "delivered"),
		retried:      metricInboxDeliveries.WithLabelValues(source, "retried"),
		deadLettered: metricInboxDeliveries.WithLabelValues(source, "dead_lettered"),
		pending:      metricInboxEvents.WithLabelValues(source, "pending"),
		scheduled:    metricInboxEvents.WithLabelValues(source, "scheduled"),
		dead:         metricInboxEvents.WithLabelValues(source, "dead"),
	}
}

func (m *inboxMetrics) setCounts(c inboxCounts) {
	m.pending.Set(float64(c.Pending))
	m.scheduled.Set(float64(c.Scheduled))
	m.dead.Set(float64(c.Dead))
}

// storeOp is a store operation, as in the `op` label.
type storeOp uint8

const (
	opClaim storeOp = iota
	opComplete
	opRelease
	opRenew
	opReplay // decoding a record for a replay
	numStoreOps
)

var storeOpNames = [numStoreOps]string{"claim", "complete", "release", "renew", "replay"}

// String returns the operation's label value.
func (op storeOp) String() string { return storeOpNames[op] }

// allResults lists every result, so each handler resolves its counters once.
var allResults = [...]string{
	resultNew, resultReplayed, resultConflict, resultMismatch, resultInvalidSignature,
	resultTooLarge, resultBypassed, resultUnavailable, resultSkipped, resultHandshake,
}

// handlerMetrics holds one handler's resolved collectors, so the hot path
// does no label lookups.
type handlerMetrics struct {
	requests    [len(allResults)]prometheus.Counter
	storeErrors [numStoreOps]prometheus.Counter
	duration    [numStoreOps]prometheus.Observer
}

// registerMetrics registers the collectors in the configuration's registry
// (which may be nil) and resolves the series of one source.
func registerMetrics(ctx caddy.Context, source string) (*handlerMetrics, error) {
	if reg := ctx.GetMetricsRegistry(); reg != nil {
		for _, c := range []prometheus.Collector{metricRequests, metricStoreErrors, metricStoreDuration, metricStoreRestarts,
			metricInboxEvents, metricInboxDeliveries, metricArchiveEvents, metricArchiveErrors, metricArchiveDropped} {
			if err := reg.Register(c); err != nil {
				var are prometheus.AlreadyRegisteredError
				if !errors.As(err, &are) {
					return nil, err
				}
			}
		}
	}
	m := new(handlerMetrics)
	for i, r := range allResults {
		m.requests[i] = metricRequests.WithLabelValues(source, r)
	}
	for op, name := range storeOpNames {
		m.storeErrors[op] = metricStoreErrors.WithLabelValues(source, name)
		m.duration[op] = metricStoreDuration.WithLabelValues(name)
	}
	return m, nil
}

// countResult counts one request's result.
func (m *handlerMetrics) countResult(result string) {
	for i, r := range allResults {
		if r == result {
			m.requests[i].Inc()
			return
		}
	}
}

// observeStore records a store call's duration, and its failure (not
// counting errNotOwner, which is an answer, not a failure).
func (m *handlerMetrics) observeStore(op storeOp, start time.Time, err error) {
	m.duration[op].Observe(time.Since(start).Seconds())
	if err != nil && !errors.Is(err, errNotOwner) {
		m.storeErrors[op].Inc()
	}
}

// meteredStore is a handler's store with every call timed and its failures
// counted: the one place that observes store calls. Its claim, complete,
// release and renew take the key's guard ("" for none: guard.go).
type meteredStore struct {
	store
	guarded guardedStore // the same store, when it holds guards
	m       *handlerMetrics
}

// Claim implements store.
func (s *meteredStore) Claim(ctx context.Context, key, owner string, lease time.Duration) (claimResult, error) {
	start := time.Now()
	res, err := s.store.Claim(ctx, key, owner, lease)
	s.m.observeStore(opClaim, start, err)
	return res, err
}

// Complete implements store.
func (s *meteredStore) Complete(ctx context.Context, key, owner string, record []byte, ttl time.Duration) error {
	start := time.Now()
	err := s.store.Complete(ctx, key, owner, record, ttl)
	s.m.observeStore(opComplete, start, err)
	return err
}

// Release implements store.
func (s *meteredStore) Release(ctx context.Context, key, owner string) error {
	start := time.Now()
	err := s.store.Release(ctx, key, owner)
	s.m.observeStore(opRelease, start, err)
	return err
}

// Renew implements store.
func (s *meteredStore) Renew(ctx context.Context, key, owner string, lease time.Duration) error {
	start := time.Now()
	err := s.store.Renew(ctx, key, owner, lease)
	s.m.observeStore(opRenew, start, err)
	return err
}

// claim claims key, with its guard unless guard is "".
func (s *meteredStore) claim(ctx context.Context, key, guard, owner string, lease time.Duration) (claimResult, error) {
	if guard == "" {
		return s.Claim(ctx, key, owner, lease)
	}
	start := time.Now()
	res, err := s.guarded.ClaimGuarded(ctx, key, guard, owner, lease)
	s.m.observeStore(opClaim, start, err)
	return res, err
}

// complete completes key, with its guard unless guard is "".
func (s *meteredStore) complete(ctx context.Context, key, guard, owner string, record []byte, ttl time.Duration) error {
	if guard == "" {
		return s.Complete(ctx, key, owner, record, ttl)
	}
	start := time.Now()
	err := s.guarded.CompleteGuarded(ctx, key, guard, owner, record, ttl)
	s.m.observeStore(opComplete, start, err)
	return err
}

// release releases key, with its guard unless guard is "".
func (s *meteredStore) release(ctx context.Context, key, guard, owner string) error {
	if guard == "" {
		return s.Release(ctx, key, owner)
	}
	start := time.Now()
	err := s.guarded.ReleaseGuarded(ctx, key, guard, owner)
	s.m.observeStore(opRelease, start, err)
	return err
}

// renew renews key, with its guard unless guard is "".
func (s *meteredStore) renew(ctx context.Context, key, guard, owner string, lease time.Duration) error {
	if guard == "" {
		return s.Renew(ctx, key, owner, lease)
	}
	start := time.Now()
	err := s.guarded.RenewGuarded(ctx, key, guard, owner, lease)
	s.m.observeStore(opRenew, start, err)
	return err
}

// recent returns the store's local copy of the record of key or, unless
// guard is "", of its guard: what a store that keeps one (the redis store,
// store_redis_recent.go) answers a duplicate with while it cannot claim.
func (s *meteredStore) recent(key, guard string) ([]byte, bool) {
	r, ok := s.store.(interface{ recent(string) ([]byte, bool) })
	if !ok {
		return nil, false
	}
	if rec, ok := r.recent(key); ok {
		return rec, true
	}
	if guard != "" {
		return r.recent(guard)
	}
	return nil, false
}

// accept accepts an event into an inbox, the claim of inbox mode.
func (s *meteredStore) accept(ctx context.Context, ib *inbox, key, guard, owner string, record []byte, event []any) (claimResult, error) {
	start := time.Now()
	res, err := ib.accept(ctx, key, guard, owner, record, event)
	s.m.observeStore(opClaim, start, err)
	return res, err
}

// completeArchived completes a key, with its guard unless guard is "", as
// complete does, and appends the archive event e in the same round trip; it
// returns the completion's error and the append's.
func (s *meteredStore) completeArchived(ctx context.Context, a *archive, key, guard, owner string, record []byte, ttl time.Duration, e *archiveEntry) (err, appendErr error) {
	start := time.Now()
	err, appendErr = a.backend.completeAndAppend(ctx, key, guard, owner, record, ttl, e)
	s.m.observeStore(opComplete, start, err)
	return err, appendErr
}

// Interface guards
var _ store = (*meteredStore)(nil)
