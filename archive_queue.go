package webhookidempotency

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The archive's background queue: events that do not go out with a key's
// completion (replays, conflicts, inbox acceptances, failures) wait here
// and are appended in batches by one goroutine per handler, off the request
// path. The queue is bounded in events and in bytes; a full queue drops the
// event and counts it, and never blocks a request.

// Bounds of the queue, per handler.
var (
	archiveQueueEvents = 1024
	archiveQueueBytes  = int64(32 << 20)
	archiveBatchMax    = 128
	// archiveStopWait bounds how long stopping waits for the queue's
	// last appends (a reload waits for it).
	archiveStopWait = 2 * time.Second
)

// archiveQueue holds events waiting to be appended.
type archiveQueue struct {
	a       *archive
	ch      chan *archiveEntry
	bytes   atomic.Int64
	mu      sync.RWMutex // guards stopped against add
	stopped bool
	start   sync.Once
	done    chan struct{}
}

func newArchiveQueue(a *archive) *archiveQueue {
	return &archiveQueue{
		a:    a,
		ch:   make(chan *archiveEntry, archiveQueueEvents),
		done: make(chan struct{}),
	}
}

// add queues an event, or drops and counts it when the queue is full or
// stopped. The flusher starts with the first event, so `caddy validate`
// starts nothing.
func (q *archiveQueue) add(e *archiveEntry) {
	e.ownBody()
	q.mu.RLock()
	defer q.mu.RUnlock()
	if q.stopped {
		q.a.metrics.dropped.Inc()
		return
	}
	if q.bytes.Add(int64(e.sizeBytes)) > archiveQueueBytes {
		q.bytes.Add(-int64(e.sizeBytes))
		q.a.metrics.dropped.Inc()
		return
	}
	q.start.Do(func() { go q.flush() })
	select {
	case q.ch <- e:
	default:
		q.bytes.Add(-int64(e.sizeBytes))
		q.a.metrics.dropped.Inc()
	}
}

// flush appends queued events in batches until the queue is closed.
func (q *archiveQueue) flush() {
	defer close(q.done)
	batch := make([]*archiveEntry, 0, archiveBatchMax)
	for e := range q.ch {
		batch = append(batch[:0], e)
	fill:
		for len(batch) < archiveBatchMax {
			select {
			case e, ok := <-q.ch:
				if !ok {
					break fill
				}
				batch = append(batch, e)
			default:
				break fill
			}
		}
		size := 0
		for _, e := range batch {
			size += e.sizeBytes
		}
		ctx, cancel := context.WithTimeout(context.Background(), q.a.backend.timeout())
		err := q.a.backend.appendBatch(ctx, batch)
		cancel()
		q.a.appended(len(batch), err)
		q.bytes.Add(-int64(size))
		clear(batch)
	}
}

// stop closes the queue and waits, at most archiveStopWait, for the
// events it holds to be appended; events added afterwards are dropped.
func (q *archiveQueue) stop() {
	if !q.seal() {
		return
	}
	started := true
	q.start.Do(func() { started = false })
	if !started {
		return
	}
	select {
	case <-q.done:
	case <-time.After(archiveStopWait):
		q.a.logger.Warn("the archive queue was still appending when the configuration stopped; its last events finish in the background")
	}
}

// seal stops the queue taking events and closes its channel; it reports
// false when the queue was already sealed.
func (q *archiveQueue) seal() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.stopped {
		return false
	}
	q.stopped = true
	close(q.ch)
	return true
}

// The archive's metrics (docs/operating.md#metrics).
var (
	metricArchiveEvents = newCounter("archive_events_total",
		"Events appended to the archive, by source.",
		"source")

	metricArchiveErrors = newCounter("archive_errors_total",
		"Events that could not be appended to the archive (a store error), by source.",
		"source")

	metricArchiveDropped = newCounter("archive_dropped_total",
		"Events not archived because the archive's background queue was full, by source.",
		"source")
)

// archiveMetrics holds one archive's resolved series.
type archiveMetrics struct {
	events, errors, dropped prometheus.Counter
	lastWarned              atomic.Int64
}

func newArchiveMetrics(source string) *archiveMetrics {
	return &archiveMetrics{
		events:  metricArchiveEvents.WithLabelValues(source),
		errors:  metricArchiveErrors.WithLabelValues(source),
		dropped: metricArchiveDropped.WithLabelValues(source),
	}
}
