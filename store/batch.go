package store

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"strconv"
	"strings"
	"time"
)

// BatchStore is a Store that claims, completes, releases and renews many
// keys for one owner in one round trip: the items of a request that holds
// many events (docs/stores.md, "Batches"), each deduplicated by its own
// key. Each method takes the keys in the caller's order; they must be
// distinct and at most MaxBatchKeys (CheckBatch), or the call is refused
// with an error and changes nothing. An empty batch changes nothing and
// costs no round trip.
//
// A batch claim is per item: each key gets its own state, as Claim would
// report it, and the absent keys are claimed (a completed key is reported
// with its record, not redone). Every key is claimed by exactly one of any
// number of concurrent claims, batch or not, that include it. What a claim
// does when a key is in flight for another owner is the caller's choice
// (BatchMode): by default it then claims none of the keys, so that a
// request that will answer 409 for the in-flight key has nothing to give
// back.
type BatchStore interface {
	Store

	// ClaimBatch reports the state of every key and claims the absent ones
	// for owner with the given lease, unless mode is BatchUnlessInFlight
	// and a key is in flight for another owner: then it claims none, and
	// reports the absent keys as StateAbsent. A key owner already holds is
	// reported claimed (its lease renewed, unless the batch is held back).
	ClaimBatch(ctx context.Context, keys []string, owner string, lease time.Duration, mode BatchMode) (BatchResult, error)

	// CompleteBatch replaces owner's claim of each key with its record,
	// kept for ttl: records holds one record for every key, in the keys'
	// order, or one record for them all. Each key is owner-checked as
	// Complete checks it (a key that already holds exactly its record
	// succeeds); the keys owner no longer owns are left alone and reported
	// in a *NotOwnerError, the others completed.
	CompleteBatch(ctx context.Context, keys []string, owner string, records [][]byte, ttl time.Duration) error

	// ReleaseBatch deletes owner's claim of each key; the keys owner no
	// longer owns are left alone and reported in a *NotOwnerError.
	ReleaseBatch(ctx context.Context, keys []string, owner string) error

	// RenewBatch extends owner's lease on each key; the keys owner no
	// longer owns are reported in a *NotOwnerError.
	RenewBatch(ctx context.Context, keys []string, owner string, lease time.Duration) error
}

// MaxBatchKeys is the most keys one batch call takes: the default of a
// batch's `max_items`, and its largest value. A Redis script holds its
// server for the whole batch: 1.7 ms for this many keys (docs/stores.md,
// "Batches").
const MaxBatchKeys = 1000

// BatchMode says what a batch claim does when one of its keys is in flight
// for another owner.
type BatchMode uint8

const (
	// BatchUnlessInFlight (the zero value) claims the absent keys only
	// when no key of the batch is in flight for another owner; otherwise
	// it claims none. The request then answers 409 for the whole batch
	// with nothing to release.
	BatchUnlessInFlight BatchMode = iota
	// BatchEach claims every absent key whatever the other keys' states.
	BatchEach
)

// BatchResult is what a batch claim found or did.
type BatchResult struct {
	// Items holds each key's result, in the order of the keys. A record
	// is shared and must not be modified.
	Items []ClaimResult
	// Claimed, InFlight, Completed and Absent count the items in each
	// state.
	Claimed, InFlight, Completed, Absent int
}

// count adds an item's state to the counts.
func (r *BatchResult) count(s State) {
	switch s {
	case StateClaimed:
		r.Claimed++
	case StateInFlight:
		r.InFlight++
	case StateCompleted:
		r.Completed++
	case StateAbsent:
		r.Absent++
	}
}

// NewBatchResult returns the result of a batch claim whose items are
// items, counted.
func NewBatchResult(items []ClaimResult) BatchResult {
	r := BatchResult{Items: items}
	for _, it := range items {
		r.count(it.State)
	}
	return r
}

// NotOwnerError is the error of a batch call that found some of its keys no
// longer owned by the caller: it did its work on the others. It matches
// ErrNotOwner.
type NotOwnerError struct {
	// Index holds the positions, in the call's keys, of the keys the
	// caller no longer owns, in increasing order.
	Index []int
}

// Error implements error.
func (e *NotOwnerError) Error() string {
	var b strings.Builder
	b.WriteString(strconv.Itoa(len(e.Index)))
	b.WriteString(" idempotency keys of the batch are no longer owned by this request (items")
	for i, n := range e.Index {
		if i == 8 {
			b.WriteString(" …")
			break
		}
		b.WriteByte(' ')
		b.WriteString(strconv.Itoa(n))
	}
	b.WriteByte(')')
	return b.String()
}

// Is reports whether target is ErrNotOwner.
func (e *NotOwnerError) Is(target error) bool { return target == ErrNotOwner }

// NotOwned returns the error of a batch call that found the keys at index
// not owned: nil when there are none.
func NotOwned(index []int) error {
	if len(index) == 0 {
		return nil
	}
	return &NotOwnerError{Index: index}
}

// Errors of batches a store refuses.
var (
	ErrBatchTooLarge    = errors.New("batch has more keys than a store call takes")
	ErrBatchDuplicate   = errors.New("batch holds a key twice")
	ErrBatchRecordCount = errors.New("batch completion needs one record, or one per key")
)

// CheckBatch is the rule of a batch's keys: at most MaxBatchKeys, each
// given once.
func CheckBatch(keys []string) error {
	if len(keys) > MaxBatchKeys {
		return fmt.Errorf("%w: %d keys, at most %d", ErrBatchTooLarge, len(keys), MaxBatchKeys)
	}
	if len(keys) < 2 {
		return nil
	}
	// an open-addressed set of the keys' positions (from 1) by their
	// hash, on the stack: a map of them cost more than a memory store's
	// claim of the whole batch
	var slots [batchSlots]uint16
	mask := uint64(batchSlots - 1)
	for mask/4 >= uint64(len(keys)) {
		mask >>= 1
	}
	for i, k := range keys {
		for j := maphash.String(batchSeed, k) & mask; ; j = (j + 1) & mask {
			p := slots[j]
			if p == 0 {
				slots[j] = uint16(i + 1)
				break
			}
			if keys[p-1] == k {
				return fmt.Errorf("%w: %q", ErrBatchDuplicate, k)
			}
		}
	}
	return nil
}

// batchSlots is the size of CheckBatch's set: a power of two at least
// twice MaxBatchKeys.
const batchSlots = 2048

var batchSeed = maphash.MakeSeed()

// CheckBatchRecords is CheckBatch for a completion, with its records:
// one, or one per key.
func CheckBatchRecords(keys []string, records [][]byte) error {
	if len(keys) > 0 && len(records) != 1 && len(records) != len(keys) {
		return fmt.Errorf("%w: %d records for %d keys", ErrBatchRecordCount, len(records), len(keys))
	}
	return CheckBatch(keys)
}

// BatchRecord returns the record of the i-th key of a completion whose
// records passed CheckBatchRecords.
func BatchRecord(records [][]byte, i int) []byte {
	if len(records) == 1 {
		return records[0]
	}
	return records[i]
}
