package webhookidempotency

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// renewal keeps a claim's lease alive while the request is handled: it
// renews the lease every third of it, until stopped. A batch's renewal
// renews every key it claimed (batch.go).
type renewal struct {
	h       *Handler
	c       claimed // what is renewed (request.go)
	mu      sync.Mutex
	timer   *time.Timer
	stopped bool
	held    time.Time // when the lease last started: the claim, or a renewal that succeeded
}

// startRenewal starts renewing c's lease.
func (h *Handler) startRenewal(c claimed) *renewal {
	rn := &renewal{h: h, c: c, held: time.Now()}
	rn.mu.Lock()
	rn.timer = time.AfterFunc(time.Duration(h.Lease)/3, rn.fire)
	rn.mu.Unlock()
	return rn
}

func (rn *renewal) fire() {
	lease := time.Duration(rn.h.Lease)
	start := time.Now()
	err := rn.c.renew(context.Background(), lease)
	rn.mu.Lock()
	defer rn.mu.Unlock()
	if err == nil {
		rn.held = start
	}
	if rn.stopped {
		return
	}
	if errors.Is(err, store.ErrNotOwner) {
		rn.h.logger.Warn("lease on idempotency key lost while the request was still being handled; a duplicate may be processed concurrently",
			zap.String("key", rn.c.name()))
		return
	}
	if err != nil {
		rn.h.logger.Warn("renewing lease failed", zap.String("key", rn.c.name()), zap.Error(err))
	}
	rn.timer.Reset(lease / 3)
}

func (rn *renewal) stop() {
	rn.mu.Lock()
	rn.stopped = true
	rn.timer.Stop()
	rn.mu.Unlock()
}

// complete records the request's answer through complete once the
// renewal is stopped, retried as retryCompletion says with the renewal's
// key and lease (docs/stores.md, "When Redis fails"). A recording that
// finally fails is counted; the caller logs it.
func (rn *renewal) complete(complete func() error) error {
	lease := time.Duration(rn.h.Lease)
	rn.mu.Lock()
	held := rn.held
	rn.mu.Unlock()
	renew := func() error { return rn.c.renew(context.Background(), lease) }
	calls, err := retryCompletion(complete, renew, lease, held)
	if err != nil {
		rn.h.metrics.unrecorded.Inc()
	} else if calls > 1 {
		rn.h.logger.Info("recorded the answer after the store failed",
			zap.String("key", rn.c.name()), zap.Int("attempts", calls))
	}
	return err
}

// Pauses between the calls of retryCompletion: the first, doubling up to
// the longest.
var (
	completionRetryFirst = 50 * time.Millisecond
	completionRetryLast  = 500 * time.Millisecond
)

// retryCompletion calls complete until it succeeds, answers
// store.ErrNotOwner (the key is no longer the request's), or the lease has
// run out: held is when it last started, and renew, called every third of
// the lease meanwhile, starts it again. Retries end one lease after the
// first call in any case (a store that renews but cannot record, such as a
// full disk, does not hold the request for ever). A store failover shorter
// than the lease then loses no answer, and the duplicates that arrive
// meanwhile get 409 (the key is in flight), not a second execution. It
// returns the number of calls and complete's last error (renew's when it
// found the key no longer owned).
func retryCompletion(complete, renew func() error, lease time.Duration, held time.Time) (int, error) {
	pause := completionRetryFirst
	nextRenew := held.Add(lease / 3)
	until := time.Now().Add(lease)
	for calls := 1; ; calls++ {
		err := complete()
		if err == nil || errors.Is(err, store.ErrNotOwner) {
			return calls, err
		}
		left := time.Until(held.Add(lease))
		if left = min(left, time.Until(until)); left <= 0 {
			return calls, err
		}
		time.Sleep(min(pause, left))
		pause = min(2*pause, completionRetryLast)
		if now := time.Now(); !now.Before(nextRenew) {
			switch rerr := renew(); {
			case rerr == nil:
				held = now
			case errors.Is(rerr, store.ErrNotOwner):
				return calls, rerr
			}
			nextRenew = time.Now().Add(lease / 3)
		}
	}
}
