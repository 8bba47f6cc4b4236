// Package memstore is the memory store, module
// `http.webhook_idempotency.stores.memory`: in-process, bounded, expiring,
// shared across config reloads and lost on restart; for tests and for
// deployments that want no disk (docs/stores.md).
package memstore

import (
	"context"
	"fmt"
	"hash/maphash"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/cfparse"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/usage"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

func init() {
	caddy.RegisterModule(Store{})
}

// Store is the embedded, in-process store: it suits a single Caddy
// instance. Its records live in one process-wide table that survives config
// reloads; keys expire after their TTL or lease, and the table holds at most
// max_entries keys, evicting the completed keys closest to expiry first (an
// in-flight key is never evicted).
type Store struct {
	// The largest number of keys the table keeps. The table is shared by
	// every handler that uses the memory store, so it holds the largest
	// max_entries any of them sets: one handler's value never lowers
	// another's, and a store that sets none lowers nothing. Default:
	// 100000 (when no store in use sets one).
	MaxEntries int `json:"max_entries,omitempty"`

	table *memoryTable
	ref   usage.Ref // on table
}

// CaddyModule returns the Caddy module information.
func (Store) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.webhook_idempotency.stores.memory",
		New: func() caddy.Module { return new(Store) },
	}
}

// defaultMaxEntries is the default bound of the memory store.
const defaultMaxEntries = 100000

// now is the clock; tests may replace it.
var now = time.Now

// memoryPool shares the one memory table across config reloads.
var memoryPool = caddy.NewUsagePool()

const memoryPoolKey = "memory"

// Provision attaches the store to the process-wide table.
func (m *Store) Provision(ctx caddy.Context) error {
	explicit := m.MaxEntries
	if m.MaxEntries == 0 {
		m.MaxEntries = defaultMaxEntries
	}
	val, _, err := memoryPool.LoadOrNew(memoryPoolKey, func() (caddy.Destructor, error) {
		return newMemoryTable(ctx.Logger()), nil
	})
	if err != nil {
		return err
	}
	m.table = val.(*memoryTable)
	m.ref = usage.NewRef(memoryPool, memoryPoolKey)
	m.table.addBound(m, explicit)
	return nil
}

// Validate checks the configuration.
func (m *Store) Validate() error {
	if m.MaxEntries < 0 {
		return fmt.Errorf("memory store: max_entries must not be negative, got %d", m.MaxEntries)
	}
	return nil
}

// Cleanup releases this configuration's use of the shared table.
//
// The table stays usable: during a reload Caddy cleans up the old
// configuration while its requests may still be completing their keys.
func (m *Store) Cleanup() error {
	if m.ref.Held() {
		m.table.removeBound(m)
	}
	return m.ref.Release()
}

// Claim implements store.Store.
func (m *Store) Claim(ctx context.Context, key, owner string, lease time.Duration) (store.ClaimResult, error) {
	return m.table.claim(key, owner, lease), nil
}

// Complete implements store.Store.
func (m *Store) Complete(ctx context.Context, key, owner string, record []byte, ttl time.Duration) error {
	return m.table.complete(key, owner, record, ttl)
}

// Release implements store.Store.
func (m *Store) Release(ctx context.Context, key, owner string) error {
	return m.table.release(key, owner)
}

// Renew implements store.Store.
func (m *Store) Renew(ctx context.Context, key, owner string, lease time.Duration) error {
	return m.table.renew(key, owner, lease)
}

// memoryShards is the number of independently locked parts of the table.
const memoryShards = 64

// memoryTable is the process-wide table behind every Store.
type memoryTable struct {
	seed       maphash.Seed
	shards     [memoryShards]memoryShard
	count      atomic.Int64 // keys in every shard, expired ones until removed
	maxEntries atomic.Int64
	evicted    atomic.Uint64
	logger     *zap.Logger
	lastWarned atomic.Int64

	boundsMu sync.Mutex
	bounds   map[*Store]int // the max_entries of every store in use; 0: none set

	janitor sync.Once
	stop    chan struct{}
	done    chan struct{}
}

// memoryShard is one part of the table. Every key is an entry in m; an
// in-flight key's owner is kept apart, in owners, so that the many completed
// keys do not each carry an owner field (in-flight keys are few: one per
// request being handled). A key is in flight exactly while it is in owners.
type memoryShard struct {
	mu     sync.Mutex
	m      map[string]memoryEntry
	owners map[string]string // the owner of every in-flight key of m
	_      [40]byte          // keep shards on separate cache lines
}

// memoryEntry is one key. record is the completed key's record, "" while the
// key is in flight (a completed key's record is "" only if it was recorded
// empty: owners tells them apart). expires is in Unix nanoseconds.
//
// A completed key's record usually shares one allocation with the key the
// map holds (see packRecord), and a string, unlike a slice, carries no
// capacity: an entry is three words (BENCHMARKS.md gives the bytes per
// key).
type memoryEntry struct {
	record  string
	expires int64
}

// inFlight reports whether the entry e of key is in flight. Called with
// s.mu held.
func (s *memoryShard) inFlight(key string, e memoryEntry) bool {
	if e.record != "" {
		return false
	}
	_, ok := s.owners[key]
	return ok
}

// packMax is the longest record packRecord copies whatever its spare
// capacity: Go's largest small-object size.
const packMax = 32 << 10

// packRecord returns the key and the record to keep in the map for a
// completed key. A record up to packMax bytes, or one with more than an
// eighth of spare capacity, is copied after a copy of the key into one
// allocation of exactly their length (the handler's recorder encodes into
// a buffer with room to spare, 256 bytes beyond the announced body, which a
// stored key would otherwise keep for its whole TTL). A longer record is
// kept where it is, not copied.
//
// The returned strings view bytes that nothing writes to once they are
// returned, which is what unsafe.String requires. A long record kept where
// it is stays the caller's buffer: the handler does not modify a record
// once it has handed it to Complete.
func packRecord(key string, record []byte) (string, string) {
	if len(record) > packMax && cap(record)-len(record) <= len(record)/8 {
		return key, unsafe.String(unsafe.SliceData(record), len(record))
	}
	buf := make([]byte, len(key)+len(record))
	copy(buf, key)
	copy(buf[len(key):], record)
	packed := unsafe.String(unsafe.SliceData(buf), len(buf))
	return packed[:len(key)], packed[len(key):]
}

// recordBytes returns a stored record as the []byte of a ClaimResult,
// without copying: callers must not modify it (see store.Store).
func recordBytes(record string) []byte {
	if record == "" {
		return []byte{}
	}
	return unsafe.Slice(unsafe.StringData(record), len(record))
}

func newMemoryTable(logger *zap.Logger) *memoryTable {
	t := &memoryTable{
		seed:   maphash.MakeSeed(),
		logger: logger,
		bounds: make(map[*Store]int),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	for i := range t.shards {
		t.shards[i].m = make(map[string]memoryEntry)
		t.shards[i].owners = make(map[string]string)
	}
	t.setMaxEntries(defaultMaxEntries)
	return t
}

// setMaxEntries sets the table's bound.
func (t *memoryTable) setMaxEntries(n int) {
	t.maxEntries.Store(int64(max(n, 1)))
}

func (t *memoryTable) shardIndex(key string) uint64 {
	return maphash.String(t.seed, key) % memoryShards
}

func (t *memoryTable) shard(key string) *memoryShard {
	return &t.shards[t.shardIndex(key)]
}

func (t *memoryTable) claim(key, owner string, lease time.Duration) store.ClaimResult {
	t.janitor.Do(t.startJanitor)
	nowNano := now().UnixNano()
	i := t.shardIndex(key)
	s := &t.shards[i]
	s.mu.Lock()
	rounds := 0 // evictions still to make for this key
	if res, live, held := s.found(key, nowNano); live {
		s.mu.Unlock()
		return res
	} else if !held && t.count.Add(1) > t.maxEntries.Load() {
		// the table is full: make room in this shard first, under the
		// lock already held (see store_memory_bound.go)
		rounds = t.evict(s, nowNano, evictRounds)
	}
	s.m[key] = memoryEntry{expires: nowNano + int64(lease)}
	s.owners[key] = owner
	s.mu.Unlock()
	if rounds > 0 {
		t.evictElsewhere(i, nowNano, rounds)
	}
	return store.ClaimResult{State: store.StateClaimed}
}

// found returns the state of key when it is live: completed, with its
// record, or in flight, with the time left on its lease; and whether the
// map holds key at all (live or expired). Called with s.mu held.
func (s *memoryShard) found(key string, nowNano int64) (res store.ClaimResult, live, held bool) {
	e, ok := s.m[key]
	if !ok || e.expires <= nowNano {
		return store.ClaimResult{}, false, ok
	}
	if !s.inFlight(key, e) {
		return store.ClaimResult{State: store.StateCompleted, Record: recordBytes(e.record)}, true, true
	}
	return store.ClaimResult{State: store.StateInFlight, LeaseLeft: time.Duration(e.expires - nowNano)}, true, true
}

// owned returns the key's entry if owner still holds a live claim on it.
// Called with s.mu held.
func (s *memoryShard) owned(key, owner string, nowNano int64) (memoryEntry, bool) {
	e, ok := s.m[key]
	if !ok || e.record != "" || e.expires <= nowNano {
		return e, false
	}
	o, ok := s.owners[key]
	return e, ok && o == owner
}

// remove deletes key, whose entry is e. Called with s.mu held.
func (t *memoryTable) remove(s *memoryShard, key string, e memoryEntry) {
	delete(s.m, key)
	if e.record == "" {
		delete(s.owners, key)
	}
	t.count.Add(-1)
}

func (t *memoryTable) complete(key, owner string, record []byte, ttl time.Duration) error {
	s := t.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.complete(key, owner, record, ttl, now().UnixNano())
}

// complete is the completion of key, called with s.mu held.
func (s *memoryShard) complete(key, owner string, record []byte, ttl time.Duration, nowNano int64) error {
	if _, ok := s.owned(key, owner, nowNano); !ok {
		if e, ok := s.m[key]; ok && e.expires > nowNano && !s.inFlight(key, e) && e.record == string(record) {
			return nil // a retried call: the record is there
		}
		return store.ErrNotOwner
	}
	delete(s.owners, key)
	// Assigning to a key already in the map also replaces the map's copy of
	// the key (the runtime updates string keys), so the packed key, which
	// shares its allocation with the record, is the one kept.
	packed, rec := packRecord(key, record)
	s.m[packed] = memoryEntry{record: rec, expires: nowNano + int64(ttl)}
	return nil
}

func (t *memoryTable) release(key, owner string) error {
	s := t.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	return t.releaseLocked(s, key, owner, now().UnixNano())
}

// releaseLocked is the release of key, called with s.mu held.
func (t *memoryTable) releaseLocked(s *memoryShard, key, owner string, nowNano int64) error {
	e, ok := s.owned(key, owner, nowNano)
	if !ok {
		return store.ErrNotOwner
	}
	t.remove(s, key, e)
	return nil
}

func (t *memoryTable) renew(key, owner string, lease time.Duration) error {
	s := t.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.renew(key, owner, lease, now().UnixNano())
}

// renew is the renewal of key's lease, called with s.mu held.
func (s *memoryShard) renew(key, owner string, lease time.Duration, nowNano int64) error {
	e, ok := s.owned(key, owner, nowNano)
	if !ok {
		return store.ErrNotOwner
	}
	e.expires = nowNano + int64(lease)
	s.m[key] = e
	return nil
}

// memorySweepEvery is how often the janitor sweeps the whole table; it
// sweeps one shard at a time, memorySweepBatch keys per hold of the
// shard's lock, so no lock is held for long.
var memorySweepEvery = 4 * time.Second

// memorySweepBatch is the most keys the janitor looks at per hold of a
// shard's lock. Removing a key took under a microsecond on the 2-core
// machine of BENCHMARKS.md, so a hold stays under a quarter of a
// millisecond even when every key has expired; a whole shard in one hold
// (15,625 expired keys of a million) took 10 to 18 ms there, and a Claim on
// that shard waited as long (BenchmarkMemoryStoreSweep).
const memorySweepBatch = 256

// startJanitor starts the goroutine that removes expired keys. It starts on
// first use, so `caddy validate` starts no background work.
func (t *memoryTable) startJanitor() {
	go func() {
		defer close(t.done)
		ticker := time.NewTicker(memorySweepEvery / memoryShards)
		defer ticker.Stop()
		for i := 0; ; i = (i + 1) % memoryShards {
			select {
			case <-t.stop:
				return
			case <-ticker.C:
			}
			t.sweep(&t.shards[i])
		}
	}()
}

// sweep removes the expired keys of s in one pass over its map, letting go
// of the lock every memorySweepBatch keys. The pass goes on across those
// gaps: Go allows a map to change while it is iterated (a key added in a
// gap may or may not be visited, a key removed is not), and the iteration
// itself only ever runs with the lock held.
func (t *memoryTable) sweep(s *memoryShard) {
	nowNano := now().UnixNano()
	s.mu.Lock()
	n := 0
	for k, e := range s.m {
		if e.expires <= nowNano {
			t.remove(s, k, e)
		}
		if n++; n%memorySweepBatch == 0 {
			s.mu.Unlock()
			runtime.Gosched() // let a Claim waiting for the lock in
			s.mu.Lock()
		}
	}
	s.mu.Unlock()
}

// Destruct stops the janitor when the last configuration using the table
// is cleaned up.
func (t *memoryTable) Destruct() error {
	close(t.stop)
	started := true
	t.janitor.Do(func() { started = false })
	if started {
		<-t.done
	}
	return nil
}

// UnmarshalCaddyfile sets up the memory store from Caddyfile tokens:
//
//	store memory {
//		max_entries <n>
//	}
func (m *Store) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // "memory"
	if d.NextArg() {
		return d.Errf("store memory takes no arguments, got '%s'", d.Val())
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		switch d.Val() {
		case "max_entries":
			v, err := cfparse.NextValue(d, "memory store 'max_entries'")
			if err != nil {
				return err
			}
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 || strconv.Itoa(n) != v {
				return d.Errf("invalid max_entries '%s': want a positive integer", v)
			}
			m.MaxEntries = n
		default:
			return d.Errf("unrecognized memory store subdirective '%s'", d.Val())
		}
	}
	return nil
}

// Interface guards
var (
	_ caddyfile.Unmarshaler = (*Store)(nil)
	_ store.Store           = (*Store)(nil)
	_ caddy.Provisioner     = (*Store)(nil)
	_ caddy.Validator       = (*Store)(nil)
	_ caddy.CleanerUpper    = (*Store)(nil)
	_ caddy.Destructor      = (*memoryTable)(nil)
)
