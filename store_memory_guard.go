package webhookidempotency

import (
	"context"
	"time"
)

// A key and its guard in the memory store (see guard.go): claimed together
// under both shards' locks, completed, released and renewed one after the
// other, each owner-checked (a guard of "" is none: the key alone is).

// ClaimGuarded implements guardedStore.
func (m *MemoryStore) ClaimGuarded(ctx context.Context, key, guard, owner string, lease time.Duration) (claimResult, error) {
	if guard == "" {
		return m.table.claim(key, owner, lease), nil
	}
	return m.table.claimGuarded(key, guard, owner, lease), nil
}

// CompleteGuarded implements guardedStore.
func (m *MemoryStore) CompleteGuarded(ctx context.Context, key, guard, owner string, record []byte, ttl time.Duration) error {
	err := m.table.complete(key, owner, record, ttl)
	if guard != "" {
		_ = m.table.complete(guard, owner, record, ttl)
	}
	return err
}

// ReleaseGuarded implements guardedStore.
func (m *MemoryStore) ReleaseGuarded(ctx context.Context, key, guard, owner string) error {
	err := m.table.release(key, owner)
	if guard != "" {
		_ = m.table.release(guard, owner)
	}
	return err
}

// RenewGuarded implements guardedStore.
func (m *MemoryStore) RenewGuarded(ctx context.Context, key, guard, owner string, lease time.Duration) error {
	err := m.table.renew(key, owner, lease)
	if guard != "" {
		_ = m.table.renew(guard, owner, lease)
	}
	return err
}

// claimGuarded claims key and guard for owner when both are absent, or
// reports the state of the first that is not (key first): neither is
// claimed then. The two shards are locked in index order (once when they
// are the same), so two such claims never wait on each other in a cycle.
func (t *memoryTable) claimGuarded(key, guard, owner string, lease time.Duration) claimResult {
	t.janitor.Do(t.startJanitor)
	nowNano := now().UnixNano()
	i, j := t.shardIndex(key), t.shardIndex(guard)
	first, second := &t.shards[min(i, j)], &t.shards[max(i, j)]
	first.mu.Lock()
	if second != first {
		second.mu.Lock()
	}
	unlock := func() {
		if second != first {
			second.mu.Unlock()
		}
		first.mu.Unlock()
	}
	keys := [2]string{key, guard}
	shards := [2]*memoryShard{&t.shards[i], &t.shards[j]}
	for n, k := range keys {
		s := shards[n]
		if e, ok := s.m[k]; ok && e.expires > nowNano {
			unlock()
			if !s.inFlight(k, e) {
				return claimResult{State: stateCompleted, Record: recordBytes(e.record)}
			}
			return claimResult{State: stateInFlight, LeaseLeft: time.Duration(e.expires - nowNano)}
		}
	}
	added := int64(0)
	for n, k := range keys {
		s := shards[n]
		if _, ok := s.m[k]; !ok {
			added++
		}
		s.m[k] = memoryEntry{expires: nowNano + int64(lease)}
		s.owners[k] = owner
	}
	over := t.count.Add(added) > t.maxEntries.Load()
	unlock()
	if over {
		t.evictElsewhere(i, nowNano, evictRounds*2)
	}
	return claimResult{State: stateClaimed}
}

// Interface guard
var _ guardedStore = (*MemoryStore)(nil)
