// Package store is the contract between the webhook_idempotency handler
// and the backends that keep its keys: the memory, redis and file stores
// (store/memstore, store/redisstore, store/filestore), loaded as Caddy
// modules in the `http.webhook_idempotency.stores` namespace. A module of
// that namespace implements Store; the optional capabilities below are
// named interfaces the handler looks for. store/storetest is the suite
// every backend passes.
//
// Keys arrive fully resolved (`<key_prefix>:<source>:<value>`). Records
// are the handler's encoded responses (internal/record), which a store
// keeps as bytes and returns as stored; a store may check that a value
// decodes as a record, to tell it from its own markers. Callers must not
// modify a returned record, and a store must not modify a record handed
// to it.
package store

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Store keeps the state of every idempotency key: absent, in flight
// (claimed by an owner, with a lease) or completed (a recorded response).
// Implementations must be safe for concurrent use, and every method is one
// round trip to the backing store.
type Store interface {
	// Claim atomically claims key for owner with the given lease when the
	// key is absent. Otherwise it reports the key's state: in flight, with
	// the time left on the current owner's lease, or completed, with the
	// recorded response. Exactly one of any number of concurrent claims of
	// an absent key gets StateClaimed.
	Claim(ctx context.Context, key, owner string, lease time.Duration) (ClaimResult, error)

	// Complete replaces owner's claim with record, kept for ttl. When the
	// key already holds exactly record (a retried call whose first answer
	// was lost) it succeeds too; otherwise, when owner no longer owns the
	// key, it returns ErrNotOwner and changes nothing.
	Complete(ctx context.Context, key, owner string, record []byte, ttl time.Duration) error

	// Release deletes owner's claim, so the next delivery is processed;
	// when owner no longer owns the key it returns ErrNotOwner and changes
	// nothing.
	Release(ctx context.Context, key, owner string) error

	// Renew extends owner's lease on an in-flight key; it returns
	// ErrNotOwner when owner no longer owns the key.
	Renew(ctx context.Context, key, owner string, lease time.Duration) error
}

// GuardedStore is a Store that holds a delivery's key together with a
// second key, its guard: the key of the delivery's signed bytes alone,
// which a replay of those bytes under another unsigned id also hits (the
// handler's replay guard, docs/providers.md). Each method acts on both
// keys, owner-checked, in one round trip. With a guard of "", each is the
// plain Store method of the key alone.
type GuardedStore interface {
	Store

	// ClaimGuarded claims key and guard for owner when both are absent,
	// or reports the state of the first that is not (key first), claiming
	// neither (`replay_guard reject`).
	ClaimGuarded(ctx context.Context, key, guard, owner string, lease time.Duration) (ClaimResult, error)

	// ClaimNoted claims key as Claim does and, in the same round trip,
	// records key as the first holder of note for noteTTL unless note
	// already holds one (`replay_guard flag`). It returns the key note
	// held before the call, "" when it held none: a value other than key
	// means the same signed bytes came before under another id.
	ClaimNoted(ctx context.Context, key, note, owner string, lease, noteTTL time.Duration) (ClaimResult, string, error)

	// CompleteGuarded completes key, as Complete does, and guard, when
	// owner holds it, with the same record; it answers for key.
	CompleteGuarded(ctx context.Context, key, guard, owner string, record []byte, ttl time.Duration) error

	// ReleaseGuarded releases key and guard where owner holds them; it
	// answers for key.
	ReleaseGuarded(ctx context.Context, key, guard, owner string) error

	// RenewGuarded renews key and guard where owner holds them; it
	// answers for key.
	RenewGuarded(ctx context.Context, key, guard, owner string, lease time.Duration) error
}

// Claim is one delivery's hold on its key, carried whole by every call
// about it: the store key, its guard or note ("" for none: the replay
// guard, or a nonce), whether the guard is a note, and the owner token.
type Claim struct {
	Key   string
	Guard string
	Noted bool
	Owner string
}

// CompletionGuard is the guard completed, released and renewed with the
// key: a note belongs to the first key that came with its bytes, not to
// this claim.
func (c Claim) CompletionGuard() string {
	if c.Noted {
		return ""
	}
	return c.Guard
}

// State is the state of a key as Claim sees it.
type State uint8

const (
	// StateClaimed means the caller now owns the key and must complete or
	// release it.
	StateClaimed State = iota
	// StateInFlight means another request owns the key and has not
	// answered yet.
	StateInFlight
	// StateCompleted means a response was recorded for the key.
	StateCompleted
	// StateAbsent means the key is absent and was left so: a batch claim
	// that found another of its keys in flight claims none
	// (BatchUnlessInFlight).
	StateAbsent
)

// String returns the state's name.
func (s State) String() string {
	switch s {
	case StateClaimed:
		return "claimed"
	case StateInFlight:
		return "in_flight"
	case StateCompleted:
		return "completed"
	case StateAbsent:
		return "absent"
	}
	return "unknown(" + strconv.Itoa(int(s)) + ")"
}

// ClaimResult is what a claim found or did.
type ClaimResult struct {
	// State of the key.
	State State
	// Record is the encoded response when State is StateCompleted. It is
	// shared and must not be modified.
	Record []byte
	// LeaseLeft is the time left on the owner's lease when State is
	// StateInFlight (zero when the store cannot tell).
	LeaseLeft time.Duration
}

// ErrNotOwner is returned by Complete, Release and Renew when the key is no
// longer owned by the caller: its lease expired and the key was released,
// completed or claimed again by another request.
var ErrNotOwner = errors.New("idempotency key is no longer owned by this request")

// KeyAdmin is implemented by the stores whose keys the admin API shows and
// forgets; the request path never uses it.
type KeyAdmin interface {
	// Inspect returns the key's state.
	Inspect(ctx context.Context, key string) (KeyInfo, error)
	// Forget deletes a completed key and returns the state it found; a
	// key in flight is left alone.
	Forget(ctx context.Context, key string) (KeyInfo, error)
	// ForgetIf deletes a completed key if it holds exactly record, and
	// reports whether it did.
	ForgetIf(ctx context.Context, key string, record []byte) (bool, error)
}

// KeyState is a key's state as the admin API names it.
type KeyState string

// The states of KeyInfo.
const (
	KeyAbsent    KeyState = "absent"
	KeyInFlight  KeyState = "in_flight"
	KeyCompleted KeyState = "completed"
)

// KeyInfo is what a store knows of a key.
type KeyInfo struct {
	State KeyState
	// Left is the time left on the lease or the record; negative when the
	// key does not expire.
	Left time.Duration
	// Record is a completed key's record.
	Record []byte
}

// Prefixer is implemented by a store whose keys start with a configured
// prefix (`key_prefix`) rather than `idem`. The prefix must pass
// CheckKeyPrefix.
type Prefixer interface {
	KeyPrefix() string
}

// DefaultKeyPrefix is the first part of every key of a store that has no
// key_prefix of its own.
const DefaultKeyPrefix = "idem"

// CheckKeyPrefix is the rule of a key prefix. Keys are
// `<key_prefix>:<source>:<value>` and a source's streams share the hash
// tag `{<key_prefix>:<source>}`: a ':' in the prefix would let the keys of
// two routes be the same string (`idem:a` with source `b` and `idem` with
// source `a`, say), and a brace would move or break the hash tag.
func CheckKeyPrefix(p string) error {
	if strings.ContainsAny(p, ":{} \t\r\n") {
		return fmt.Errorf("invalid key_prefix %q: it must not contain ':', '{', '}' or white space (keys are <key_prefix>:<source>:<value>; a ':' would let two routes' keys collide)", p)
	}
	return nil
}

// RecentRecords is implemented by a store that keeps a local copy of the
// records this process completed lately (the redis store), so that a
// duplicate arriving while the store cannot answer is still replayed.
type RecentRecords interface {
	// Recent returns this process's copy of key's record, if it still
	// serves one.
	Recent(key string) ([]byte, bool)
}

// DurabilityWatcher is implemented by a store whose durability depends on
// how its server is run (the redis store, which warns about a Redis
// without AOF): it is told of every source that relies on what the store
// keeps surviving a restart (an inbox, or `fail closed`).
type DurabilityWatcher interface {
	RequireDurable(source string)
}

// HealthReporter is implemented by a store that can tell it no longer
// keeps what it is given although its calls succeed (the file store whose
// file was deleted or replaced under the running Caddy: docs/stores.md).
// Health returns nil, or why the store is unhealthy; the admin API shows
// the sources on such a store as unhealthy.
type HealthReporter interface {
	Health() error
}

// NewOwner returns an owner token unique to one request across processes:
// a random per-process prefix and a counter.
func NewOwner() string {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], ownerCounter.Add(1))
	var b [ownerPrefixLen + 16]byte
	copy(b[:], ownerPrefix)
	hex.Encode(b[ownerPrefixLen:], n[:])
	return string(b[:])
}

const ownerPrefixLen = 24

var (
	ownerCounter atomic.Uint64
	ownerPrefix  = func() string {
		var b [ownerPrefixLen / 2]byte
		if _, err := rand.Read(b[:]); err != nil {
			panic("webhook_idempotency: reading random owner prefix: " + err.Error())
		}
		return hex.EncodeToString(b[:])
	}()
)
