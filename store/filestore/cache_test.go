package filestore

import (
	"path/filepath"
	"testing"
)

// The cache of records read or written lately is bounded in bytes as well
// as in records (docs/stores.md, "Fast duplicates"): 65,536 records of any
// size held gigabytes of large answers. Every record stays answered, from
// the file when it is not in memory.

// cachedBytes returns the bytes of keys and payloads the cache holds.
func cachedBytes(d *db) (total, largest int) {
	for i := range d.shards {
		s := &d.shards[i]
		s.mu.Lock()
		for k, c := range s.cache {
			total += len(k) + len(c.payload)
			largest = max(largest, len(c.payload))
		}
		s.mu.Unlock()
	}
	return total, largest
}

func TestCacheIsBoundedInBytes(t *testing.T) {
	t.Parallel()
	d := openTest(t, filepath.Join(t.TempDir(), "store.db"))
	// 6,000 records of 14 KB: 84 MB, cached up to the bound
	medium := completeKeys(t, d, "medium", 6000, 8, 14_000)
	waitApplied(t, d)
	// 100 of 1 MB: none cached, each read from the file
	large := completeKeys(t, d, "large", 100, 4, 1<<20)
	waitApplied(t, d)
	total, largest := cachedBytes(d)
	t.Logf("cached: %d MB, the largest record %d bytes", total>>20, largest)
	if total > shards*cacheBytesPerShard {
		t.Fatalf("the cache holds %d MB of records, bound %d MB", total>>20, shards*cacheBytesPerShard>>20)
	}
	if largest > cacheMaxValue {
		t.Fatalf("the cache holds a record of %d bytes", largest)
	}
	checkCompleted(t, d, medium)
	checkCompleted(t, d, large)
	if total, _ := cachedBytes(d); total > shards*cacheBytesPerShard {
		t.Fatalf("after reading every record the cache holds %d MB", total>>20)
	}
	// the count of bytes the shards keep agrees with what they hold
	for i := range d.shards {
		s := &d.shards[i]
		s.mu.Lock()
		n := 0
		for k, c := range s.cache {
			n += cachedSize(k, c)
		}
		if n != s.cached {
			t.Errorf("shard %d counts %d bytes and holds %d", i, s.cached, n)
		}
		s.mu.Unlock()
	}
}
