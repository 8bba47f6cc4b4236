package series

import (
	"context"
	"sync"
	"time"
)

// The series of the memory store, and of a store of another module: a
// table in the process, laid out as kv.go says, kept across config
// reloads with its recorder (recorders), and lost at a restart as the
// memory store's keys are.

// memoryTable is a source's buckets.
type memoryTable struct {
	m      map[string][]byte
	pruned map[byte]string // each tier's last cutoff: the table is walked once per new cutoff
}

func (t *memoryTable) get(k []byte) []byte { return t.m[string(k)] }

func (t *memoryTable) put(k, v []byte) error {
	t.m[string(k)] = v
	return nil
}

func (t *memoryTable) deleteBefore(tag byte, k []byte) error {
	cutoff := string(k)
	if t.pruned[tag] == cutoff {
		return nil
	}
	t.pruned[tag] = cutoff
	for key := range t.m {
		if key[0] == tag && key < cutoff {
			delete(t.m, key)
		}
	}
	return nil
}

type memoryBackend struct {
	mu    sync.Mutex
	table memoryTable
}

func newMemoryBackend() *memoryBackend {
	return &memoryBackend{table: memoryTable{m: map[string][]byte{}, pruned: map[byte]string{}}}
}

func (b *memoryBackend) add(_ context.Context, w *write) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return applyWrite(&b.table, w)
}

func (b *memoryBackend) buckets(_ context.Context, t tier, first, last int64) (map[int64]fields, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return readBuckets(&b.table, t, first, last), nil
}

func (b *memoryBackend) totals(context.Context) (fields, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return currentTotals(b.table.get(totalsKey), time.Now()), nil
}

func (b *memoryBackend) timeout() time.Duration { return time.Second }

func (b *memoryBackend) close() {}
