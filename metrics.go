package webhookidempotency

import (
	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/metrics"
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

// allResults lists every result, so each handler resolves its counters once.
var allResults = [...]string{
	resultNew, resultReplayed, resultConflict, resultMismatch, resultInvalidSignature,
	resultTooLarge, resultBypassed, resultUnavailable, resultSkipped, resultHandshake,
	resultAmbiguous, resultLoop, resultOverBudget,
	resultForbidden,
}

// handlerMetrics holds one handler's resolved series.
type handlerMetrics struct {
	requests    [len(allResults)]prometheus.Counter
	suspected   prometheus.Counter
	storeErrors [numStoreOps]prometheus.Counter
	duration    [numStoreOps]prometheus.Observer

	unrecorded prometheus.Counter // answers whose recording finally failed (lease.go)
}

// registerMetrics registers the collectors in the configuration's registry
// (which may be nil) and resolves the series of one source.
func registerMetrics(ctx caddy.Context, source string) (*handlerMetrics, error) {
	if err := metrics.Register(ctx.GetMetricsRegistry()); err != nil {
		return nil, err
	}
	m := &handlerMetrics{suspected: metrics.ReplaysSuspected.WithLabelValues(source)}
	for i, r := range allResults {
		m.requests[i] = metrics.Requests.WithLabelValues(source, r)
	}
	for op, name := range storeOpNames {
		m.storeErrors[op] = metrics.StoreErrors.WithLabelValues(source, name)
		m.duration[op] = metrics.StoreDuration.WithLabelValues(name)
	}
	m.unrecorded = metrics.AnswersUnrecorded.WithLabelValues(source)
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
