package inbox

import (
	"cmp"
	"context"
	"math/big"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/results"
)

// Stale events (docs/inbox.md#newer-than). With `newer_than` and
// `order_by`, the store keeps, for each group, the largest newer_than
// value it has delivered (for the accept ttl); an event whose value is
// lower when its turn comes is ended without delivery: a provider that
// retried an older state after a newer one (Shopify's orders/updated)
// does not overwrite the newer state. The group delivers one event at a
// time, so the value read before the attempt is still the largest when
// the attempt is recorded.

// doneWith is how a delivered event ends in the store: as ended does, and
// its newer_than value becomes its group's largest.
func (ib *Inbox) doneWith(m message) done {
	d := ib.ended(m)
	if m.ev.Newer != "" && m.ev.Group != "" {
		d.newest, d.newestTTL = m.ev.Newer, ib.acceptTTL
	}
	return d
}

// ended is how an event ends in the store, delivered or stale: its key
// answers duplicates for ttl from now, unless other destinations still
// deliver it (it keeps the accept ttl then).
func (ib *Inbox) ended(m message) done {
	if m.ev.Fanout > 1 {
		return done{}
	}
	return done{ttl: ib.cfg.TTL}
}

// stale ends m without delivering it when its newer_than value is lower
// than the largest its group has delivered, archives it (results.Stale)
// and counts it; it reports whether it did. A value that cannot be read
// delivers the event: at least once.
func (ib *Inbox) stale(ctx context.Context, m message, logger *zap.Logger) bool {
	if m.ev.Newer == "" || m.ev.Group == "" {
		return false
	}
	newest, err := ib.q.newest(ctx, m)
	if err != nil {
		ib.warn("reading an inbox group's newest value failed; delivering the event", err)
		return false
	}
	if newest == "" || compareValues(m.ev.Newer, newest) >= 0 {
		return false
	}
	if err := ib.q.delivered(ctx, m, ib.ended(m)); err != nil {
		// it stays in delivery: taken over and looked at again
		logger.Warn("ending a stale inbox event failed; it will be taken over", zap.Error(err))
		return true
	}
	ib.metrics.stale.Inc()
	if ib.cfg.Archive != nil {
		ib.cfg.Archive(&m.ev.Request, results.Stale)
	}
	logger.Info("inbox event not delivered: its group has delivered a newer one (newer_than)",
		zap.String("value", m.ev.Newer), zap.String("newest", newest))
	return true
}

// compareValues orders two newer_than values: as times when both are RFC
// 3339 timestamps, as numbers when both are
// (integers exactly, whatever their size), else byte by byte.
func compareValues(a, b string) int {
	if ta, err := time.Parse(time.RFC3339Nano, a); err == nil {
		if tb, err := time.Parse(time.RFC3339Nano, b); err == nil {
			return ta.Compare(tb)
		}
	}
	if ia, ok := new(big.Int).SetString(a, 10); ok {
		if ib, ok := new(big.Int).SetString(b, 10); ok {
			return ia.Cmp(ib) // integers of any size, exactly
		}
	}
	if na, err := strconv.ParseFloat(strings.TrimSpace(a), 64); err == nil {
		if nb, err := strconv.ParseFloat(strings.TrimSpace(b), 64); err == nil {
			return cmp.Compare(na, nb)
		}
	}
	return strings.Compare(a, b)
}
