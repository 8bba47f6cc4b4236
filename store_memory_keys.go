package webhookidempotency

import (
	"context"
	"time"
)

// The memory store's side of the admin API's key routes (admin_keys.go).

// inspect implements keyAdmin.
func (m *MemoryStore) inspect(_ context.Context, key string) (keyInfo, error) {
	return m.table.keyInfo(key, false), nil
}

// forget implements keyAdmin.
func (m *MemoryStore) forget(_ context.Context, key string) (keyInfo, error) {
	return m.table.keyInfo(key, true), nil
}

// keyInfo returns a key's state; with forget, a completed key is deleted.
func (t *memoryTable) keyInfo(key string, forget bool) keyInfo {
	nowNano := now().UnixNano()
	s := t.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[key]
	if !ok || e.expires <= nowNano {
		return keyInfo{state: keyAbsent}
	}
	left := time.Duration(e.expires - nowNano)
	if s.inFlight(key, e) {
		return keyInfo{state: keyInFlight, left: left}
	}
	info := keyInfo{state: keyCompleted, left: left, record: []byte(e.record)}
	if forget {
		t.remove(s, key, e)
	}
	return info
}

// forgetIf implements keyAdmin.
func (m *MemoryStore) forgetIf(_ context.Context, key string, record []byte) (bool, error) {
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
var _ keyAdmin = (*MemoryStore)(nil)
