package inbox

import (
	"context"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// The file store's control state and routes, in buckets of the source:
//
//	inbox-control:<source>       `paused` (the source) and `paused:<id>`
//	                             (a destination), present while paused
//	inbox-destinations:<source>  route id -> URL (destination.go)
//
// A breaker's state is the process's own, as the rate limit's is: one
// Caddy runs the file store's inbox, and a restart closes the breakers
// (their first attempts open them again if the destination still fails).

// fileBreakers are the breakers of the process, by file, source and
// destination, kept across config reloads.
var fileBreakers = struct {
	sync.Mutex
	m map[string]*breakerCell
}{m: make(map[string]*breakerCell)}

// fileControl is a destination's control state on the file store.
type fileControl struct {
	q       *fileQueue
	bucket  []byte
	field   []byte
	breaker string // its key in fileBreakers
}

func (q *fileQueue) control() control {
	return &fileControl{q: q, bucket: []byte("inbox-control:" + q.source), field: []byte("paused:" + q.destID),
		breaker: q.src.file.Path() + "\x00" + q.source + "\x00" + q.destID}
}

func (c *fileControl) read(_ context.Context, b *Breaker) (controlState, error) {
	var st controlState
	err := c.q.src.file.View(func(tx *bolt.Tx) error {
		if bk := tx.Bucket(c.bucket); bk != nil {
			st.sourcePaused, st.paused = bk.Get([]byte("paused")) != nil, bk.Get(c.field) != nil
		}
		return nil
	})
	if b != nil {
		c.cell(func(cell *breakerCell) { st.breaker = cell.view(*b) })
	}
	return st, err
}

func (c *fileControl) setPaused(ctx context.Context, source, paused bool) error {
	field := c.field
	if source {
		field = []byte("paused")
	}
	return c.q.src.file.Update(ctx, func(tx *bolt.Tx) error {
		bk, err := tx.CreateBucketIfNotExists(c.bucket)
		if err != nil {
			return err
		}
		if paused {
			return bk.Put(field, []byte("1"))
		}
		return bk.Delete(field)
	})
}

func (c *fileControl) record(_ context.Context, b Breaker, failed, probe bool) (BreakerState, error) {
	var st BreakerState
	c.cell(func(cell *breakerCell) {
		cell.record(b, failed, probe, time.Now().UnixMilli())
		st = cell.view(b)
	})
	return st, nil
}

func (c *fileControl) probe(_ context.Context, _ Breaker, owner string, lease time.Duration) (bool, error) {
	var ok bool
	c.cell(func(cell *breakerCell) { ok = cell.probe(owner, lease.Milliseconds(), time.Now().UnixMilli()) })
	return ok, nil
}

// cell runs fn on the destination's breaker, under the breakers' lock.
func (c *fileControl) cell(fn func(*breakerCell)) {
	fileBreakers.Lock()
	defer fileBreakers.Unlock()
	cell := fileBreakers.m[c.breaker]
	if cell == nil {
		cell = &breakerCell{}
		fileBreakers.m[c.breaker] = cell
	}
	fn(cell)
}

func (q *fileQueue) destinations(ctx context.Context, routes map[string]string) (map[string]string, error) {
	name := []byte("inbox-destinations:" + q.source)
	out := make(map[string]string)
	if err := q.src.file.View(func(tx *bolt.Tx) error {
		if bk := tx.Bucket(name); bk != nil {
			return bk.ForEach(func(k, v []byte) error {
				out[string(k)] = string(v)
				return nil
			})
		}
		return nil
	}); err != nil {
		return nil, err
	}
	missing := false
	for id, u := range routes {
		missing = missing || out[id] != u
		out[id] = u
	}
	if !missing {
		return out, nil
	}
	return out, q.src.file.Update(ctx, func(tx *bolt.Tx) error {
		bk, err := tx.CreateBucketIfNotExists(name)
		if err != nil {
			return err
		}
		for id, u := range routes {
			if err := bk.Put([]byte(id), []byte(u)); err != nil {
				return err
			}
		}
		return nil
	})
}

func (q *fileQueue) forgetDestination(ctx context.Context, id string) error {
	return q.src.file.Update(ctx, func(tx *bolt.Tx) error {
		if bk := tx.Bucket([]byte("inbox-destinations:" + q.source)); bk != nil {
			return bk.Delete([]byte(id))
		}
		return nil
	})
}

// Interface guard
var _ control = (*fileControl)(nil)
