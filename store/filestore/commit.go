package filestore

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime/debug"
	"sync"
	"time"
	"unsafe"

	bolt "go.etcd.io/bbolt"
	"go.uber.org/zap"
)

// Group commit. Every write goes through one goroutine, the committer,
// which takes every write that waited while the last one was on its way to
// the disk and handles them together, so concurrent writes share one
// fdatasync. An idle store adds no wait: a write that finds the committer
// free goes out at once, alone. Under load, completions linger a little
// for others before their fdatasync (linger), so that more share each.
//
// A completion's values (puts) go to the log (log.go): one write and, with
// `sync always`, one fdatasync for all of them, after which they are
// answered, kept in the shards' pending maps, and handed to the applier.
// Every other write (a function on a transaction: the inbox, the archive,
// a forget, a sweep; and completions when the store has no log) is handed
// to the applier and answered once the applier has committed it. The applier is a second goroutine that owns bbolt's
// write transactions: it commits what it is handed, in the order the
// committer took it, so a write always finds the completions taken before
// it in the tree. Values already in the log are not waited for: they wait
// up to applyDelay to share a commit, which makes the tree's commits large
// and few.

// write is one write waiting for its commit: a function on a transaction,
// or a completion's values.
type write struct {
	fn    func(tx *bolt.Tx) error
	puts  []put
	err   error
	done  chan struct{}
	timer *time.Timer // commitWait, reused with the write
}

var writePool = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &write{done: make(chan struct{}, 1), timer: t}
}}

// commitWait bounds how long a write waits for the disk; a write that
// times out may still be committed later.
var commitWait = 10 * time.Second

// applyDelay is how long values already in the log wait for more to share
// the tree's commit with, at most; once applyBytes of them wait (a quarter
// of a segment of the log), they are applied at once. A commit of the tree
// costs two fdatasyncs and a write of every page it changed, however few
// keys it holds: the more keys share a commit, the fewer pages and
// fdatasyncs each costs (BenchmarkFileCompleteRate). The log holds the values
// meanwhile, and the segment they are in is written over only once the
// tree has them (log.go).
const (
	applyDelay = 250 * time.Millisecond
	applyBytes = segSize / 4
)

// commit runs fn in the next commit and returns its error, or the
// commit's. fn must check what it needs before it writes anything: a
// failing fn does not roll back the writes of the others in its commit.
func (d *db) commit(ctx context.Context, fn func(tx *bolt.Tx) error) error {
	return d.submit(fn, nil)
}

// commitPuts writes a completion's values: on disk when it returns
// without an error (`sync always`), or written at once and synced within
// the interval.
func (d *db) commitPuts(ctx context.Context, puts []put) error {
	return d.submit(nil, puts)
}

func (d *db) submit(fn func(tx *bolt.Tx) error, puts []put) error {
	w := writePool.Get().(*write)
	w.fn, w.puts, w.err = fn, puts, nil
	w.timer.Reset(commitWait)
	select {
	case d.writes <- w:
	case <-d.stop:
		w.recycle()
		return fmt.Errorf("file store: %s is closed", d.path)
	case <-w.timer.C:
		w.recycle()
		return fmt.Errorf("file store: writing %s: no commit within %s", d.path, commitWait)
	}
	select {
	case <-w.done:
	case <-w.timer.C:
		// the committer still holds w: it is not reused
		return fmt.Errorf("file store: writing %s: not on disk within %s", d.path, commitWait)
	}
	err := w.err
	w.recycle()
	return err
}

// recycle puts a write no goroutine holds back in the pool.
func (w *write) recycle() {
	w.timer.Stop()
	w.fn, w.puts, w.err = nil, nil, nil
	writePool.Put(w)
}

// commitLoop takes writes until the store closes; writes queued then are
// taken first, and the applier commits everything it holds before it
// stops.
func (d *db) commitLoop() {
	defer d.done.Done()
	defer d.ap.finish()
	batch := make([]*write, 0, batchMax)
	for {
		select {
		case w := <-d.writes:
			batch = append(batch[:0], w)
		case <-d.stop:
			for {
				select {
				case w := <-d.writes:
					d.take([]*write{w})
				default:
					return
				}
			}
		}
		if batch[0].fn == nil {
			d.linger()
		}
	fill:
		for len(batch) < batchMax {
			select {
			case w := <-d.writes:
				batch = append(batch, w)
			default:
				break fill
			}
		}
		d.take(batch)
		clear(batch)
	}
}

// lingerMax bounds how long a completion waits for others to share its
// fdatasync (linger).
const lingerMax = time.Millisecond

// linger waits, with `sync always` and when the log's last fdatasync was
// shared by several completions, until as long has passed since that
// fdatasync returned as it took (lingerMax at most): the completions that
// come meanwhile share the next one. Under a load that keeps the disk
// busy, a completion waits for the fdatasync on its way and then its own
// either way; this lets the disk rest between the two, so that about
// twice as many completions share each fdatasync (deliveries per
// fdatasync rise with the load, fdatasyncs a second stay bounded), for at
// most the time of one more. A completion that finds the disk idle since
// at least that long goes out at once, and so does every completion of a
// sender that waits for each answer before the next delivery (the last
// fdatasync was its own alone): no one would join it.
func (d *db) linger() {
	if d.log == nil || d.syncEvery.Load() != 0 || d.lastSyncShared < 2 {
		return
	}
	wait := time.Until(d.lastSync.Add(min(d.lastSyncTook, lingerMax)))
	if wait <= 0 {
		return
	}
	d.lingerTimer.Reset(wait)
	select {
	case <-d.lingerTimer.C:
	case <-d.stop:
		d.lingerTimer.Stop()
	}
}

// take handles one batch of writes: the completions' values go to the
// log, and everything goes to the applier in the batch's order.
func (d *db) take(batch []*write) {
	var logged []put
	if d.log != nil {
		logged = d.logged[:0]
		for _, w := range batch {
			if w.fn == nil {
				logged = append(logged, w.puts...)
			}
		}
		d.logged = logged
		if len(logged) == 0 {
			logged = nil
		}
	}
	var seq uint64
	var logErr error
	if logged != nil {
		if fits(logged) {
			seq, logErr = d.appendLog(logged)
		} else {
			logged = nil // written to the tree, as with an interval
		}
	}
	items := make([]applyItem, 0, len(batch))
	answered := d.answered[:0] // the completions the log holds, answered here
	for _, w := range batch {
		switch {
		case w.fn != nil || logged == nil:
			items = append(items, applyItem{w: w})
		case logErr == nil:
			items = append(items, applyItem{puts: w.puts, seq: seq})
		}
		if w.fn == nil && logged != nil {
			answered = append(answered, w)
		}
	}
	if logged != nil && logErr == nil {
		d.keepPending(logged, seq)
		d.lastSyncShared = len(answered)
	}
	clear(d.logged)
	// once added, a write of items belongs to the applier, which answers
	// it: its submitter may have put it back in the pool for another
	// write, so it is not read again here
	d.ap.add(items)
	for _, w := range answered {
		w.err = logErr
		w.done <- struct{}{}
	}
	clear(answered)
	d.answered = answered
}

// appendLog writes puts to the log as its next record and returns the
// record's sequence number.
func (d *db) appendLog(puts []put) (uint64, error) {
	always := d.syncEvery.Load() == 0
	start := time.Now()
	seq, err := d.log.appendLog(puts, always, d.ap.applied, d.ap.catchUp)
	if err != nil {
		return 0, fmt.Errorf("file store: writing %s: %w", d.path, err)
	}
	if always {
		d.lastSync = time.Now()
		d.lastSyncTook = d.lastSync.Sub(start)
	}
	d.logWrites.Add(1)
	return seq, nil
}

// keepPending keeps values written to the log in memory until the tree has
// them.
func (d *db) keepPending(puts []put, seq uint64) {
	for _, p := range puts {
		s := d.shardOf(p.key)
		s.mu.Lock()
		s.pending[p.key] = pending{c: cached{kind: p.kind, payload: p.payload, expires: p.expires}, seq: seq}
		s.mu.Unlock()
	}
}

// pending is a value in the log that the tree does not have yet.
type pending struct {
	c   cached
	seq uint64
}

// applyItem is what the applier is handed: a write to commit and answer,
// or values already in the log (record seq) to put in the tree.
type applyItem struct {
	w    *write
	puts []put
	seq  uint64
}

// applier commits to the tree what the committer hands it, in order.
type applier struct {
	d       *db
	mu      sync.Mutex
	items   []applyItem
	urgent  bool          // a write waits for its commit
	logged  int           // the log's bytes of the values in items (putsSize)
	delay   time.Duration // applyDelay; tests may change it
	done    uint64        // the last log record the tree holds
	lastErr error         // the last commit's error
	advance chan struct{} // closed and replaced after every commit
	kick    chan struct{} // something was added
	hurry   chan struct{} // commit now
	stop    chan struct{}
	stopped chan struct{}
}

func newApplier(d *db, applied uint64) *applier {
	return &applier{
		d: d, delay: applyDelay, done: applied, advance: make(chan struct{}),
		kick: make(chan struct{}, 1), hurry: make(chan struct{}, 1),
		stop: make(chan struct{}), stopped: make(chan struct{}),
	}
}

// add hands items to the applier; a write among them is committed at once.
func (a *applier) add(items []applyItem) {
	if len(items) == 0 {
		return
	}
	a.mu.Lock()
	a.items = append(a.items, items...)
	urgent := a.urgent
	for _, it := range items {
		urgent = urgent || it.w != nil
		a.logged += putsSize(it.puts)
	}
	urgent = urgent || a.logged >= applyBytes
	a.urgent = urgent
	a.mu.Unlock()
	signal(a.kick)
	if urgent {
		signal(a.hurry)
	}
}

// applied is the sequence number of the last log record the tree holds.
func (a *applier) applied() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.done
}

// catchUp waits until the tree holds record seq and every record before
// it, or the applier fails to commit them.
func (a *applier) catchUp(seq uint64) error {
	timer := time.NewTimer(commitWait)
	defer timer.Stop()
	for {
		a.mu.Lock()
		done, advance := a.done, a.advance
		a.urgent = true
		a.mu.Unlock()
		if done >= seq {
			return nil
		}
		signal(a.hurry)
		select {
		case <-advance:
			a.mu.Lock()
			done, err := a.done, a.lastErr
			a.mu.Unlock()
			if done < seq && err != nil {
				return err
			}
		case <-timer.C:
			return fmt.Errorf("the log is full and its records not in the tree within %s", commitWait)
		}
	}
}

// finish commits what the applier holds and stops it.
func (a *applier) finish() {
	close(a.stop)
	<-a.stopped
}

// signal sends on a channel of one without waiting.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// loop commits what it is handed until finish.
func (a *applier) loop() {
	defer close(a.stopped)
	delay := time.NewTimer(time.Hour)
	delay.Stop()
	stopping := false
	for {
		if !stopping {
			select {
			case <-a.kick:
			case <-a.hurry:
			case <-a.stop:
				stopping = true
			}
		}
		a.mu.Lock()
		n, urgent, wait := len(a.items), a.urgent, a.delay
		a.mu.Unlock()
		if n == 0 {
			if stopping {
				return
			}
			continue
		}
		if !urgent && !stopping {
			// only values already in the log: let more join them
			delay.Reset(wait)
			select {
			case <-delay.C:
			case <-a.hurry:
				delay.Stop()
			case <-a.stop:
				delay.Stop()
				stopping = true
			}
		}
		a.mu.Lock()
		items := a.items
		a.items, a.urgent, a.logged = nil, false, 0
		a.mu.Unlock()
		err := a.d.apply(items)
		a.mu.Lock()
		a.lastErr = err
		if err != nil {
			// the values in the log are tried again (the writes were
			// answered with the error)
			var keep []applyItem
			for _, it := range items {
				if it.w == nil {
					keep = append(keep, it)
				}
			}
			a.items = append(keep, a.items...)
			for _, it := range keep {
				a.logged += putsSize(it.puts)
			}
		} else {
			for _, it := range items {
				a.done = max(a.done, it.seq)
			}
		}
		close(a.advance)
		a.advance = make(chan struct{})
		a.mu.Unlock()
		if err != nil {
			a.d.logger.Warn("file store: writing to the file failed; the completions in its log are kept and tried again", zap.String("path", a.d.path), zap.Error(err))
			if stopping {
				return // they are in the log: the next open applies them
			}
			select { // no busy loop on a failing disk
			case <-time.After(100 * time.Millisecond):
			case <-a.stop:
				stopping = true
			}
			signal(a.kick)
		}
	}
}

// apply commits items in one transaction, then finishes their writes and
// moves the values that were pending to the cache. The file is synced
// before it returns, whatever the sync setting: a commit bbolt does not
// sync may reach the disk with its meta page ahead of the pages it names,
// which a power loss then leaves as a damaged file, not merely an older
// one; and the writes that are not completions (an inbox's acceptance
// above all) are promised on disk once answered (docs/stores.md).
func (d *db) apply(items []applyItem) error {
	var seq uint64
	for _, it := range items {
		seq = max(seq, it.seq)
	}
	d.txKeys = d.txKeys[:0]
	err := d.update(func(tx *bolt.Tx) error {
		for _, it := range items {
			switch {
			case it.w != nil && it.w.fn != nil:
				it.w.err = safely(it.w.fn, tx)
			case it.w != nil:
				it.w.err = safely(func(tx *bolt.Tx) error { return d.putAll(tx, it.w.puts) }, tx)
			default:
				if err := safely(func(tx *bolt.Tx) error { return d.putAll(tx, it.puts) }, tx); err != nil {
					// a value the tree refuses cannot be tried again
					d.logger.Error("file store: a completion in the log cannot be written to the file", zap.String("path", d.path), zap.Error(err))
				}
			}
		}
		if seq > 0 {
			return tx.Bucket(bucketLog).Put(keyApplied, binary.BigEndian.AppendUint64(nil, seq))
		}
		return nil
	})
	d.treeCommits.Add(1)
	if err == nil {
		// the filter has the keys before they leave the pending maps and
		// their claims
		if d.filter.add(d.txKeys) {
			d.building.Add(1)
			go func() {
				defer d.building.Done()
				if err := d.filter.build(d, d.stop); err != nil {
					d.logger.Warn("file store: reading the keys of the file failed", zap.String("path", d.path), zap.Error(err))
				}
			}()
		}
		for _, it := range items {
			if it.w == nil {
				d.settle(it.puts, it.seq)
			}
		}
	}
	for _, it := range items {
		if it.w != nil {
			if err != nil {
				it.w.err = err
			}
			it.w.done <- struct{}{}
		}
	}
	return err
}

// putAll writes puts, in the applier's transaction.
func (d *db) putAll(tx *bolt.Tx, puts []put) error {
	for _, p := range puts {
		if err := putValue(tx, p.key, p.kind, p.payload, p.expires, d.filter.mayHave(p.key)); err != nil {
			return err
		}
		d.txKeys = append(d.txKeys, p.key)
		if len(p.payload) > cacheMaxValue {
			// and its leaf's neighbours, about as much again, are read
			// as it is written
			d.touched(2 * len(p.payload))
		}
	}
	return nil
}

// settle moves values of record seq, now in the tree, from the pending
// maps to the cache (unless a later record has the key).
func (d *db) settle(puts []put, seq uint64) {
	for _, p := range puts {
		s := d.shardOf(p.key)
		s.mu.Lock()
		if pv, ok := s.pending[p.key]; ok && pv.seq == seq {
			delete(s.pending, p.key)
			s.remember(p.key, pv.c)
		}
		s.mu.Unlock()
	}
}

// update runs fn in a write transaction and commits it; a panic (a
// damaged page) is an error.
func (d *db) update(fn func(tx *bolt.Tx) error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("file store: writing %s: %v", d.path, p)
		}
	}()
	if err := d.bolt.Update(fn); err != nil {
		return fmt.Errorf("file store: writing %s: %w", d.path, err)
	}
	return nil
}

// safely runs fn, a panic being its error.
func safely(fn func(tx *bolt.Tx) error, tx *bolt.Tx) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("file store: %v", p)
		}
	}()
	return fn(tx)
}

// recordBytes returns a cached record as the []byte of a ClaimResult,
// without copying: callers must not modify it (see store.Store).
func recordBytes(record string) []byte {
	if record == "" {
		return []byte{}
	}
	return unsafe.Slice(unsafe.StringData(record), len(record))
}
