package archive

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// The archive's background queue: events that do not go out with a key's
// completion (replays, conflicts, inbox acceptances, failures) wait here
// and are appended in batches by one goroutine per handler, off the request
// path. The queue is bounded in events and in bytes; a full queue drops the
// event and counts it, and never blocks a request.

// Bounds of the queue, per handler.
var (
	queueEvents = 1024
	queueBytes  = int64(32 << 20)
	batchMax    = 128
	// stopWait bounds how long stopping waits for the queue's
	// last appends (a reload waits for it).
	stopWait = 2 * time.Second
)

// queue holds events waiting to be appended.
type queue struct {
	a       *Archive
	ch      chan *Entry
	bytes   atomic.Int64
	mu      sync.RWMutex // guards stopped against add
	stopped bool
	start   sync.Once
	done    chan struct{}
}

func newQueue(a *Archive) *queue {
	return &queue{
		a:    a,
		ch:   make(chan *Entry, queueEvents),
		done: make(chan struct{}),
	}
}

// add queues an event, or drops and counts it when the queue is full or
// stopped. The flusher starts with the first event, so `caddy validate`
// starts nothing.
func (q *queue) add(e *Entry) {
	e.OwnBody()
	q.mu.RLock()
	defer q.mu.RUnlock()
	if q.stopped {
		q.a.metrics.dropped.Inc()
		return
	}
	if q.bytes.Add(int64(e.size())) > queueBytes {
		q.bytes.Add(-int64(e.size()))
		q.a.metrics.dropped.Inc()
		return
	}
	q.start.Do(func() { go q.flush() })
	select {
	case q.ch <- e:
	default:
		q.bytes.Add(-int64(e.size()))
		q.a.metrics.dropped.Inc()
	}
}

// flush appends queued events in batches until the queue is closed.
func (q *queue) flush() {
	defer close(q.done)
	batch := make([]*Entry, 0, batchMax)
	for e := range q.ch {
		batch = append(batch[:0], e)
	fill:
		for len(batch) < batchMax {
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
		admitted := make([]*Entry, 0, len(batch))
		for _, e := range batch {
			size += e.size()
			if q.a.admit(e) {
				admitted = append(admitted, e)
			}
		}
		if len(admitted) > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), q.a.backend.timeout())
			err := q.a.backend.appendBatch(ctx, admitted)
			cancel()
			q.a.appended(len(admitted), err)
		}
		q.bytes.Add(-int64(size))
		clear(batch)
	}
}

// stop closes the queue and waits, at most stopWait, for the
// events it holds to be appended; events added afterwards are dropped.
func (q *queue) stop() {
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
	case <-time.After(stopWait):
		q.a.logger.Warn("the archive queue was still appending when the configuration stopped; its last events finish in the background")
	}
}

// seal stops the queue taking events and closes its channel; it reports
// false when the queue was already sealed.
func (q *queue) seal() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.stopped {
		return false
	}
	q.stopped = true
	close(q.ch)
	return true
}
