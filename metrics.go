package webhookidempotency

import (
	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/metrics"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/results"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/series"
)

// Each handler's series of the module's collectors (internal/metrics,
// docs/operating.md#metrics), resolved once so the hot path does no label
// lookups.

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

// handlerMetrics holds one handler's resolved series.
type handlerMetrics struct {
	requests    [len(results.All)]prometheus.Counter
	suspected   prometheus.Counter
	storeErrors [numStoreOps]prometheus.Counter
	duration    [numStoreOps]prometheus.Observer

	unrecorded prometheus.Counter // answers whose recording finally failed (lease.go)

	series *series.Recorder // the counts kept in the store, once the store is known
}

// registerMetrics registers the collectors in the configuration's registry
// (which may be nil) and resolves the series of one source.
func registerMetrics(ctx caddy.Context, source string) (*handlerMetrics, error) {
	if err := metrics.Register(ctx.GetMetricsRegistry()); err != nil {
		return nil, err
	}
	m := &handlerMetrics{suspected: metrics.ReplaysSuspected.WithLabelValues(source)}
	for i, r := range results.All {
		m.requests[i] = metrics.Requests.WithLabelValues(source, r)
	}
	for op, name := range storeOpNames {
		m.storeErrors[op] = metrics.StoreErrors.WithLabelValues(source, name)
		m.duration[op] = metrics.StoreDuration.WithLabelValues(name)
	}
	m.unrecorded = metrics.AnswersUnrecorded.WithLabelValues(source)
	return m, nil
}

// countResult counts one request's result, by its index in results.All
// (none for -1), in the metric and in the store's counts.
func (m *handlerMetrics) countResult(i int) {
	if i >= 0 {
		m.requests[i].Inc()
		m.series.Result(i)
	}
}

// results reads the counts of each result since the process started.
func (m *handlerMetrics) results() map[string]int64 {
	out := make(map[string]int64, len(results.All))
	for i, res := range results.All {
		var d dto.Metric
		if err := m.requests[i].Write(&d); err == nil {
			out[res] = int64(d.GetCounter().GetValue())
		}
	}
	return out
}
