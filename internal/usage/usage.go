// Package usage holds a reference taken on a value shared through a
// caddy.UsagePool, given back exactly once.
package usage

import "github.com/caddyserver/caddy/v2"

// Ref is a reference taken on a value shared through a caddy.UsagePool;
// Release gives it back once, and the pool destructs the value when its
// last reference is given back. The zero Ref holds none.
type Ref struct {
	pool *caddy.UsagePool
	key  string
}

// NewRef returns the reference a LoadOrNew of key in pool took.
func NewRef(pool *caddy.UsagePool, key string) Ref { return Ref{pool: pool, key: key} }

// Held reports whether the reference is still to be given back.
func (r *Ref) Held() bool { return r.pool != nil }

// Key returns the pool key the reference is on.
func (r *Ref) Key() string { return r.key }

// Release gives the reference back, the first time it is called.
func (r *Ref) Release() error {
	if r.pool == nil {
		return nil
	}
	pool := r.pool
	r.pool = nil
	_, err := pool.Delete(r.key)
	return err
}
