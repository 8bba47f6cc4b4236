package inbox

import (
	"container/heap"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	bolt "go.etcd.io/bbolt"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
	"github.com/webhookguard/caddy-webhook-idempotency/store/filestore"
)

// The file store's queue: one Caddy, its events in the store's file. A
// source's events are a bucket, `inbox:<source>`, keyed by id (16 bytes:
// milliseconds and a sequence number, big endian, so keys sort as ids do);
// its dead letters another, `inbox-dead:<source>`. An event carries its
// delivery state in its fields: attempts recorded, `started` (attempts
// begun since, so an attempt that a crash cut short still counts), and
// `due` (unix milliseconds of a scheduled retry, 0 when ready).
//
// What is ready, scheduled or in delivery is known in memory, loaded from
// the file when the source's queue is first opened in the process, and so
// are the groups (order_by): the events of a group, in id order, are its
// head (ready, scheduled or in delivery) and those held behind it, which
// become ready one after the other. That
// state is one per file and source, shared by every inbox on it: during a
// reload the old and the new configuration's workers take events from the
// same queue, so no event goes to both. An event in delivery when the
// process dies is ready again when the queue is opened next: delivered at
// least once.

// Fields the file keeps besides the stream fields.
const (
	fieldStarted = "started"
	fieldDue     = "due"
)

// fileSources shares each file's source queue across config reloads.
var fileSources = caddy.NewUsagePool()

// fileSource is the queue of one destination of a source in one file.
type fileSource struct {
	file   filestore.File
	events []byte // bucket names
	dead   []byte
	newest []byte

	mu         sync.Mutex
	ready      []string // ids ready, in the order they became ready
	scheduled  dueHeap
	inDelivery map[string]bool
	deadCount  int64
	lastID     [2]event.ID // the last id given out in events and dead
	groups     map[string]*fileGroup
	heldCount  int64    // events held behind the head of their group
	pace       gcraCell // the rate limit's state
	// newestWrites counts the newest values written (newer_than)
	newestWrites atomic.Int64
	notify       chan struct{}
	release      func() // gives back the hold on the file
}

// fileGroup is a group with events pending: its head, and the events held
// behind it in id order.
type fileGroup struct {
	head  string
	since int64 // when the head was accepted, unix ms
	held  []heldEvent
}

// heldEvent is an event held behind the head of its group.
type heldEvent struct {
	id       string
	received int64 // unix ms
}

// Destruct implements caddy.Destructor: the last inbox of the source on
// this file is gone.
func (fs *fileSource) Destruct() error {
	fs.release()
	return nil
}

// fileQueue is one inbox's queue on the file store: the destination's
// shared queue, with this inbox's ttls.
type fileQueue struct {
	src       *fileSource
	key       string      // in fileSources
	source    string      // the inbox's source
	destID    string      // the destination's id, in the pause and breaker state
	handed    atomic.Bool // the one lane has its reader
	acceptTTL time.Duration
	noteTTL   time.Duration
}

func newFileQueue(file filestore.File, ib *Inbox) (*fileQueue, error) {
	name := ib.cfg.Source
	if ib.dest.queue != "" {
		name += "@" + ib.dest.queue // a route's buckets
	}
	key := file.Path() + "\x00" + name
	val, _, err := fileSources.LoadOrNew(key, func() (caddy.Destructor, error) {
		return openFileSource(file, name)
	})
	if err != nil {
		return nil, err
	}
	return &fileQueue{src: val.(*fileSource), key: key, source: ib.cfg.Source, destID: ib.dest.id, acceptTTL: ib.acceptTTL, noteTTL: ib.cfg.TTL}, nil
}

// openFileSource loads a destination's queue from the file: the buckets
// of name, `<source>` for deliver_to's, `<source>@<id>` for a route's.
func openFileSource(file filestore.File, name string) (*fileSource, error) {
	release, err := file.Hold()
	if err != nil {
		return nil, err
	}
	fs := &fileSource{
		file: file, events: []byte("inbox:" + name), dead: []byte("inbox-dead:" + name), newest: []byte("inbox-newest:" + name),
		inDelivery: make(map[string]bool), groups: make(map[string]*fileGroup),
		notify: make(chan struct{}, 1), release: release,
	}
	source := name
	nowMs := time.Now().UnixMilli()
	if err := file.Update(context.Background(), func(tx *bolt.Tx) error {
		for _, name := range [][]byte{fs.events, fs.dead, fs.newest} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		return pruneNewest(tx.Bucket(fs.newest), nowMs)
	}); err != nil {
		release()
		return nil, fmt.Errorf("preparing the inbox of %s: %v", source, err)
	}
	err = file.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(fs.events).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			id := event.IDFromKey(k)
			fs.lastID[0] = id
			f, err := event.ReadFields(v)
			if err != nil {
				return err
			}
			received, _ := strconv.ParseInt(f[event.FieldReceived], 10, 64)
			if !fs.admitLocked(id.String(), f[fieldGroup], received) {
				continue // held behind its group's head
			}
			if due, _ := strconv.ParseInt(f[fieldDue], 10, 64); due > nowMs {
				heap.Push(&fs.scheduled, dueItem{id: id.String(), due: due})
			} else {
				fs.ready = append(fs.ready, id.String())
			}
		}
		dead := tx.Bucket(fs.dead)
		fs.deadCount = int64(dead.Stats().KeyN)
		if k, _ := dead.Cursor().Last(); k != nil {
			fs.lastID[1] = event.IDFromKey(k)
		}
		return nil
	})
	if err != nil {
		release()
		return nil, fmt.Errorf("loading the inbox of %s: %v", source, err)
	}
	return fs, nil
}

// nextID gives out the next id of a bucket (0 events, 1 dead), as a Redis
// stream does: the time in milliseconds, and a sequence within one.
// Called with fs.mu held.
func (fs *fileSource) nextID(which int) event.ID {
	id := fs.lastID[which].Next(uint64(time.Now().UnixMilli()))
	fs.lastID[which] = id
	return id
}

// admitLocked enters a new event in its group: it returns true when the
// event may be delivered now (no group, or it is the group's head), false
// when it is held behind the group's head. Called with fs.mu held, in id
// order.
func (fs *fileSource) admitLocked(id, group string, received int64) bool {
	if group == "" {
		return true
	}
	if g := fs.groups[group]; g != nil {
		g.held = append(g.held, heldEvent{id: id, received: received})
		fs.heldCount++
		return false
	}
	fs.groups[group] = &fileGroup{head: id, since: received}
	return true
}

// nextOf returns the event held first behind the head id of group, "" for
// none. Called with fs.mu held.
func (fs *fileSource) nextOf(group, id string) string {
	if g := fs.groups[group]; group != "" && g != nil && g.head == id && len(g.held) > 0 {
		return g.held[0].id
	}
	return ""
}

// releaseGroup hands the group of id, its head that has left the queue, to
// the next event held behind it, which becomes ready.
func (fs *fileSource) releaseGroup(group, id string) {
	if group == "" {
		return
	}
	fs.mu.Lock()
	g := fs.groups[group]
	if g == nil || g.head != id {
		fs.mu.Unlock()
		return
	}
	if len(g.held) == 0 {
		delete(fs.groups, group)
		fs.mu.Unlock()
		return
	}
	next := g.held[0]
	g.held = g.held[1:]
	fs.heldCount--
	g.head, g.since = next.id, next.received
	fs.ready = append(fs.ready, next.id)
	fs.mu.Unlock()
	fs.wake()
}

// unadmit undoes admitLocked for an event that was not stored after all.
func (fs *fileSource) unadmit(id, group string) {
	if group == "" {
		return
	}
	fs.mu.Lock()
	g := fs.groups[group]
	if g != nil && g.head != id {
		for i, h := range g.held {
			if h.id == id {
				g.held = append(g.held[:i], g.held[i+1:]...)
				fs.heldCount--
				break
			}
		}
	}
	fs.mu.Unlock()
	fs.releaseGroup(group, id)
}

// push makes an event ready and wakes a reader.
func (fs *fileSource) push(id string) {
	fs.mu.Lock()
	fs.ready = append(fs.ready, id)
	fs.mu.Unlock()
	fs.wake()
}

// wake tells a waiting reader that events are ready. An event moves from
// one of the counted states to another under one hold of fs.mu, followed
// by wake, so that counts never see it in none.
func (fs *fileSource) wake() {
	select {
	case fs.notify <- struct{}{}:
	default:
	}
}

func (q *fileQueue) setTTLs(acceptTTL, noteTTL time.Duration) {
	q.acceptTTL, q.noteTTL = acceptTTL, noteTTL
}

func (q *fileQueue) accept(ctx context.Context, c store.Claim, rec []byte, ev *event.Request, extra []any, to []admission) (store.ClaimResult, []admitted, error) {
	out := make([]admitted, len(to))
	ready := make([]bool, len(to))
	res, err := q.src.file.ClaimAndAppend(ctx, c.Key, c.Guard, c.Noted, rec, q.acceptTTL, q.noteTTL, func(tx *bolt.Tx, suspected string) error {
		return admitAll(tx, ev, extra, to, suspected, out, ready)
	})
	if err != nil || res.State != store.StateClaimed {
		unadmitAll(to, out)
		return res, nil, err
	}
	pushReady(to, out, ready)
	return res, out, nil
}

func (q *fileQueue) acceptBatch(ctx context.Context, items []acceptance) ([]store.ClaimResult, [][]admitted, bool, error) {
	keys := make([]string, len(items))
	recs := make([][]byte, len(items))
	for i, it := range items {
		if it.c.Guard != "" {
			return nil, nil, false, nil
		}
		keys[i], recs[i] = it.c.Key, it.record
	}
	out := make([][]admitted, len(items))
	ready := make([][]bool, len(items))
	res, err := q.src.file.ClaimAndAppendBatch(ctx, keys, recs, q.acceptTTL, func(tx *bolt.Tx, claimed []int) error {
		for _, i := range claimed {
			it := items[i]
			out[i], ready[i] = make([]admitted, len(it.to)), make([]bool, len(it.to))
			if err := admitAll(tx, it.ev, it.extra, it.to, "", out[i], ready[i]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		for i, it := range items {
			unadmitAll(it.to, out[i])
		}
		return nil, nil, true, err
	}
	for i, it := range items {
		if res.Items[i].State == store.StateClaimed {
			pushReady(it.to, out[i], ready[i])
		}
	}
	return res.Items, out, true, nil
}

// admitAll stores ev, with the extra fields, in the queue of each
// destination of to, within the transaction of its acceptance: each gets
// an id, entered in its group, and out and ready say what became of it
// there (ready: deliverable now, pushReady once committed).
func admitAll(tx *bolt.Tx, ev *event.Request, extra []any, to []admission, suspected string, out []admitted, ready []bool) error {
	for i, a := range to {
		fs := a.q.(*fileQueue).src
		pairs := append(fields(ev, "0", "0", a.group), extra...)
		if suspected != "" {
			pairs = append(pairs, fieldSuspected, suspected)
		}
		// ids are given out and entered in their groups in one step: a
		// group's events are in id order
		fs.mu.Lock()
		eid := fs.nextID(0)
		out[i] = admitted{id: eid.String(), suspected: suspected}
		ready[i] = fs.admitLocked(out[i].id, a.group, ev.Received.UnixMilli())
		if ready[i] && !a.answer.IsZero() {
			// in delivery at once, its attempt begun (written below)
			out[i].answering = true
			fs.inDelivery[out[i].id] = true
			pairs = append(pairs, fieldStarted, "1")
		}
		fs.mu.Unlock()
		if err := tx.Bucket(fs.events).Put(eid.Key(), event.AppendFields(nil, pairs)); err != nil {
			return err
		}
	}
	return nil
}

// unadmitAll undoes admitAll for an event that was not stored after all
// (out nil, or its ids "", for none admitted).
func unadmitAll(to []admission, out []admitted) {
	for i, a := range to {
		if i < len(out) && out[i].id != "" {
			fs := a.q.(*fileQueue).src
			if out[i].answering {
				fs.done(out[i].id)
			}
			fs.unadmit(out[i].id, a.group)
		}
	}
}

// pushReady makes the events admitAll stored deliverable, once their
// commit is done.
func pushReady(to []admission, out []admitted, ready []bool) {
	for i, a := range to {
		if ready[i] && !out[i].answering {
			a.q.(*fileQueue).src.push(out[i].id)
		}
	}
}

// lanes returns the one lane of the file store's queue, the first time:
// each inbox of the source (an old and a new configuration's, during a
// reload) reads it.
func (q *fileQueue) lanes() []int {
	if q.handed.Swap(true) {
		return nil
	}
	return []int{0}
}

func (q *fileQueue) retired(int) bool { return false }

// refresh finds nothing: the file store has one queue per source.
func (q *fileQueue) refresh(context.Context) error { return nil }

// touch does nothing: no other worker takes an event over.
func (q *fileQueue) touch(context.Context, []message) error { return nil }

func (q *fileQueue) next(ctx context.Context, _ int, n int, wait time.Duration) ([]message, error) {
	fs := q.src
	var timer <-chan time.Time
	if wait >= 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		timer = t.C
	}
	for {
		fs.mu.Lock()
		if len(fs.ready) > 0 {
			ids := slices.Clone(fs.ready[:min(n, len(fs.ready))])
			fs.ready = fs.ready[len(ids):]
			for _, id := range ids {
				fs.inDelivery[id] = true
			}
			fs.mu.Unlock()
			msgs, err := q.start(ctx, ids)
			if err != nil {
				fs.mu.Lock()
				for _, id := range ids {
					delete(fs.inDelivery, id)
					fs.ready = append(fs.ready, id) // tried again
				}
				fs.mu.Unlock()
				fs.wake()
				return nil, err
			}
			return msgs, nil
		}
		fs.mu.Unlock()
		if timer == nil {
			return nil, nil
		}
		select {
		case <-fs.notify:
		case <-timer:
			return nil, nil
		case <-ctx.Done():
			return nil, nil
		}
	}
}

// start records that an attempt of each event begins (so that an attempt
// a crash cuts short still counts), in one commit, and returns them; an
// event that is gone is left out.
func (q *fileQueue) start(ctx context.Context, ids []string) ([]message, error) {
	fs := q.src
	var msgs []message
	err := fs.file.Update(ctx, func(tx *bolt.Tx) error {
		msgs = msgs[:0]
		b := tx.Bucket(fs.events)
		for _, id := range ids {
			sid, _ := event.ParseID(id)
			v := b.Get(sid.Key())
			if v == nil {
				continue
			}
			f, err := event.ReadFields(v)
			if err != nil {
				return err
			}
			started, _ := strconv.ParseInt(f[fieldStarted], 10, 64)
			started++
			msgs = append(msgs, message{id: id, ev: fromFields(id, func(name string) string { return f[name] }), deliveries: started})
			if err := b.Put(sid.Key(), event.EncodeFields(f, fieldStarted, strconv.FormatInt(started, 10), fieldDue, "0")); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		if !slices.ContainsFunc(msgs, func(m message) bool { return m.id == id }) {
			fs.done(id) // gone
		}
	}
	return msgs, nil
}

// done ends an event's delivery.
func (fs *fileSource) done(id string) {
	fs.mu.Lock()
	delete(fs.inDelivery, id)
	fs.mu.Unlock()
}

// reclaimable finds nothing: the workers are this process's, and an event
// in delivery when a process died is ready again when the queue opens.
func (q *fileQueue) reclaimable(context.Context, time.Duration) ([]int, error) { return nil, nil }

func (q *fileQueue) reclaim(context.Context, int, time.Duration) (message, bool, error) {
	return message{}, false, nil
}

func (q *fileQueue) moveDue(_ context.Context, now time.Time) error {
	fs := q.src
	nowMs := now.UnixMilli()
	moved := false
	fs.mu.Lock()
	for fs.scheduled.Len() > 0 && fs.scheduled[0].due <= nowMs {
		fs.ready = append(fs.ready, heap.Pop(&fs.scheduled).(dueItem).id)
		moved = true
	}
	fs.mu.Unlock()
	if moved {
		fs.wake()
	}
	return nil
}

func (q *fileQueue) delivered(ctx context.Context, m message, d done) error {
	if err := q.remove(ctx, m, d); err != nil {
		return err
	}
	q.src.releaseGroup(m.ev.Group, m.id)
	return nil
}

// remove deletes a delivered event and updates its key as d says.
func (q *fileQueue) remove(ctx context.Context, m message, d done) error {
	fs := q.src
	sid, _ := event.ParseID(m.id)
	storeKey := m.ev.StoreKey
	err := fs.file.Update(ctx, func(tx *bolt.Tx) error {
		if err := q.logTx(tx, m); err != nil {
			return err
		}
		if err := tx.Bucket(fs.events).Delete(sid.Key()); err != nil {
			return err
		}
		if d.newest != "" {
			b := tx.Bucket(fs.newest)
			v := binary.BigEndian.AppendUint64(nil, uint64(time.Now().Add(d.newestTTL).UnixMilli()))
			if err := b.Put([]byte(m.ev.Group), append(v, d.newest...)); err != nil {
				return err
			}
			if fs.newestWrites.Add(1)%pruneEvery == 0 {
				if err := pruneNewest(b, time.Now().UnixMilli()); err != nil {
					return err
				}
			}
		}
		if storeKey == "" {
			return nil
		}
		if d.record != nil {
			for _, k := range []string{storeKey, d.guard} {
				if k == "" {
					continue
				}
				ttl := d.ttl
				if k != storeKey {
					ttl = 0
				}
				if err := fs.file.SetRecord(tx, k, d.record, ttl); err != nil {
					return err
				}
			}
			return nil
		}
		if d.ttl == 0 {
			return nil
		}
		return fs.file.SetExpiry(tx, storeKey, d.ttl)
	})
	if err != nil {
		return err
	}
	if storeKey != "" {
		fs.file.DropCached(storeKey)
		if d.guard != "" {
			fs.file.DropCached(d.guard)
		}
	}
	fs.done(m.id)
	return nil
}

func (q *fileQueue) newest(_ context.Context, m message) (string, error) {
	fs := q.src
	var out string
	err := fs.file.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(fs.newest).Get([]byte(m.ev.Group))
		if len(v) >= 8 && int64(binary.BigEndian.Uint64(v)) > time.Now().UnixMilli() {
			out = string(v[8:])
		}
		return nil
	})
	return out, err
}

// pruneEvery is how many newest values are written between two prunings
// of those that expired.
const pruneEvery = 1024

// pruneNewest deletes the newest values that expired by now (ms).
func pruneNewest(b *bolt.Bucket, now int64) error {
	var expired [][]byte
	_ = b.ForEach(func(k, v []byte) error {
		if len(v) < 8 || int64(binary.BigEndian.Uint64(v)) <= now {
			expired = append(expired, slices.Clone(k))
		}
		return nil
	})
	for _, k := range expired {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

func (q *fileQueue) schedule(ctx context.Context, m message, attempts, status int, reason string, due time.Time) error {
	fs := q.src
	sid, _ := event.ParseID(m.id)
	dueMs := (due.UnixNano() + int64(time.Millisecond) - 1) / int64(time.Millisecond)
	err := fs.file.Update(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(fs.events)
		f, err := event.ReadFields(b.Get(sid.Key()))
		if err != nil {
			return err
		}
		if err := q.logTx(tx, m); err != nil {
			return err
		}
		return b.Put(sid.Key(), event.EncodeFields(f,
			event.FieldAttempts, strconv.Itoa(attempts), fieldStarted, "0",
			event.FieldLastStatus, strconv.Itoa(status), event.FieldLastError, reason,
			fieldDue, strconv.FormatInt(dueMs, 10)))
	})
	if err != nil {
		return err
	}
	fs.mu.Lock()
	delete(fs.inDelivery, m.id)
	heap.Push(&fs.scheduled, dueItem{id: m.id, due: dueMs})
	fs.mu.Unlock()
	return nil
}

func (q *fileQueue) deadLetter(ctx context.Context, m message, attempts, status int, reason string, failed time.Time) error {
	fs := q.src
	sid, _ := event.ParseID(m.id)
	err := fs.file.Update(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(fs.events)
		v := b.Get(sid.Key())
		if v == nil {
			return nil
		}
		f, err := event.ReadFields(v)
		if err != nil {
			return err
		}
		if err := q.logTx(tx, m); err != nil {
			return err
		}
		delete(f, fieldStarted)
		delete(f, fieldDue)
		fs.mu.Lock()
		did := fs.nextID(1)
		next := fs.nextOf(f[fieldGroup], m.id)
		fs.mu.Unlock()
		if err := tx.Bucket(fs.dead).Put(did.Key(), event.EncodeFields(f,
			event.FieldAttempts, strconv.Itoa(attempts), event.FieldLastStatus, strconv.Itoa(status),
			event.FieldLastError, reason, event.FieldFailed, event.Millis(failed))); err != nil {
			return err
		}
		if next != "" {
			// the next event of the group says which one it follows
			nid, _ := event.ParseID(next)
			nf, err := event.ReadFields(b.Get(nid.Key()))
			if err != nil {
				return err
			}
			if err := b.Put(nid.Key(), event.EncodeFields(nf, fieldOrderBroken, did.String())); err != nil {
				return err
			}
		}
		return b.Delete(sid.Key())
	})
	if err != nil {
		return err
	}
	fs.mu.Lock()
	delete(fs.inDelivery, m.id)
	fs.deadCount++
	fs.mu.Unlock()
	fs.releaseGroup(m.ev.Group, m.id)
	return nil
}

func (q *fileQueue) counts(context.Context) (Counts, error) {
	fs := q.src
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return Counts{
		Pending:   int64(len(fs.ready)+len(fs.inDelivery)) + fs.heldCount,
		Scheduled: int64(fs.scheduled.Len()),
		Dead:      fs.deadCount,
	}, nil
}

func (q *fileQueue) dead(_ context.Context, start string, count int64) ([]Event, error) {
	fs := q.src
	var from []byte
	if start != "-" {
		id, ok := event.ParseStart(start)
		if !ok {
			return nil, fmt.Errorf("invalid id %q", start)
		}
		from = id.Key()
	}
	var out []Event
	err := fs.file.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(fs.dead).Cursor()
		k, v := c.First()
		if from != nil {
			k, v = c.Seek(from)
		}
		for ; k != nil && int64(len(out)) < count; k, v = c.Next() {
			f, err := event.ReadFields(v)
			if err != nil {
				return err
			}
			id := event.IDFromKey(k).String()
			out = append(out, fromFields(id, func(name string) string { return f[name] }))
		}
		return nil
	})
	return out, err
}

func (q *fileQueue) newestDead(context.Context) (string, bool, error) {
	fs := q.src
	var id string
	err := fs.file.View(func(tx *bolt.Tx) error {
		if k, _ := tx.Bucket(fs.dead).Cursor().Last(); k != nil {
			id = event.IDFromKey(k).String()
		}
		return nil
	})
	return id, id != "", err
}

func (q *fileQueue) redeliver(ctx context.Context, id string) (string, error) {
	fs := q.src
	sid, ok := event.ParseID(id)
	if !ok {
		return "", ErrNoDeadEvent
	}
	var newID, group string
	var ready bool
	err := fs.file.Update(ctx, func(tx *bolt.Tx) error {
		dead := tx.Bucket(fs.dead)
		v := dead.Get(sid.Key())
		if v == nil {
			return ErrNoDeadEvent
		}
		f, err := event.ReadFields(v)
		if err != nil {
			return err
		}
		attempts := f[event.FieldAttempts]
		delete(f, event.FieldFailed)
		delete(f, fieldOrderBroken)
		received, _ := strconv.ParseInt(f[event.FieldReceived], 10, 64)
		fs.mu.Lock()
		eid := fs.nextID(0)
		newID, group = eid.String(), f[fieldGroup]
		ready = fs.admitLocked(newID, group, received)
		fs.mu.Unlock()
		if err := tx.Bucket(fs.events).Put(eid.Key(), event.EncodeFields(f, event.FieldBase, attempts, fieldStarted, "0", fieldDue, "0")); err != nil {
			return err
		}
		return dead.Delete(sid.Key())
	})
	if err != nil {
		if newID != "" {
			fs.unadmit(newID, group)
		}
		return "", err
	}
	fs.mu.Lock()
	fs.deadCount--
	if ready {
		fs.ready = append(fs.ready, newID)
	}
	fs.mu.Unlock()
	fs.wake()
	return newID, nil
}

func (q *fileQueue) discard(ctx context.Context, id string) (bool, error) {
	fs := q.src
	sid, ok := event.ParseID(id)
	if !ok {
		return false, nil
	}
	found := false
	err := fs.file.Update(ctx, func(tx *bolt.Tx) error {
		dead := tx.Bucket(fs.dead)
		if dead.Get(sid.Key()) == nil {
			return nil
		}
		found = true
		return dead.Delete(sid.Key())
	})
	if err == nil && found {
		fs.mu.Lock()
		fs.deadCount--
		fs.mu.Unlock()
	}
	return found, err
}

func (q *fileQueue) enqueue(ctx context.Context, ev *event.Request, group string, extra []any) (string, error) {
	fs := q.src
	var id string
	var ready bool
	err := fs.file.Update(ctx, func(tx *bolt.Tx) error {
		fs.mu.Lock()
		eid := fs.nextID(0)
		id = eid.String()
		ready = fs.admitLocked(id, group, ev.Received.UnixMilli())
		fs.mu.Unlock()
		return tx.Bucket(fs.events).Put(eid.Key(), event.AppendFields(nil, append(fields(ev, "0", "0", group), extra...)))
	})
	if err != nil {
		if id != "" {
			fs.unadmit(id, group)
		}
		return "", err
	}
	if ready {
		fs.push(id)
	}
	return id, nil
}

func (q *fileQueue) groups(_ context.Context, count int) (Groups, error) {
	fs := q.src
	fs.mu.Lock()
	due := make(map[string]int64, fs.scheduled.Len())
	for _, it := range fs.scheduled {
		due[it.id] = it.due
	}
	out := Groups{Pending: int64(len(fs.groups)), Held: fs.heldCount}
	for name, g := range fs.groups {
		st := GroupState{Group: name, Pending: 1 + int64(len(g.held)), Since: time.UnixMilli(g.since).UTC(), Head: HeadState{ID: g.head, State: "ready"}}
		if fs.inDelivery[g.head] {
			st.Head.State = "delivering"
		} else if d, ok := due[g.head]; ok {
			t := time.UnixMilli(d).UTC()
			st.Head.State, st.Head.Due = "scheduled", &t
		}
		out.Longest = append(out.Longest, st)
	}
	fs.mu.Unlock()
	out.sortAndCut(count)
	err := fs.file.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(fs.events)
		for i := range out.Longest {
			h := &out.Longest[i].Head
			id, _ := event.ParseID(h.ID)
			v := b.Get(id.Key())
			if v == nil {
				continue
			}
			f, err := event.ReadFields(v)
			if err != nil {
				return err
			}
			h.Attempts, _ = strconv.Atoi(f[event.FieldAttempts])
			h.LastStatus, _ = strconv.Atoi(f[event.FieldLastStatus])
			h.LastError = f[event.FieldLastError]
		}
		return nil
	})
	return out, err
}

func (q *fileQueue) limiter(r Rate) limiter { return &localLimiter{rate: r, cell: &q.src.pace} }

func (q *fileQueue) close(bool) { _, _ = fileSources.Delete(q.key) }

// dueItem is a scheduled retry.
type dueItem struct {
	id  string
	due int64 // unix milliseconds
}

// dueHeap orders scheduled retries by when they are due.
type dueHeap []dueItem

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].due < h[j].due }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(dueItem)) }
func (h *dueHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}

// Interface guards
var (
	_ queue            = (*fileQueue)(nil)
	_ caddy.Destructor = (*fileSource)(nil)
)
