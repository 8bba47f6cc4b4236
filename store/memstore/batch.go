package memstore

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// A request's items (store.BatchStore): every shard the keys fall in is
// locked, in index order, for the whole call, so that a batch claim reads
// every key's state and claims the absent ones at one instant, as one
// script does in Redis. Each key is then what its own call would make it.

// ClaimBatch implements store.BatchStore.
func (m *Store) ClaimBatch(ctx context.Context, keys []string, owner string, lease time.Duration, mode store.BatchMode) (store.BatchResult, error) {
	if err := store.CheckBatch(keys); err != nil {
		return store.BatchResult{}, fmt.Errorf("memory store: %w", err)
	}
	if len(keys) == 0 {
		return store.BatchResult{}, nil
	}
	return m.table.claimBatch(keys, owner, lease, mode), nil
}

// CompleteBatch implements store.BatchStore.
func (m *Store) CompleteBatch(ctx context.Context, keys []string, owner string, records [][]byte, ttl time.Duration) error {
	if err := store.CheckBatchRecords(keys, records); err != nil {
		return fmt.Errorf("memory store: %w", err)
	}
	return m.table.eachOwned(keys, func(s *memoryShard, i int, key string, nowNano int64) error {
		return s.complete(key, owner, store.BatchRecord(records, i), ttl, nowNano)
	})
}

// ReleaseBatch implements store.BatchStore.
func (m *Store) ReleaseBatch(ctx context.Context, keys []string, owner string) error {
	if err := store.CheckBatch(keys); err != nil {
		return fmt.Errorf("memory store: %w", err)
	}
	return m.table.eachOwned(keys, func(s *memoryShard, _ int, key string, nowNano int64) error {
		return m.table.releaseLocked(s, key, owner, nowNano)
	})
}

// RenewBatch implements store.BatchStore.
func (m *Store) RenewBatch(ctx context.Context, keys []string, owner string, lease time.Duration) error {
	if err := store.CheckBatch(keys); err != nil {
		return fmt.Errorf("memory store: %w", err)
	}
	return m.table.eachOwned(keys, func(s *memoryShard, _ int, key string, nowNano int64) error {
		return s.renew(key, owner, lease, nowNano)
	})
}

// shardSet is the shards of a batch's keys: each key's shard index, and
// the set of them as a bit mask (memoryShards is 64).
type shardSet struct {
	idx  []uint8
	mask uint64
}

// shardsOf returns the shards of keys, appending their indexes to buf.
func (t *memoryTable) shardsOf(keys []string, buf []uint8) shardSet {
	set := shardSet{idx: buf}
	for _, k := range keys {
		i := t.shardIndex(k)
		set.idx = append(set.idx, uint8(i))
		set.mask |= 1 << i
	}
	return set
}

// lock locks the set's shards in index order, so two batches (or a batch
// and a pair, see lockPair) never wait on each other in a cycle.
func (t *memoryTable) lock(set shardSet) {
	for m := set.mask; m != 0; m &= m - 1 {
		t.shards[bits.TrailingZeros64(m)].mu.Lock()
	}
}

// unlock unlocks the set's shards.
func (t *memoryTable) unlock(set shardSet) {
	for m := set.mask; m != 0; m &= m - 1 {
		t.shards[bits.TrailingZeros64(m)].mu.Unlock()
	}
}

// batchStack is how many keys' shard indexes a batch keeps on the stack.
const batchStack = 256

// claimBatch claims keys as store.BatchStore.ClaimBatch does.
func (t *memoryTable) claimBatch(keys []string, owner string, lease time.Duration, mode store.BatchMode) store.BatchResult {
	t.janitor.Do(t.startJanitor)
	items := make([]store.ClaimResult, len(keys))
	var buf [batchStack]uint8
	set := t.shardsOf(keys, buf[:0])
	t.lock(set)
	nowNano := now().UnixNano()
	busy := false
	for i, k := range keys {
		s := &t.shards[set.idx[i]]
		res, live, _ := s.found(k, nowNano)
		switch {
		case !live:
			items[i].State = store.StateAbsent // claimed below
		case res.State == store.StateCompleted || s.owners[k] != owner:
			items[i] = res
			busy = busy || res.State == store.StateInFlight
		}
		// else the owner's own claim: StateClaimed, its lease renewed below
	}
	if busy && mode == store.BatchUnlessInFlight {
		t.unlock(set)
		return store.NewBatchResult(items)
	}
	added := int64(0)
	for i, k := range keys {
		switch items[i].State {
		case store.StateAbsent:
			items[i].State = store.StateClaimed
		case store.StateClaimed:
		default:
			continue
		}
		s := &t.shards[set.idx[i]]
		if _, held := s.m[k]; !held {
			added++
		}
		s.m[k] = memoryEntry{expires: nowNano + int64(lease)}
		s.owners[k] = owner
	}
	over := t.count.Add(added) > t.maxEntries.Load()
	t.unlock(set)
	if over {
		t.evictElsewhere(uint64(set.idx[0]), nowNano, evictRounds*int(added))
	}
	return store.NewBatchResult(items)
}

// eachOwned runs op on every key with its shard locked, every shard of the
// batch locked at once, and returns the positions of the keys op found not
// owned (store.ErrNotOwner) as a *store.NotOwnerError.
func (t *memoryTable) eachOwned(keys []string, op func(s *memoryShard, i int, key string, nowNano int64) error) error {
	if len(keys) == 0 {
		return nil
	}
	var buf [batchStack]uint8
	set := t.shardsOf(keys, buf[:0])
	t.lock(set)
	defer t.unlock(set)
	nowNano := now().UnixNano()
	var notOwned []int
	for i, k := range keys {
		if err := op(&t.shards[set.idx[i]], i, k, nowNano); errors.Is(err, store.ErrNotOwner) {
			notOwned = append(notOwned, i)
		}
	}
	return store.NotOwned(notOwned)
}

// Interface guard
var _ store.BatchStore = (*Store)(nil)
