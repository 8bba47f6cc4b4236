package archive

import (
	"context"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/usage"
	"github.com/webhookguard/caddy-webhook-idempotency/store/memstore"
)

// The memory store's archive: a ring of events per source, in the process,
// shared across config reloads and lost on restart (docs/archive.md).

// rings shares each source's ring across config reloads.
var rings = caddy.NewUsagePool()

// archiveRing holds a source's most recent events, oldest first from
// start, in a buffer that grows up to max and then wraps around.
type archiveRing struct {
	mu    sync.Mutex
	buf   []ringEvent
	start int // index of the oldest event
	n     int // events held
	max   int
	last  event.ID
}

type ringEvent struct {
	id event.ID
	e  *Entry
}

// Destruct implements caddy.Destructor: the events go with the last
// configuration that uses the ring.
func (r *archiveRing) Destruct() error { return nil }

// at returns the i-th oldest event. Called with r.mu held.
func (r *archiveRing) at(i int) *ringEvent { return &r.buf[(r.start+i)%len(r.buf)] }

// setMax changes the bound, keeping the newest events.
func (r *archiveRing) setMax(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n == r.max {
		return
	}
	keep := min(r.n, n)
	buf := make([]ringEvent, keep, max(keep, min(n, 1024)))
	for i := range keep {
		buf[i] = *r.at(r.n - keep + i)
	}
	r.buf, r.start, r.n, r.max = buf, 0, keep, n
}

// add appends an event, dropping the oldest when the ring is full and
// those older than retention.
func (r *archiveRing) add(e *Entry, retention time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	id := r.last.Next(uint64(max(e.Received.UnixMilli(), 0)))
	r.last = id
	r.trim(retention)
	switch {
	case r.n < len(r.buf):
		*r.at(r.n) = ringEvent{id, e}
		r.n++
	case len(r.buf) < r.max:
		if r.start != 0 { // make the buffer linear again before it grows
			buf := make([]ringEvent, r.n, max(2*r.n, 16))
			for i := range r.n {
				buf[i] = *r.at(i)
			}
			r.buf, r.start = buf, 0
		}
		r.buf = append(r.buf, ringEvent{id, e})
		r.n++
	default: // full: the newest replaces the oldest
		*r.at(0) = ringEvent{id, e}
		r.start = (r.start + 1) % len(r.buf)
	}
}

// trim drops the events older than retention. Called with r.mu held.
func (r *archiveRing) trim(retention time.Duration) {
	cutoff := now().Add(-retention)
	for r.n > 0 && r.at(0).e.Received.Before(cutoff) {
		*r.at(0) = ringEvent{}
		r.start = (r.start + 1) % len(r.buf)
		r.n--
	}
}

// memoryBackend is the archive of a handler on the memory store.
type memoryBackend struct {
	store     *memstore.Store
	ring      *archiveRing
	ref       usage.Ref // on ring
	retention time.Duration
	mu        sync.Mutex // guards ref
}

func newMemoryBackend(s *memstore.Store, a *Archive) (*memoryBackend, error) {
	key := a.cfg.name() + ":" + a.cfg.Source
	v, _, err := rings.LoadOrNew(key, func() (caddy.Destructor, error) { return new(archiveRing), nil })
	if err != nil {
		return nil, err
	}
	ring := v.(*archiveRing)
	ring.setMax(a.cfg.MaxEvents)
	return &memoryBackend{store: s, ring: ring, ref: usage.NewRef(rings, key), retention: a.cfg.Retention}, nil
}

func (m *memoryBackend) completeAndAppend(ctx context.Context, key, guard, owner string, record []byte, ttl time.Duration, e *Entry) (err, appendErr error) {
	err = m.store.CompleteGuarded(ctx, key, guard, owner, record, ttl)
	e.OwnBody() // the ring outlives the request's buffers
	e.ownAttempts()
	m.ring.add(e, m.retention)
	return err, nil
}

func (m *memoryBackend) appendBatch(_ context.Context, es []*Entry) error {
	for _, e := range es {
		e.ownAttempts()
		m.ring.add(e, m.retention)
	}
	return nil
}

// search returns the index of the oldest event whose id is id or later
// (r.n when there is none). Called with r.mu held.
func (r *archiveRing) search(id event.ID) int {
	return sort.Search(r.n, func(i int) bool { return !r.at(i).id.Less(id) })
}

func (m *memoryBackend) page(_ context.Context, hi, lo event.ID, count int) ([]Event, error) {
	r := m.ring
	r.mu.Lock()
	defer r.mu.Unlock()
	r.trim(m.retention)
	out := make([]Event, 0, min(count, r.n))
	// from the newest event at or before hi
	upper := sort.Search(r.n, func(i int) bool { return hi.Less(r.at(i).id) })
	for i := upper - 1; i >= 0 && len(out) < count; i-- {
		ev := r.at(i)
		if ev.id.Less(lo) {
			break
		}
		out = append(out, ev.e.event(ev.id, false))
	}
	return out, nil
}

// find returns the event with id, or nil. Called with r.mu held.
func (r *archiveRing) find(id event.ID) *ringEvent {
	if i := r.search(id); i < r.n && r.at(i).id == id {
		return r.at(i)
	}
	return nil
}

func (m *memoryBackend) event(_ context.Context, id event.ID) (Event, bool, error) {
	r := m.ring
	r.mu.Lock()
	defer r.mu.Unlock()
	r.trim(m.retention)
	if ev := r.find(id); ev != nil {
		return ev.e.event(ev.id, true), true, nil
	}
	return Event{}, false, nil
}

func (m *memoryBackend) bodies(_ context.Context, evs []*Event) error {
	r := m.ring
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ev := range evs {
		if !ev.BodyStored {
			continue
		}
		var body []byte
		if id, ok := event.ParseID(ev.ID); ok {
			if found := r.find(id); found != nil {
				body = found.e.Body
			}
		}
		ev.setBody(body)
	}
	return nil
}

// redelivered replaces the event's attempts by a copy with at added:
// events already read hold the attempts they were read with.
func (m *memoryBackend) redelivered(_ context.Context, id event.ID, at *event.Attempt) error {
	r := m.ring
	r.mu.Lock()
	defer r.mu.Unlock()
	r.trim(m.retention)
	ev := r.find(id)
	if ev == nil {
		return errGone
	}
	h := event.History{Total: ev.e.Attempts.Total, Attempts: slices.Clone(ev.e.Attempts.Attempts)}
	h.Add(*at)
	ev.e.Attempts = h
	return nil
}

func (m *memoryBackend) size(context.Context, event.ID) (int64, error) {
	r := m.ring
	r.mu.Lock()
	defer r.mu.Unlock()
	r.trim(m.retention)
	return int64(r.n), nil
}

func (m *memoryBackend) timeout() time.Duration { return time.Second }

func (m *memoryBackend) close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	_ = m.ref.Release()
}

// Interface guards
var (
	_ backend          = (*memoryBackend)(nil)
	_ caddy.Destructor = (*archiveRing)(nil)
)
