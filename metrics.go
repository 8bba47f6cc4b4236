package webhookidempotency

import (
	"errors"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"
)

// The collectors of SPEC §3.9. They are built once per process and
// registered in each configuration's registry, so their values survive
// config reloads. No label carries an idempotency key.
var (
	metricRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "caddy",
		Subsystem: "webhook_idempotency",
		Name:      "requests_total",
		Help:      "Requests handled by webhook_idempotency, by source and result.",
	}, []string{"source", "result"})

	metricStoreErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "caddy",
		Subsystem: "webhook_idempotency",
		Name:      "store_errors_total",
		Help:      "Failed store calls, by source and operation.",
	}, []string{"source", "op"})

	metricStoreDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "caddy",
		Subsystem: "webhook_idempotency",
		Name:      "store_duration_seconds",
		Help:      "Duration of store calls, by operation.",
		Buckets:   []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
	}, []string{"op"})

	metricInboxEvents = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "caddy",
		Subsystem: "webhook_idempotency",
		Name:      "inbox_events",
		Help:      "Inbox events in Redis, by source and state (pending, scheduled, dead), as last read by this instance.",
	}, []string{"source", "state"})

	metricInboxDeliveries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "caddy",
		Subsystem: "webhook_idempotency",
		Name:      "inbox_deliveries_total",
		Help:      "Inbox delivery attempts by their outcome (delivered, retried, dead_lettered), by source.",
	}, []string{"source", "outcome"})
)

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

// Store operations, as in the `op` label.
const (
	opClaim    = "claim"
	opComplete = "complete"
	opRelease  = "release"
	opRenew    = "renew"
	opReplay   = "replay"
)

// allResults lists every result, so each handler resolves its counters once.
var allResults = [...]string{
	resultNew, resultReplayed, resultConflict, resultMismatch, resultInvalidSignature,
	resultTooLarge, resultBypassed, resultUnavailable, resultSkipped,
}

// handlerMetrics holds one handler's resolved collectors, so the hot path
// does no label lookups.
type handlerMetrics struct {
	requests    [len(allResults)]prometheus.Counter
	storeErrors map[string]prometheus.Counter
	duration    map[string]prometheus.Observer
}

// registerMetrics registers the collectors in the configuration's registry
// (which may be nil) and resolves this handler's series.
func (h *Handler) registerMetrics(ctx caddy.Context) error {
	if reg := ctx.GetMetricsRegistry(); reg != nil {
		for _, c := range []prometheus.Collector{metricRequests, metricStoreErrors, metricStoreDuration, metricInboxEvents, metricInboxDeliveries} {
			if err := reg.Register(c); err != nil {
				var are prometheus.AlreadyRegisteredError
				if !errors.As(err, &are) {
					return err
				}
			}
		}
	}
	m := &handlerMetrics{
		storeErrors: make(map[string]prometheus.Counter),
		duration:    make(map[string]prometheus.Observer),
	}
	for i, r := range allResults {
		m.requests[i] = metricRequests.WithLabelValues(h.Source, r)
	}
	for _, op := range []string{opClaim, opComplete, opRelease, opRenew, opReplay} {
		m.storeErrors[op] = metricStoreErrors.WithLabelValues(h.Source, op)
		m.duration[op] = metricStoreDuration.WithLabelValues(op)
	}
	h.metrics = m
	return nil
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
// counting ErrNotOwner, which is an answer, not a failure).
func (m *handlerMetrics) observeStore(op string, start time.Time, err error) {
	m.duration[op].Observe(time.Since(start).Seconds())
	if err != nil && !errors.Is(err, ErrNotOwner) {
		m.storeErrors[op].Inc()
	}
}
