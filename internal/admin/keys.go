package admin

import (
	"fmt"
	"net/http"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/record"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// A key's state, and forgetting a key, through the admin API
// (docs/admin.md#keys).

// keyStatus is a key's state as the admin API answers it.
type keyStatus struct {
	Source      string         `json:"source"`
	Key         string         `json:"key"`
	StoreKey    string         `json:"store_key"`
	State       store.KeyState `json:"state"`
	LeaseLeftMs *int64         `json:"lease_left_ms,omitempty"` // in flight
	Status      int            `json:"status,omitempty"`        // completed: the recorded status
	RecordedAt  *time.Time     `json:"recorded_at,omitempty"`   // completed: when, from the expiry and the route's ttl
	ExpiresAt   *time.Time     `json:"expires_at,omitempty"`    // completed
	Corrupt     bool           `json:"corrupt,omitempty"`       // completed, but the record cannot be read
	// History is the attempts of the key's event, with an inbox, as long
	// as it keeps them (docs/inbox.md#attempts).
	History *event.HistoryView `json:"history,omitempty"`
}

// keyStore returns the store and the store key of a source's key.
func (s *adminSource) keyStore(key string) (store.KeyAdmin, string, Route, error) {
	rt := s.routes[0]
	ka, ok := rt.Store().(store.KeyAdmin)
	if !ok {
		return nil, "", nil, apiError(http.StatusNotFound, fmt.Errorf("the store of source %q cannot show keys", s.name))
	}
	return ka, rt.KeyPrefix() + key, rt, nil
}

// keyAnswer turns what the store knows of a key into the answer.
func keyAnswer(info store.KeyInfo, src *adminSource, rt Route, key, storeKey string) keyStatus {
	st := keyStatus{Source: src.name, Key: key, StoreKey: storeKey, State: info.State}
	switch info.State {
	case store.KeyInFlight:
		ms := max(info.Left.Milliseconds(), 0)
		st.LeaseLeftMs = &ms
	case store.KeyCompleted:
		if rec, err := record.Decode(info.Record); err == nil {
			st.Status = rec.Status
		} else {
			st.Corrupt = true
		}
		if info.Left >= 0 {
			t := time.Now()
			expires := t.Add(info.Left).Truncate(time.Millisecond).UTC()
			ttl := rt.TTL()
			if ib := rt.Inbox(); ib != nil && info.Left > ttl {
				// accepted, not yet delivered: kept for the retry horizon too
				ttl = ib.AcceptTTL()
			}
			recorded := expires.Add(-ttl)
			st.ExpiresAt, st.RecordedAt = &expires, &recorded
		}
	}
	return st
}

// handleKey reports a key's state.
func handleKey(w http.ResponseWriter, r *http.Request, src *adminSource, key string) error {
	ka, storeKey, rt, err := src.keyStore(key)
	if err != nil {
		return err
	}
	info, err := ka.Inspect(r.Context(), storeKey)
	if err != nil {
		return storeError(src.name, err)
	}
	st := keyAnswer(info, src, rt, key, storeKey)
	if ib := rt.Inbox(); ib != nil {
		hs, err := ib.Attempts(r.Context(), key)
		if err != nil {
			return storeError(src.name, err)
		}
		st.History = event.ShowHistory(hs[0], true)
	}
	return writeJSON(w, st)
}

// handleForget forgets a completed key so that the provider's next retry
// is processed: 204; 404 when the key is absent; 409 while it is in flight
// (its delivery is being processed, and forgetting it would let a
// duplicate run alongside). A key claimed with a guard (guard.go) is
// forgotten with it, the guard first: the guard is the body's key, so
// while it stays, a retry of the same bytes is a duplicate whatever id it
// carries. The guard is deleted only while it holds the key's record.
func handleForget(w http.ResponseWriter, r *http.Request, src *adminSource, key string) error {
	ka, storeKey, rt, err := src.keyStore(key)
	if err != nil {
		return err
	}
	if rt.Guards() {
		info, err := ka.Inspect(r.Context(), storeKey)
		if err != nil {
			return storeError(src.name, err)
		}
		if guard := rt.Guard(key, info); guard != "" {
			if _, err := ka.ForgetIf(r.Context(), guard, info.Record); err != nil {
				return storeError(src.name, err)
			}
		}
	}
	info, err := ka.Forget(r.Context(), storeKey)
	if err != nil {
		return storeError(src.name, err)
	}
	switch info.State {
	case store.KeyAbsent:
		return apiError(http.StatusNotFound, fmt.Errorf("key %q of source %q is absent", key, src.name))
	case store.KeyInFlight:
		return apiError(http.StatusConflict, fmt.Errorf("key %q of source %q is in flight (lease left %s): its delivery is being processed; wait for it to complete or its lease to end", key, src.name, info.Left.Round(time.Millisecond)))
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
