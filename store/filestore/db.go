package filestore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/caddyserver/caddy/v2"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/metrics"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// The file: one bbolt database per path and process, shared across config
// reloads through pool.
//
// Layout. Bucket `records` maps a key to its value: 8 bytes of expiry (unix
// nanoseconds, big endian), a kind byte (kindRecord: a completed key's
// record; kindNote: the first key a note saw) and the payload. Bucket
// `expiry` indexes them: 8 bytes of expiry then the key, to nothing; the
// sweeper walks it from the start and deletes what has expired, checking
// that the record still carries that expiry (an index entry whose record
// was rewritten is dropped alone). The inbox and the archive keep buckets
// of their own (file.go: File).
//
// In memory: the claims in flight, which are never written, and a bounded
// cache of the records read or written lately, so that duplicates are
// answered without reading the file; both sharded by key.

var (
	bucketRecords = []byte("records")
	bucketExpiry  = []byte("expiry")
)

// Kinds of a value.
const (
	kindRecord = 1
	kindNote   = 2
)

// pool shares each open file across config reloads, by absolute path.
var pool = caddy.NewUsagePool()

// Timing, variables for tests.
var (
	// lockTimeout is how long opening waits for a file another process
	// holds.
	lockTimeout = time.Second
	// sweepEvery is how often expired records are swept.
	sweepEvery = 10 * time.Second
)

// Bounds.
const (
	shards        = 64
	cachePerShard = 1024 // records cached per shard (65,536 in all)
	// cacheBytesPerShard bounds the bytes cached per shard (64 MiB in
	// all, as the redis store's copy of recent records): recorded answers
	// can be large, and 65,536 of them unbounded in size held gigabytes
	// (docs/stores.md, "Fast duplicates").
	cacheBytesPerShard = 1 << 20
	// cacheMaxValue is the largest value cached: a larger one is read
	// from the file each time it is asked for, so that a shard holds at
	// least 64 values however large the answers, and large answers never
	// push out the small ones.
	cacheMaxValue = 16 << 10
	batchMax      = 1024 // writes per commit at most
	sweepBatch    = 4096 // expired records deleted per commit at most
)

// now is the clock; tests may replace it.
var now = time.Now

// db is one open file.
type db struct {
	path   string
	bolt   *bolt.DB
	logger *zap.Logger
	seed   maphash.Seed
	shards [shards]shard

	writes chan *write // the committer's queue
	log    *wal        // the committer's (nil: none)
	logged []put       // the committer's, reused
	// answered are the completions of a batch the committer answers, reused
	answered []*write
	// the committer's: when the log's last fdatasync returned, how long it
	// took and how many completions shared it, and the timer it lingers
	// with (commit.go)
	lastSync       time.Time
	lastSyncTook   time.Duration
	lastSyncShared int
	lingerTimer    *time.Timer

	filter   keysFilter     // the keys the tree holds (filter.go)
	txKeys   []string       // the applier's: keys put in its transaction
	building sync.WaitGroup // the filter's builds in the background
	ap       *applier
	stop     chan struct{}
	done     sync.WaitGroup

	mapped mapped     // the file's pages made resident by large values (mapped.go)
	health fileHealth // the files under the running Caddy (health.go)

	// what the disk was asked for so far: records written to the log
	// (one fdatasync each) and commits of the tree (two each, when synced)
	logWrites, treeCommits atomic.Uint64

	syncMu    sync.Mutex
	syncs     map[*use]time.Duration // the sync setting of every configuration using the file
	syncEvery atomic.Int64           // the strictest (0: always)
	syncKick  chan struct{}
}

// shard is one part of the in-memory state, under one lock.
type shard struct {
	mu      sync.Mutex
	claims  map[string]*claim
	cache   map[string]cached
	cached  int                // bytes of cache (cachedSize)
	pending map[string]pending // in the log, not in the tree yet (commit.go)
	_       [32]byte           // keep shards on separate cache lines
}

// claim is a key in flight.
type claim struct {
	owner   string
	expires int64 // unix nanoseconds
	// pinned is set while the claim's completion is being written: it
	// neither expires nor may be completed or released meanwhile.
	pinned bool
	// note is the note this claim took (replay_guard flag), written with
	// the key's completion.
	note    string
	noteTTL time.Duration
	// by is the configuration's use of the file the claim was taken
	// through: a use cleaned up by a reload keeps the file until its
	// claims are done (use.go).
	by *use
}

// cached is a value read from or written to the file lately.
type cached struct {
	kind    byte
	payload string // the record, or the note's first key
	expires int64
}

// openDB opens (or creates) the file at path; a file another process holds
// is an error within lockTimeout, and so is a corrupt one.
func openDB(path string, logger *zap.Logger) (_ *db, err error) {
	if err := ensureDir(path); err != nil {
		return nil, fmt.Errorf("file store: cannot make the directory of %s: %v", path, err)
	}
	if err := preflight(path); errors.Is(err, errInUse) {
		return nil, inUse(path)
	} else if err != nil {
		return nil, corrupt(path, err)
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = corrupt(path, fmt.Errorf("%v", p))
		}
	}()
	b, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout:      lockTimeout,
		FreelistType: bolt.FreelistMapType,
		// the list of free pages is not written at each commit (see
		// writeFreelist): under a steady churn of keys it grew large and
		// needed a run of free pages of its own, which the churn had
		// fragmented, so the file grew without end (3 MiB a second at
		// 14,000 keys a second, ttl 30s)
		NoFreelistSync:  true,
		InitialMmapSize: 1 << 30,
	})
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return nil, inUse(path)
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrChecksum), errors.Is(err, berrors.ErrVersionMismatch):
		return nil, corrupt(path, err)
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EROFS), errors.Is(err, os.ErrPermission):
		return nil, fmt.Errorf("file store: cannot open %s for writing: %v: give Caddy a writable path (`store file <path>`)", path, err)
	case err != nil:
		if fi, serr := os.Stat(path); serr == nil && fi.Size() > 0 {
			return nil, corrupt(path, err)
		}
		return nil, fmt.Errorf("file store: opening %s: %v", path, err)
	}
	// grow the file 1MiB at a time (bbolt's default is 16MiB): a small
	// store stays small
	b.AllocSize = 1 << 20
	var applied uint64
	if err := b.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketRecords, bucketExpiry, bucketLog} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		if v := tx.Bucket(bucketLog).Get(keyApplied); len(v) == 8 {
			applied = binary.BigEndian.Uint64(v)
		}
		return nil
	}); err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("file store: preparing %s: %v", path, err)
	}
	log, recovered, err := openLog(path, applied)
	if err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("file store: %s: %v", path, err)
	}
	if log == nil {
		logger.Warn("file store: no room for its log beside the file: each completion is a commit of the file, two fdatasyncs instead of one", zap.String("path", path))
	}
	d := &db{
		path: path, bolt: b, logger: logger, seed: maphash.MakeSeed(),
		writes: make(chan *write, 4096), log: log, stop: make(chan struct{}),
		syncs: make(map[*use]time.Duration), syncKick: make(chan struct{}, 1),
		lingerTimer: time.NewTimer(time.Hour),
	}
	d.lingerTimer.Stop()
	d.mapped.kick = make(chan struct{}, 1)
	d.ap = newApplier(d, applied)
	d.filter.seed = maphash.MakeSeed()
	if err := d.filter.build(d, nil); err != nil {
		_ = b.Close()
		return nil, corrupt(path, err)
	}
	for i := range d.shards {
		d.shards[i].claims = make(map[string]*claim)
		d.shards[i].cache = make(map[string]cached)
		d.shards[i].pending = make(map[string]pending)
	}
	if err := d.watch(); err != nil {
		_ = b.Close()
		if log != nil {
			_ = log.close()
		}
		return nil, fmt.Errorf("file store: %s: %v", path, err)
	}
	// what the log holds and the tree does not: answered before the
	// process ended, so kept as if just written
	for _, r := range recovered {
		d.keepPending(r.puts, r.seq)
		d.ap.add([]applyItem{{puts: r.puts, seq: r.seq}})
	}
	d.done.Add(6)
	go d.commitLoop()
	go func() {
		defer d.done.Done()
		d.ap.loop()
	}()
	go d.sweepLoop()
	go d.syncLoop()
	go d.mappedLoop()
	go d.healthLoop()
	return d, nil
}

// inUse is the error for a file at path that another process holds.
func inUse(path string) error {
	return fmt.Errorf("file store: %s is in use by another process (another Caddy with the same file store?): give each instance its own path (`store file <path>`), or use the redis store for several instances", path)
}

// corrupt is the error of a file that is not a sound store.
func corrupt(path string, cause error) error {
	return fmt.Errorf("file store: %s is damaged (%v): move it aside to start with an empty store (the records it held are lost, and deliveries recorded in it may be processed again), or restore a copy", path, cause)
}

// Destruct closes the file when the last configuration using it is
// cleaned up: the writes queued are committed first.
func (d *db) Destruct() error {
	close(d.stop)
	d.done.Wait()
	d.building.Wait()
	d.writeFreelist()
	if d.log != nil {
		if d.log.dirty.Load() {
			_ = d.log.sync()
		}
		_ = d.log.close()
	}
	d.health.close()
	metrics.StoreFileHealthy.DeleteLabelValues(d.path)
	return d.bolt.Close()
}

// writeFreelist writes bbolt's list of free pages into the file once, at
// a close: the next open reads it, in the goroutine that opens the file and
// recovers from a damaged page (openDB). A file closed without it (a crash)
// has its list rebuilt by bbolt from every reachable page instead, after
// preflight has read them.
func (d *db) writeFreelist() {
	d.bolt.NoFreelistSync = false
	if err := d.bolt.Update(func(*bolt.Tx) error { return nil }); err != nil {
		d.logger.Warn("file store: writing the list of free pages at close failed; the next open rebuilds it", zap.String("path", d.path), zap.Error(err))
	}
}

// setSync records a use's sync setting and applies the strictest in use.
func (d *db) setSync(u *use, every time.Duration) {
	d.syncMu.Lock()
	defer d.syncMu.Unlock()
	d.syncs[u] = every
	d.applySync()
}

// dropSync forgets the setting of a use that ended.
func (d *db) dropSync(u *use) {
	d.syncMu.Lock()
	defer d.syncMu.Unlock()
	delete(d.syncs, u)
	d.applySync()
}

// applySync applies the strictest setting: always, else the shortest
// interval. Called with syncMu held.
func (d *db) applySync() {
	strictest := time.Duration(-1)
	for _, every := range d.syncs {
		if strictest < 0 || every < strictest {
			strictest = every
		}
	}
	strictest = max(strictest, 0)
	if time.Duration(d.syncEvery.Swap(int64(strictest))) != strictest {
		select {
		case d.syncKick <- struct{}{}:
		default:
		}
	}
}

// syncLoop syncs the log every interval while the setting is one (every
// commit of the tree is synced, whatever the setting: apply).
func (d *db) syncLoop() {
	defer d.done.Done()
	var tick <-chan time.Time
	var ticker *time.Ticker
	for {
		every := time.Duration(d.syncEvery.Load())
		if ticker != nil {
			ticker.Stop()
			ticker, tick = nil, nil
		}
		if every > 0 {
			ticker = time.NewTicker(every)
			tick = ticker.C
		}
		select {
		case <-d.stop:
			if ticker != nil {
				ticker.Stop()
			}
			return
		case <-d.syncKick:
		case <-tick:
			if d.log != nil && d.log.dirty.Load() {
				if err := d.log.sync(); err != nil {
					d.logger.Warn("file store: syncing the file's log failed", zap.String("path", d.path), zap.Error(err))
				}
			}
		}
	}
}

// shardIndex returns the index of key's shard.
func (d *db) shardIndex(key string) uint64 { return maphash.String(d.seed, key) % shards }

// shardOf returns the shard of key.
func (d *db) shardOf(key string) *shard { return &d.shards[d.shardIndex(key)] }

// lockShards locks the shards of a and b ("" for none), each once, in
// index order (so two such locks never wait on each other in a cycle), and
// returns them locked: a value, not a closure, which would be an
// allocation on every claim and completion.
func (d *db) lockShards(a, b string) shardsLocked {
	i := d.shardIndex(a)
	j := i
	if b != "" {
		j = d.shardIndex(b)
	}
	first, second := &d.shards[min(i, j)], &d.shards[max(i, j)]
	first.mu.Lock()
	if second == first {
		return shardsLocked{first: first}
	}
	second.mu.Lock()
	return shardsLocked{first: first, second: second}
}

// shardsLocked is one or two shards lockShards locked.
type shardsLocked struct{ first, second *shard }

// unlock unlocks them.
func (l shardsLocked) unlock() {
	if l.second != nil {
		l.second.mu.Unlock()
	}
	l.first.mu.Unlock()
}

// lookup returns key's live value, from the cache or the file. Called with
// the key's shard locked.
func (d *db) lookup(s *shard, key string, nowNano int64) (cached, bool, error) {
	if c, found, known := d.recall(s, key, nowNano); known {
		return c, found, nil
	}
	var c cached
	found := false
	err := d.view(func(tx *bolt.Tx) error {
		c, found = d.fetch(tx, key, nowNano)
		return nil
	})
	if err != nil || !found {
		return cached{}, false, err
	}
	s.remember(key, c)
	return c, true, nil
}

// recall returns key's live value as memory knows it: known is false when
// only the file can tell (the keys' filter says it may hold the key).
// Called with the key's shard locked.
func (d *db) recall(s *shard, key string, nowNano int64) (c cached, found, known bool) {
	if p, ok := s.pending[key]; ok {
		// newer than what the cache or the tree may hold
		return p.c, p.c.expires > nowNano, true
	}
	if c, ok := s.cache[key]; ok {
		if c.expires > nowNano {
			return c, true, true
		}
		s.drop(key)
	}
	return cached{}, false, !d.filter.mayHave(key)
}

// fetch reads key's live value from the file, in the read transaction tx.
func (d *db) fetch(tx *bolt.Tx, key string, nowNano int64) (cached, bool) {
	v := tx.Bucket(bucketRecords).Get([]byte(key))
	if len(v) < 9 {
		return cached{}, false
	}
	c := cached{expires: int64(binary.BigEndian.Uint64(v)), kind: v[8], payload: string(v[9:])}
	if len(v) > cacheMaxValue {
		d.touched(len(v))
	}
	return c, c.expires > nowNano
}

// remember caches a value, making room by dropping others when the shard
// is full, in records or in bytes (the file keeps every value: the cache
// loses nothing). A value over cacheMaxValue is not cached.
func (s *shard) remember(key string, c cached) {
	s.drop(key)
	size := cachedSize(key, c)
	if size > cacheMaxValue {
		return
	}
	for len(s.cache) > 0 && (len(s.cache) >= cachePerShard || s.cached+size > cacheBytesPerShard) {
		for k := range s.cache {
			s.drop(k)
			break
		}
	}
	s.cache[key] = c
	s.cached += size
}

// drop forgets key's cached value, if any.
func (s *shard) drop(key string) {
	if c, ok := s.cache[key]; ok {
		s.cached -= cachedSize(key, c)
		delete(s.cache, key)
	}
}

// cachedSize is what a cached value costs: its key, its payload, and
// about what the map and the value's fields take.
func cachedSize(key string, c cached) int { return len(key) + len(c.payload) + 64 }

// view runs fn in a read transaction; a panic (a damaged page) is an
// error.
func (d *db) view(fn func(tx *bolt.Tx) error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("file store: reading %s: %v", d.path, p)
		}
	}()
	return d.bolt.View(fn)
}

// claim modes.
const (
	claimPlain   = iota // the key alone
	claimGuarded        // the key and its guard, all or none
	claimNoted          // the key, and its note read and taken when free
)

// claim claims key (and second, its guard or note, by mode) for owner,
// through the use by (nil in tests).
func (d *db) claim(key, second, owner string, lease, noteTTL time.Duration, mode int, by *use) (store.ClaimResult, string, error) {
	if mode != claimPlain && second == "" {
		mode = claimPlain
	}
	nowNano := now().UnixNano()
	locked := d.lockShards(key, second)
	defer locked.unlock()
	ks := d.shardOf(key)
	prev := ""
	if mode == claimNoted {
		ns := d.shardOf(second)
		c, ok, err := d.lookup(ns, second, nowNano)
		if err != nil {
			return store.ClaimResult{}, "", err
		}
		if ok && c.kind == kindNote {
			prev = c.payload
		}
	}
	res, err := d.state(ks, key, nowNano)
	if err != nil || res.State != store.StateClaimed {
		return res, prev, err
	}
	if mode == claimGuarded {
		gs := d.shardOf(second)
		gres, err := d.state(gs, second, nowNano)
		if err != nil || gres.State != store.StateClaimed {
			return gres, "", err
		}
		gs.claims[second] = &claim{owner: owner, expires: nowNano + int64(lease), by: by}
	}
	c := &claim{owner: owner, expires: nowNano + int64(lease), by: by}
	if mode == claimNoted && prev == "" {
		// the note is this key's from now on: kept in memory at once and
		// written with the key's completion
		ns := d.shardOf(second)
		ns.remember(second, cached{kind: kindNote, payload: key, expires: nowNano + int64(noteTTL)})
		c.note, c.noteTTL = second, noteTTL
	}
	ks.claims[key] = c
	return store.ClaimResult{State: store.StateClaimed}, prev, nil
}

// state is what a claim of key finds: claimed (free), in flight or
// completed. Called with the key's shard locked.
func (d *db) state(s *shard, key string, nowNano int64) (store.ClaimResult, error) {
	if c, live := held(s, key, nowNano); live {
		return c.inFlight(nowNano), nil
	}
	v, ok, err := d.lookup(s, key, nowNano)
	if err != nil {
		return store.ClaimResult{}, err
	}
	return valueState(v, ok), nil
}

// held returns key's claim while it is live, and drops one whose lease
// ended. Called with the key's shard locked.
func held(s *shard, key string, nowNano int64) (*claim, bool) {
	c, ok := s.claims[key]
	if !ok {
		return nil, false
	}
	if c.pinned || c.expires > nowNano {
		return c, true
	}
	delete(s.claims, key)
	return nil, false
}

// inFlight is what a claim of a key c holds finds.
func (c *claim) inFlight(nowNano int64) store.ClaimResult {
	return store.ClaimResult{State: store.StateInFlight, LeaseLeft: time.Duration(max(c.expires-nowNano, 1))}
}

// valueState is what a claim of a key that no request holds finds, with
// its value v (found false: none): completed, or free to claim.
func valueState(v cached, found bool) store.ClaimResult {
	if found && v.kind == kindRecord {
		return store.ClaimResult{State: store.StateCompleted, Record: recordBytes(v.payload)}
	}
	return store.ClaimResult{State: store.StateClaimed}
}

// holds reports whether key, claimed by no one, holds exactly record: a
// retried completion, whose first answer was lost. Called with the key's
// shard locked.
func (d *db) holds(s *shard, key string, record []byte, nowNano int64) bool {
	if _, inFlight := s.claims[key]; inFlight {
		return false
	}
	v, found, err := d.lookup(s, key, nowNano)
	return err == nil && found && v.kind == kindRecord && v.payload == string(record)
}

// claimsOf reports whether a claim taken through u is in flight: being
// completed, or within its lease.
func (d *db) claimsOf(u *use) bool {
	nowNano := now().UnixNano()
	for i := range d.shards {
		sh := &d.shards[i]
		sh.mu.Lock()
		for _, c := range sh.claims {
			if c.by == u && (c.pinned || c.expires > nowNano) {
				sh.mu.Unlock()
				return true
			}
		}
		sh.mu.Unlock()
	}
	return false
}

// owned returns key's claim if owner holds it live and unpinned. Called
// with the key's shard locked.
func owned(s *shard, key, owner string, nowNano int64) (*claim, bool) {
	c, ok := s.claims[key]
	return c, ok && c.owner == owner && !c.pinned && c.expires > nowNano
}

// also is more to write in a completion's transaction: before, written
// first, and the completion only if it succeeds (an inbox event, which its
// key must not be completed without); after, written after the completion
// whatever becomes of it, its error apart (an archive event).
type also struct {
	before   func(tx *bolt.Tx) error
	after    func(tx *bolt.Tx) error
	afterErr error
}

// complete replaces owner's claim of key (and of guard, when owner holds
// it) with record, kept for ttl, in one commit, with what more (nil for
// nothing) is written in the same transaction. When the commit fails the
// claims go: the key is released, so the provider's retry is processed.
func (d *db) complete(ctx context.Context, key, guard, owner string, record []byte, ttl time.Duration, more *also) error {
	nowNano := now().UnixNano()
	locked := d.lockShards(key, guard)
	ks := d.shardOf(key)
	c, ok := owned(ks, key, owner, nowNano)
	if !ok {
		retried := d.holds(ks, key, record, nowNano)
		locked.unlock()
		if retried {
			return nil
		}
		return store.ErrNotOwner
	}
	c.pinned = true
	var gc *claim
	if guard != "" {
		if gc, ok = owned(d.shardOf(guard), guard, owner, nowNano); ok {
			gc.pinned = true
		} else {
			gc = nil
		}
	}
	locked.unlock()

	expires := nowNano + int64(ttl)
	rec := string(record) // kept by the cache, and by the log's pending values
	puts := make([]put, 1, 3)
	puts[0] = put{key: key, kind: kindRecord, payload: rec, expires: expires}
	if gc != nil {
		puts = append(puts, put{key: guard, kind: kindRecord, payload: rec, expires: expires})
	}
	if c.note != "" {
		puts = append(puts, put{key: c.note, kind: kindNote, payload: key, expires: nowNano + int64(c.noteTTL)})
	}
	var err error
	if more == nil {
		// the values alone: the log, when the store has one
		err = d.commitPuts(ctx, puts)
	} else {
		err = d.commit(ctx, func(tx *bolt.Tx) error {
			if more.before != nil {
				if err := more.before(tx); err != nil {
					return err
				}
			}
			if err := d.putAll(tx, puts); err != nil {
				return err
			}
			if more.after != nil {
				more.afterErr = more.after(tx)
			}
			return nil
		})
	}

	locked = d.lockShards(key, guard)
	defer locked.unlock()
	d.finish(key, c, rec, expires, err)
	if gc != nil {
		d.finish(guard, gc, rec, expires, err)
	}
	return err
}

// finish ends the claim cl of key once its completion's commit returned
// err: the claim goes, and the record, when it is written, is cached
// (unless the log's pending values hold it: they are newer). Called with
// the key's shard locked.
func (d *db) finish(key string, cl *claim, rec string, expires int64, err error) {
	s := d.shardOf(key)
	if s.claims[key] == cl {
		delete(s.claims, key)
	}
	if _, inLog := s.pending[key]; err == nil && !inLog {
		s.remember(key, cached{kind: kindRecord, payload: rec, expires: expires})
	}
}

// release deletes owner's claims of key and guard.
func (d *db) release(key, guard, owner string) error {
	nowNano := now().UnixNano()
	locked := d.lockShards(key, guard)
	defer locked.unlock()
	ks := d.shardOf(key)
	_, ok := owned(ks, key, owner, nowNano)
	if guard != "" {
		gs := d.shardOf(guard)
		if _, gok := owned(gs, guard, owner, nowNano); gok {
			delete(gs.claims, guard)
		}
	}
	if !ok {
		return store.ErrNotOwner
	}
	// a note this claim took stays in memory, unwritten: it is written
	// only with a completion
	delete(ks.claims, key)
	return nil
}

// renew extends owner's leases on key and guard.
func (d *db) renew(key, guard, owner string, lease time.Duration) error {
	nowNano := now().UnixNano()
	locked := d.lockShards(key, guard)
	defer locked.unlock()
	if guard != "" {
		if gc, ok := owned(d.shardOf(guard), guard, owner, nowNano); ok {
			gc.expires = nowNano + int64(lease)
		}
	}
	c, ok := owned(d.shardOf(key), key, owner, nowNano)
	if !ok {
		return store.ErrNotOwner
	}
	c.expires = nowNano + int64(lease)
	return nil
}

// inspect returns what the store knows of key.
func (d *db) inspect(key string) (store.KeyInfo, error) {
	nowNano := now().UnixNano()
	locked := d.lockShards(key, "")
	defer locked.unlock()
	s := d.shardOf(key)
	if c, ok := s.claims[key]; ok && (c.pinned || c.expires > nowNano) {
		return store.KeyInfo{State: store.KeyInFlight, Left: time.Duration(max(c.expires-nowNano, 0))}, nil
	}
	v, ok, err := d.lookup(s, key, nowNano)
	if err != nil {
		return store.KeyInfo{}, err
	}
	if !ok {
		return store.KeyInfo{State: store.KeyAbsent}, nil
	}
	return store.KeyInfo{State: store.KeyCompleted, Left: time.Duration(v.expires - nowNano), Record: []byte(v.payload)}, nil
}

// forget deletes a completed key (if it holds exactly record, when record
// is not nil) and returns what it found; a key in flight is left alone.
func (d *db) forget(ctx context.Context, key string, record []byte) (store.KeyInfo, error) {
	info, err := d.inspect(key)
	if err != nil || info.State != store.KeyCompleted {
		return info, err
	}
	if record != nil && string(info.Record) != string(record) {
		return store.KeyInfo{State: store.KeyAbsent}, nil
	}
	err = d.commit(ctx, func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketRecords).Get([]byte(key))
		if len(v) < 9 || (record != nil && string(v[9:]) != string(record)) {
			return nil
		}
		return deleteValue(tx, key, v)
	})
	if err != nil {
		return store.KeyInfo{}, err
	}
	locked := d.lockShards(key, "")
	d.shardOf(key).drop(key)
	locked.unlock()
	return info, nil
}

// putValue writes key's value and its expiry index entry.
// mayHold false says the tree holds no value of key (the keys' filter),
// so there is no old index entry to look for; one left by a value put
// earlier in the same transaction is dropped alone by the sweep, which
// checks each entry against its record.
func putValue(tx *bolt.Tx, key string, kind byte, payload string, expires int64, mayHold bool) error {
	records := tx.Bucket(bucketRecords)
	if mayHold {
		if old := records.Get([]byte(key)); len(old) >= 8 {
			// the old value's index entry would delete the new one early:
			// it goes
			if err := tx.Bucket(bucketExpiry).Delete(indexKey(int64(binary.BigEndian.Uint64(old)), key)); err != nil {
				return err
			}
		}
	}
	v := make([]byte, 9+len(payload))
	binary.BigEndian.PutUint64(v, uint64(expires))
	v[8] = kind
	copy(v[9:], payload)
	if err := records.Put([]byte(key), v); err != nil {
		return err
	}
	index := tx.Bucket(bucketExpiry)
	// entries go in at the end, by time: a page that splits is left full
	// rather than half full (bbolt's default), for the index's pages are
	// not written again but to drop what expired
	index.FillPercent = indexFill
	return index.Put(indexKey(expires, key), nil)
}

// indexFill is the expiry index's FillPercent.
const indexFill = 0.9

// deleteValue deletes key, whose value is v, and its index entry.
func deleteValue(tx *bolt.Tx, key string, v []byte) error {
	if err := tx.Bucket(bucketExpiry).Delete(indexKey(int64(binary.BigEndian.Uint64(v)), key)); err != nil {
		return err
	}
	return tx.Bucket(bucketRecords).Delete([]byte(key))
}

// indexKey is the expiry index's key of key expiring at expires.
func indexKey(expires int64, key string) []byte {
	k := make([]byte, 8+len(key))
	binary.BigEndian.PutUint64(k, uint64(expires))
	copy(k[8:], key)
	return k
}

// sweepLoop deletes expired records every sweepEvery, and the claims of
// requests that died.
func (d *db) sweepLoop() {
	defer d.done.Done()
	ticker := time.NewTicker(sweepEvery)
	defer ticker.Stop()
	for {
		select {
		case <-d.stop:
			return
		case <-ticker.C:
		}
		if _, err := d.sweep(context.Background()); err != nil {
			d.logger.Warn("file store: sweeping expired records failed; retrying", zap.String("path", d.path), zap.Error(err))
		}
		d.sweepClaims()
	}
}

// sweep deletes every record that has expired, walking the expiry index
// from its start, sweepBatch per commit; it returns how many it deleted.
func (d *db) sweep(ctx context.Context) (int, error) {
	total := 0
	for {
		nowNano := now().UnixNano()
		n := 0
		err := d.commit(ctx, func(tx *bolt.Tx) error {
			records, index := tx.Bucket(bucketRecords), tx.Bucket(bucketExpiry)
			cur := index.Cursor()
			var stale [][]byte
			for k, _ := cur.First(); k != nil && n < sweepBatch; k, _ = cur.Next() {
				if len(k) < 8 || int64(binary.BigEndian.Uint64(k)) > nowNano {
					break
				}
				stale = append(stale, append([]byte(nil), k...))
				n++
			}
			for _, k := range stale {
				key := k[8:]
				if v := records.Get(key); len(v) >= 8 && binary.BigEndian.Uint64(v) == binary.BigEndian.Uint64(k) {
					if err := records.Delete(key); err != nil {
						return err
					}
				}
				if err := index.Delete(k); err != nil {
					return err
				}
			}
			return nil
		})
		total += n
		if err != nil || n < sweepBatch {
			return total, err
		}
	}
}

// sweepClaims drops the claims whose lease ended without a completion or
// a release (their request died), and expired cache entries.
func (d *db) sweepClaims() {
	nowNano := now().UnixNano()
	for i := range d.shards {
		s := &d.shards[i]
		s.mu.Lock()
		for k, c := range s.claims {
			if !c.pinned && c.expires <= nowNano {
				delete(s.claims, k)
			}
		}
		for k, c := range s.cache {
			if c.expires <= nowNano {
				s.drop(k)
			}
		}
		s.mu.Unlock()
	}
}

// Interface guard
var _ caddy.Destructor = (*db)(nil)
