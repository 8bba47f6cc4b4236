package filestore

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"time"
	"unsafe"

	bolt "go.etcd.io/bbolt"
)

// Group commit: every write goes through one goroutine, which takes every
// write that waited while the last commit was on its way to the disk and
// commits them as one transaction, so concurrent completions share one
// fsync. An idle store adds no wait: a write that finds the committer free
// goes out at once, alone.

// write is one write waiting for its commit.
type write struct {
	fn   func(tx *bolt.Tx) error
	err  error
	done chan struct{}
}

var writePool = sync.Pool{New: func() any { return &write{done: make(chan struct{}, 1)} }}

// commitWait bounds how long a write waits for the disk; a write that
// times out may still be committed later.
var commitWait = 10 * time.Second

// commit runs fn in the next commit and returns its error, or the
// commit's. fn must check what it needs before it writes anything: a
// failing fn does not roll back the writes of the others in its commit.
func (d *db) commit(ctx context.Context, fn func(tx *bolt.Tx) error) error {
	w := writePool.Get().(*write)
	w.fn, w.err = fn, nil
	timer := time.NewTimer(commitWait)
	defer timer.Stop()
	select {
	case d.writes <- w:
	case <-d.stop:
		return fmt.Errorf("file store: %s is closed", d.path)
	case <-timer.C:
		return fmt.Errorf("file store: writing %s: no commit within %s", d.path, commitWait)
	}
	select {
	case <-w.done:
	case <-timer.C:
		// the committer still holds w: it is not reused
		return fmt.Errorf("file store: writing %s: not on disk within %s", d.path, commitWait)
	}
	err := w.err
	w.fn, w.err = nil, nil
	writePool.Put(w)
	return err
}

// commitLoop commits writes until the store closes; writes queued then are
// committed first.
func (d *db) commitLoop() {
	defer d.done.Done()
	batch := make([]*write, 0, batchMax)
	for {
		select {
		case w := <-d.writes:
			batch = append(batch[:0], w)
		case <-d.stop:
			for {
				select {
				case w := <-d.writes:
					d.commitBatch([]*write{w})
				default:
					return
				}
			}
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
		d.commitBatch(batch)
		clear(batch)
	}
}

// commitBatch commits one batch and finishes its writes. The file is
// synced before the commit returns unless the store syncs on an interval.
func (d *db) commitBatch(batch []*write) {
	d.bolt.NoSync = d.syncEvery.Load() > 0
	err := d.update(func(tx *bolt.Tx) error {
		for _, w := range batch {
			w.err = safely(w.fn, tx)
		}
		return nil
	})
	for _, w := range batch {
		if err != nil {
			w.err = err
		}
		w.done <- struct{}{}
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
