package webhookidempotency

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"
)

func init() {
	caddy.RegisterModule(MemoryStore{})
}

// MemoryStore is the embedded, in-process store: it suits a single Caddy
// instance. Its records live in one process-wide table that survives config
// reloads; keys expire after their TTL or lease, and the table holds at most
// MaxEntries keys, evicting the completed keys closest to expiry first (an
// in-flight key is never evicted).
type MemoryStore struct {
	// The largest number of keys kept. The most recently provisioned
	// configuration's value applies to the shared table. Default: 100000.
	MaxEntries int `json:"max_entries,omitempty"`

	table    *memoryTable
	released bool
}

// CaddyModule returns the Caddy module information.
func (MemoryStore) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.webhook_idempotency.stores.memory",
		New: func() caddy.Module { return new(MemoryStore) },
	}
}

// defaultMaxEntries is the default bound of the memory store.
const defaultMaxEntries = 100000

// memoryPool shares the one memory table across config reloads.
var memoryPool = caddy.NewUsagePool()

const memoryPoolKey = "memory"

// Provision attaches the store to the process-wide table.
func (m *MemoryStore) Provision(ctx caddy.Context) error {
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
	m.table.setMaxEntries(m.MaxEntries)
	return nil
}

// Validate checks the configuration.
func (m *MemoryStore) Validate() error {
	if m.MaxEntries < 0 {
		return fmt.Errorf("memory store: max_entries must not be negative, got %d", m.MaxEntries)
	}
	return nil
}

// Cleanup releases this configuration's use of the shared table.
//
// The table stays usable: during a reload Caddy cleans up the old
// configuration while its requests may still be completing their keys.
func (m *MemoryStore) Cleanup() error {
	if m.table == nil || m.released {
		return nil
	}
	m.released = true
	_, err := memoryPool.Delete(memoryPoolKey)
	return err
}

// Claim implements Store.
func (m *MemoryStore) Claim(ctx context.Context, key, owner string, lease time.Duration) (ClaimResult, error) {
	return m.table.claim(key, owner, lease), nil
}

// Complete implements Store.
func (m *MemoryStore) Complete(ctx context.Context, key, owner string, record []byte, ttl time.Duration) error {
	return m.table.complete(key, owner, record, ttl)
}

// Release implements Store.
func (m *MemoryStore) Release(ctx context.Context, key, owner string) error {
	return m.table.release(key, owner)
}

// Renew implements Store.
func (m *MemoryStore) Renew(ctx context.Context, key, owner string, lease time.Duration) error {
	return m.table.renew(key, owner, lease)
}

// memoryShards is the number of independently locked parts of the table.
const memoryShards = 64

// memoryTable is the process-wide table behind every MemoryStore.
type memoryTable struct {
	seed       maphash.Seed
	shards     [memoryShards]memoryShard
	perShard   atomic.Int64
	evicted    atomic.Uint64
	logger     *zap.Logger
	lastWarned atomic.Int64

	janitor sync.Once
	stop    chan struct{}
	done    chan struct{}
}

type memoryShard struct {
	mu sync.Mutex
	m  map[string]memoryEntry
	_  [40]byte // keep shards on separate cache lines
}

// memoryEntry is one key: in flight while owner is set, completed while
// record is set. expires is in Unix nanoseconds.
type memoryEntry struct {
	owner   string
	record  []byte
	expires int64
}

func newMemoryTable(logger *zap.Logger) *memoryTable {
	t := &memoryTable{
		seed:   maphash.MakeSeed(),
		logger: logger,
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	for i := range t.shards {
		t.shards[i].m = make(map[string]memoryEntry)
	}
	t.setMaxEntries(defaultMaxEntries)
	return t
}

func (t *memoryTable) setMaxEntries(n int) {
	per := (int64(n) + memoryShards - 1) / memoryShards
	t.perShard.Store(max(per, 1))
}

func (t *memoryTable) shard(key string) *memoryShard {
	return &t.shards[maphash.String(t.seed, key)%memoryShards]
}

func (t *memoryTable) claim(key, owner string, lease time.Duration) ClaimResult {
	t.janitor.Do(t.startJanitor)
	nowNano := now().UnixNano()
	s := t.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.m[key]; ok && e.expires > nowNano {
		if e.record != nil {
			return ClaimResult{State: Completed, Record: e.record}
		}
		return ClaimResult{State: InFlight, LeaseLeft: time.Duration(e.expires - nowNano)}
	} else if !ok && int64(len(s.m)) >= t.perShard.Load() {
		t.evict(s, nowNano)
	}
	s.m[key] = memoryEntry{owner: owner, expires: nowNano + int64(lease)}
	return ClaimResult{State: Claimed}
}

// evict makes room in a full shard: it drops expired keys among a sample,
// or else the sampled completed key closest to expiry. Go's randomised map
// iteration order makes the sample random. A sample of in-flight keys only
// does not stop the search: it goes on until it finds an expired or a
// completed key, so the shard grows past its bound only when every key in
// it is in flight. Called with s.mu held.
func (t *memoryTable) evict(s *memoryShard, nowNano int64) {
	const sample = 16
	var victim string
	var victimExpires int64
	seen, dropped := 0, 0
	for k, e := range s.m {
		if e.expires <= nowNano {
			delete(s.m, k)
			dropped++
		} else if e.record != nil && (victim == "" || e.expires < victimExpires) {
			victim, victimExpires = k, e.expires
		}
		if seen++; seen >= sample && (dropped > 0 || victim != "") {
			break
		}
	}
	if dropped > 0 || victim == "" {
		return
	}
	delete(s.m, victim)
	t.evicted.Add(1)
	// warn at most once a minute: an evicted key no longer deduplicates
	if last := t.lastWarned.Load(); nowNano-last > int64(time.Minute) && t.lastWarned.CompareAndSwap(last, nowNano) {
		t.logger.Warn("memory store is full: evicting completed keys before their TTL; raise max_entries or use the redis store",
			zap.Int64("max_entries", t.perShard.Load()*memoryShards),
			zap.Uint64("evicted_total", t.evicted.Load()))
	}
}

// owned returns the key's entry if owner still holds a live claim on it.
// Called with s.mu held.
func (s *memoryShard) owned(key, owner string, nowNano int64) (memoryEntry, bool) {
	e, ok := s.m[key]
	return e, ok && e.record == nil && e.owner == owner && e.expires > nowNano
}

func (t *memoryTable) complete(key, owner string, record []byte, ttl time.Duration) error {
	nowNano := now().UnixNano()
	s := t.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.owned(key, owner, nowNano); !ok {
		return ErrNotOwner
	}
	s.m[key] = memoryEntry{record: record, expires: nowNano + int64(ttl)}
	return nil
}

func (t *memoryTable) release(key, owner string) error {
	s := t.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.owned(key, owner, now().UnixNano()); !ok {
		return ErrNotOwner
	}
	delete(s.m, key)
	return nil
}

func (t *memoryTable) renew(key, owner string, lease time.Duration) error {
	nowNano := now().UnixNano()
	s := t.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.owned(key, owner, nowNano)
	if !ok {
		return ErrNotOwner
	}
	e.expires = nowNano + int64(lease)
	s.m[key] = e
	return nil
}

// len returns the number of keys held, expired ones included until swept.
func (t *memoryTable) len() int {
	n := 0
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		n += len(s.m)
		s.mu.Unlock()
	}
	return n
}

// memorySweepEvery is how often the janitor sweeps the whole table; it
// sweeps one shard at a time so no lock is held for long.
var memorySweepEvery = 4 * time.Second

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

func (t *memoryTable) sweep(s *memoryShard) {
	nowNano := now().UnixNano()
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, e := range s.m {
		if e.expires <= nowNano {
			delete(s.m, k)
		}
	}
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

// Interface guards
var (
	_ Store              = (*MemoryStore)(nil)
	_ caddy.Provisioner  = (*MemoryStore)(nil)
	_ caddy.Validator    = (*MemoryStore)(nil)
	_ caddy.CleanerUpper = (*MemoryStore)(nil)
	_ caddy.Destructor   = (*memoryTable)(nil)
)
