package archive

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	bolt "go.etcd.io/bbolt"
	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/store/filestore"
)

// The file store's archive: a bucket per source in the store's file,
// `archive:<source>`, keyed by id (16 bytes: milliseconds and a sequence
// number, big endian, as a Redis stream numbers its entries), and the
// bodies apart in `archive-body:<source>` under the same ids, so that a
// list reads no body; trimmed on every append to max_events and to
// retention (and on reads to retention), and kept across restarts.

// fileArchives shares each source's archive state across config reloads.
var fileArchives = caddy.NewUsagePool()

// fileArchive is the archive of one source in one file.
type fileArchive struct {
	file    filestore.File
	bucket  []byte // the events without their bodies
	bodies  []byte // the bodies, by the same ids
	release func() // gives back the hold on the file

	mu     sync.Mutex
	count  int64 // events in the bucket; -1 when it must be counted again
	lastID event.ID
}

// Destruct implements caddy.Destructor.
func (fa *fileArchive) Destruct() error {
	fa.release()
	return nil
}

// fileBackend is one handler's archive on the file store.
type fileBackend struct {
	fa *fileArchive
	// file is the handler's store's: a key's completion goes to the file
	// the key was claimed in, which holds it open until then, even after
	// a reload stopped the archive (fa's may be another configuration's)
	file      filestore.File
	key       string // in fileArchives
	a         *Archive
	closeOnce sync.Once
}

func newFileBackend(file filestore.File, a *Archive) (*fileBackend, error) {
	key := file.Path() + "\x00" + a.cfg.name() + "\x00" + a.cfg.Source
	val, _, err := fileArchives.LoadOrNew(key, func() (caddy.Destructor, error) {
		release, err := file.Hold()
		if err != nil {
			return nil, err
		}
		fa := &fileArchive{
			file: file, bucket: []byte(a.cfg.name() + ":" + a.cfg.Source), bodies: []byte(a.cfg.name() + "-body:" + a.cfg.Source),
			release: release, count: -1,
		}
		if err := file.Update(context.Background(), fa.buckets); err != nil {
			// a full disk, say: the archive is degraded, never a reason
			// to refuse the sites; its buckets are made by the first
			// append that can write
			a.metrics.errors.Inc()
			a.logger.Error("the archive cannot write to the store's file: its events are not kept, and counted in caddy_webhook_idempotency_archive_errors_total, until it can; deliveries are handled as usual",
				zap.String("path", file.Path()), zap.Error(err))
		}
		return fa, nil
	})
	if err != nil {
		return nil, err
	}
	return &fileBackend{fa: val.(*fileArchive), file: file, key: key, a: a}, nil
}

// buckets makes the archive's buckets, in a write transaction, and
// returns them.
func (fa *fileArchive) buckets(tx *bolt.Tx) error {
	_, _, err := fa.make(tx)
	return err
}

// make returns the archive's buckets, made when missing (their first
// commit failed: a full disk). Called in a write transaction.
func (fa *fileArchive) make(tx *bolt.Tx) (events, bodies *bolt.Bucket, err error) {
	if events, err = tx.CreateBucketIfNotExists(fa.bucket); err != nil {
		return nil, nil, err
	}
	bodies, err = tx.CreateBucketIfNotExists(fa.bodies)
	return events, bodies, err
}

// append writes e in tx and trims the bucket. Called in a commit.
func (b *fileBackend) append(tx *bolt.Tx, e *Entry) error {
	fa := b.fa
	bk, bodies, err := fa.make(tx)
	if err != nil {
		return fmt.Errorf("archive buckets of %s: %v", b.a.cfg.Source, err)
	}
	fa.mu.Lock()
	defer fa.mu.Unlock()
	fa.recount(bk)
	// numbered by the time of the append, as a Redis stream numbers its
	// entries, and trimmed by it
	id := fa.lastID.Next(uint64(max(now().UnixMilli(), 0)))
	if err := bk.Put(id.Key(), event.AppendFields(nil, e.appendFields(make([]any, 0, fieldCount)))); err != nil {
		return err
	}
	if e.HasBody {
		if err := bodies.Put(id.Key(), e.Body); err != nil {
			return err
		}
	}
	fa.lastID = id
	fa.count++
	// trim: the oldest beyond max_events, and what is older than retention
	return b.trim(bk, bodies, b.a.cutoff(), int64(b.a.cfg.MaxEvents))
}

// recount counts the events of bk and reads the last one's id when they
// are not known (at first, or after a commit that failed). Called in a
// write transaction, whose view no other commit is ahead of, with fa.mu
// held.
func (fa *fileArchive) recount(bk *bolt.Bucket) {
	if fa.count >= 0 {
		return
	}
	fa.count = int64(bk.Stats().KeyN)
	if k, _ := bk.Cursor().Last(); k != nil {
		fa.lastID = event.IDFromKey(k)
	}
}

// trim deletes, from the oldest, the events beyond maxEvents and those
// before cutoff, with their bodies. Called in a commit, with fa.mu held
// and fa.count known.
func (b *fileBackend) trim(bk, bodies *bolt.Bucket, cutoff event.ID, maxEvents int64) error {
	fa := b.fa
	c := bk.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.First() {
		if fa.count <= maxEvents && !event.IDFromKey(k).Less(cutoff) {
			break
		}
		if err := bodies.Delete(k); err != nil {
			return err
		}
		if err := c.Delete(); err != nil {
			return err
		}
		fa.count--
	}
	return nil
}

// failed marks the count for recounting after a commit that failed.
func (b *fileBackend) failed() {
	b.fa.mu.Lock()
	b.fa.count = -1
	b.fa.mu.Unlock()
}

func (b *fileBackend) completeAndAppend(ctx context.Context, key, guard, owner string, record []byte, ttl time.Duration, e *Entry) (err, appendErr error) {
	appendErr, err = b.file.CompleteThen(ctx, key, guard, owner, record, ttl, func(tx *bolt.Tx) error { return b.append(tx, e) })
	if appendErr != nil {
		b.failed()
	}
	return err, appendErr
}

func (b *fileBackend) appendBatch(ctx context.Context, es []*Entry) error {
	err := b.fa.file.Update(ctx, func(tx *bolt.Tx) error {
		for _, e := range es {
			if err := b.append(tx, e); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.failed()
	}
	return err
}

func (b *fileBackend) page(_ context.Context, hi, lo event.ID, count int) ([]Event, error) {
	var out []Event
	err := b.fa.file.View(func(tx *bolt.Tx) error {
		bk := tx.Bucket(b.fa.bucket)
		if bk == nil {
			return nil // never written
		}
		c := bk.Cursor()
		k, v := c.Seek(hi.Key())
		if k == nil {
			k, v = c.Last()
		} else if hi.Less(event.IDFromKey(k)) {
			k, v = c.Prev()
		}
		for ; k != nil && len(out) < count; k, v = c.Prev() {
			id := event.IDFromKey(k)
			if id.Less(lo) {
				break
			}
			ev, err := fileEvent(id, v, nil)
			if err != nil {
				return err
			}
			out = append(out, ev)
		}
		return nil
	})
	return out, err
}

// fileEvent decodes an archived event from its bucket value. bodies is
// the bucket of bodies, or nil for an event without its body (the body an
// event archived before bodies were kept apart holds in its value is then
// skipped, not copied).
func fileEvent(id event.ID, v []byte, bodies *bolt.Bucket) (Event, error) {
	skip := event.FieldBody
	if bodies != nil {
		skip = ""
	}
	f, err := event.ReadFieldsExcept(v, skip)
	if err != nil {
		return Event{}, err
	}
	ev := eventFromFields(id.String(), func(name string) (string, bool) {
		s, ok := f[name]
		return s, ok
	}, bodies != nil)
	if bodies != nil && ev.BodyStored && !ev.bodyRead {
		// bbolt's value lives as long as the transaction: copy it
		body := bodies.Get(id.Key())
		if body != nil {
			body = append(make([]byte, 0, len(body)), body...)
		}
		ev.setBody(body)
	}
	return ev, nil
}

func (b *fileBackend) event(_ context.Context, id event.ID) (Event, bool, error) {
	var ev Event
	found := false
	err := b.fa.file.View(func(tx *bolt.Tx) error {
		bk := tx.Bucket(b.fa.bucket)
		if bk == nil {
			return nil
		}
		v := bk.Get(id.Key())
		if v == nil {
			return nil
		}
		var err error
		ev, err = fileEvent(id, v, tx.Bucket(b.fa.bodies))
		found = err == nil
		return err
	})
	return ev, found, err
}

func (b *fileBackend) bodies(_ context.Context, evs []*Event) error {
	return b.fa.file.View(func(tx *bolt.Tx) error {
		bk, bodies := tx.Bucket(b.fa.bucket), tx.Bucket(b.fa.bodies)
		if bk == nil || bodies == nil {
			for _, ev := range evs {
				ev.setBody(nil)
			}
			return nil
		}
		for _, ev := range evs {
			if !ev.BodyStored {
				continue
			}
			id, _ := event.ParseID(ev.ID)
			v := bk.Get(id.Key())
			if v == nil {
				ev.setBody(nil)
				continue
			}
			whole, err := fileEvent(id, v, bodies)
			if err != nil {
				return err
			}
			ev.setBody(whole.body)
		}
		return nil
	})
}

func (b *fileBackend) size(ctx context.Context, cutoff event.ID) (int64, error) {
	fa := b.fa
	fa.mu.Lock()
	count, expired := fa.count, false
	fa.mu.Unlock()
	err := fa.file.View(func(tx *bolt.Tx) error {
		bk := tx.Bucket(fa.bucket)
		if bk == nil {
			count = 0 // never written
			return nil
		}
		k, _ := bk.Cursor().First()
		expired = k != nil && event.IDFromKey(k).Less(cutoff)
		if count < 0 {
			// counted in this view only: an append may have committed
			// since it began, so what it holds is not to be kept (the
			// next write counts, in its own transaction)
			count = int64(bk.Stats().KeyN)
		}
		return nil
	})
	if err != nil || !expired {
		return count, err
	}
	// events older than retention on an idle source: retention holds for
	// reads too, so they go now rather than with the next append
	err = fa.file.Update(ctx, func(tx *bolt.Tx) error {
		fa.mu.Lock()
		defer fa.mu.Unlock()
		bk, bodies := tx.Bucket(fa.bucket), tx.Bucket(fa.bodies)
		if bk == nil || bodies == nil {
			return nil
		}
		fa.recount(bk)
		err := b.trim(bk, bodies, cutoff, math.MaxInt64)
		count = fa.count
		return err
	})
	if err != nil {
		b.failed()
	}
	return count, err
}

// redelivered rewrites the event with at added to its history, in one
// commit.
func (b *fileBackend) redelivered(ctx context.Context, id event.ID, at *event.Attempt) error {
	return b.fa.file.Update(ctx, func(tx *bolt.Tx) error {
		bk := tx.Bucket(b.fa.bucket)
		if bk == nil {
			return errGone
		}
		v := bk.Get(id.Key())
		if v == nil {
			return errGone
		}
		f, err := event.ReadFields(v)
		if err != nil {
			return err
		}
		h, err := event.ParseHistory([]byte(f[event.FieldHistory]))
		if err != nil {
			return err
		}
		h.Add(*at)
		return bk.Put(id.Key(), event.EncodeFields(f, event.FieldHistory, string(event.AppendHistory(nil, &h))))
	})
}

func (b *fileBackend) timeout() time.Duration { return 10 * time.Second }

func (b *fileBackend) close() {
	b.closeOnce.Do(func() { _, _ = fileArchives.Delete(b.key) })
}

// Interface guards
var (
	_ backend          = (*fileBackend)(nil)
	_ caddy.Destructor = (*fileArchive)(nil)
)
