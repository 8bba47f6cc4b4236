// Package filestore is the file store, module
// `http.webhook_idempotency.stores.file`, the default store: records kept
// durably in one file on go.etcd.io/bbolt, so deduplication survives
// restarts (graceful or kill -9) and one Caddy needs no Redis for any
// feature: the inbox's queue and the archive live in the same file
// (docs/stores.md). In-flight claims belong to the running process and are
// not written: a crash ends them, as a lease expiry would.
//
// A completion is on disk before the handler answers (`sync always`, the
// default): concurrent completions share one write to the store's log, a
// file beside it, and one fdatasync (group commit), and reach the file
// itself in larger commits that no request waits for (log.go, commit.go);
// with `sync <interval>` every completion is written at once and synced
// every interval, so a process crash loses nothing and a machine crash at
// most the last interval. Expired records
// are swept through an expiry index, at a cost proportional to what
// expires. The file is opened once per process and shared across config
// reloads; a file another process holds is a provision error.
package filestore

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/cfparse"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

func init() {
	caddy.RegisterModule(Store{})
}

// Store keeps idempotency keys in a file on this machine: the default
// store, for one Caddy instance (use the redis store for several).
type Store struct {
	// The path of the store's file. Placeholders such as `{env.X}` are
	// resolved at provision time. Default:
	// `<Caddy's data directory>/webhook_idempotency/store.db` (Caddy's
	// data directory is where it keeps certificates:
	// `$XDG_DATA_HOME/caddy`, else `~/.local/share/caddy`).
	Path string `json:"path,omitempty"`

	// When a completion is on disk: `always` (before the answer is sent;
	// concurrent completions share one fsync) or an interval such as `1s`
	// (written at once, synced at most that much later: a machine crash
	// may lose that much, a process crash or a graceful stop nothing).
	// Default: `always`.
	Sync string `json:"sync,omitempty"`

	use *use // this configuration's use of the open file (use.go)
}

// CaddyModule returns the Caddy module information.
func (Store) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.webhook_idempotency.stores.file",
		New: func() caddy.Module { return new(Store) },
	}
}

// DefaultPath returns the default path of the store's file, in Caddy's
// data directory.
func DefaultPath() string {
	return filepath.Join(caddy.AppDataDir(), "webhook_idempotency", "store.db")
}

// Provision opens the store's file, or shares the one this process has
// open at that path.
func (s *Store) Provision(ctx caddy.Context) error {
	if err := s.Validate(); err != nil {
		return err
	}
	path := caddy.NewReplacer().ReplaceKnown(s.Path, "")
	if path == "" {
		path = DefaultPath()
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("file store: path %q: %v", path, err)
	}
	every, _ := parseSync(s.Sync)
	val, _, err := pool.LoadOrNew(abs, func() (caddy.Destructor, error) {
		return openDB(abs, ctx.Logger())
	})
	if err != nil {
		return err
	}
	s.use = newUse(val.(*db), every)
	return nil
}

// Validate checks the configuration.
func (s *Store) Validate() error {
	if _, err := parseSync(s.Sync); err != nil {
		return fmt.Errorf("file store: %v", err)
	}
	return nil
}

// Cleanup releases this configuration's use of the file once the last
// request that claimed in it is done; the file is closed when no
// configuration uses it any more (use.go).
func (s *Store) Cleanup() error {
	if s.use == nil {
		return nil
	}
	return s.use.cleanup()
}

// parseSync parses `always` or an interval ("" is always; zero is
// always).
func parseSync(v string) (time.Duration, error) {
	if v == "" || v == "always" {
		return 0, nil
	}
	d, err := cfparse.PositiveDuration("sync", v)
	if err != nil {
		return 0, fmt.Errorf("%v (want always or an interval such as 1s)", err)
	}
	return time.Duration(d), nil
}

// KeyPrefix implements store.Prefixer.
func (s *Store) KeyPrefix() string { return store.DefaultKeyPrefix }

// Path returns the path of the open file.
func (s *Store) FilePath() string { return s.use.file().path }

// Claim implements store.Store.
func (s *Store) Claim(ctx context.Context, key, owner string, lease time.Duration) (store.ClaimResult, error) {
	res, _, err := s.use.claim(key, "", owner, lease, 0, claimPlain)
	return res, err
}

// Complete implements store.Store.
func (s *Store) Complete(ctx context.Context, key, owner string, record []byte, ttl time.Duration) error {
	return s.use.file().complete(ctx, key, "", owner, record, ttl, nil)
}

// Release implements store.Store.
func (s *Store) Release(ctx context.Context, key, owner string) error {
	return s.use.file().release(key, "", owner)
}

// Renew implements store.Store.
func (s *Store) Renew(ctx context.Context, key, owner string, lease time.Duration) error {
	return s.use.file().renew(key, "", owner, lease)
}

// ClaimGuarded implements store.GuardedStore.
func (s *Store) ClaimGuarded(ctx context.Context, key, guard, owner string, lease time.Duration) (store.ClaimResult, error) {
	mode := claimGuarded
	if guard == "" {
		mode = claimPlain
	}
	res, _, err := s.use.claim(key, guard, owner, lease, 0, mode)
	return res, err
}

// ClaimNoted implements store.GuardedStore.
func (s *Store) ClaimNoted(ctx context.Context, key, note, owner string, lease, noteTTL time.Duration) (store.ClaimResult, string, error) {
	return s.use.claim(key, note, owner, lease, noteTTL, claimNoted)
}

// CompleteGuarded implements store.GuardedStore.
func (s *Store) CompleteGuarded(ctx context.Context, key, guard, owner string, record []byte, ttl time.Duration) error {
	return s.use.file().complete(ctx, key, guard, owner, record, ttl, nil)
}

// ReleaseGuarded implements store.GuardedStore.
func (s *Store) ReleaseGuarded(ctx context.Context, key, guard, owner string) error {
	return s.use.file().release(key, guard, owner)
}

// RenewGuarded implements store.GuardedStore.
func (s *Store) RenewGuarded(ctx context.Context, key, guard, owner string, lease time.Duration) error {
	return s.use.file().renew(key, guard, owner, lease)
}

// Inspect implements store.KeyAdmin.
func (s *Store) Inspect(ctx context.Context, key string) (store.KeyInfo, error) {
	return s.use.file().inspect(key)
}

// Forget implements store.KeyAdmin.
func (s *Store) Forget(ctx context.Context, key string) (store.KeyInfo, error) {
	return s.use.file().forget(ctx, key, nil)
}

// ForgetIf implements store.KeyAdmin.
func (s *Store) ForgetIf(ctx context.Context, key string, record []byte) (bool, error) {
	info, err := s.use.file().forget(ctx, key, record)
	return err == nil && info.State == store.KeyCompleted, err
}

// UnmarshalCaddyfile sets up the file store from Caddyfile tokens:
//
//	store file [<path>] {
//		sync always | <interval>
//	}
func (s *Store) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // "file"
	if args := d.RemainingArgs(); len(args) > 0 {
		p, err := cfparse.OneValue(d, "store file", args)
		if err != nil {
			return err
		}
		s.Path = p
	}
	return cfparse.Block(d, "file store", map[string]cfparse.Arity{"sync": cfparse.One}, func(name, v string, _ []string) error {
		if _, err := parseSync(v); err != nil {
			return err
		}
		s.Sync = v
		return nil
	})
}

// ensureDir makes the directory of path, as Caddy makes its data
// directory.
func ensureDir(path string) error {
	return os.MkdirAll(filepath.Dir(path), 0o700)
}

// Interface guards
var (
	_ store.Store           = (*Store)(nil)
	_ store.GuardedStore    = (*Store)(nil)
	_ store.KeyAdmin        = (*Store)(nil)
	_ store.Prefixer        = (*Store)(nil)
	_ store.HealthReporter  = (*Store)(nil)
	_ caddy.Provisioner     = (*Store)(nil)
	_ caddy.Validator       = (*Store)(nil)
	_ caddy.CleanerUpper    = (*Store)(nil)
	_ caddyfile.Unmarshaler = (*Store)(nil)
)
