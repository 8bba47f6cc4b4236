package memstore

import (
	"context"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// The memory store's side of the admin API's key routes.

// Inspect implements store.KeyAdmin.
func (m *Store) Inspect(_ context.Context, key string) (store.KeyInfo, error) {
	return m.table.keyInfo(key, false), nil
}

// Forget implements store.KeyAdmin.
func (m *Store) Forget(_ context.Context, key string) (store.KeyInfo, error) {
	return m.table.keyInfo(key, true), nil
}

// keyInfo returns a key's state; with forget, a completed key is deleted.
func (t *memoryTable) keyInfo(key string, forget bool) store.KeyInfo {
	nowNano := now().UnixNano()
	s := t.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[key]
	if !ok || e.expires <= nowNano {
		return store.KeyInfo{State: store.KeyAbsent}
	}
	left := time.Duration(e.expires - nowNano)
	if s.inFlight(key, e) {
		return store.KeyInfo{State: store.KeyInFlight, Left: left}
	}
	info := store.KeyInfo{State: store.KeyCompleted, Left: left, Record: []byte(e.record)}
	if forget {
		t.remove(s, key, e)
	}
	return info
}

// ForgetIf implements store.KeyAdmin.
func (m *Store) ForgetIf(_ context.Context, key string, record []byte) (bool, error) {
	t := m.table
	nowNano := now().UnixNano()
	s := t.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[key]
	if !ok || e.expires <= nowNano || s.inFlight(key, e) || e.record != string(record) {
		return false, nil
	}
	t.remove(s, key, e)
	return true, nil
}

// Interface guard
var _ store.KeyAdmin = (*Store)(nil)
