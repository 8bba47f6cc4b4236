package filestore

import (
	"errors"
	"hash/maphash"
	"math/bits"
	"sync"
	"sync/atomic"

	bolt "go.etcd.io/bbolt"
)

// A new delivery's key is in no map in memory, and reading the tree to
// learn that it is not there either is a read transaction of bbolt's: a
// few locks on the database, a handful of allocations, a search from the
// root. The filter answers "not in the tree" for most such keys without
// it: a Bloom filter of the keys the tree holds (16 bits and 4 hashes a
// key: one key in about 400 that is not there is taken for one that may
// be, and read). A key is added once the commit that puts it into the tree
// has succeeded, before it leaves the pending map or its claim: until then
// those answer for it. Keys deleted from the tree stay in the filter until
// it is built again from the tree, which happens once as many keys were
// added since the last build as half of what the filter was sized for.

const (
	filterBitsPerKey = 16
	filterHashes     = 4
	filterMinBits    = 1 << 20 // 128 KiB
)

// keysFilter is the filter of the keys in the tree.
type keysFilter struct {
	seed  maphash.Seed
	bits  atomic.Pointer[bitset] // nil: not built, every key may be there
	added atomic.Int64           // keys added since the last build

	rebuilding atomic.Bool
	mu         sync.Mutex
	side       []uint64 // hashes added while a build walks the tree, under mu
}

// bitset is a filter's bits, set with atomic operations.
type bitset struct {
	words []atomic.Uint64
	mask  uint64 // bits - 1
	keys  int64  // the keys it is sized for
}

func newBitset(keys int64) *bitset {
	n := uint64(max(filterMinBits, keys*filterBitsPerKey))
	n = 1 << bits.Len64(n-1)
	return &bitset{words: make([]atomic.Uint64, n/64), mask: n - 1, keys: int64(n / filterBitsPerKey)}
}

// position is the word and bit of hash h's i-th position (double hashing).
func (b *bitset) position(h, i uint64) (uint64, uint64) {
	p := (h + i*(h>>32|h<<32|1)) & b.mask
	return p >> 6, 1 << (p & 63)
}

func (b *bitset) add(h uint64) {
	for i := range uint64(filterHashes) {
		w, bit := b.position(h, i)
		if b.words[w].Load()&bit == 0 {
			b.words[w].Or(bit)
		}
	}
}

func (b *bitset) has(h uint64) bool {
	for i := range uint64(filterHashes) {
		w, bit := b.position(h, i)
		if b.words[w].Load()&bit == 0 {
			return false
		}
	}
	return true
}

// mayHave reports whether key may be in the tree; false is certain.
func (f *keysFilter) mayHave(key string) bool {
	b := f.bits.Load()
	return b == nil || b.has(maphash.String(f.seed, key))
}

// add records keys the tree holds now, and reports whether the filter
// should be built again.
func (f *keysFilter) add(keys []string) bool {
	b := f.bits.Load()
	if len(keys) == 0 || b == nil {
		return false
	}
	for _, k := range keys {
		h := maphash.String(f.seed, k)
		for {
			b = f.bits.Load()
			b.add(h)
			if f.rebuilding.Load() {
				// the walk may have begun before the key's commit
				f.mu.Lock()
				if f.rebuilding.Load() {
					f.side = append(f.side, h)
				}
				f.mu.Unlock()
			}
			if f.bits.Load() == b {
				break
			}
			// a build ended meanwhile: the new filter needs it too
		}
	}
	return f.added.Add(int64(len(keys))) > b.keys/2 && !f.rebuilding.Load()
}

// build builds the filter from the keys of the tree, sized for twice as
// many; the keys added meanwhile go into it too. It stops, keeping the
// filter it had, when stop is closed.
func (f *keysFilter) build(d *db, stop <-chan struct{}) error {
	f.mu.Lock()
	if f.rebuilding.Load() {
		f.mu.Unlock()
		return nil
	}
	f.rebuilding.Store(true)
	f.mu.Unlock()
	var hashes []uint64
	err := d.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketRecords).ForEach(func(k, _ []byte) error {
			if len(hashes)%4096 == 4095 {
				select {
				case <-stop:
					return errStopped
				default:
				}
			}
			hashes = append(hashes, maphash.Bytes(f.seed, k))
			return nil
		})
	})
	f.mu.Lock()
	defer f.mu.Unlock()
	defer f.rebuilding.Store(false)
	if err != nil {
		f.side = nil
		if err == errStopped {
			return nil
		}
		return err
	}
	next := newBitset(2 * int64(len(hashes)+len(f.side)))
	for _, h := range hashes {
		next.add(h)
	}
	for _, h := range f.side {
		next.add(h)
	}
	f.side = nil
	f.bits.Store(next)
	f.added.Store(0)
	return nil
}

// errStopped ends a walk of the tree when the store closes.
var errStopped = errors.New("the store is closing")
