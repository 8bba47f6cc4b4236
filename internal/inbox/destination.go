package inbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// Destinations (docs/inbox.md#routes). An event goes to every route whose
// rule it matches, else to deliver_to; it is stored once per destination,
// each copy delivered by that destination's inbox with its own attempts,
// order, rate, breaker and dead letters.
//
// deliver_to's queue is the source's own (the keys and buckets an inbox
// without routes has); a route's queue is named after a hash of its URL,
// so a reload that keeps a route's URL keeps its queue. The store records
// the routes of the source (their ids and URLs): a reload that removes a
// route, or an instance running another configuration, leaves its queue
// behind, and every instance then delivers that queue to the URL it was
// recorded with, with deliver_to's options, until it is empty (its dead
// letters redelivered or discarded), when the record is forgotten.
// Nothing already accepted is lost to a change of routes.

// dest is a destination of a source's events.
type dest struct {
	url string
	// queue names its queue in the store: "" for deliver_to's (the
	// source's own keys), else id.
	queue string
	// id names it in the store's pause and breaker state: a hash of its
	// URL, whatever queue it has.
	id   string
	rule string // the route's rule; "" for deliver_to
	// orphan marks a route of another configuration, delivered until its
	// queue is empty.
	orphan bool
}

// destID names a destination by its URL: 12 hex digits of its SHA-256.
func destID(url string) string {
	h := sha256.Sum256([]byte(url))
	return hex.EncodeToString(h[:6])
}

// targets returns the inboxes of an event's destinations: those of the
// routes it matches, in the order of the configuration, once each, else
// deliver_to's.
func (ib *Inbox) targets(ev *event.Request) []*Inbox {
	var out []*Inbox
	for i, r := range ib.cfg.Routes {
		if r.Match(ev) && !slices.Contains(out, ib.routeTo(i)) {
			out = append(out, ib.routeTo(i))
		}
	}
	if len(out) == 0 {
		return []*Inbox{ib}
	}
	return out
}

// routeTo returns the inbox of route i of the configuration: deliver_to's
// for its URL, else the first route's of that URL.
func (ib *Inbox) routeTo(i int) *Inbox {
	u := ib.cfg.Routes[i].URL
	if u == ib.cfg.DeliverTo {
		return ib
	}
	for _, r := range ib.routes {
		if r.dest.url == u && !r.dest.orphan {
			return r
		}
	}
	return ib // not reached: New made one for every URL
}

// destination returns the inbox of the destination named by its URL (as
// configured, or as the admin API shows it) or its id; nil for none.
func (ib *Inbox) destination(name string) *Inbox {
	for _, d := range ib.all() {
		if name == d.dest.url || name == d.dest.id || name == d.cfg.Redact.URI(d.dest.url) {
			return d
		}
	}
	return nil
}

// refreshDestinations records this configuration's routes in the store,
// starts delivering the queues of the routes recorded there that it does
// not have (a reload removed them, or another instance runs another
// configuration), and stops delivering those that are empty, forgetting
// their record. Called by the source's scheduler.
func (ib *Inbox) refreshDestinations(ctx context.Context, s store.Store) {
	routes := make(map[string]string)
	for _, r := range ib.all()[1:] {
		if !r.dest.orphan {
			routes[r.dest.queue] = r.dest.url
		}
	}
	bg, cancel := ib.bg()
	recorded, err := ib.q.destinations(bg, routes)
	cancel()
	if err != nil {
		ib.warn("reading the inbox's routes in the store failed; retrying", err)
		return
	}
	for _, id := range slices.Sorted(maps.Keys(recorded)) {
		if _, ok := routes[id]; ok || id != destID(recorded[id]) || ib.orphan(id) != nil {
			continue
		}
		u := recorded[id]
		cfg := routeConfig(ib.cfg, Route{URL: u})
		o, err := newDestination(cfg, s, dest{url: u, queue: id, id: id, orphan: true}, ib, ib.consumer)
		if err != nil {
			ib.warn("delivering the queue of a route no longer configured failed; retrying", err, zap.String("destination", ib.cfg.Redact.URI(u)))
			continue
		}
		o.acceptTTL = ib.acceptTTL
		o.q.setTTLs(ib.acceptTTL, ib.cfg.TTL)
		ib.mu.Lock()
		if ib.stopped {
			ib.mu.Unlock()
			o.stop()
			return
		}
		ib.routes = append(ib.routes, o)
		ib.mu.Unlock()
		o.start()
		o.logger.Info("delivering the queue of a route this configuration does not have, until it is empty")
	}
	for _, o := range ib.all()[1:] {
		if !o.dest.orphan {
			continue
		}
		c, err := o.Counts(ctx)
		if err != nil || c.Pending+c.Scheduled+c.Dead > 0 {
			continue
		}
		bg, cancel := ib.bg()
		err = ib.q.forgetDestination(bg, o.dest.queue)
		cancel()
		if err != nil {
			ib.warn("forgetting an emptied route failed; retrying", err)
			continue
		}
		ib.mu.Lock()
		ib.routes = slices.DeleteFunc(ib.routes, func(r *Inbox) bool { return r == o })
		ib.mu.Unlock()
		o.stop()
		o.logger.Info("the queue of a route this configuration does not have is empty: no longer delivered")
	}
}

// orphan returns the inbox of the route of another configuration whose
// queue is id, nil when none is delivered.
func (ib *Inbox) orphan(id string) *Inbox {
	for _, r := range ib.all()[1:] {
		if r.dest.orphan && r.dest.queue == id {
			return r
		}
	}
	return nil
}

// destinationsEvery is how often the source's inbox refreshes the record
// of its routes.
var destinationsEvery = 5 * time.Second
