// Package keyset shares JSON Web Key sets (signature.KeySet) across the
// routes and configuration reloads of a process: a set fetched from a URL
// or read from a file is loaded once per source and algorithms, refreshed
// in the background (hourly, and at most once a minute when a token names
// an unknown kid, never on the request path), and stopped when its last
// user lets it go (docs/providers.md: Stone, Pub/Sub), so reloading an
// unchanged configuration fetches nothing.
package keyset

import (
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// sets holds the key sets in use, by source and algorithms.
var sets = caddy.NewUsagePool()

// Timing is every set's timing, read when a set is created: the module's
// own tests shorten it, nothing else changes it.
var Timing = struct {
	Refresh      time.Duration // refresh of a loaded set
	MinRefresh   time.Duration // least time between fetches on an unknown kid
	Retry        time.Duration // retry while no set is loaded
	FetchTimeout time.Duration // one fetch
}{signature.DefaultKeySetRefresh, signature.DefaultKeySetMinRefresh, signature.DefaultKeySetRetry, signature.DefaultFetchTimeout}

// Client is the HTTP client of the fetches the schemes make: key sets,
// the certificates deliveries name, Amazon SNS's subscription
// confirmations. Nil, its value: each fetch has a client of its own, with
// the system's roots and the environment's proxy. The module's own tests
// point it at servers of their own; nothing else changes it.
var Client *http.Client

// RetryAfter is the Retry-After of a 503 while no key set is loaded: the
// next fetch is at most this far away.
func RetryAfter() string {
	return strconv.FormatInt(int64((Timing.Retry+time.Second-1)/time.Second), 10)
}

// Set is one shared key set.
type Set struct {
	*signature.KeySet
	poolKey string
}

// destructor closes a set when its last user lets it go.
type destructor struct{ s *signature.KeySet }

func (d destructor) Destruct() error { d.s.Close(); return nil }

// Load returns the shared key set of a URL or file for the JWS algorithms
// algs (RS256 when none), loading it the first time; Release gives it
// back. An unreachable URL is a warning (the set is retried in the
// background, and deliveries get 503 meanwhile); an unreadable or invalid
// file is an error.
func Load(logger *zap.Logger, url, file string, algs ...string) (*Set, error) {
	poolKey, source := "url:"+url, url
	if file != "" {
		poolKey, source = "file:"+file, file
	}
	poolKey += "|" + strings.Join(algs, ",")
	val, _, err := sets.LoadOrNew(poolKey, func() (caddy.Destructor, error) {
		log := logger.With(zap.String("jwks", source))
		var loaded atomic.Bool
		cfg := signature.KeySetConfig{
			Algorithms: algs,
			Timeout:    Timing.FetchTimeout, Refresh: Timing.Refresh, MinRefresh: Timing.MinRefresh, Retry: Timing.Retry,
			HTTPClient: Client,
			OnFetch: func(err error) {
				switch {
				case err != nil && !loaded.Load():
					log.Warn("key set unavailable: deliveries get 503 until it loads", zap.Error(err))
				case err != nil:
					log.Warn("refreshing key set failed; keeping the previous one", zap.Error(err))
				case loaded.CompareAndSwap(false, true):
					log.Info("key set loaded")
				}
			},
		}
		if file != "" {
			cfg.File = file
		} else {
			cfg.URL = url
		}
		ks, err := signature.NewKeySet(cfg)
		if err != nil {
			return nil, err
		}
		if ks.Loaded() {
			loaded.Store(true)
		}
		return destructor{ks}, nil
	})
	if err != nil {
		return nil, err
	}
	return &Set{KeySet: val.(destructor).s, poolKey: poolKey}, nil
}

// Release gives the set back to the pool; the last user stops it.
func (s *Set) Release() {
	_, _ = sets.Delete(s.poolKey)
}
