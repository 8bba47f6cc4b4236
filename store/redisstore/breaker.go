package redisstore

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// breaker stops a store from paying its timeout on every request during an
// outage (docs/stores.md): one per Redis node (node.go). It opens after breakerThreshold consecutive failures;
// while it is open every call fails at once, and a background goroutine
// probes the store until it answers, then closes the breaker. No request
// traffic is let through while it is open, so an outage never costs a
// request more than an immediate error.
type breaker struct {
	name     string // the node's address, for the logs
	failures atomic.Int32
	isOpen   atomic.Bool

	probe    func(context.Context) error
	timeout  time.Duration // bound of one probe
	interval time.Duration // time between probes
	logger   *zap.Logger

	mu      sync.Mutex
	stopped bool
	stop    chan struct{}
	wg      sync.WaitGroup
}

// breakerThreshold is the number of consecutive failures that opens the
// breaker.
const breakerThreshold = 3

// breakerProbeInterval is the time between two probes of an open breaker.
var breakerProbeInterval = 500 * time.Millisecond

func newBreaker(name string, probe func(context.Context) error, timeout time.Duration, logger *zap.Logger) *breaker {
	return &breaker{
		name:     name,
		probe:    probe,
		timeout:  timeout,
		interval: breakerProbeInterval,
		logger:   logger,
		stop:     make(chan struct{}),
	}
}

// allow reports whether a call may go to the store.
func (b *breaker) allow() bool { return !b.isOpen.Load() }

// success records a call that the store answered.
func (b *breaker) success() {
	if b.failures.Load() != 0 {
		b.failures.Store(0)
	}
}

// failure records a call that failed or timed out.
func (b *breaker) failure() {
	if b.failures.Add(1) >= breakerThreshold {
		b.open()
	}
}

// open opens the breaker and starts probing, unless it is already open or
// the breaker was stopped.
func (b *breaker) open() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopped || b.isOpen.Load() {
		return
	}
	b.isOpen.Store(true)
	b.logger.Warn("redis store unreachable: failing calls at once until it answers again",
		zap.String("address", b.name), zap.Int("consecutive_failures", int(b.failures.Load())))
	b.wg.Add(1)
	go b.probeUntilUp()
}

func (b *breaker) probeUntilUp() {
	defer b.wg.Done()
	ticker := time.NewTicker(b.interval)
	defer ticker.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-ticker.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
		err := b.probe(ctx)
		cancel()
		if err != nil {
			continue
		}
		b.mu.Lock()
		b.failures.Store(0)
		b.isOpen.Store(false)
		b.mu.Unlock()
		b.logger.Info("redis store reachable again", zap.String("address", b.name))
		return
	}
}

// close stops probing and waits for the probe goroutine to end. The breaker
// does not open again afterwards.
func (b *breaker) close() {
	b.mu.Lock()
	if !b.stopped {
		b.stopped = true
		close(b.stop)
	}
	b.mu.Unlock()
	b.wg.Wait()
}
