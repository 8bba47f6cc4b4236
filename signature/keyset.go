package signature

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-jose/go-jose/v4"
)

// KeySetConfig configures NewKeySet: a JWK set (RFC 7517) read from a URL
// or a file.
type KeySetConfig struct {
	// URL is where the set is fetched (Google's
	// https://www.googleapis.com/oauth2/v3/certs, Stone's discovery
	// URL). One of URL and File is required.
	URL string

	// File is a file holding the set, for tests and air-gapped sites.
	File string

	// Algorithms are the JWS algorithms the set's keys are used with; a
	// key usable with none of them (by its type, and its `alg` when it
	// has one) is skipped. Default: RS256.
	Algorithms []string

	// HTTPClient fetches the set. Default: a client of its own, with the
	// proxy of the environment.
	HTTPClient *http.Client

	// Timeout bounds a fetch. Default: DefaultFetchTimeout.
	Timeout time.Duration

	// MaxSize bounds the set's document. Default: DefaultMaxKeySetSize.
	MaxSize int64

	// Refresh is how often a loaded set is fetched again. Default:
	// DefaultKeySetRefresh.
	Refresh time.Duration

	// MinRefresh is the least time between two fetches asked for by
	// tokens that name a key the set does not have. Default:
	// DefaultKeySetMinRefresh.
	MinRefresh time.Duration

	// Retry is how often the set is fetched while none is loaded; the
	// module's Retry-After while it answers 503. Default:
	// DefaultKeySetRetry.
	Retry time.Duration

	// OnFetch, when set, is told of the end of each background fetch,
	// with its error (nil when a set was loaded), and of a first fetch
	// from URL that failed, for the log. It must not block.
	OnFetch func(err error)
}

// Defaults of KeySetConfig.
const (
	DefaultMaxKeySetSize    = 1 << 20
	DefaultKeySetRefresh    = time.Hour
	DefaultKeySetMinRefresh = time.Minute
	DefaultKeySetRetry      = 30 * time.Second
)

// maxSetKeys bounds the keys kept of a set.
const maxSetKeys = 100

// minJWKRSABits is the smallest RSA key taken from a key set.
const minJWKRSABits = 2048

// KeySet is a JWK set fetched from a URL (or read from a file), cached,
// and refreshed in the background: every Refresh once loaded, every Retry
// until then, and when a token names a key the set does not have, at
// most once per MinRefresh. Its lookups are made on the request path and
// never wait on a fetch: until a set is loaded they are ErrUnavailable.
// It is safe for concurrent use; Close stops it.
type KeySet struct {
	cfg    KeySetConfig
	client *http.Client
	algs   []string

	keys    atomic.Pointer[[]setKey]
	fetches atomic.Int64
	kick    chan struct{}
	cancel  context.CancelFunc
	done    chan struct{}
}

// setKey is a usable key of a set.
type setKey struct {
	kid string
	alg string // the JWK's alg, "" when it has none
	key crypto.PublicKey
}

// NewKeySet returns the key set of cfg, loaded once before it returns:
// a file that cannot be read or holds no usable key is an error; a URL
// that cannot be fetched is not (OnFetch and the returned Loaded say so),
// the set is fetched again in the background meanwhile.
func NewKeySet(cfg KeySetConfig) (*KeySet, error) {
	switch {
	case (cfg.URL == "") == (cfg.File == ""):
		return nil, errors.New("jwks: give jwks_url or jwks_file")
	case cfg.Timeout < 0, cfg.MaxSize < 0, cfg.Refresh < 0, cfg.MinRefresh < 0, cfg.Retry < 0:
		return nil, errors.New("jwks: durations and sizes must not be negative")
	}
	if cfg.URL != "" && !strings.HasPrefix(cfg.URL, "https://") && !strings.HasPrefix(cfg.URL, "http://") {
		return nil, fmt.Errorf("jwks_url: %q is not an http(s) URL", cfg.URL)
	}
	cfg.Timeout = orDefault(cfg.Timeout, DefaultFetchTimeout)
	cfg.Refresh = orDefault(cfg.Refresh, DefaultKeySetRefresh)
	cfg.MinRefresh = orDefault(cfg.MinRefresh, DefaultKeySetMinRefresh)
	cfg.Retry = orDefault(cfg.Retry, DefaultKeySetRetry)
	if cfg.MaxSize == 0 {
		cfg.MaxSize = DefaultMaxKeySetSize
	}
	algs := cfg.Algorithms
	if len(algs) == 0 {
		algs = []string{"RS256"}
	}
	for _, a := range algs {
		if _, ok := jwsAlgorithms[a]; !ok || jwsAlgorithms[a] == familyHMAC {
			return nil, fmt.Errorf("jwks: algorithm %q is not a public-key JWS algorithm", a)
		}
	}
	s := &KeySet{cfg: cfg, algs: algs, kick: make(chan struct{}, 1), done: make(chan struct{})}
	s.client = cfg.HTTPClient
	if s.client == nil {
		s.client = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	if err := s.fetch(ctx); err != nil {
		if cfg.File != "" {
			cancel()
			return nil, fmt.Errorf("jwks_file: %v", err)
		}
		if cfg.OnFetch != nil {
			cfg.OnFetch(err)
		}
	}
	go s.run(ctx)
	return s, nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// Close stops the background refresh and waits for it to end.
func (s *KeySet) Close() {
	s.cancel()
	<-s.done
}

// Loaded reports whether a set is loaded.
func (s *KeySet) Loaded() bool { return s.keys.Load() != nil }

// Fetches is the number of fetches made so far, for tests and logs.
func (s *KeySet) Fetches() int64 { return s.fetches.Load() }

// Key returns the public key named kid. It is ErrUnavailable while no set
// is loaded, and ErrInvalid when the set has no such key (a refresh is
// then asked for, without waiting for it).
func (s *KeySet) Key(kid string) (crypto.PublicKey, error) {
	keys := s.keys.Load()
	if keys == nil {
		return nil, ErrUnavailable
	}
	for i := range *keys {
		if k := &(*keys)[i]; k.kid == kid && kid != "" {
			return k.key, nil
		}
	}
	s.askRefresh()
	return nil, ErrInvalid
}

// StoneKey is Key for an RSA key; with it a KeySet gives Stone's keys
// (StoneKeys).
func (s *KeySet) StoneKey(kid string) (*rsa.PublicKey, error) {
	k, err := s.Key(kid)
	if err != nil {
		return nil, err
	}
	rk, ok := k.(*rsa.PublicKey)
	if !ok {
		return nil, ErrInvalid
	}
	return rk, nil
}

// candidates returns the keys a token signed with alg under kid may be
// checked with: the key named kid (every key, when kid is empty) whose
// type fits alg and whose alg, if any, is alg.
func (s *KeySet) candidates(kid, alg string) ([]crypto.PublicKey, error) {
	keys := s.keys.Load()
	if keys == nil {
		return nil, ErrUnavailable
	}
	var out []crypto.PublicKey
	known := false
	for i := range *keys {
		k := &(*keys)[i]
		if kid != "" && k.kid != kid {
			continue
		}
		known = true
		if (k.alg == "" || k.alg == alg) && keyFitsJWS(alg, k.key) {
			out = append(out, k.key)
		}
	}
	if !known && kid != "" {
		s.askRefresh()
	}
	if len(out) == 0 {
		return nil, ErrInvalid
	}
	return out, nil
}

// askRefresh asks the background loop for a fetch, without waiting.
func (s *KeySet) askRefresh() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// run refreshes the set: every Refresh once loaded, every Retry until
// then, and on a kick no sooner than MinRefresh after the last fetch.
func (s *KeySet) run(ctx context.Context) {
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
			if wait := s.cfg.MinRefresh - time.Since(last); wait > 0 {
				// fetch when the interval is up, unless the timer is sooner
				timer.Reset(min(wait, s.nextRefresh()-time.Since(last)))
				continue
			}
		}
		last = time.Now()
		err := s.fetch(ctx)
		if ctx.Err() != nil {
			return
		}
		if s.cfg.OnFetch != nil {
			s.cfg.OnFetch(err)
		}
		timer.Reset(s.nextRefresh())
	}
}

// nextRefresh is the time from a fetch to the next scheduled one.
func (s *KeySet) nextRefresh() time.Duration {
	if s.Loaded() {
		return s.cfg.Refresh
	}
	return s.cfg.Retry
}

// fetch reads the set and, when it holds a usable key, replaces the one
// in use; a failed fetch keeps it.
func (s *KeySet) fetch(ctx context.Context) error {
	s.fetches.Add(1)
	var data []byte
	var err error
	if s.cfg.File != "" {
		data, err = readBounded(s.cfg.File, s.cfg.MaxSize)
	} else {
		fctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
		data, err = fetchBounded(fctx, s.client, s.cfg.URL, s.cfg.MaxSize, "application/json")
		cancel()
	}
	if err != nil {
		return err
	}
	keys, err := parseKeySet(data, s.algs)
	if err != nil {
		return err
	}
	s.keys.Store(&keys)
	return nil
}

// readBounded reads a file of at most max bytes.
func readBounded(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("larger than %d bytes", max)
	}
	return data, nil
}

// parseKeySet parses a JWK set, `{"keys":[…]}`, keeping the public keys
// whose use is `sig` or unset and that are usable with one of algs (RSA
// keys of at least 2048 bits). Symmetric keys are never taken. A set
// without a usable key is an error.
func parseKeySet(data []byte, algs []string) ([]setKey, error) {
	var doc struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("not a JWK set: %v", err)
	}
	var keys []setKey
	for _, raw := range doc.Keys {
		if len(keys) == maxSetKeys {
			break
		}
		var k jose.JSONWebKey
		if k.UnmarshalJSON(raw) != nil || (k.Use != "" && k.Use != "sig") {
			continue
		}
		pub := publicOf(k.Key)
		if pub == nil {
			continue
		}
		if rk, ok := pub.(*rsa.PublicKey); ok && rk.N.BitLen() < minJWKRSABits {
			continue
		}
		usable := false
		for _, a := range algs {
			usable = usable || ((k.Algorithm == "" || k.Algorithm == a) && keyFitsJWS(a, pub))
		}
		if usable {
			keys = append(keys, setKey{kid: k.KeyID, alg: k.Algorithm, key: pub})
		}
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("the key set has no key for %s", strings.Join(algs, ", "))
	}
	return keys, nil
}

// publicOf is the public key of a parsed JWK, nil for a symmetric one.
func publicOf(k any) crypto.PublicKey {
	switch k := k.(type) {
	case *rsa.PublicKey, *ecdsa.PublicKey, ed25519.PublicKey:
		return k
	case *rsa.PrivateKey:
		return &k.PublicKey
	case *ecdsa.PrivateKey:
		return &k.PublicKey
	case ed25519.PrivateKey:
		return k.Public()
	}
	return nil
}

// jwsAlgorithms are the JWS algorithms (RFC 7518, RFC 8037) the JWT
// scheme takes, by the kind of key each needs.
var jwsAlgorithms = map[string]keyFamily{
	"HS256": familyHMAC, "HS384": familyHMAC, "HS512": familyHMAC,
	"RS256": familyRSA, "RS384": familyRSA, "RS512": familyRSA,
	"PS256": familyRSA, "PS384": familyRSA, "PS512": familyRSA,
	"ES256": familyECDSA, "ES384": familyECDSA, "ES512": familyECDSA,
	"EdDSA": familyEd25519,
}

// keyFitsJWS reports whether a public key is of the type and size a JWS
// algorithm takes.
func keyFitsJWS(alg string, key crypto.PublicKey) bool {
	switch k := key.(type) {
	case *rsa.PublicKey:
		f, ok := jwsAlgorithms[alg]
		return ok && f == familyRSA
	case *ecdsa.PublicKey:
		switch alg {
		case "ES256":
			return k.Curve == elliptic.P256()
		case "ES384":
			return k.Curve == elliptic.P384()
		case "ES512":
			return k.Curve == elliptic.P521()
		}
	case ed25519.PublicKey:
		return alg == "EdDSA"
	}
	return false
}

var _ StoneKeys = (*KeySet)(nil)
