package webhookidempotency

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
)

// store keeps the state of every idempotency key: absent, in flight
// (claimed by an owner, with a lease) or completed (a recorded response).
// Implementations must be safe for concurrent use, and every method is
// one round trip to the backing store.
//
// Keys arrive fully resolved (`<key_prefix>:<source>:<value>`); records
// are opaque bytes (encoded by recorder.go) returned as stored: callers
// must not modify a returned record. The memory and redis stores are its
// implementations, in store_memory.go and store_redis.go.
type store interface {
	// Claim atomically claims key for owner with the given lease when the
	// key is absent. Otherwise it reports the key's state: in flight, with
	// the time left on the current owner's lease, or completed, with the
	// recorded response.
	Claim(ctx context.Context, key, owner string, lease time.Duration) (claimResult, error)

	// Complete replaces the claim with the encoded record, kept for ttl,
	// if owner still owns the key; otherwise it returns errNotOwner and
	// changes nothing.
	Complete(ctx context.Context, key, owner string, record []byte, ttl time.Duration) error

	// Release deletes the claim if owner still owns the key, so the next
	// delivery is processed; otherwise it returns errNotOwner.
	Release(ctx context.Context, key, owner string) error

	// Renew extends owner's lease on an in-flight key; it returns
	// ErrNotOwner when the key is no longer owned by owner.
	Renew(ctx context.Context, key, owner string, lease time.Duration) error
}

// guardedStore is a store that holds a delivery's key together with a
// second key, its guard: the key of the delivery's signed bytes alone,
// which a replay of those bytes under another unsigned id also hits (see
// guard.go). Each method acts on both keys, owner-checked, in one round
// trip; Claim claims both or neither and reports the state of whichever
// is taken (the key's first). With a guard of "", each is the plain
// method of the key alone.
type guardedStore interface {
	ClaimGuarded(ctx context.Context, key, guard, owner string, lease time.Duration) (claimResult, error)
	CompleteGuarded(ctx context.Context, key, guard, owner string, record []byte, ttl time.Duration) error
	ReleaseGuarded(ctx context.Context, key, guard, owner string) error
	RenewGuarded(ctx context.Context, key, guard, owner string, lease time.Duration) error
}

// claimState is the state of a key as seen by Claim.
type claimState uint8

const (
	// stateClaimed means the caller now owns the key and must complete or
	// release it.
	stateClaimed claimState = iota
	// stateInFlight means another request owns the key and has not answered yet.
	stateInFlight
	// stateCompleted means a response was recorded for the key.
	stateCompleted
)

// String returns the state's name.
func (s claimState) String() string {
	switch s {
	case stateClaimed:
		return "claimed"
	case stateInFlight:
		return "in_flight"
	case stateCompleted:
		return "completed"
	}
	return "unknown(" + strconv.Itoa(int(s)) + ")"
}

// claimResult is what Claim found or did.
type claimResult struct {
	// State of the key.
	State claimState
	// Record is the encoded response when State is stateCompleted. It is
	// shared and must not be modified.
	Record []byte
	// LeaseLeft is the time left on the owner's lease when State is
	// stateInFlight (zero when the store cannot tell).
	LeaseLeft time.Duration
}

// errNotOwner is returned by Complete, Release and Renew when the key is no
// longer owned by the caller: its lease expired and the key was released,
// completed or claimed again by another request.
var errNotOwner = errors.New("idempotency key is no longer owned by this request")

// poolRef is a reference taken on a value shared through a
// caddy.UsagePool; release gives it back once, and the pool destructs the
// value when its last reference is given back. The zero poolRef holds
// none.
type poolRef struct {
	pool *caddy.UsagePool
	key  string
}

// held reports whether the reference is still to be given back.
func (r *poolRef) held() bool { return r.pool != nil }

// release gives the reference back, the first time it is called.
func (r *poolRef) release() error {
	if r.pool == nil {
		return nil
	}
	pool := r.pool
	r.pool = nil
	_, err := pool.Delete(r.key)
	return err
}

// newOwner returns an owner token unique to one request across processes:
// a random per-process prefix and a counter.
func newOwner() string {
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
