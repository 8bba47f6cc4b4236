package memstore

import (
	"time"

	"go.uber.org/zap"
)

// The memory table's bound (docs/stores.md): how many keys it holds, and
// which it evicts to stay there.

// addBound records the max_entries of a store that uses the table (0 when
// it sets none) and applies the largest.
func (t *memoryTable) addBound(m *Store, maxEntries int) {
	t.boundsMu.Lock()
	defer t.boundsMu.Unlock()
	t.bounds[m] = maxEntries
	t.applyBounds()
	if maxEntries > 0 && int64(maxEntries) < t.maxEntries.Load() {
		t.logger.Info("memory store max_entries is lower than another configured store's: the shared table holds the largest",
			zap.Int("max_entries", maxEntries), zap.Int64("table_max_entries", t.maxEntries.Load()))
	}
}

// removeBound forgets the bound of a store that no longer uses the table.
func (t *memoryTable) removeBound(m *Store) {
	t.boundsMu.Lock()
	defer t.boundsMu.Unlock()
	delete(t.bounds, m)
	t.applyBounds()
}

// applyBounds sets the table's bound to the largest max_entries set by a
// store in use, or the default when none sets one. Called with boundsMu
// held.
func (t *memoryTable) applyBounds() {
	largest := 0
	for _, n := range t.bounds {
		largest = max(largest, n)
	}
	if largest == 0 {
		largest = defaultMaxEntries
	}
	t.setMaxEntries(largest)
}

// evictRounds is how many times one new key may make room in a full
// table: more than once, so that a table above a bound that was lowered
// shrinks back to it.
const evictRounds = 2

// overBound reports whether the table holds more keys than its bound.
func (t *memoryTable) overBound() bool {
	return t.count.Load() > t.maxEntries.Load()
}

// evict makes room in a full table, in the shard s: up to rounds times,
// while the table is over its bound, it drops the expired keys among a
// sample of s, or else the sampled completed key closest to expiry. It
// returns the rounds left. Go's randomised map iteration order makes the
// sample random. A sample of in-flight keys only does not stop the search:
// it goes on until it finds an expired or a completed key. Called with
// s.mu held.
func (t *memoryTable) evict(s *memoryShard, nowNano int64, rounds int) int {
	for ; rounds > 0 && t.overBound(); rounds-- {
		if !t.evictOnce(s, nowNano) {
			break
		}
	}
	return rounds
}

// evictOnce is one round of evict; it reports whether it removed a key.
func (t *memoryTable) evictOnce(s *memoryShard, nowNano int64) bool {
	const sample = 16
	var victim string
	var victimEntry memoryEntry
	seen, dropped := 0, 0
	for k, e := range s.m {
		if e.expires <= nowNano {
			t.remove(s, k, e)
			dropped++
		} else if !s.inFlight(k, e) && (victim == "" || e.expires < victimEntry.expires) {
			victim, victimEntry = k, e
		}
		if seen++; seen >= sample && (dropped > 0 || victim != "") {
			break
		}
	}
	if dropped > 0 {
		return true
	}
	if victim == "" {
		return false
	}
	t.remove(s, victim, victimEntry)
	t.evicted.Add(1)
	// warn at most once a minute: an evicted key no longer deduplicates
	if last := t.lastWarned.Load(); nowNano-last > int64(time.Minute) && t.lastWarned.CompareAndSwap(last, nowNano) {
		t.logger.Warn("memory store is full: evicting completed keys before their TTL; raise max_entries or use the redis store",
			zap.Int64("max_entries", t.maxEntries.Load()),
			zap.Uint64("evicted_total", t.evicted.Load()))
	}
	return true
}

// evictElsewhere goes on making room in a full table after the shard
// `from` ran out of keys to evict: it tries the other shards in turn, one
// lock at a time, with the rounds left. When every key of the table is in
// flight, the table grows past its bound rather than drop a claim.
func (t *memoryTable) evictElsewhere(from uint64, nowNano int64, rounds int) {
	for i := uint64(1); i < memoryShards && rounds > 0 && t.overBound(); i++ {
		s := &t.shards[(from+i)%memoryShards]
		s.mu.Lock()
		rounds = t.evict(s, nowNano, rounds)
		s.mu.Unlock()
	}
}
