package signature

import (
	"context"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// CertURLConfig is where a delivery names the certificate of the key that
// signed it (Amazon SNS's `SigningCertURL`, PayPal's `PAYPAL-CERT-URL`),
// and what the verifier may fetch. A URL is fetched only when it is https,
// on a host that matches Hosts (and a path that matches Paths, when set):
// a URL outside is ErrInvalid before any network access, so no request
// can make the verifier fetch an address of its choosing. The certificate
// must chain to Roots (or, with TrustOrigin, have come from an allowed
// host over https) and be within its validity period; it is cached by
// URL until Cache has passed or the certificate expires, fetched once at a
// time per URL. A fetch that fails (the network, a status other than 200)
// is ErrUnavailable, the module's 503 with Retry-After, and is not tried
// again for CertRetry; a document that is no acceptable certificate is
// ErrInvalid.
type CertURLConfig struct {
	// From is `header:<Name>` or `json:<path>`: the delivery's value that
	// holds the URL. Empty for no certificate URL.
	From string

	// Hosts are regular expressions (RE2 syntax), anchored at both ends,
	// one of which the URL's host name (without port) must match.
	// Required. Amazon SNS: `sns\.[a-zA-Z0-9-]{3,}\.amazonaws\.com(\.cn)?`.
	Hosts []string

	// Paths, when set, are anchored regular expressions one of which the
	// URL's path (as sent) must match; AWS's SNS validators require
	// `.pem`.
	Paths []string

	// Subjects, when set, are anchored regular expressions one of which a
	// DNS name of the certificate (its common name when it has none) must
	// match, as PayPal's SDK checks `messageverificationcerts…paypal.com`.
	Subjects []string

	// Cache is how long a certificate is kept after it was fetched, at
	// most until it expires. Default: DefaultCertCache.
	Cache time.Duration

	// Timeout bounds a fetch, connection and body included. Default:
	// DefaultFetchTimeout.
	Timeout time.Duration

	// MaxSize bounds the document fetched; a larger one is ErrInvalid.
	// Default: DefaultMaxCertSize.
	MaxSize int64

	// Roots are the certificate authorities the certificate must chain
	// to. Default (nil): the system's roots.
	Roots *x509.CertPool

	// Intermediates are certificates that may complete a chain, for a
	// provider whose document holds its certificate alone; those the
	// document holds after the first are used as well.
	Intermediates *x509.CertPool

	// TrustOrigin trusts a certificate for where it came from instead of
	// its chain: it was fetched over https, the server's own certificate
	// verified by the client, from a host Hosts allows (and a path Paths
	// allows). Its validity period, Subjects and key are still checked;
	// Roots and Intermediates are not used. Amazon SNS serves its signing
	// certificate alone, without the intermediate that issued it, and
	// AWS's validators trust it so (AWS SDK for Java v2,
	// SnsMessageManager's CertificateRetriever: the host, the certificate's
	// name and validity; aws-php-sns-message-validator: the host).
	TrustOrigin bool

	// HTTPClient fetches the certificates; its redirect policy is
	// replaced by one that follows at most three redirects, on the same
	// host over https. Default: a client of its own, with the proxy of
	// the environment.
	HTTPClient *http.Client

	// OnError, when set, is told of each fetch that fails, for the log.
	// It must not block.
	OnError func(url string, err error)
}

// Defaults of CertURLConfig and KeySetConfig.
const (
	// DefaultCertCache is how long a fetched certificate is kept.
	DefaultCertCache = 24 * time.Hour

	// DefaultFetchTimeout bounds a fetch of a certificate or a key set.
	DefaultFetchTimeout = 5 * time.Second

	// DefaultMaxCertSize bounds a certificate document.
	DefaultMaxCertSize = 64 << 10
)

// CertRetry is how long a certificate URL whose fetch failed answers
// ErrUnavailable without a new fetch: a Retry-After for the sender.
const CertRetry = 10 * time.Second

// The cache's bounds.
const (
	maxCertEntries = 256 // URLs kept
	maxCertFetches = 4   // fetches at once; more are ErrUnavailable
	maxRedirects   = 3
)

// certFetcher fetches, checks and caches the certificates of one
// template.
type certFetcher struct {
	family                 keyFamily
	hosts, paths, subjects []*regexp.Regexp
	cache, timeout         time.Duration
	maxSize                int64
	roots, intermediates   *x509.CertPool
	trustOrigin            bool
	client                 *http.Client
	onError                func(string, error)

	mu       sync.Mutex
	entries  map[string]*certEntry
	inFlight int
	waiting  atomic.Int32 // requests waiting on a fetch, for tests
}

// certEntry is a URL's certificate: being fetched until done is closed,
// then its key or why there is none, until expires.
type certEntry struct {
	done    chan struct{}
	key     crypto.PublicKey
	err     error // ErrInvalid or ErrUnavailable
	expires time.Time
}

// finished reports whether the fetch is over.
func (e *certEntry) finished() bool {
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}

func newCertFetcher(cfg CertURLConfig, family keyFamily) (*certFetcher, error) {
	f := &certFetcher{
		family: family, cache: cfg.Cache, timeout: cfg.Timeout, maxSize: cfg.MaxSize,
		roots: cfg.Roots, intermediates: cfg.Intermediates, trustOrigin: cfg.TrustOrigin, onError: cfg.OnError,
		entries: make(map[string]*certEntry),
	}
	if len(cfg.Hosts) == 0 {
		return nil, errors.New("hosts: required: the hosts certificates may be fetched from")
	}
	var err error
	if f.hosts, err = anchored("hosts", cfg.Hosts); err != nil {
		return nil, err
	}
	if f.paths, err = anchored("paths", cfg.Paths); err != nil {
		return nil, err
	}
	if f.subjects, err = anchored("subjects", cfg.Subjects); err != nil {
		return nil, err
	}
	switch {
	case f.cache < 0, f.timeout < 0, f.maxSize < 0:
		return nil, errors.New("cache, timeout and max_size must not be negative")
	case f.trustOrigin && (f.roots != nil || f.intermediates != nil):
		return nil, errors.New("trust origin: a certificate trusted for where it came from is not checked against roots or intermediates")
	}
	if f.cache == 0 {
		f.cache = DefaultCertCache
	}
	if f.timeout == 0 {
		f.timeout = DefaultFetchTimeout
	}
	if f.maxSize == 0 {
		f.maxSize = DefaultMaxCertSize
	}
	f.client = boundedClient(cfg.HTTPClient)
	return f, nil
}

// anchored compiles patterns anchored at both ends.
func anchored(option string, patterns []string) ([]*regexp.Regexp, error) {
	res := make([]*regexp.Regexp, len(patterns))
	for i, p := range patterns {
		re, err := regexp.Compile(`^(?:` + p + `)$`)
		if err != nil {
			return nil, fmt.Errorf("%s: %q: %v", option, p, err)
		}
		res[i] = re
	}
	return res, nil
}

// boundedClient is c (or a client of its own) with a redirect policy that
// stays on the host, over https.
func boundedClient(c *http.Client) *http.Client {
	var client http.Client
	if c != nil {
		client = *c
	} else {
		client.Transport = http.DefaultTransport.(*http.Transport).Clone()
	}
	client.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if len(via) >= maxRedirects {
			return errors.New("too many redirects")
		}
		if req.URL.Scheme != "https" || req.URL.Host != via[0].URL.Host {
			return fmt.Errorf("redirect to %s://%s refused: another host", req.URL.Scheme, req.URL.Host)
		}
		return nil
	}
	return &client
}

// matchAny reports whether s matches one of res.
func matchAny(res []*regexp.Regexp, s string) bool {
	for _, re := range res {
		if re.MatchString(s) {
			return true
		}
	}
	return false
}

// allowed reports whether a URL may be fetched.
func (f *certFetcher) allowed(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "https" || u.Opaque != "" || u.User != nil || u.Host == "" {
		return false
	}
	if !matchAny(f.hosts, u.Hostname()) {
		return false
	}
	return len(f.paths) == 0 || matchAny(f.paths, u.EscapedPath())
}

// key returns the key of the certificate at raw: cached, or fetched now
// (one fetch per URL at a time; the caller waits until it ends or ctx is
// done).
func (f *certFetcher) key(ctx context.Context, raw string) (crypto.PublicKey, error) {
	f.mu.Lock()
	e := f.entries[raw]
	if e != nil && e.finished() && !now().Before(e.expires) {
		delete(f.entries, raw)
		e = nil
	}
	f.mu.Unlock()
	if e == nil {
		// checked before any network access, and before the URL takes a
		// place in the cache
		if !f.allowed(raw) {
			return nil, ErrInvalid
		}
		var err error
		if e, err = f.start(raw); err != nil {
			return nil, err
		}
	}
	if !e.finished() {
		f.waiting.Add(1)
		defer f.waiting.Add(-1)
	}
	select {
	case <-e.done:
		return e.key, e.err
	case <-ctx.Done():
		return nil, ErrUnavailable
	}
}

// start returns the entry of raw, starting its fetch unless another
// request did.
func (f *certFetcher) start(raw string) (*certEntry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e := f.entries[raw]; e != nil {
		return e, nil
	}
	if f.inFlight >= maxCertFetches {
		return nil, ErrUnavailable
	}
	f.evict()
	e := &certEntry{done: make(chan struct{})}
	u := strings.Clone(raw) // raw may be a view of a request's body
	f.entries[u] = e
	f.inFlight++
	go f.fetch(u, e)
	return e, nil
}

// evict makes room for an entry: expired ones go, then the one that
// expires first.
func (f *certFetcher) evict() {
	if len(f.entries) < maxCertEntries {
		return
	}
	t := now()
	var soonest string
	for u, e := range f.entries {
		if !e.finished() {
			continue
		}
		if !t.Before(e.expires) {
			delete(f.entries, u)
			continue
		}
		if soonest == "" || e.expires.Before(f.entries[soonest].expires) {
			soonest = u
		}
	}
	if len(f.entries) >= maxCertEntries && soonest != "" {
		delete(f.entries, soonest)
	}
}

// fetch fills the entry of u and closes its done channel.
func (f *certFetcher) fetch(u string, e *certEntry) {
	key, expires, err := f.get(u)
	if err != nil {
		e.err, e.expires = ErrUnavailable, now().Add(CertRetry)
		var ce *certError
		if errors.As(err, &ce) {
			e.err = ErrInvalid
		}
		if f.onError != nil {
			f.onError(u, err)
		}
	} else {
		e.key, e.expires = key, expires
	}
	f.mu.Lock()
	f.inFlight--
	f.mu.Unlock()
	close(e.done)
}

// certError is a fetched document that is no acceptable certificate: the
// delivery is refused, not asked to come again.
type certError struct{ msg string }

func (e *certError) Error() string { return e.msg }

func badCert(format string, args ...any) error {
	return &certError{msg: fmt.Sprintf(format, args...)}
}

// get fetches and checks the certificate at u, and returns its key and
// how long it may be kept.
func (f *certFetcher) get(u string) (crypto.PublicKey, time.Time, error) {
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	data, err := fetchBounded(ctx, f.client, u, f.maxSize, "")
	if err != nil {
		return nil, time.Time{}, err
	}
	certs, err := parseCertificates(data)
	if err != nil {
		return nil, time.Time{}, err
	}
	leaf := certs[0]
	t := now()
	chain := []*x509.Certificate{leaf}
	if f.trustOrigin {
		// fetched over https from an allowed host: the leaf's own dates
		if t.Before(leaf.NotBefore) || t.After(leaf.NotAfter) {
			return nil, time.Time{}, badCert("the certificate is not valid at %s (valid %s to %s)", t.UTC().Format(time.RFC3339), leaf.NotBefore.UTC().Format(time.RFC3339), leaf.NotAfter.UTC().Format(time.RFC3339))
		}
	} else {
		inter := x509.NewCertPool()
		if f.intermediates != nil {
			inter = f.intermediates.Clone()
		}
		for _, c := range certs[1:] {
			inter.AddCert(c)
		}
		chains, err := leaf.Verify(x509.VerifyOptions{
			Roots: f.roots, Intermediates: inter, CurrentTime: t,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
		})
		if err != nil {
			return nil, time.Time{}, badCert("the certificate does not verify: %v", err)
		}
		chain = chains[0]
	}
	if len(f.subjects) > 0 && !subjectMatches(f.subjects, leaf) {
		return nil, time.Time{}, badCert("the certificate's names %q match no subject", leaf.DNSNames)
	}
	if err := checkPublicKey(f.family, leaf.PublicKey); err != nil {
		return nil, time.Time{}, badCert("the certificate's key: %v", err)
	}
	expires := t.Add(f.cache)
	for _, c := range chain {
		if c.NotAfter.Before(expires) {
			expires = c.NotAfter
		}
	}
	return leaf.PublicKey, expires, nil
}

// subjectMatches reports whether a DNS name of the certificate, or its
// common name when it has none, matches one of res.
func subjectMatches(res []*regexp.Regexp, c *x509.Certificate) bool {
	if len(c.DNSNames) == 0 {
		return matchAny(res, c.Subject.CommonName)
	}
	for _, n := range c.DNSNames {
		if matchAny(res, n) {
			return true
		}
	}
	return false
}

// parseCertificates reads the certificates of a PEM document (or one DER
// certificate), the first being the signer's.
func parseCertificates(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	rest := data
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, badCert("a certificate of the document does not parse: %v", err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		c, err := x509.ParseCertificate(data)
		if err != nil {
			return nil, badCert("the document holds no certificate")
		}
		certs = append(certs, c)
	}
	return certs, nil
}

// fetchBounded GETs u within ctx and returns its body, which must be at
// most max bytes (larger is a certError); any status but 200 is an error.
func fetchBounded(ctx context.Context, client *http.Client, u string, max int64, accept string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	if err == nil {
		// a fetch the deadline cut short may read as a short document:
		// it is unavailable, not a document that is no certificate
		err = ctx.Err()
	}
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, badCert("the document is larger than %d bytes", max)
	}
	return data, nil
}
