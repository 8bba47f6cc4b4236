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
// renews the lease every third of it, until stopped.
type renewal struct {
	h                 *Handler
	key, guard, owner string
	mu                sync.Mutex
	timer             *time.Timer
	stopped           bool
}

func (h *Handler) startRenewal(key, guard, owner string) *renewal {
	rn := &renewal{h: h, key: key, guard: guard, owner: owner}
	rn.mu.Lock()
	rn.timer = time.AfterFunc(time.Duration(h.Lease)/3, rn.fire)
	rn.mu.Unlock()
	return rn
}

func (rn *renewal) fire() {
	lease := time.Duration(rn.h.Lease)
	err := rn.h.store.renew(context.Background(), rn.key, rn.guard, rn.owner, lease)
	rn.mu.Lock()
	defer rn.mu.Unlock()
	if rn.stopped {
		return
	}
	if errors.Is(err, store.ErrNotOwner) {
		rn.h.logger.Warn("lease on idempotency key lost while the request was still being handled; a duplicate may be processed concurrently",
			zap.String("key", rn.key))
		return
	}
	if err != nil {
		rn.h.logger.Warn("renewing lease failed", zap.String("key", rn.key), zap.Error(err))
	}
	rn.timer.Reset(lease / 3)
}

func (rn *renewal) stop() {
	rn.mu.Lock()
	rn.stopped = true
	rn.timer.Stop()
	rn.mu.Unlock()
}
