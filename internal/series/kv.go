package series

import (
	"encoding/binary"
	"time"
)

// The layout of the file and memory stores: a bucket per tier and unit
// under the key of its tier's tag and its unit (8 bytes, big endian, so
// that a tier's buckets sort by time), and the totals under "t"; each
// value a bucket's fields (fields.go). A write prunes its tier's buckets
// older than the tier keeps.

// kv is where the file and memory stores keep a source's buckets, within
// one transaction or lock.
type kv interface {
	get(k []byte) []byte
	put(k, v []byte) error
	// deleteBefore deletes the keys from {tag} up to, not including, k.
	deleteBefore(tag byte, k []byte) error
}

// totalsKey is the key of the totals.
var totalsKey = []byte("t")

// bucketKey is the key of a tier's bucket.
func bucketKey(t tier, unit int64) []byte {
	k := make([]byte, 9)
	k[0] = t.tag
	binary.BigEndian.PutUint64(k[1:], uint64(unit))
	return k
}

// applyWrite adds w to the buckets of its minute and hour, prunes what
// their tiers no longer keep, and adds w's counts to the totals.
func applyWrite(s kv, w *write) error {
	for _, t := range tiers {
		k := bucketKey(t, t.unitOf(w.at))
		f, err := decodeFields(s.get(k))
		if err != nil {
			f = fields{} // a damaged bucket is started again
		}
		f.apply(w, true)
		if err := s.put(k, encodeFields(f)); err != nil {
			return err
		}
		if err := s.deleteBefore(t.tag, bucketKey(t, t.unitOf(w.at.Add(-t.keep)))); err != nil {
			return err
		}
	}
	if len(w.counts) == 0 {
		return nil
	}
	f := currentTotals(s.get(totalsKey), w.at)
	if f[fieldSince] == 0 {
		f[fieldSince] = w.at.Unix()
	}
	f[fieldAt] = w.at.Unix()
	f.apply(w, false)
	return s.put(totalsKey, encodeFields(f))
}

// currentTotals decodes the totals, empty when they were last added to
// longer than totalsKeep before now (or cannot be read).
func currentTotals(v []byte, now time.Time) fields {
	f, err := decodeFields(v)
	if err != nil || (f[fieldAt] != 0 && now.Sub(time.Unix(f[fieldAt], 0)) > totalsKeep) {
		return fields{}
	}
	return f
}

// readBuckets reads a tier's buckets from unit first to last.
func readBuckets(s kv, t tier, first, last int64) map[int64]fields {
	out := map[int64]fields{}
	for u := first; u <= last; u++ {
		if v := s.get(bucketKey(t, u)); v != nil {
			if f, err := decodeFields(v); err == nil {
				out[u] = f
			}
		}
	}
	return out
}
