package archive

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The archive yields to the idempotency keys in a Redis with a maxmemory
// (docs/stores.md, "Sizing"): past archiveMemoryShare of maxmemory the
// archive appends nothing, so that the archive's growth never makes Redis
// evict keys (with an allkeys-* or volatile-* policy: every key has a TTL
// and the archive is the largest thing written) nor refuse their writes
// (noeviction). What it reads of Redis's memory is INFO's used_memory, read
// in the background while the archive appends (more often as Redis fills
// up), plus an estimate of what it appended since.

// archiveMemoryShare is the part of maxmemory past which the archive stops
// appending: the rest is left to the keys, the inbox and the guards.
const archiveMemoryShare = 0.9

// How often an appending archive reads Redis's memory: memoryReadEvery,
// and memoryReadNear once Redis is past half its maxmemory (or the archive
// is stopped), where an estimate has less room to be wrong.
const (
	memoryReadEvery = 5 * time.Second
	memoryReadNear  = 250 * time.Millisecond
)

// memoryOverhead is what Redis takes for a byte appended, as the archive
// estimates it between two readings: the allocator rounds a large value up
// (jemalloc's size classes are up to 25 % apart), and a stream entry has
// its node.
const memoryOverhead = 1.25

// memoryWatcher is a backend that refuses appends while its store has no
// room for them.
type memoryWatcher interface {
	// admit reports whether e may be appended.
	admit(e *Entry) bool
}

// memoryGuard tracks the memory of the Redis node of one archive.
type memoryGuard struct {
	b *redisBackend

	mu      sync.Mutex
	limit   int64 // archiveMemoryShare of maxmemory; 0 without maxmemory, or before the first reading
	used    int64 // used_memory at the last reading, and what was appended since
	max     int64 // maxmemory
	read    time.Time
	reading bool
	full    bool
	closed  bool
	wg      sync.WaitGroup
}

func newMemoryGuard(b *redisBackend) *memoryGuard { return &memoryGuard{b: b} }

// admit reports whether n more bytes may be appended, and counts them
// when they may. It starts a reading of Redis's memory when the last one
// is old; until the first one answers, everything is admitted.
func (g *memoryGuard) admit(n int64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	every := memoryReadEvery
	if g.full || g.max > 0 && g.used > g.max/2 {
		every = memoryReadNear
	}
	if !g.reading && !g.closed && time.Since(g.read) >= every {
		g.reading = true
		g.wg.Add(1)
		go g.readMemory()
	}
	if g.limit == 0 {
		return true
	}
	n = int64(float64(n) * memoryOverhead)
	if g.used+n > g.limit {
		if !g.full {
			g.full = true
			g.b.a.warnFull(g.used, g.max)
		}
		return false
	}
	g.full = false
	g.used += n
	return true
}

// readMemory reads used_memory and maxmemory from the archive's node.
func (g *memoryGuard) readMemory() {
	defer g.wg.Done()
	used, maxMemory, err := g.info()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.reading, g.read = false, time.Now()
	if err != nil {
		return // the store's errors are the store's to report; the last reading stands
	}
	g.used, g.max, g.limit = used, maxMemory, int64(float64(maxMemory)*archiveMemoryShare)
	if g.full && (g.limit == 0 || used < g.limit) {
		g.full = false
	}
}

// info reads INFO memory on the archive's node.
func (g *memoryGuard) info() (used, maxMemory int64, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), g.b.streams.Timeout())
	defer cancel()
	var c redis.Cmdable = g.b.client
	if cc, ok := g.b.client.(*redis.ClusterClient); ok {
		node, err := cc.MasterForKey(ctx, g.b.stream)
		if err != nil {
			return 0, 0, err
		}
		c = node
	}
	info, err := c.Info(ctx, "memory").Result()
	if err != nil {
		return 0, 0, err
	}
	for line := range strings.SplitSeq(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		switch k {
		case "used_memory":
			used, _ = strconv.ParseInt(v, 10, 64)
		case "maxmemory":
			maxMemory, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return used, maxMemory, nil
}

// close waits for a reading under way; no other starts.
func (g *memoryGuard) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.wg.Wait()
}
