// Package metrics holds the module's Prometheus collectors
// (docs/operating.md#metrics). They are built once per process and
// registered in each configuration's registry, so their values survive
// config reloads. No label carries an idempotency key.
package metrics

import (
	"errors"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// The collectors, caddy_webhook_idempotency_<name>.
var (
	Requests = newCounter("requests_total",
		"Requests handled by webhook_idempotency, by source and result.",
		"source", "result")

	ReplaysSuspected = newCounter("replays_suspected_total",
		"Deliveries processed although their signed bytes were seen within ttl under another id (replay_guard flag), by source.",
		"source")

	AnswersUnrecorded = newCounter("answers_unrecorded_total",
		"Answers of the application that could not be recorded: the store failed until the request's lease ran out, or the key was no longer the request's. A duplicate of such a delivery is processed again.",
		"source")

	StoreErrors = newCounter("store_errors_total",
		"Failed store calls, by source and operation.",
		"source", "op")

	StoreDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "caddy",
		Subsystem: "webhook_idempotency",
		Name:      "store_duration_seconds",
		Help:      "Duration of store calls, by operation.",
		Buckets:   []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
	}, []string{"op"})

	StoreRestarts = newCounter("store_restarts_total",
		"Times a Redis node was found to be another server process than before (a restart or a failover): what it held may be lost.",
		"address")

	StoreFileHealthy = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "caddy",
		Subsystem: "webhook_idempotency",
		Name:      "store_file_healthy",
		Help:      "1 while the file store's file and its log are the files Caddy opened, 0 once either was deleted or replaced under the running Caddy (what is recorded since is lost at the next restart), by path.",
	}, []string{"path"})

	StoreFileLost = newCounter("store_file_lost_total",
		"Times the file store's file or its log was found deleted or replaced under the running Caddy, by path.",
		"path")

	StoreReplicasShort = newCounter("store_replicas_short_total",
		"Writes that fewer Redis replicas than `replicas` acknowledged within its timeout, by master and operation: an inbox acceptance (accept), refused with 503, or a completion (complete), recorded on the master only.",
		"address", "op")

	InboxEvents = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "caddy",
		Subsystem: "webhook_idempotency",
		Name:      "inbox_events",
		Help:      "Inbox events in the store, by source and state (pending, scheduled, dead), as last read by this instance.",
	}, []string{"source", "state"})

	InboxDeliveries = newCounter("inbox_deliveries_total",
		"Inbox delivery attempts by their outcome (delivered, retried, dead_lettered), and events ended without delivery because their group delivered a newer one (stale), by source.",
		"source", "outcome")

	InboxDeliveryLag = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "caddy",
		Subsystem: "webhook_idempotency",
		Name:      "inbox_delivery_lag_seconds",
		Help:      "Time from an inbox event's acceptance to the 2xx that delivered it (retries and waits included), by source.",
		Buckets:   []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600, 12 * 3600, 24 * 3600},
	}, []string{"source"})

	InboxRate = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "caddy",
		Subsystem: "webhook_idempotency",
		Name:      "inbox_rate_limit",
		Help:      "Deliveries a second the inbox's rate limit allows now (lower than its rate while a 429 slows the source down), by source; only for inboxes with a rate.",
	}, []string{"source"})

	InboxPaused = newGauge("inbox_paused",
		"1 while an inbox destination's deliveries are paused (the destination, or its whole source), by source and destination; events are still accepted.",
		"source", "destination")

	InboxBreakerOpen = newGauge("inbox_breaker_open",
		"1 while an inbox destination's breaker stops its deliveries (open, or probing with one attempt), by source and destination.",
		"source", "destination")

	AnswerSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "caddy",
		Subsystem: "webhook_idempotency",
		Name:      "answer_seconds",
		Help:      "With respond app within: time from an event's acceptance to the application's answer to its first attempt, in time or not (attempts that got no answer are not observed), by source.",
		Buckets:   []float64{.01, .025, .05, .1, .25, .5, 1, 2, 3, 4, 5, 8, 10, 15, 20, 30, 60},
	}, []string{"source"})

	ArchiveEvents = newCounter("archive_events_total",
		"Events appended to the archive, by source.",
		"source")

	ArchiveErrors = newCounter("archive_errors_total",
		"Events that could not be appended to the archive (a store error), by source.",
		"source")

	RefusalsListed = newCounter("refusals_listed_total",
		"Refused requests added to their source's list of refusals.", "source")
	RefusalsUnlisted = newCounter("refusals_unlisted_total",
		"Refused requests left out of their source's list of refusals: past the rate at which the list is written (a flood of forgeries), or its queue full.", "source")
	RefusalsErrors = newCounter("refusals_errors_total",
		"Refused requests the store failed to add to their source's list of refusals.", "source")
	ArchiveDropped = newCounter("archive_dropped_total",
		"Events not archived because the archive's background queue was full, by source.",
		"source")

	AllowListRanges = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "caddy",
		Subsystem: "webhook_idempotency",
		Name:      "allow_list_ranges",
		Help:      "Address ranges in use from each allow_ips list (a provider, a URL or a file).",
	}, []string{"list"})

	AllowListRefreshes = newCounter("allow_list_refreshes_total",
		"Fetches and reads of allow_ips lists, by list and outcome (ok, failed: unreachable or malformed, the last good list kept).",
		"list", "outcome")

	Reconciled = newCounter("reconciled_total",
		"Events reconciliation recovered, by source: entered into the route as if delivered (stripe), or redelivered by the provider at the route's request (github).",
		"source")

	ReconcilePasses = newCounter("reconcile_passes_total",
		"Reconciliation passes this instance ran, by source and result (ok, failed: stopped part-way, resumed by the next pass).",
		"source", "result")

	ReconcileLastSuccess = newGauge("reconcile_last_success_timestamp_seconds",
		"Unix time the last reconciliation pass of the source completed, by any instance sharing the store; 0 until one has.",
		"source")

	ReconcileStarted = newGauge("reconcile_started_timestamp_seconds",
		"Unix time reconciliation of the source started on this instance (its configuration was loaded): the alert on reconcile_last_success_timestamp_seconds counts from here until a first pass succeeds.",
		"source")

	ReconcileInterval = newGauge("reconcile_interval_seconds",
		"The configured time between reconciliation passes of the source (every), for alerting rules.",
		"source")
)

// BufferedBodies is the number of bytes the request bodies being read or
// handled take now, across the process: the handlers count their body
// buffers here, against the global option's body_budget.
var BufferedBodies atomic.Int64

// BufferedBodyBytes reports BufferedBodies.
var BufferedBodyBytes = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
	Namespace: "caddy",
	Subsystem: "webhook_idempotency",
	Name:      "buffered_body_bytes",
	Help:      "Bytes the request bodies being read or handled take now, across the process (counted against body_budget).",
}, func() float64 { return float64(BufferedBodies.Load()) })

// all lists every collector, for Register.
var all = []prometheus.Collector{
	Requests, ReplaysSuspected, AnswersUnrecorded, StoreErrors, StoreDuration, StoreRestarts, StoreReplicasShort, StoreFileHealthy, StoreFileLost,
	InboxEvents, InboxDeliveries, InboxDeliveryLag, InboxRate, InboxPaused, InboxBreakerOpen, AnswerSeconds,
	ArchiveEvents, ArchiveErrors, ArchiveDropped, RefusalsListed, RefusalsUnlisted, RefusalsErrors,
	BufferedBodyBytes,
	AllowListRanges, AllowListRefreshes,
	Reconciled, ReconcilePasses, ReconcileLastSuccess, ReconcileStarted, ReconcileInterval,
}

// Register registers every collector in reg (a configuration's registry,
// which may be nil); collectors already registered there are fine.
func Register(reg prometheus.Registerer) error {
	if reg == nil {
		return nil
	}
	for _, c := range all {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return err
			}
		}
	}
	return nil
}

// newGauge builds a gauge of the module's namespace
// (caddy_webhook_idempotency_<name>).
func newGauge(name, help string, labels ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "caddy",
		Subsystem: "webhook_idempotency",
		Name:      name,
		Help:      help,
	}, labels)
}

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
