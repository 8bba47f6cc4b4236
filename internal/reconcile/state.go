package reconcile

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/record"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// The state of a source's passes, shared by every instance on the store:
// the last pass's outcome, and the point a pass that stopped part-way
// reached, which the next pass resumes from whichever instance runs it
// (docs/reconcile.md: Resuming). It is kept in the route's store as a
// completed key, `{<key_prefix>:<source>}:reconcile:state`, through the
// store contract alone, so every backend keeps it: only the holder of the
// lease writes it (forget, claim, complete).

// state is the shared state, stored as JSON.
type state struct {
	LastStart   time.Time `json:"last_start,omitzero"`
	LastEnd     time.Time `json:"last_end,omitzero"`
	LastResult  string    `json:"last_result,omitempty"`
	LastError   string    `json:"last_error,omitempty"`
	Recovered   int       `json:"recovered"`
	LastSuccess time.Time `json:"last_success,omitzero"`
	// NotBefore is when the provider's rate limit lets the next pass run.
	NotBefore time.Time `json:"not_before,omitzero"`
	// Pass is the pass in progress, or the one that stopped part-way.
	Pass *passState `json:"pass,omitempty"`
}

// passState is where a pass is: the start of its window, the provider's
// cursor after the last page it finished, and its counts so far.
type passState struct {
	Since     time.Time       `json:"since"`
	Cursor    json.RawMessage `json:"cursor,omitempty"`
	Recovered int             `json:"recovered"`
	Known     int             `json:"known"`
}

// due is when the next pass may start: Every after the last one started,
// and not before the provider's rate limit allows.
func (st *state) due(every time.Duration) time.Time {
	if st.LastStart.IsZero() {
		return st.NotBefore
	}
	next := st.LastStart.Add(every)
	if st.NotBefore.After(next) {
		return st.NotBefore
	}
	return next
}

// stateStatus is the status a state record carries (any status decodes as
// a record).
const stateStatus = 200

// encodeState writes st as a record whose body is its JSON.
func encodeState(st state) ([]byte, error) {
	js, err := json.Marshal(st)
	if err != nil {
		return nil, err
	}
	var zero [32]byte
	return append(record.Encode(make([]byte, 0, record.FixedLen+1+len(js)), stateStatus, nil, &zero), js...), nil
}

// decodeState reads a state record.
func decodeState(b []byte) (state, error) {
	rec, err := record.Decode(b)
	if err != nil {
		return state{}, err
	}
	var st state
	if err := json.Unmarshal(rec.Body, &st); err != nil {
		return state{}, fmt.Errorf("reading the reconcile state: %w", err)
	}
	return st, nil
}

// readState returns the shared state and its record as stored (nil when
// there is none). A record that does not decode is taken as no state: the
// next pass starts from the beginning, which the dedup makes safe.
func (r *Reconciler) readState(ctx context.Context) (state, []byte, error) {
	info, err := r.cfg.Store.Inspect(ctx, r.stateKey)
	if err != nil {
		return state{}, nil, fmt.Errorf("reading the pass state: %w", err)
	}
	if info.State != store.KeyCompleted {
		return state{}, nil, nil
	}
	st, err := decodeState(info.Record)
	if err != nil {
		return state{}, info.Record, nil
	}
	return st, info.Record, nil
}

// writeState replaces the state record prev (nil: none) with st. The
// lease makes its holder the only writer; a record other than prev found
// in the way means the lease was lost.
func (r *Reconciler) writeState(ctx context.Context, owner string, prev []byte, st state) ([]byte, error) {
	rec, err := encodeState(st)
	if err != nil {
		return nil, err
	}
	if prev != nil {
		if _, err := r.cfg.Store.ForgetIf(ctx, r.stateKey, prev); err != nil {
			return nil, fmt.Errorf("writing the pass state: %w", err)
		}
	}
	res, err := r.cfg.Store.Claim(ctx, r.stateKey, owner, storeTimeout)
	if err != nil {
		return nil, fmt.Errorf("writing the pass state: %w", err)
	}
	if res.State != store.StateClaimed {
		return nil, errLeaseLost
	}
	if err := r.cfg.Store.Complete(ctx, r.stateKey, owner, rec, stateTTL); err != nil {
		return nil, fmt.Errorf("writing the pass state: %w", err)
	}
	return rec, nil
}
