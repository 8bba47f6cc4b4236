// Package keyset keeps RS256 JSON Web Key sets fetched from a URL or read
// from a file (docs/providers.md: Stone): fetched once, cached, refreshed in
// the background every hour and, when a token names an unknown kid, at most
// once a minute. The request path never waits on a fetch. Sets are shared
// across routes and configuration reloads, keyed by their source, so
// reloading an unchanged configuration fetches nothing.
package keyset

import (
	"context"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/go-jose/go-jose/v4"
	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// sets holds the key sets in use, by source.
var sets = caddy.NewUsagePool()

// Timing is every set's timing, read when a set is created: the module's
// own tests shorten it, nothing else changes it.
var Timing = struct {
	Refresh      time.Duration // refresh of a loaded set
	MinRefresh   time.Duration // least time between fetches on an unknown kid
	Retry        time.Duration // retry while no set is loaded
	FetchTimeout time.Duration // one fetch
}{time.Hour, time.Minute, 30 * time.Second, 5 * time.Second}

// RetryAfter is the Retry-After of a 503 while no key set is loaded: the
// next fetch is at most this far away.
func RetryAfter() string {
	return strconv.FormatInt(int64((Timing.Retry+time.Second-1)/time.Second), 10)
}

// maxKeySet bounds the key set document that is read.
const maxKeySet = 1 << 20

// Set is one source's key set.
type Set struct {
	poolKey string
	url     string // or
	file    string
	logger  *zap.Logger
	client  *http.Client

	// the timing, copied from Timing at creation
	refresh, minRefresh, retry, fetchTimeout time.Duration

	keys    atomic.Pointer[map[string]*rsa.PublicKey]
	fetches atomic.Int64 // fetch attempts, for tests and logs
	kick    chan struct{}
	cancel  context.CancelFunc
	done    chan struct{}
}

// Load returns the shared key set of a URL or file, fetching it the first
// time; Release gives it back. An unreachable URL is a warning (the set is
// retried in the background, and deliveries get 503 meanwhile); an
// unreadable or invalid file is an error.
func Load(logger *zap.Logger, url, file string) (*Set, error) {
	poolKey, source := "url:"+url, url
	if file != "" {
		poolKey, source = "file:"+file, file
	}
	val, _, err := sets.LoadOrNew(poolKey, func() (caddy.Destructor, error) {
		s := &Set{
			poolKey: poolKey,
			url:     url,
			file:    file,
			logger:  logger.With(zap.String("jwks", source)),
			client:  &http.Client{Timeout: Timing.FetchTimeout},
			refresh: Timing.Refresh, minRefresh: Timing.MinRefresh, retry: Timing.Retry, fetchTimeout: Timing.FetchTimeout,
			kick: make(chan struct{}, 1),
			done: make(chan struct{}),
		}
		if err := s.fetch(context.Background()); err != nil {
			if file != "" {
				return nil, fmt.Errorf("jwks_file: %v", err)
			}
			s.logger.Warn("key set unavailable: deliveries get 503 until it loads", zap.Error(err))
		}
		ctx, cancel := context.WithCancel(context.Background())
		s.cancel = cancel
		go s.run(ctx)
		return s, nil
	})
	if err != nil {
		return nil, err
	}
	return val.(*Set), nil
}

// Release gives the set back to the pool; the last user stops it.
func (s *Set) Release() {
	_, _ = sets.Delete(s.poolKey)
}

// Destruct stops the background refresh.
func (s *Set) Destruct() error {
	s.cancel()
	<-s.done
	return nil
}

// Loaded reports whether a set is loaded.
func (s *Set) Loaded() bool { return s.keys.Load() != nil }

// Key returns the key of a kid: signature.ErrUnavailable while no set is
// loaded, signature.ErrInvalid for a kid the set does not hold. An unknown
// kid asks the background loop for a refresh, without waiting for it.
func (s *Set) Key(kid string) (*rsa.PublicKey, error) {
	m := s.keys.Load()
	if m == nil {
		return nil, signature.ErrUnavailable
	}
	if k, ok := (*m)[kid]; ok {
		return k, nil
	}
	select {
	case s.kick <- struct{}{}:
	default:
	}
	return nil, signature.ErrInvalid
}

// run refreshes the set: hourly once loaded, every retry interval until
// then, and on a kick no sooner than the minimum interval after the last
// fetch.
func (s *Set) run(ctx context.Context) {
	defer close(s.done)
	last := time.Now()
	timer := time.NewTimer(s.nextRefresh())
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-s.kick:
			if wait := s.minRefresh - time.Since(last); wait > 0 {
				// fetch when the minute is up, unless the timer is sooner
				if !timer.Stop() {
					select {
					case <-timer.C:
					default:
					}
				}
				timer.Reset(min(wait, s.nextRefresh()))
				continue
			}
		}
		last = time.Now()
		loaded := s.Loaded()
		if err := s.fetch(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			s.logger.Warn("refreshing key set failed", zap.Bool("keeping_previous", loaded), zap.Error(err))
		} else if !loaded {
			s.logger.Info("key set loaded")
		}
		timer.Reset(s.nextRefresh())
	}
}

// nextRefresh is the time to the next scheduled fetch.
func (s *Set) nextRefresh() time.Duration {
	if s.Loaded() {
		return s.refresh
	}
	return s.retry
}

// fetch reads the set from its URL or file and, when it holds a usable
// key, replaces the cached one.
func (s *Set) fetch(ctx context.Context) error {
	s.fetches.Add(1)
	var data []byte
	var err error
	if s.file != "" {
		data, err = readKeySetFile(s.file)
	} else {
		data, err = s.get(ctx)
	}
	if err != nil {
		return err
	}
	keys, err := parseRS256(data)
	if err != nil {
		return err
	}
	s.keys.Store(&keys)
	return nil
}

// get fetches the set over HTTP.
func (s *Set) get(ctx context.Context) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, s.fetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxKeySet+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxKeySet {
		return nil, errors.New("key set larger than 1MiB")
	}
	return data, nil
}

// readKeySetFile reads a key set file of at most maxKeySet bytes.
func readKeySetFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxKeySet+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxKeySet {
		return nil, errors.New("key set larger than 1MiB")
	}
	return data, nil
}

// parseRS256 parses a JWK set (RFC 7517), `{"keys":[…]}`, keeping the
// RSA public keys of at least 2048 bits that have a kid, whose use is `sig`
// or unset and whose alg is RS256 or unset. Other keys are skipped; a set
// without a usable key is an error.
func parseRS256(data []byte) (map[string]*rsa.PublicKey, error) {
	var doc struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("not a JWK set: %v", err)
	}
	keys := make(map[string]*rsa.PublicKey, len(doc.Keys))
	for _, raw := range doc.Keys {
		var k jose.JSONWebKey
		if k.UnmarshalJSON(raw) != nil {
			continue
		}
		pub, ok := k.Key.(*rsa.PublicKey)
		if !ok || k.KeyID == "" || pub.N.BitLen() < 2048 ||
			(k.Use != "" && k.Use != "sig") ||
			(k.Algorithm != "" && k.Algorithm != string(jose.RS256)) {
			continue
		}
		keys[k.KeyID] = pub
	}
	if len(keys) == 0 {
		return nil, errors.New("the key set has no RS256 signing key (RSA, 2048 bits or more, with a kid)")
	}
	return keys, nil
}

// Interface guards
var _ caddy.Destructor = (*Set)(nil)
