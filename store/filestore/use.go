package filestore

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/usage"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// A configuration's use of the open file. Caddy cleans an old
// configuration up as soon as the new one runs, without waiting for the
// old one's requests: a request that claimed a key must still complete it
// in the file it claimed in, whatever path the new configuration uses
// (docs/stores.md, "One process"). So a use gives its reference on the
// file back only once no claim taken through it is in flight (completed,
// released, or past its lease), and a request of the old configuration
// that claims only after that (it was still reading its body) takes the
// file again, and gives it back once done.

// use is one configuration's use of the file.
type use struct {
	d atomic.Pointer[db]
	// mu is held shared by each claim, and exclusively by cleanup and by
	// the drain that gives the file back: no claim goes to a file given
	// back under it.
	mu       sync.RWMutex
	ref      usage.Ref // on d, while held
	retired  bool      // cleanup ran
	draining bool      // a drain runs
	every    time.Duration
}

// newUse is the use of d, which the caller took a reference on, with the
// configuration's sync setting.
func newUse(d *db, every time.Duration) *use {
	u := &use{ref: usage.NewRef(pool, d.path), every: every}
	u.d.Store(d)
	d.setSync(u, every)
	return u
}

// file is the open file: a claim taken through the use holds it open
// until the claim is done.
func (u *use) file() *db { return u.d.Load() }

// drainEvery is how often a cleaned-up use looks for claims still in
// flight.
var drainEvery = 50 * time.Millisecond

// cleanup gives the file back now, or once the last claim taken through u
// is done.
func (u *use) cleanup() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.retired = true
	d := u.file()
	if !u.ref.Held() {
		return nil
	}
	if d.claimsOf(u) {
		u.drain()
		return nil
	}
	d.dropSync(u)
	return u.ref.Release()
}

// drain gives the file back, in the background, once no claim taken
// through u is in flight. Called with u.mu held.
func (u *use) drain() {
	if u.draining {
		return
	}
	u.draining = true
	d := u.file()
	d.logger.Debug("file store: requests of a configuration that was replaced are still running; the file stays open for them",
		zap.String("path", d.path))
	go func() {
		tick := time.NewTicker(drainEvery)
		defer tick.Stop()
		for range tick.C {
			u.mu.Lock()
			if !d.claimsOf(u) {
				d.dropSync(u)
				_ = u.ref.Release()
				u.draining = false
				u.mu.Unlock()
				return
			}
			u.mu.Unlock()
		}
	}()
}

// claim claims in the file (see holding).
func (u *use) claim(key, second, owner string, lease, noteTTL time.Duration, mode int) (res store.ClaimResult, prev string, err error) {
	if err := u.holding(func(d *db) {
		res, prev, err = d.claim(key, second, owner, lease, noteTTL, mode, u)
	}); err != nil {
		return store.ClaimResult{}, "", err
	}
	return res, prev, err
}

// claimBatch claims a batch's keys in the file (see holding).
func (u *use) claimBatch(keys []string, owner string, lease time.Duration, mode store.BatchMode) (res store.BatchResult, err error) {
	if err := u.holding(func(d *db) {
		res, err = d.claimBatch(keys, owner, lease, mode, u)
	}); err != nil {
		return store.BatchResult{}, err
	}
	return res, err
}

// holding runs a claim, fn, on the file with the use's reference on it
// held. A claim that comes after cleanup gave the file back takes it
// again.
func (u *use) holding(fn func(d *db)) error {
	for {
		u.mu.RLock()
		if u.ref.Held() {
			defer u.mu.RUnlock()
			fn(u.file())
			return nil
		}
		u.mu.RUnlock()
		if err := u.reopen(); err != nil {
			return err
		}
	}
}

// reopen takes the file again, for a claim that comes after cleanup gave
// it back, and drains again.
func (u *use) reopen() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.ref.Held() {
		return nil
	}
	if !u.retired {
		return errors.New("file store: the file was given back before the configuration was cleaned up")
	}
	old := u.file()
	val, _, err := pool.LoadOrNew(old.path, func() (caddy.Destructor, error) {
		return openDB(old.path, old.logger)
	})
	if err != nil {
		return err
	}
	d := val.(*db)
	u.d.Store(d)
	u.ref = usage.NewRef(pool, d.path)
	d.setSync(u, u.every)
	u.drain()
	return nil
}
