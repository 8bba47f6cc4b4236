package inbox

import (
	"context"
	"encoding/binary"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
)

// The file store's histories (attempts.go): a bucket per source,
// `inbox-attempts:<source>`, of each event's history by its key (the time
// of its last attempt, 8 bytes of unix milliseconds, then the history),
// and `inbox-attempts-at:<source>`, the same keys by that time (8 bytes,
// then the key), from which those past their life, and the oldest beyond
// the bound, go; it also holds their count under a key of its own. An
// attempt is written in the commit that records its outcome.

// fileAttempts is a source's histories in the store's file.
type fileAttempts struct {
	q       *fileQueue
	byKey   []byte
	byTime  []byte
	counted []byte // the count's key in byTime: sorts after every time
}

func (q *fileQueue) attempts() attemptLog { return q.histories() }

func (q *fileQueue) histories() fileAttempts {
	return fileAttempts{q: q, byKey: []byte("inbox-attempts:" + q.source), byTime: []byte("inbox-attempts-at:" + q.source), counted: []byte{0xff}}
}

// logTx records m's attempt in its event's history, in the commit of its
// outcome.
func (q *fileQueue) logTx(tx *bolt.Tx, m message) error {
	if m.logged == nil {
		return nil
	}
	return q.histories().add(tx, m.logged, time.Now())
}

// add records an attempt in its event's history and drops the histories
// past their life, and the oldest beyond the bound. Called in a commit.
func (l fileAttempts) add(tx *bolt.Tx, lg *logged, now time.Time) error {
	byKey, err := tx.CreateBucketIfNotExists(l.byKey)
	if err != nil {
		return err
	}
	byTime, err := tx.CreateBucketIfNotExists(l.byTime)
	if err != nil {
		return err
	}
	count, _ := binary.Uvarint(byTime.Get(l.counted))
	key := []byte(lg.key)
	var h event.History
	if old := byKey.Get(key); len(old) >= 8 {
		if err := byTime.Delete(append(old[:8:8], key...)); err != nil {
			return err
		}
		if h, err = event.ParseHistory(old[8:]); err != nil {
			h = event.History{} // a damaged history starts again
		}
	} else {
		count++
	}
	h.Add(lg.attempt)
	at := binary.BigEndian.AppendUint64(nil, uint64(now.UnixMilli()))
	if err := byKey.Put(key, event.AppendHistory(at, &h)); err != nil {
		return err
	}
	if err := byTime.Put(append(at, key...), nil); err != nil {
		return err
	}
	// the oldest first: past their life, then beyond the bound
	expired := uint64(now.Add(-lg.life).UnixMilli())
	c := byTime.Cursor()
	for k, _ := c.First(); len(k) > 8; k, _ = c.First() {
		if binary.BigEndian.Uint64(k) >= expired && (lg.max <= 0 || count <= uint64(lg.max)) {
			break
		}
		if err := byKey.Delete(k[8:]); err != nil {
			return err
		}
		if err := c.Delete(); err != nil {
			return err
		}
		count--
	}
	return byTime.Put(l.counted, binary.AppendUvarint(nil, count))
}

func (l fileAttempts) read(_ context.Context, keys []string) ([]event.History, error) {
	out := make([]event.History, len(keys))
	err := l.q.src.file.View(func(tx *bolt.Tx) error {
		byKey := tx.Bucket(l.byKey)
		if byKey == nil {
			return nil
		}
		for i, k := range keys {
			v := byKey.Get([]byte(k))
			if len(v) < 8 {
				continue
			}
			h, err := event.ParseHistory(v[8:])
			if err != nil {
				continue // a damaged history shows none
			}
			out[i] = h
		}
		return nil
	})
	return out, err
}
