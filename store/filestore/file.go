package filestore

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/caddyserver/caddy/v2"

	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// File is a file store's file as the inbox (internal/inbox), the archive
// (internal/archive) and the series (internal/series) use it, and nothing
// more: transactions on the file (their buckets are theirs),
// claim-and-append, a completion with writes of their own in the same
// transaction, and a reference on the open file. Nothing outside this
// package reads the store's fields.
type File struct{ s *Store }

// File returns the store's file for the inbox and the archive; the store
// must be provisioned.
func (s *Store) File() File { return File{s} }

// Path returns the path of the file; it names the file in errors and
// identifies it among the files of the process.
func (f File) Path() string { return f.s.use.file().path }

// Hold takes a reference of the caller's own on the open file, which
// release gives back: the store may be cleaned up before the caller is done
// with the file (a reload while an inbox finishes its deliveries).
func (f File) Hold() (release func(), err error) {
	path := f.s.use.file().path
	if _, _, err := pool.LoadOrNew(path, func() (caddy.Destructor, error) {
		return nil, fmt.Errorf("file store: %s is closed", path)
	}); err != nil {
		return nil, err
	}
	return func() { _, _ = pool.Delete(path) }, nil
}

// View runs fn in a read transaction.
func (f File) View(fn func(tx *bolt.Tx) error) error { return f.s.use.file().view(fn) }

// Update runs fn in the next commit (group commit, durable as the store's
// sync setting says) and returns its error or the commit's. fn must check
// what it needs before it writes: a failing fn does not roll back the
// writes of others in its commit.
func (f File) Update(ctx context.Context, fn func(tx *bolt.Tx) error) error {
	return f.s.use.file().commit(ctx, fn)
}

// ClaimAndAppend claims an absent key (with its guard, or noted its note,
// "" for neither), then in one commit runs appendFn and, if it succeeds,
// completes the key (and its guard) with record, kept for ttl: the event
// and its key are stored together or not at all. Otherwise it reports the
// key's state as Claim does. appendFn gets the key the note held before,
// when that is another key (a suspected replay), else "".
func (f File) ClaimAndAppend(ctx context.Context, key, guard string, noted bool, record []byte, ttl, noteTTL time.Duration, appendFn func(tx *bolt.Tx, suspected string) error) (store.ClaimResult, error) {
	owner := store.NewOwner()
	mode := claimGuarded
	if noted {
		mode = claimNoted
	}
	res, prev, err := f.s.use.claim(key, guard, owner, time.Minute, noteTTL, mode)
	if err != nil || res.State != store.StateClaimed {
		return res, err
	}
	d := f.s.use.file() // the file claimed in: held until the claim is done
	suspected := ""
	if noted && prev != "" && prev != key {
		suspected = prev
	}
	completeGuard := guard
	if noted {
		completeGuard = ""
	}
	err = d.complete(ctx, key, completeGuard, owner, record, ttl, &also{before: func(tx *bolt.Tx) error {
		return appendFn(tx, suspected)
	}})
	return res, err
}

// ClaimAndAppendBatch is ClaimAndAppend for the items of one request,
// without guards: it claims every absent key of keys (store.BatchEach),
// then in one commit runs appendFn with the positions of the keys it
// claimed and, if that succeeds, completes each of them with its record
// (records: one, or one per key; store.BatchRecord), kept for ttl. The
// events and their keys are stored together or not at all. The result
// says each key's state, as ClaimBatch does; a key claimed here whose
// commit failed is released, and the error returned.
func (f File) ClaimAndAppendBatch(ctx context.Context, keys []string, records [][]byte, ttl time.Duration, appendFn func(tx *bolt.Tx, claimed []int) error) (store.BatchResult, error) {
	if err := store.CheckBatchRecords(keys, records); err != nil {
		return store.BatchResult{}, fmt.Errorf("file store: %w", err)
	}
	if len(keys) == 0 {
		return store.BatchResult{}, nil
	}
	owner := store.NewOwner()
	res, err := f.s.use.claimBatch(keys, owner, time.Minute, store.BatchEach)
	if err != nil || res.Claimed == 0 {
		return res, err
	}
	d := f.s.use.file() // the file claimed in: held until the claims are done
	claimed := make([]int, 0, res.Claimed)
	ckeys := make([]string, 0, res.Claimed)
	crecs := records
	if len(records) > 1 {
		crecs = make([][]byte, 0, res.Claimed)
	}
	for i, it := range res.Items {
		if it.State == store.StateClaimed {
			claimed = append(claimed, i)
			ckeys = append(ckeys, keys[i])
			if len(records) > 1 {
				crecs = append(crecs, records[i])
			}
		}
	}
	err = d.completeBatch(ctx, ckeys, owner, crecs, ttl, &also{before: func(tx *bolt.Tx) error {
		return appendFn(tx, claimed)
	}})
	return res, err
}

// CompleteThen completes key and, unless guard is "", its guard, as
// store.GuardedStore's CompleteGuarded does, with then written in the same
// transaction after the completion. It returns the completion's error and
// then's.
func (f File) CompleteThen(ctx context.Context, key, guard, owner string, record []byte, ttl time.Duration, then func(tx *bolt.Tx) error) (thenErr, err error) {
	more := &also{after: then}
	err = f.s.use.file().complete(ctx, key, guard, owner, record, ttl, more)
	if err != nil {
		return err, err
	}
	return more.afterErr, nil
}

// SetExpiry makes key, if it holds a value, expire ttl from now, within an
// Update's transaction; DropCached must follow the commit.
func (f File) SetExpiry(tx *bolt.Tx, key string, ttl time.Duration) error {
	v := tx.Bucket(bucketRecords).Get([]byte(key))
	if len(v) < 9 {
		return nil
	}
	return putValue(tx, key, v[8], string(v[9:]), now().Add(ttl).UnixNano(), true)
}

// SetRecord replaces the record of key, if it holds one, within an
// Update's transaction: it expires ttl from now, or when it did with ttl
// 0. DropCached must follow the commit.
func (f File) SetRecord(tx *bolt.Tx, key string, record []byte, ttl time.Duration) error {
	v := tx.Bucket(bucketRecords).Get([]byte(key))
	if len(v) < 9 || v[8] != kindRecord {
		return nil
	}
	expires := int64(binary.BigEndian.Uint64(v))
	if ttl > 0 {
		expires = now().Add(ttl).UnixNano()
	}
	return putValue(tx, key, kindRecord, string(record), expires, true)
}

// DropCached forgets the process's copy of key's value, after its value
// changed on the file.
func (f File) DropCached(key string) {
	d := f.s.use.file()
	locked := d.lockShards(key, "")
	d.shardOf(key).drop(key)
	locked.unlock()
}
