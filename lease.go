package webhookidempotency

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// renewal keeps a claim's lease alive while the request is handled: once
// a third of the lease has passed since it was taken or last renewed, it
// is renewed, until stopped. A batch's renewal renews every key it claimed
// (batch.go). A renewal is one entry of its handler's renewer; it is part
// of the request's state, so taking a claim allocates nothing for it.
type renewal struct {
	h          *Handler
	c          claimed // what is renewed (request.go)
	prev, next *renewal
	renewing   bool      // a renewal of it is under way (under the renewer's lock)
	lost       bool      // a renewal found the key no longer the request's: none follows
	stopped    bool      // the request is done with it (under the renewer's lock)
	held       time.Time // when the lease last started: the claim, or a renewal that succeeded
}

// renewer renews the leases of a handler's claims in flight. One goroutine,
// running while any claim is in flight, looks at them every sixth of the
// lease and renews those held for a third of it or more, each in a
// goroutine of its own: a lease is renewed before half of it has run, and
// a request that takes a claim only joins a list (a timer per request cost
// it three allocations and the runtime's timer heap twice).
type renewer struct {
	mu          sync.Mutex
	first, last *renewal // the claims in flight
	running     bool     // the goroutine runs
}

// startRenewal starts renewing c's lease through rn, the request's own;
// held is when the lease started, as near as the caller knows (the claim
// has returned, and the request is about to be handed on: nothing between
// waits for anything).
func (h *Handler) startRenewal(rn *renewal, c claimed, held time.Time) {
	*rn = renewal{h: h, c: c, held: held}
	rr := h.renewer
	rr.mu.Lock()
	rn.prev = rr.last
	if rr.last != nil {
		rr.last.next = rn
	} else {
		rr.first = rn
	}
	rr.last = rn
	if !rr.running {
		rr.running = true
		go rr.run(time.Duration(h.Lease))
	}
	rr.mu.Unlock()
}

// run renews what is due every sixth of the lease, until no claim is in
// flight.
func (rr *renewer) run(lease time.Duration) {
	tick := time.NewTicker(max(lease/6, time.Millisecond))
	defer tick.Stop()
	for range tick.C {
		now := time.Now()
		rr.mu.Lock()
		if rr.first == nil {
			rr.running = false
			rr.mu.Unlock()
			return
		}
		for rn := rr.first; rn != nil; rn = rn.next {
			if !rn.renewing && !rn.lost && now.Sub(rn.held) >= lease/3 {
				rn.renewing = true
				go rn.fire(lease)
			}
		}
		rr.mu.Unlock()
	}
}

// fire renews the lease once.
func (rn *renewal) fire(lease time.Duration) {
	start := time.Now()
	err := rn.c.renew(context.Background(), lease)
	rr := rn.h.renewer
	rr.mu.Lock()
	defer rr.mu.Unlock()
	rn.renewing = false
	switch {
	case err == nil:
		rn.held = start
	case errors.Is(err, store.ErrNotOwner):
		rn.lost = true
		if !rn.stopped {
			rn.h.logger.Warn("lease on idempotency key lost while the request was still being handled; a duplicate may be processed concurrently",
				zap.String("key", rn.c.name()))
		}
	case !rn.stopped:
		// tried again at the next look
		rn.h.logger.Warn("renewing lease failed", zap.String("key", rn.c.name()), zap.Error(err))
	}
}

// stop ends the renewal: the claim leaves the renewer's list. A renewal
// under way finishes, and changes nothing but the time the lease was held.
func (rn *renewal) stop() {
	rr := rn.h.renewer
	rr.mu.Lock()
	if !rn.stopped {
		rn.stopped = true
		if rn.prev != nil {
			rn.prev.next = rn.next
		} else {
			rr.first = rn.next
		}
		if rn.next != nil {
			rn.next.prev = rn.prev
		} else {
			rr.last = rn.prev
		}
		rn.prev, rn.next = nil, nil
	}
	rr.mu.Unlock()
}

// complete records the request's answer through complete once the
// renewal is stopped, retried as retryCompletion says with the renewal's
// key and lease (docs/stores.md, "When Redis fails"). A recording that
// finally fails is counted; the caller logs it.
func (rn *renewal) complete(complete func() error) error {
	lease := time.Duration(rn.h.Lease)
	rn.h.renewer.mu.Lock()
	held := rn.held
	rn.h.renewer.mu.Unlock()
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
// first call failed in any case (a store that renews but cannot record,
// such as a full disk, does not hold the request for ever). A store
// failover shorter than the lease then loses no answer, and the duplicates
// that arrive meanwhile get 409 (the key is in flight), not a second
// execution. It returns the number of calls and complete's last error
// (renew's when it found the key no longer owned).
func retryCompletion(complete, renew func() error, lease time.Duration, held time.Time) (int, error) {
	pause := completionRetryFirst
	nextRenew := held.Add(lease / 3)
	var until time.Time
	for calls := 1; ; calls++ {
		err := complete()
		if err == nil || errors.Is(err, store.ErrNotOwner) {
			return calls, err
		}
		if calls == 1 {
			// taken once a call has failed: the one that succeeds at
			// once, nearly every one, reads no clock here
			until = time.Now().Add(lease)
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
