package filestore

import (
	"context"
	"fmt"
	"math/bits"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// A request's items (store.BatchStore). Every shard the keys fall in is
// locked, in index order, for the whole claim: the claims in flight and the
// values in memory are read first, then the values only the file can tell
// in one read transaction, and the absent keys are claimed, all at one
// instant for the other requests. A batch's completion is one commit: one
// record of the log (one fdatasync with `sync always`), or, for answers too
// large for the log, one transaction of the tree.

// ClaimBatch implements store.BatchStore.
func (s *Store) ClaimBatch(ctx context.Context, keys []string, owner string, lease time.Duration, mode store.BatchMode) (store.BatchResult, error) {
	if err := store.CheckBatch(keys); err != nil {
		return store.BatchResult{}, fmt.Errorf("file store: %w", err)
	}
	if len(keys) == 0 {
		return store.BatchResult{}, nil
	}
	return s.use.claimBatch(keys, owner, lease, mode)
}

// CompleteBatch implements store.BatchStore.
func (s *Store) CompleteBatch(ctx context.Context, keys []string, owner string, records [][]byte, ttl time.Duration) error {
	if err := store.CheckBatchRecords(keys, records); err != nil {
		return fmt.Errorf("file store: %w", err)
	}
	if len(keys) == 0 {
		return nil
	}
	return s.use.file().completeBatch(ctx, keys, owner, records, ttl, nil)
}

// ReleaseBatch implements store.BatchStore.
func (s *Store) ReleaseBatch(ctx context.Context, keys []string, owner string) error {
	if err := store.CheckBatch(keys); err != nil {
		return fmt.Errorf("file store: %w", err)
	}
	return s.use.file().eachOwned(keys, owner, func(sh *shard, key string, _ *claim) {
		// a note a claim took stays in memory, unwritten, as with release
		delete(sh.claims, key)
	})
}

// RenewBatch implements store.BatchStore.
func (s *Store) RenewBatch(ctx context.Context, keys []string, owner string, lease time.Duration) error {
	if err := store.CheckBatch(keys); err != nil {
		return fmt.Errorf("file store: %w", err)
	}
	expires := now().UnixNano() + int64(lease)
	return s.use.file().eachOwned(keys, owner, func(_ *shard, _ string, c *claim) {
		c.expires = expires
	})
}

// shardSet is the shards of a batch's keys: each key's shard index, and
// the set of them as a bit mask (shards is 64).
type shardSet struct {
	idx  []uint8
	mask uint64
}

// shardsOf returns the shards of keys, appending their indexes to buf.
func (d *db) shardsOf(keys []string, buf []uint8) shardSet {
	set := shardSet{idx: buf}
	for _, k := range keys {
		i := d.shardIndex(k)
		set.idx = append(set.idx, uint8(i))
		set.mask |= 1 << i
	}
	return set
}

// lock locks the set's shards in index order, as lockShards does, so that
// no two locks wait on each other in a cycle.
func (d *db) lock(set shardSet) {
	for m := set.mask; m != 0; m &= m - 1 {
		d.shards[bits.TrailingZeros64(m)].mu.Lock()
	}
}

// unlock unlocks the set's shards.
func (d *db) unlock(set shardSet) {
	for m := set.mask; m != 0; m &= m - 1 {
		d.shards[bits.TrailingZeros64(m)].mu.Unlock()
	}
}

// batchStack is how many keys' shard indexes a batch keeps on the stack.
const batchStack = 256

// claimBatch claims keys as store.BatchStore.ClaimBatch does, through the
// use by (nil in tests).
func (d *db) claimBatch(keys []string, owner string, lease time.Duration, mode store.BatchMode, by *use) (store.BatchResult, error) {
	items := make([]store.ClaimResult, len(keys))
	var buf [batchStack]uint8
	set := d.shardsOf(keys, buf[:0])
	d.lock(set)
	defer d.unlock(set)
	nowNano := now().UnixNano()
	busy := false
	var unknown []int // the keys only the file can tell
	for i, k := range keys {
		s := &d.shards[set.idx[i]]
		if c, live := held(s, k, nowNano); live {
			if c.owner != owner || c.pinned {
				items[i] = c.inFlight(nowNano)
				busy = true
			}
			// else the owner's own claim: StateClaimed, its lease renewed
			// below
			continue
		}
		v, found, known := d.recall(s, k, nowNano)
		if !known {
			unknown = append(unknown, i)
			continue
		}
		items[i] = itemState(v, found)
	}
	if len(unknown) > 0 {
		err := d.view(func(tx *bolt.Tx) error {
			for _, i := range unknown {
				v, found := d.fetch(tx, keys[i], nowNano)
				if found {
					d.shards[set.idx[i]].remember(keys[i], v)
				}
				items[i] = itemState(v, found)
			}
			return nil
		})
		if err != nil {
			return store.BatchResult{}, err
		}
	}
	res := store.NewBatchResult(items)
	if busy && mode == store.BatchUnlessInFlight {
		return res, nil
	}
	expires := nowNano + int64(lease)
	claims := make([]claim, res.Absent) // one allocation for the batch's claims
	n := 0
	for i, k := range keys {
		s := &d.shards[set.idx[i]]
		switch items[i].State {
		case store.StateAbsent:
			claims[n] = claim{owner: owner, expires: expires, by: by}
			s.claims[k] = &claims[n]
			n++
			items[i].State = store.StateClaimed
		case store.StateClaimed: // the owner's own
			s.claims[k].expires = expires
		}
	}
	res.Claimed, res.Absent = res.Claimed+res.Absent, 0
	return res, nil
}

// itemState is valueState for a batch's key: a free key is StateAbsent
// until the batch claims it.
func itemState(v cached, found bool) store.ClaimResult {
	res := valueState(v, found)
	if res.State == store.StateClaimed {
		res.State = store.StateAbsent
	}
	return res
}

// completeBatch completes keys as store.BatchStore.CompleteBatch does: the
// claims owner holds are pinned, their records written in one commit, with
// what more (nil for nothing) writes before them in the same transaction,
// and the claims end (a failed commit releases them, as complete does).
// With more, a key owner does not hold fails the whole completion.
func (d *db) completeBatch(ctx context.Context, keys []string, owner string, records [][]byte, ttl time.Duration, more *also) error {
	var buf [batchStack]uint8
	set := d.shardsOf(keys, buf[:0])
	d.lock(set)
	nowNano := now().UnixNano()
	pinned := make([]*claim, len(keys))
	var notOwned []int
	n := 0
	for i, k := range keys {
		s := &d.shards[set.idx[i]]
		c, ok := owned(s, k, owner, nowNano)
		if !ok {
			if !d.holds(s, k, store.BatchRecord(records, i), nowNano) {
				notOwned = append(notOwned, i)
			}
			continue
		}
		c.pinned = true
		pinned[i] = c
		n++
	}
	d.unlock(set)
	if n == 0 {
		return store.NotOwned(notOwned)
	}

	expires := nowNano + int64(ttl)
	recs := make([]string, len(records)) // kept by the cache, and by the log's pending values
	for i, r := range records {
		recs[i] = string(r)
	}
	rec := func(i int) string {
		if len(recs) == 1 {
			return recs[0]
		}
		return recs[i]
	}
	puts := make([]put, 0, n)
	for i, c := range pinned {
		if c == nil {
			continue
		}
		puts = append(puts, put{key: keys[i], kind: kindRecord, payload: rec(i), expires: expires})
		if c.note != "" {
			puts = append(puts, put{key: c.note, kind: kindNote, payload: keys[i], expires: nowNano + int64(c.noteTTL)})
		}
	}
	var err error
	switch {
	case more != nil && len(notOwned) > 0:
		// what more writes goes with every key or none: none, and the
		// claims are released
		err = store.NotOwned(notOwned)
	case more == nil:
		// the values alone: the log, when the store has one
		err = d.commitPuts(ctx, puts)
	default:
		err = d.commit(ctx, func(tx *bolt.Tx) error {
			if err := more.before(tx); err != nil {
				return err
			}
			return d.putAll(tx, puts)
		})
	}

	d.lock(set)
	defer d.unlock(set)
	for i, c := range pinned {
		if c != nil {
			d.finish(keys[i], c, rec(i), expires, err)
		}
	}
	if err != nil {
		return err
	}
	return store.NotOwned(notOwned)
}

// eachOwned runs op on every key whose claim owner holds, every shard of
// the batch locked at once, and returns the positions of the others as a
// *store.NotOwnerError.
func (d *db) eachOwned(keys []string, owner string, op func(s *shard, key string, c *claim)) error {
	if len(keys) == 0 {
		return nil
	}
	var buf [batchStack]uint8
	set := d.shardsOf(keys, buf[:0])
	d.lock(set)
	defer d.unlock(set)
	nowNano := now().UnixNano()
	var notOwned []int
	for i, k := range keys {
		s := &d.shards[set.idx[i]]
		if c, ok := owned(s, k, owner, nowNano); ok {
			op(s, k, c)
		} else {
			notOwned = append(notOwned, i)
		}
	}
	return store.NotOwned(notOwned)
}

// Interface guard
var _ store.BatchStore = (*Store)(nil)
