package webhookidempotency

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/inbox"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
	"github.com/webhookguard/caddy-webhook-idempotency/store/filestore"
)

// The handler's side of the store seam (package store): loading a backend
// from the http.webhook_idempotency.stores namespace, the optional
// capabilities it is checked for, and the metering of every call.

// loadStore loads the store module of a field (the handler's or the app's
// StoreRaw): a module of the namespace that is not a store is an error.
func loadStore(ctx caddy.Context, owner any, field string) (store.Store, error) {
	mod, err := ctx.LoadModule(owner, field)
	if err != nil {
		return nil, fmt.Errorf("loading store: %v", err)
	}
	s, ok := mod.(store.Store)
	if !ok {
		return nil, fmt.Errorf("loading store: module %s is not a store: it does not implement store.Store", moduleName(mod))
	}
	return s, nil
}

// storeModule returns a zero value of the store module a store's JSON
// names, for the Caddyfile parser to ask what it can hold (nil when the
// module is unknown or no store).
func storeModule(raw json.RawMessage) store.Store {
	var m struct {
		Module string `json:"module"`
	}
	if json.Unmarshal(raw, &m) != nil {
		return nil
	}
	info, err := caddy.GetModule("http.webhook_idempotency.stores." + m.Module)
	if err != nil {
		return nil
	}
	s, _ := info.New().(store.Store)
	return s
}

// moduleName returns the name of a module in its namespace (`redis`).
func moduleName(v any) string {
	if m, ok := v.(caddy.Module); ok {
		return m.CaddyModule().ID.Name()
	}
	return fmt.Sprintf("%T", v)
}

// provisionStore loads the store: the handler's own, else the global
// option's, else a file store of its own at the default path (the
// default store, shared by every handler that uses it). Every call to it is
// metered, and what it can do beyond the contract decides how keys are
// claimed.
func (h *Handler) provisionStore(ctx caddy.Context, app *App) error {
	var s store.Store
	switch {
	case h.StoreRaw != nil:
		var err error
		if s, err = loadStore(ctx, h, "StoreRaw"); err != nil {
			return err
		}
	case app.store != nil:
		s = app.store
	default:
		fs := new(filestore.Store)
		if err := fs.Provision(ctx); err != nil {
			return err
		}
		h.ownedStore, s = fs, fs
	}
	if h.Inbox != nil {
		if err := inbox.Supports(s); err != nil {
			return err
		}
	}
	if dw, ok := s.(store.DurabilityWatcher); ok && (h.Inbox != nil || h.failClosed) {
		dw.RequireDurable(h.Source)
	}
	prefix := store.DefaultKeyPrefix
	if p, ok := s.(store.Prefixer); ok {
		prefix = p.KeyPrefix()
	}
	if err := store.CheckKeyPrefix(prefix); err != nil {
		// a store module of another namespace that does not check its own
		return fmt.Errorf("store %s: %v", moduleName(s), err)
	}
	h.keyPrefix = prefix + ":" + h.Source + ":"
	h.store = &meteredStore{backend: s, m: h.metrics}
	h.store.guarded, _ = s.(store.GuardedStore)
	h.store.recent, _ = s.(store.RecentRecords)
	h.store.batch, _ = s.(store.BatchStore)
	if h.store.guarded == nil {
		// a store that holds no guard: every key is claimed alone
		h.guardMode, h.nonce = guardOff, nil
	}
	return nil
}

// namespace is the handler's key namespace, `<key_prefix>:<source>`: what
// its store keys start with, and what Webhook-Via names for the requests
// its inbox and archive send (internal/event, ViaHeader).
func (h *Handler) namespace() string { return strings.TrimSuffix(h.keyPrefix, ":") }

// meteredStore is a handler's store with every call timed and its failures
// counted: the one place that observes store calls. Its methods take the
// key's guard ("" for none: guard.go); noted makes the guard a note.
type meteredStore struct {
	backend store.Store
	guarded store.GuardedStore  // the same store, when it holds guards
	recent  store.RecentRecords // the same store, when it keeps recent records
	batch   store.BatchStore    // the same store, when it claims many keys at once
	m       *handlerMetrics
}

// observe records a store call's duration, and its failure (not counting
// store.ErrNotOwner, which is an answer, not a failure).
func (s *meteredStore) observe(op storeOp, start time.Time, err error) {
	s.m.duration[op].Observe(time.Since(start).Seconds())
	if err != nil && !errors.Is(err, store.ErrNotOwner) {
		s.m.storeErrors[op].Inc()
	}
}

// claim claims c's key, with its guard unless it has none (or, noted,
// with its note, returning the key the note held before).
func (s *meteredStore) claim(ctx context.Context, c store.Claim, lease, noteTTL time.Duration) (res store.ClaimResult, prev string, err error) {
	start := time.Now()
	switch {
	case c.Guard == "":
		res, err = s.backend.Claim(ctx, c.Key, c.Owner, lease)
	case c.Noted:
		res, prev, err = s.guarded.ClaimNoted(ctx, c.Key, c.Guard, c.Owner, lease, noteTTL)
	default:
		res, err = s.guarded.ClaimGuarded(ctx, c.Key, c.Guard, c.Owner, lease)
	}
	s.observe(opClaim, start, err)
	return res, prev, err
}

// accept accepts an event into an inbox: the claim of inbox mode.
func (s *meteredStore) accept(ctx context.Context, ib *inbox.Inbox, c store.Claim, bodyHash *[32]byte, ev *event.Request) (store.ClaimResult, error) {
	start := time.Now()
	res, err := ib.Accept(ctx, c, bodyHash, ev)
	s.observe(opClaim, start, err)
	return res, err
}

// acceptBatch accepts the items of a request into an inbox, each an
// event of its own (in one round trip where the store allows it).
func (s *meteredStore) acceptBatch(ctx context.Context, ib *inbox.Inbox, items []inbox.BatchItem) ([]store.ClaimResult, error) {
	start := time.Now()
	res, err := ib.AcceptBatch(ctx, items)
	s.observe(opClaim, start, err)
	return res, err
}

// acceptAnswering accepts an event into an inbox whose first attempt is
// made at once (respond app within).
func (s *meteredStore) acceptAnswering(ctx context.Context, ib *inbox.Inbox, c store.Claim, bodyHash *[32]byte, ev *event.Request) (store.ClaimResult, *inbox.Answer, error) {
	start := time.Now()
	res, ans, err := ib.AcceptAnswering(ctx, c, bodyHash, ev)
	s.observe(opClaim, start, err)
	return res, ans, err
}

// complete completes c's key, with its guard.
func (s *meteredStore) complete(ctx context.Context, c store.Claim, record []byte, ttl time.Duration) error {
	start := time.Now()
	var err error
	if guard := c.CompletionGuard(); guard == "" {
		err = s.backend.Complete(ctx, c.Key, c.Owner, record, ttl)
	} else {
		err = s.guarded.CompleteGuarded(ctx, c.Key, guard, c.Owner, record, ttl)
	}
	s.observe(opComplete, start, err)
	return err
}

// release releases c's key, with its guard.
func (s *meteredStore) release(ctx context.Context, c store.Claim) error {
	start := time.Now()
	var err error
	if guard := c.CompletionGuard(); guard == "" {
		err = s.backend.Release(ctx, c.Key, c.Owner)
	} else {
		err = s.guarded.ReleaseGuarded(ctx, c.Key, guard, c.Owner)
	}
	s.observe(opRelease, start, err)
	return err
}

// renew renews c's key, with its guard.
func (s *meteredStore) renew(ctx context.Context, c store.Claim, lease time.Duration) error {
	start := time.Now()
	var err error
	if guard := c.CompletionGuard(); guard == "" {
		err = s.backend.Renew(ctx, c.Key, c.Owner, lease)
	} else {
		err = s.guarded.RenewGuarded(ctx, c.Key, guard, c.Owner, lease)
	}
	s.observe(opRenew, start, err)
	return err
}

// claimBatch claims a batch's keys for owner in one round trip (batch.go).
func (s *meteredStore) claimBatch(ctx context.Context, keys []string, owner string, lease time.Duration) (store.BatchResult, error) {
	start := time.Now()
	res, err := s.batch.ClaimBatch(ctx, keys, owner, lease, store.BatchUnlessInFlight)
	s.observe(opClaim, start, err)
	return res, err
}

// completeBatch completes a batch's keys with one record.
func (s *meteredStore) completeBatch(ctx context.Context, keys []string, owner string, record []byte, ttl time.Duration) error {
	start := time.Now()
	err := s.batch.CompleteBatch(ctx, keys, owner, [][]byte{record}, ttl)
	s.observe(opComplete, start, err)
	return err
}

// releaseBatch releases a batch's keys.
func (s *meteredStore) releaseBatch(ctx context.Context, keys []string, owner string) error {
	start := time.Now()
	err := s.batch.ReleaseBatch(ctx, keys, owner)
	s.observe(opRelease, start, err)
	return err
}

// renewBatch renews a batch's keys.
func (s *meteredStore) renewBatch(ctx context.Context, keys []string, owner string, lease time.Duration) error {
	start := time.Now()
	err := s.batch.RenewBatch(ctx, keys, owner, lease)
	s.observe(opRenew, start, err)
	return err
}

// recentRecord returns the store's local copy of the record of key or,
// unless guard is "", of its guard: what a store that keeps one answers a
// duplicate with while it cannot claim.
func (s *meteredStore) recentRecord(key, guard string) ([]byte, bool) {
	if s.recent == nil {
		return nil, false
	}
	if rec, ok := s.recent.Recent(key); ok {
		return rec, true
	}
	if guard != "" {
		return s.recent.Recent(guard)
	}
	return nil, false
}
