package webhookidempotency

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// A key's state, and forgetting a key, through the admin API
// (docs/admin.md#keys).

// keyAdmin is implemented by the stores whose keys the admin API shows and
// forgets; the request path never uses it.
type keyAdmin interface {
	// inspect returns the key's state.
	inspect(ctx context.Context, key string) (keyInfo, error)
	// forget deletes a completed key and returns the state it found; a
	// key in flight is left alone.
	forget(ctx context.Context, key string) (keyInfo, error)
	// forgetIf deletes a completed key if it holds exactly record, and
	// reports whether it did.
	forgetIf(ctx context.Context, key string, record []byte) (bool, error)
}

// keyState is a key's state as the admin API names it.
type keyState string

const (
	keyAbsent    keyState = "absent"
	keyInFlight  keyState = "in_flight"
	keyCompleted keyState = "completed"
)

// keyInfo is what a store knows of a key.
type keyInfo struct {
	state  keyState
	left   time.Duration // time left on the lease or the record; negative: no expiry
	record []byte        // a completed key's record
}

// keyStatus is a key's state as the admin API answers it.
type keyStatus struct {
	Source      string     `json:"source"`
	Key         string     `json:"key"`
	StoreKey    string     `json:"store_key"`
	State       keyState   `json:"state"`
	LeaseLeftMs *int64     `json:"lease_left_ms,omitempty"` // in flight
	Status      int        `json:"status,omitempty"`        // completed: the recorded status
	RecordedAt  *time.Time `json:"recorded_at,omitempty"`   // completed: when, from the expiry and the route's ttl
	ExpiresAt   *time.Time `json:"expires_at,omitempty"`    // completed
	Corrupt     bool       `json:"corrupt,omitempty"`       // completed, but the record cannot be read
}

// keyStore returns the store and the store key of a source's key.
func (s *adminSource) keyStore(key string) (keyAdmin, string, *Handler, error) {
	h := s.handlers[0]
	ka, ok := h.store.store.(keyAdmin)
	if !ok {
		return nil, "", nil, apiError(http.StatusNotFound, fmt.Errorf("the store of source %q cannot show keys", s.name))
	}
	return ka, h.keyPrefix + key, h, nil
}

// status turns what the store knows into the answer.
func (info keyInfo) status(src *adminSource, h *Handler, key, storeKey string) keyStatus {
	st := keyStatus{Source: src.name, Key: key, StoreKey: storeKey, State: info.state}
	switch info.state {
	case keyInFlight:
		ms := max(info.left.Milliseconds(), 0)
		st.LeaseLeftMs = &ms
	case keyCompleted:
		if rec, err := decodeRecord(info.record); err == nil {
			st.Status = rec.status
		} else {
			st.Corrupt = true
		}
		if info.left >= 0 {
			t := now()
			expires := t.Add(info.left).Truncate(time.Millisecond).UTC()
			ttl := time.Duration(h.TTL)
			if h.inbox != nil && info.left > ttl {
				// accepted, not yet delivered: kept for the retry horizon too
				ttl = h.inbox.acceptTTL
			}
			recorded := expires.Add(-ttl)
			st.ExpiresAt, st.RecordedAt = &expires, &recorded
		}
	}
	return st
}

// handleKey reports a key's state.
func handleKey(w http.ResponseWriter, r *http.Request, src *adminSource, key string) error {
	ka, storeKey, h, err := src.keyStore(key)
	if err != nil {
		return err
	}
	info, err := ka.inspect(r.Context(), storeKey)
	if err != nil {
		return storeError(src.name, err)
	}
	return writeJSON(w, info.status(src, h, key, storeKey))
}

// handleForget forgets a completed key so that the provider's next retry
// is processed: 204; 404 when the key is absent; 409 while it is in flight
// (its delivery is being processed, and forgetting it would let a
// duplicate run alongside). A key claimed with a guard (guard.go) is
// forgotten with it, the guard first: the guard is the body's key, so
// while it stays, a retry of the same bytes is a duplicate whatever id it
// carries. The guard is deleted only while it holds the key's record.
func handleForget(w http.ResponseWriter, r *http.Request, src *adminSource, key string) error {
	ka, storeKey, h, err := src.keyStore(key)
	if err != nil {
		return err
	}
	if h.guards() {
		info, err := ka.inspect(r.Context(), storeKey)
		if err != nil {
			return storeError(src.name, err)
		}
		if guard := h.recordGuard(key, info); guard != "" {
			if _, err := ka.forgetIf(r.Context(), guard, info.record); err != nil {
				return storeError(src.name, err)
			}
		}
	}
	info, err := ka.forget(r.Context(), storeKey)
	if err != nil {
		return storeError(src.name, err)
	}
	switch info.state {
	case keyAbsent:
		return apiError(http.StatusNotFound, fmt.Errorf("key %q of source %q is absent", key, src.name))
	case keyInFlight:
		return apiError(http.StatusConflict, fmt.Errorf("key %q of source %q is in flight (lease left %s): its delivery is being processed; wait for it to complete or its lease to end", key, src.name, info.left.Round(time.Millisecond)))
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
