package series

import (
	"bytes"
	"context"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/webhookguard/caddy-webhook-idempotency/store/filestore"
)

// The file store's series: a bucket per source in the store's file,
// `series:<source>`, laid out as kv.go says, reached through the store's
// File; a flush is one transaction of the store's group commit.

// fileTimeout bounds a flush's commit and a read: the file store has no
// call timeout of its own.
const fileTimeout = 10 * time.Second

type fileBackend struct {
	file    filestore.File
	bucket  []byte
	release func() // gives back the hold on the file
}

func newFileBackend(f filestore.File, source string) (*fileBackend, error) {
	release, err := f.Hold()
	if err != nil {
		return nil, err
	}
	return &fileBackend{file: f, bucket: []byte("series:" + source), release: release}, nil
}

// boltKV is a source's bucket in a transaction.
type boltKV struct{ bk *bolt.Bucket }

func (s boltKV) get(k []byte) []byte {
	if s.bk == nil {
		return nil
	}
	return s.bk.Get(k)
}

func (s boltKV) put(k, v []byte) error { return s.bk.Put(k, v) }

func (s boltKV) deleteBefore(tag byte, k []byte) error {
	c := s.bk.Cursor()
	for key, _ := c.Seek([]byte{tag}); key != nil && key[0] == tag && bytes.Compare(key, k) < 0; key, _ = c.Seek([]byte{tag}) {
		if err := s.bk.Delete(key); err != nil {
			return err
		}
	}
	return nil
}

func (b *fileBackend) add(ctx context.Context, w *write) error {
	return b.file.Update(ctx, func(tx *bolt.Tx) error {
		bk, err := tx.CreateBucketIfNotExists(b.bucket)
		if err != nil {
			return err
		}
		return applyWrite(boltKV{bk}, w)
	})
}

func (b *fileBackend) buckets(_ context.Context, t tier, first, last int64) (out map[int64]fields, err error) {
	err = b.file.View(func(tx *bolt.Tx) error {
		out = readBuckets(boltKV{tx.Bucket(b.bucket)}, t, first, last)
		return nil
	})
	return out, err
}

func (b *fileBackend) totals(context.Context) (out fields, err error) {
	err = b.file.View(func(tx *bolt.Tx) error {
		out = currentTotals(boltKV{tx.Bucket(b.bucket)}.get(totalsKey), time.Now())
		return nil
	})
	return out, err
}

func (b *fileBackend) timeout() time.Duration { return fileTimeout }

func (b *fileBackend) close() { b.release() }
