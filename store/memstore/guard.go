package memstore

import (
	"context"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// A key and its guard (store.GuardedStore): claimed together under both
// shards' locks, completed, released and renewed one after the other, each
// owner-checked (a guard of "" is none: the key alone is). A note is a key
// whose value is the first key that noted it.

// ClaimGuarded implements store.GuardedStore.
func (m *Store) ClaimGuarded(ctx context.Context, key, guard, owner string, lease time.Duration) (store.ClaimResult, error) {
	if guard == "" {
		return m.table.claim(key, owner, lease), nil
	}
	return m.table.claimGuarded(key, guard, owner, lease), nil
}

// CompleteGuarded implements store.GuardedStore.
func (m *Store) CompleteGuarded(ctx context.Context, key, guard, owner string, record []byte, ttl time.Duration) error {
	err := m.table.complete(key, owner, record, ttl)
	if guard != "" {
		_ = m.table.complete(guard, owner, record, ttl)
	}
	return err
}

// ReleaseGuarded implements store.GuardedStore.
func (m *Store) ReleaseGuarded(ctx context.Context, key, guard, owner string) error {
	err := m.table.release(key, owner)
	if guard != "" {
		_ = m.table.release(guard, owner)
	}
	return err
}

// RenewGuarded implements store.GuardedStore.
func (m *Store) RenewGuarded(ctx context.Context, key, guard, owner string, lease time.Duration) error {
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
func (t *memoryTable) claimGuarded(key, guard, owner string, lease time.Duration) store.ClaimResult {
	t.janitor.Do(t.startJanitor)
	nowNano := now().UnixNano()
	i, j := t.shardIndex(key), t.shardIndex(guard)
	unlock := t.lockPair(i, j)
	keys := [2]string{key, guard}
	shards := [2]*memoryShard{&t.shards[i], &t.shards[j]}
	for n, k := range keys {
		if res, live, _ := shards[n].found(k, nowNano); live {
			unlock()
			return res
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
	return store.ClaimResult{State: store.StateClaimed}
}

// ClaimNoted implements store.GuardedStore.
func (m *Store) ClaimNoted(ctx context.Context, key, note, owner string, lease, noteTTL time.Duration) (store.ClaimResult, string, error) {
	res, prev := m.table.claimNoted(key, note, owner, lease, noteTTL)
	return res, prev, nil
}

// claimNoted claims key as claim does and, under the same locks, records
// key in note unless note holds a live value; it returns what note held.
func (t *memoryTable) claimNoted(key, note, owner string, lease, noteTTL time.Duration) (store.ClaimResult, string) {
	t.janitor.Do(t.startJanitor)
	nowNano := now().UnixNano()
	i, j := t.shardIndex(key), t.shardIndex(note)
	unlock := t.lockPair(i, j)
	ks, ns := &t.shards[i], &t.shards[j]
	prev := ""
	added := int64(0)
	if e, ok := ns.m[note]; ok && e.expires > nowNano && !ns.inFlight(note, e) {
		prev = e.record
	} else {
		if !ok {
			added++
		} else if ns.inFlight(note, e) {
			delete(ns.owners, note)
		}
		packed, rec := packRecord(note, []byte(key))
		ns.m[packed] = memoryEntry{record: rec, expires: nowNano + int64(noteTTL)}
	}
	res, live, held := ks.found(key, nowNano)
	if !live {
		if !held {
			added++
		}
		ks.m[key] = memoryEntry{expires: nowNano + int64(lease)}
		ks.owners[key] = owner
	}
	over := t.count.Add(added) > t.maxEntries.Load()
	unlock()
	if over {
		t.evictElsewhere(i, nowNano, evictRounds*2)
	}
	return res, prev
}

// lockPair locks the shards i and j in index order (once when they are the
// same), so two such locks never wait on each other in a cycle, and
// returns the unlock.
func (t *memoryTable) lockPair(i, j uint64) (unlock func()) {
	first, second := &t.shards[min(i, j)], &t.shards[max(i, j)]
	first.mu.Lock()
	if second != first {
		second.mu.Lock()
	}
	return func() {
		if second != first {
			second.mu.Unlock()
		}
		first.mu.Unlock()
	}
}

// Interface guard
var _ store.GuardedStore = (*Store)(nil)
