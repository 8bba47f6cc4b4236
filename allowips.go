package webhookidempotency

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/cfparse"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/ipset"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/metrics"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/usage"
	"github.com/webhookguard/caddy-webhook-idempotency/providers"
)

// AllowIPsConfig is the `allow_ips` option (docs/caddyfile.md: Addresses
// and client certificates): a request whose client address is in none of
// its lists is answered 403 before its body is read, and nothing is
// stored. The client address is Caddy's, so `trusted_proxies` is
// respected.
type AllowIPsConfig struct {
	// Providers whose published address lists are allowed: the presets
	// with an address list (docs/providers.md: Published addresses says
	// which, and where each list is; `github`'s is the `hooks` ranges of
	// GitHub's meta API). Each list is fetched at
	// provision, refreshed in the background and kept on disk in Caddy's
	// data directory, so a restart without network has the last one.
	Providers []string `json:"providers,omitempty"`

	// Addresses and CIDR ranges allowed as written: `192.0.2.7`,
	// `192.0.2.0/24`, `2001:db8::/32`.
	Ranges []string `json:"ranges,omitempty"`

	// URLs of address lists, fetched and kept like a provider's: one
	// address or range a line (`#` comments), a JSON array of them, or a
	// JSON object whose arrays of strings are all addresses.
	URLs []string `json:"urls,omitempty"`

	// Files of address lists in the same forms, read at provision and
	// again at every refresh. A file that does not parse at provision is
	// an error.
	Files []string `json:"files,omitempty"`

	// How often lists are fetched, and files read, again. A list that
	// fails to load (unreachable, malformed) is retried within a minute,
	// and the last good one is kept meanwhile. Default: 1h.
	Refresh caddy.Duration `json:"refresh,omitempty"`
}

// Timing of the address lists; tests shorten it.
var (
	allowListRefresh      = time.Hour
	allowListRetry        = time.Minute      // after a failed refresh, at most
	allowListMinRefresh   = time.Second      // the least `refresh` accepted
	allowListFetchTimeout = 10 * time.Second // one fetch
)

// maxAllowList bounds a fetched list or file (GitHub's meta document, which
// holds every range GitHub publishes, is a few hundred KB).
const maxAllowList = 8 << 20

// listURL is the URL a provider's list (package providers: each preset's
// Addresses) is fetched from; tests point it at a local server.
var listURL = func(provider string, l providers.AddressList) string { return l.URL }

// listProviders names the providers that publish a list, sorted.
func listProviders() []string {
	var names []string
	for _, p := range providers.All() {
		if p.Addresses != nil {
			names = append(names, p.Name)
		}
	}
	return names
}

// checkListProvider is the rule of a provider named in allow_ips.
func checkListProvider(name string) error {
	p, ok := providers.Lookup(name)
	if !ok {
		return fmt.Errorf("'%s' is neither a provider that publishes its addresses (%s) nor an address or CIDR range", name, strings.Join(listProviders(), ", "))
	}
	if p.Addresses == nil {
		return fmt.Errorf("%s publishes no address list that can be fetched (docs/providers.md: Published addresses): write the addresses it documents as ranges", name)
	}
	return nil
}

// parseAllowIPs parses `allow_ips <entry>... [{ refresh <duration> }]`,
// an entry being a provider, an address or CIDR range, `url <url>` or
// `file <path>`. Several lines add up.
func (h *Handler) parseAllowIPs(d *caddyfile.Dispenser) error {
	if h.AllowIPs == nil {
		h.AllowIPs = new(AllowIPsConfig)
	}
	a := h.AllowIPs
	args := d.RemainingArgs()
	if len(args) == 0 {
		return d.Errf("'allow_ips' needs a provider, an address or range, 'url <url>' or 'file <path>'")
	}
	for i := 0; i < len(args); i++ {
		switch v := args[i]; v {
		case "url", "file":
			if i+1 >= len(args) {
				return d.Errf("allow_ips '%s' needs a value", v)
			}
			i++
			if v == "url" {
				if err := cfparse.CheckHTTPURL("allow_ips url", args[i]); err != nil {
					return d.Errf("%v", err)
				}
				a.URLs = append(a.URLs, args[i])
			} else {
				a.Files = append(a.Files, args[i])
			}
		default:
			if strings.ContainsAny(v, ":./") {
				if _, err := ipset.ParsePrefix(v); err != nil {
					return d.Errf("allow_ips: %v", err)
				}
				a.Ranges = append(a.Ranges, v)
				continue
			}
			if err := checkListProvider(v); err != nil {
				return d.Errf("allow_ips: %v", err)
			}
			a.Providers = append(a.Providers, v)
		}
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		switch d.Val() {
		case "refresh":
			v, err := cfparse.NextValue(d, "allow_ips 'refresh'")
			if err != nil {
				return err
			}
			dur, err := parseAllowRefresh(v)
			if err != nil {
				return d.Errf("%v", err)
			}
			a.Refresh = dur
		default:
			return d.Errf("unrecognized allow_ips subdirective '%s'", d.Val())
		}
	}
	return nil
}

// parseAllowRefresh parses allow_ips' refresh, at least a second.
func parseAllowRefresh(v string) (caddy.Duration, error) {
	dur, err := cfparse.PositiveDuration("allow_ips refresh", v)
	if err == nil {
		err = checkAllowRefresh(dur)
	}
	return dur, err
}

func checkAllowRefresh(d caddy.Duration) error {
	if time.Duration(d) < allowListMinRefresh {
		return fmt.Errorf("allow_ips refresh %s is shorter than %s", time.Duration(d), allowListMinRefresh)
	}
	return nil
}

// allowIPs is a route's allow_ips at run time: the ranges written in the
// configuration, and the lists it shares with other routes.
type allowIPs struct {
	static *ipset.Set
	lists  []*allowList
	refs   []usage.Ref
}

// allowVerdict is what the lists say of a client address.
type allowVerdict uint8

const (
	addrAllowed     allowVerdict = iota
	addrRefused                  // in no list
	addrUnavailable              // in no loaded list, and a list never loaded
)

// check looks an address up: the written ranges first, then each list as
// it was last loaded. It allocates nothing.
func (a *allowIPs) check(addr netip.Addr) allowVerdict {
	if a.static.Contains(addr) {
		return addrAllowed
	}
	verdict := addrRefused
	for _, l := range a.lists {
		set := l.set.Load()
		if set == nil {
			verdict = addrUnavailable
			continue
		}
		if set.Contains(addr) {
			return addrAllowed
		}
	}
	return verdict
}

// newAllowIPs builds a route's allow_ips: placeholders resolved, the
// ranges parsed, every list loaded (from the shared pool, fetching it the
// first time). Errors name the entry.
func newAllowIPs(cfg *AllowIPsConfig, logger *zap.Logger) (*allowIPs, error) {
	a := &allowIPs{}
	if len(cfg.Providers)+len(cfg.Ranges)+len(cfg.URLs)+len(cfg.Files) == 0 {
		return nil, errors.New("allow_ips lists nothing: give a provider, an address or range, a url or a file")
	}
	refresh := allowListRefresh
	if cfg.Refresh != 0 {
		if err := checkAllowRefresh(cfg.Refresh); err != nil {
			return nil, err
		}
		refresh = time.Duration(cfg.Refresh)
	}
	repl := caddy.NewReplacer()
	ranges := make([]netip.Prefix, 0, len(cfg.Ranges))
	for _, r := range cfg.Ranges {
		p, err := ipset.ParsePrefix(strings.TrimSpace(r))
		if err != nil {
			return nil, fmt.Errorf("allow_ips: %v", err)
		}
		ranges = append(ranges, p)
	}
	a.static = ipset.New(ranges)
	var sources []allowListSource
	for _, name := range cfg.Providers {
		if err := checkListProvider(name); err != nil {
			return nil, fmt.Errorf("allow_ips: %v", err)
		}
		p, _ := providers.Lookup(name)
		sources = append(sources, allowListSource{name: name, kind: "provider", url: listURL(name, *p.Addresses), field: p.Addresses.Field})
	}
	for _, u := range cfg.URLs {
		v, err := repl.ReplaceOrErr(u, true, true)
		if err != nil {
			return nil, fmt.Errorf("allow_ips url: resolving %q: %v", u, err)
		}
		if err := cfparse.CheckHTTPURL("allow_ips url", v); err != nil {
			return nil, err
		}
		sources = append(sources, allowListSource{name: displayURL(v), kind: "url", url: v})
	}
	for _, f := range cfg.Files {
		v, err := repl.ReplaceOrErr(f, true, true)
		if err != nil {
			return nil, fmt.Errorf("allow_ips file: resolving %q: %v", f, err)
		}
		if v == "" {
			return nil, errors.New("allow_ips file: empty path")
		}
		sources = append(sources, allowListSource{name: v, kind: "file", file: v})
	}
	for _, src := range sources {
		l, ref, err := loadAllowList(logger, src, refresh)
		if err != nil {
			a.release()
			return nil, err
		}
		a.lists = append(a.lists, l)
		a.refs = append(a.refs, ref)
	}
	return a, nil
}

// release gives the route's lists back to the pool.
func (a *allowIPs) release() {
	for i := range a.refs {
		_ = a.refs[i].Release()
	}
	a.refs, a.lists = nil, nil
}

// displayURL is a list's URL as logs, metrics and the admin API show it:
// without a password or the query's values, which may carry a token.
func displayURL(v string) string {
	u, err := url.Parse(v)
	if err != nil {
		return v
	}
	if u.User != nil {
		u.User = url.User(u.User.Username())
	}
	if u.RawQuery != "" {
		u.RawQuery = "…"
	}
	u.Fragment = ""
	return u.String()
}

// allowLists holds the lists in use, by source and refresh: routes and
// reloads that name the same list share one, fetched once.
var allowLists = caddy.NewUsagePool()

// allowListSource says where a list comes from.
type allowListSource struct {
	name  string // as the admin API shows it: the provider, the URL or the path
	kind  string // provider, url or file
	url   string
	file  string
	field string // the JSON field of a provider's list
}

// id identifies the list's content (not its refresh), for the disk copy.
func (s allowListSource) id() string {
	return s.kind + "|" + s.name + "|" + s.url + "|" + s.file + "|" + s.field
}

// allowList is one list, loaded and refreshed in the background; the
// request path reads set and nothing else.
type allowList struct {
	src     allowListSource
	refresh time.Duration
	logger  *zap.Logger
	client  *http.Client
	cache   string // the disk copy; "" for a file

	set atomic.Pointer[ipset.Set]

	mu    sync.Mutex
	state allowListState

	ranges    prometheus.Gauge
	refreshed prometheus.Counter
	failures  prometheus.Counter

	cancel context.CancelFunc
	done   chan struct{}
}

// allowListState is what the admin API tells of a list.
type allowListState struct {
	loadedFrom  string    // fetch, disk or file
	loadedAt    time.Time // when the list in use was fetched or read
	lastAttempt time.Time
	lastError   string
}

// loadAllowList returns the shared list of a source, loading it the first
// time: a file must load; a URL that cannot be fetched is a warning (the
// disk copy is used meanwhile, and without one the route answers 503 to
// addresses no other list allows).
func loadAllowList(logger *zap.Logger, src allowListSource, refresh time.Duration) (*allowList, usage.Ref, error) {
	key := src.id() + "|" + refresh.String()
	val, _, err := allowLists.LoadOrNew(key, func() (caddy.Destructor, error) {
		l := &allowList{
			src:     src,
			refresh: refresh,
			logger:  logger.With(zap.String("allow_list", src.name)),
			client:  &http.Client{Timeout: allowListFetchTimeout},
			done:    make(chan struct{}),
		}
		l.ranges = metrics.AllowListRanges.WithLabelValues(src.name)
		l.refreshed = metrics.AllowListRefreshes.WithLabelValues(src.name, "ok")
		l.failures = metrics.AllowListRefreshes.WithLabelValues(src.name, "failed")
		if src.kind == "file" {
			if err := l.load(context.Background()); err != nil {
				return nil, fmt.Errorf("allow_ips file %s: %v", src.file, err)
			}
		} else {
			l.cache = allowListCachePath(src)
			l.loadCopy()
			if err := l.load(context.Background()); err != nil {
				if l.set.Load() != nil {
					l.logger.Warn("address list could not be fetched; using the copy kept on disk", zap.Time("fetched_at", l.state.loadedAt), zap.Error(err))
				} else {
					l.logger.Warn("address list could not be fetched and no copy is kept on disk: requests from addresses no other list allows get 503 until it loads", zap.Error(err))
				}
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		l.cancel = cancel
		go l.run(ctx)
		return l, nil
	})
	if err != nil {
		return nil, usage.Ref{}, err
	}
	return val.(*allowList), usage.NewRef(allowLists, key), nil
}

// Destruct stops the background refresh.
func (l *allowList) Destruct() error {
	l.cancel()
	<-l.done
	metrics.AllowListRanges.DeleteLabelValues(l.src.name)
	return nil
}

// run refreshes the list every refresh interval, sooner after a failure.
func (l *allowList) run(ctx context.Context) {
	defer close(l.done)
	timer := time.NewTimer(l.next())
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		if err := l.load(ctx); err != nil && ctx.Err() == nil {
			l.logger.Warn("refreshing address list failed; keeping the last good list", zap.Bool("has_list", l.set.Load() != nil), zap.Error(err))
		}
		timer.Reset(l.next())
	}
}

// next is the time to the next refresh: the interval, or the retry delay
// after a failure when that is sooner.
func (l *allowList) next() time.Duration {
	l.mu.Lock()
	failed := l.state.lastError != ""
	l.mu.Unlock()
	if failed {
		return min(l.refresh, allowListRetry)
	}
	return l.refresh
}

// load fetches or reads the list and, when it parses, puts it in use and
// keeps a copy on disk. A list that does not parse is refused whole: the
// last good one stays in use.
func (l *allowList) load(ctx context.Context) error {
	now := time.Now()
	var data []byte
	var err error
	if l.src.kind == "file" {
		data, err = readAllowFile(l.src.file)
	} else {
		data, err = l.fetch(ctx)
	}
	var set *ipset.Set
	if err == nil {
		set, err = parseAllowList(data, l.src.field)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.state.lastAttempt = now
	if err != nil {
		l.state.lastError = err.Error()
		l.failures.Inc()
		return err
	}
	l.set.Store(set)
	l.ranges.Set(float64(set.Len()))
	l.refreshed.Inc()
	l.state.lastError = ""
	l.state.loadedAt = now
	l.state.loadedFrom = "fetch"
	if l.src.kind == "file" {
		l.state.loadedFrom = "file"
	}
	if l.cache != "" {
		if werr := writeAllowCopy(l.cache, l.src, now, set); werr != nil {
			l.logger.Warn("keeping the address list on disk failed; a restart without network will not have it", zap.String("path", l.cache), zap.Error(werr))
		}
	}
	return nil
}

// parseAllowList parses a fetched list or file, and checks it
// (checkAllowRanges).
func parseAllowList(data []byte, field string) (*ipset.Set, error) {
	prefixes, err := ipset.Parse(data, field)
	if err != nil {
		return nil, err
	}
	if err := checkAllowRanges(prefixes); err != nil {
		return nil, err
	}
	return ipset.New(prefixes), nil
}

// checkAllowRanges refuses a list, fetched, read or kept on disk, that
// holds no range, more than ipset.MaxRanges, or a range wider than a /8
// (IPv4) or a /16 (IPv6), such as 0.0.0.0/0 or ::/0: no provider sends
// from so many addresses, and such a list is broken or not the
// provider's.
func checkAllowRanges(prefixes []netip.Prefix) error {
	if len(prefixes) == 0 {
		return ipset.ErrEmpty
	}
	if len(prefixes) > ipset.MaxRanges {
		return fmt.Errorf("more than %d ranges", ipset.MaxRanges)
	}
	for _, p := range prefixes {
		if (p.Addr().Is4() && p.Bits() < 8) || (!p.Addr().Is4() && p.Bits() < 16) {
			return fmt.Errorf("the list allows %s, wider than any provider sends from", p)
		}
	}
	return nil
}

// fetch gets the list over HTTP.
func (l *allowList) fetch(ctx context.Context) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, allowListFetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, l.src.url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json, text/plain;q=0.9, */*;q=0.1")
	req.Header.Set("User-Agent", "caddy-webhook-idempotency (allow_ips)")
	resp, err := l.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: status %d", l.src.url, resp.StatusCode)
	}
	return readBounded(resp.Body)
}

// readAllowFile reads a list file.
func readAllowFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readBounded(f)
}

func readBounded(r io.Reader) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxAllowList+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxAllowList {
		return nil, fmt.Errorf("the list is larger than %d MiB", maxAllowList>>20)
	}
	return data, nil
}

// allowListCachePath is where a fetched list is kept: in Caddy's data
// directory, beside the file store's default file.
func allowListCachePath(src allowListSource) string {
	sum := sha256.Sum256([]byte(src.id()))
	return filepath.Join(caddy.AppDataDir(), "webhook_idempotency", "allow_lists", hex.EncodeToString(sum[:12])+".json")
}

// allowCopy is a list as it is kept on disk.
type allowCopy struct {
	Source    string    `json:"source"`
	ID        string    `json:"id"`
	FetchedAt time.Time `json:"fetched_at"`
	Ranges    []string  `json:"ranges"`
}

// writeAllowCopy keeps a list on disk, replacing the previous copy whole.
func writeAllowCopy(path string, src allowListSource, at time.Time, set *ipset.Set) error {
	data, err := json.Marshal(allowCopy{Source: src.name, ID: src.id(), FetchedAt: at.UTC(), Ranges: set.Strings()})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".allow-list-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// loadCopy puts the list kept on disk in use, when there is a good one:
// it passes the checks a fetched list passes (its size, read bounded as a
// fetch is, then checkAllowRanges), for it may have been edited or
// replaced since it was written (a copy of a good list is at most about
// 5 MB: MaxRanges ranges of an IPv6 address each).
func (l *allowList) loadCopy() {
	data, err := readAllowFile(l.cache)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	var c allowCopy
	if err == nil {
		err = json.Unmarshal(data, &c)
	}
	var prefixes []netip.Prefix
	if err == nil && c.ID != l.src.id() {
		err = errors.New("the copy is of another list")
	}
	if err == nil && len(c.Ranges) > ipset.MaxRanges {
		err = fmt.Errorf("more than %d ranges", ipset.MaxRanges)
	}
	if err == nil {
		prefixes, err = ipset.ParseAll(c.Ranges)
	}
	if err == nil {
		err = checkAllowRanges(prefixes)
	}
	if err != nil {
		l.logger.Warn("ignoring the address list kept on disk", zap.String("path", l.cache), zap.Error(err))
		return
	}
	set := ipset.New(prefixes)
	l.set.Store(set)
	l.ranges.Set(float64(set.Len()))
	l.state.loadedFrom = "disk"
	l.state.loadedAt = c.FetchedAt
}

// allowListStatus is a list as the admin API shows it.
type allowListStatus struct {
	// Source is the provider, the URL or the file; `inline` for the
	// ranges written in the configuration.
	Source string `json:"source"`
	// Kind is provider, url, file or inline.
	Kind string `json:"kind"`
	// Ranges is the number of ranges in use.
	Ranges int `json:"ranges"`
	// LoadedFrom says where the list in use came from: fetch, disk (the
	// copy kept on disk, until a fetch succeeds) or file.
	LoadedFrom string `json:"loaded_from,omitempty"`
	// LastRefresh is when the list in use was fetched or read.
	LastRefresh *time.Time `json:"last_refresh,omitempty"`
	// LastAttempt is when the list was last fetched or read, successfully
	// or not.
	LastAttempt *time.Time `json:"last_attempt,omitempty"`
	// LastError is the error of the last attempt, "" when it succeeded.
	LastError string `json:"last_error,omitempty"`
	// Refresh is the refresh interval.
	Refresh string `json:"refresh,omitempty"`
}

// status reads a list's state for the admin API.
func (l *allowList) status() allowListStatus {
	l.mu.Lock()
	st := l.state
	l.mu.Unlock()
	out := allowListStatus{
		Source:     l.src.name,
		Kind:       l.src.kind,
		Ranges:     l.set.Load().Len(),
		LoadedFrom: st.loadedFrom,
		LastError:  st.lastError,
		Refresh:    l.refresh.String(),
	}
	if !st.loadedAt.IsZero() {
		t := st.loadedAt.UTC()
		out.LastRefresh = &t
	}
	if !st.lastAttempt.IsZero() {
		t := st.lastAttempt.UTC()
		out.LastAttempt = &t
	}
	return out
}

// statuses lists a route's lists for the admin API, its written ranges
// first.
func (a *allowIPs) statuses() []allowListStatus {
	var out []allowListStatus
	if n := a.static.Len(); n > 0 {
		out = append(out, allowListStatus{Source: "inline", Kind: "inline", Ranges: n})
	}
	for _, l := range a.lists {
		out = append(out, l.status())
	}
	return out
}

// Interface guards
var _ caddy.Destructor = (*allowList)(nil)
