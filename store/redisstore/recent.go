package redisstore

import (
	"errors"
	"sync"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// Recent records (docs/stores.md, "When Redis fails"): every Caddy instance
// keeps a bounded copy of the records it completed lately, so that while
// Redis cannot answer, a duplicate of one of those deliveries is still
// answered with its recorded response instead of being executed again
// (fail open) or refused (fail closed). The copy is consulted only when a
// claim fails: while Redis answers, Redis alone decides.
//
// A copy is never changed, only dropped. It is served until the record
// expires in Redis or recentMaxAge after it was recorded, whichever comes
// first; forgetRecent drops it at once, and the oldest copies go first when
// the bounds below are reached.

// Bounds of the copy, per Redis client (every handler and configuration
// using the same connection settings shares one).
const (
	// recentMaxAge is the longest a copy is served: a key forgotten in
	// Redis through another instance (or by hand) can be answered from
	// this instance's copy for at most this long after it was recorded,
	// and only while Redis cannot answer.
	recentMaxAge = time.Hour
	// recentMaxEntries and recentMaxBytes bound the copies kept.
	recentMaxEntries = 10000
	recentMaxBytes   = 64 << 20
)

// recentRecords is the copy: records by store key, and the order they came
// in, oldest first, for dropping.
type recentRecords struct {
	mu     sync.Mutex
	byKey  map[string]recentRecord
	ring   [recentMaxEntries]recentSlot // the order of puts; slot i%len
	oldest uint64                       // ring position of the oldest slot
	next   uint64                       // ring position of the next put
	bytes  int
}

type recentRecord struct {
	record  []byte
	expires int64  // unix nanoseconds
	seq     uint64 // its ring position
}

type recentSlot struct {
	key string
	seq uint64
}

func newRecentRecords() *recentRecords {
	return &recentRecords{byKey: make(map[string]recentRecord)}
}

// put keeps a copy of key's record, recorded now with a TTL of ttl. The
// record is kept as it is: callers do not modify a record handed to the
// store.
func (rr *recentRecords) put(key string, record []byte, ttl time.Duration) {
	nowNano := time.Now().UnixNano()
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if old, ok := rr.byKey[key]; ok {
		rr.bytes -= cap(old.record)
		delete(rr.byKey, key)
	}
	// make room first: the new copy's ring slot is the oldest's when the
	// ring is full
	for rr.next-rr.oldest >= recentMaxEntries || (rr.oldest < rr.next && rr.bytes+cap(record) > recentMaxBytes) {
		rr.dropOldest()
	}
	seq := rr.next
	rr.next++
	rr.byKey[key] = recentRecord{record: record, expires: nowNano + int64(min(ttl, recentMaxAge)), seq: seq}
	rr.bytes += cap(record)
	rr.ring[seq%recentMaxEntries] = recentSlot{key: key, seq: seq}
}

// dropOldest drops the oldest copy, unless it was dropped or put again
// since. Called with rr.mu held.
func (rr *recentRecords) dropOldest() {
	slot := rr.ring[rr.oldest%recentMaxEntries]
	rr.oldest++
	if r, ok := rr.byKey[slot.key]; ok && r.seq == slot.seq {
		rr.bytes -= cap(r.record)
		delete(rr.byKey, slot.key)
	}
}

// get returns key's record if a copy of it is still served.
func (rr *recentRecords) get(key string) ([]byte, bool) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	r, ok := rr.byKey[key]
	if !ok || r.expires <= time.Now().UnixNano() {
		return nil, false
	}
	return r.record, true
}

// drop forgets the copy of key's record.
func (rr *recentRecords) drop(key string) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if r, ok := rr.byKey[key]; ok {
		rr.bytes -= cap(r.record)
		delete(rr.byKey, key)
	}
}

// keepRecent keeps a copy of a record just handed to Complete for keys (a
// key, and its guard or ""), unless Complete found the key owned by another
// request (whose answer is the one that counts). A record whose completion failed for want of Redis
// is kept too: the application has answered, and that answer is what a
// duplicate arriving during the outage should get.
func (s *Store) keepRecent(err error, record []byte, ttl time.Duration, keys ...string) {
	if errors.Is(err, store.ErrNotOwner) || s.client == nil {
		return
	}
	for _, k := range keys {
		if k != "" {
			s.client.recent.put(k, record, ttl)
		}
	}
}

// Recent implements store.RecentRecords: this instance's copy of key's
// record, for answering a duplicate while Redis cannot.
func (s *Store) Recent(key string) ([]byte, bool) {
	if s.client == nil {
		return nil, false
	}
	return s.client.recent.get(key)
}

// forgetRecent drops this instance's copy of key's record: forgetting a key
// must forget it here too, or a duplicate arriving while Redis cannot
// answer would still get the forgotten answer.
func (s *Store) forgetRecent(key string) {
	if s.client != nil {
		s.client.recent.drop(key)
	}
}
