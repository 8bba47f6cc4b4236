// Package edge holds the mechanics of the checks only the edge can make
// (docs/caddyfile.md: Addresses and client certificates): the client's
// address as Caddy determined it, looked up in a route's allow lists
// (ranges written out, and lists fetched from providers and URLs or read
// from files, refreshed in the background, kept on disk and shared across
// routes and reloads), and the TLS client certificate Caddy verified. The
// handler holds the configuration and answers the refusals.
package edge

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/cfparse"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/ipset"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/usage"
	"github.com/webhookguard/caddy-webhook-idempotency/providers"
)

// Sources are the entries of a route's allow_ips, as configured.
type Sources struct {
	Providers []string      // presets whose published list is fetched
	Ranges    []string      // addresses and CIDR ranges written out
	URLs      []string      // lists fetched from a URL
	Files     []string      // lists read from a file
	Refresh   time.Duration // how often lists load again; 0: an hour
}

// Timing of the address lists; tests shorten it.
var (
	defaultRefresh = time.Hour
	retryDelay     = time.Minute      // after a failed refresh, at most
	minRefresh     = time.Second      // the least `refresh` accepted
	fetchTimeout   = 10 * time.Second // one fetch
)

// listURL is the URL a provider's list (package providers: each preset's
// Addresses) is fetched from; tests point it at a local server.
var listURL = func(provider string, l providers.AddressList) string { return l.URL }

// ListProviders names the providers that publish a list, sorted.
func ListProviders() []string {
	var names []string
	for _, p := range providers.All() {
		if p.Addresses != nil {
			names = append(names, p.Name)
		}
	}
	return names
}

// CheckProvider is the rule of a provider named in allow_ips.
func CheckProvider(name string) error {
	p, ok := providers.Lookup(name)
	if !ok {
		return fmt.Errorf("'%s' is neither a provider that publishes its addresses (%s) nor an address or CIDR range", name, strings.Join(ListProviders(), ", "))
	}
	if p.Addresses == nil {
		return fmt.Errorf("%s publishes no address list that can be fetched (docs/providers.md: Published addresses): write the addresses it documents as ranges", name)
	}
	return nil
}

// ParseRefresh parses allow_ips' refresh, at least a second.
func ParseRefresh(v string) (caddy.Duration, error) {
	dur, err := cfparse.PositiveDuration("allow_ips refresh", v)
	if err == nil {
		err = checkRefresh(time.Duration(dur))
	}
	return dur, err
}

func checkRefresh(d time.Duration) error {
	if d < minRefresh {
		return fmt.Errorf("allow_ips refresh %s is shorter than %s", d, minRefresh)
	}
	return nil
}

// Lists is a route's allow_ips at run time: the ranges written in the
// configuration, and the lists it shares with other routes.
type Lists struct {
	static *ipset.Set
	lists  []*list
	refs   []usage.Ref
}

// Verdict is what the lists say of a client address.
type Verdict uint8

// The verdicts.
const (
	Allowed     Verdict = iota // in a list
	Refused                    // in no list
	Unavailable                // in no loaded list, and a list never loaded
)

// Check looks an address up: the written ranges first, then each list as
// it was last loaded. It allocates nothing.
func (a *Lists) Check(addr netip.Addr) Verdict {
	if a.static.Contains(addr) {
		return Allowed
	}
	verdict := Refused
	for _, l := range a.lists {
		set := l.set.Load()
		if set == nil {
			verdict = Unavailable
			continue
		}
		if set.Contains(addr) {
			return Allowed
		}
	}
	return verdict
}

// NewLists builds a route's allow_ips: placeholders resolved, the ranges
// parsed, every list loaded (from the shared pool, fetching it the first
// time). Errors name the entry.
func NewLists(cfg Sources, logger *zap.Logger) (*Lists, error) {
	a := &Lists{}
	if len(cfg.Providers)+len(cfg.Ranges)+len(cfg.URLs)+len(cfg.Files) == 0 {
		return nil, errors.New("allow_ips lists nothing: give a provider, an address or range, a url or a file")
	}
	refresh := defaultRefresh
	if cfg.Refresh != 0 {
		if err := checkRefresh(cfg.Refresh); err != nil {
			return nil, err
		}
		refresh = cfg.Refresh
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
	var sources []source
	for _, name := range cfg.Providers {
		if err := CheckProvider(name); err != nil {
			return nil, fmt.Errorf("allow_ips: %v", err)
		}
		p, _ := providers.Lookup(name)
		sources = append(sources, source{name: name, kind: "provider", url: listURL(name, *p.Addresses), field: p.Addresses.Field})
	}
	for _, u := range cfg.URLs {
		v, err := repl.ReplaceOrErr(u, true, true)
		if err != nil {
			return nil, fmt.Errorf("allow_ips url: resolving %q: %v", u, err)
		}
		if err := cfparse.CheckHTTPURL("allow_ips url", v); err != nil {
			return nil, err
		}
		sources = append(sources, source{name: displayURL(v), kind: "url", url: v})
	}
	for _, f := range cfg.Files {
		v, err := repl.ReplaceOrErr(f, true, true)
		if err != nil {
			return nil, fmt.Errorf("allow_ips file: resolving %q: %v", f, err)
		}
		if v == "" {
			return nil, errors.New("allow_ips file: empty path")
		}
		sources = append(sources, source{name: v, kind: "file", file: v})
	}
	for _, src := range sources {
		l, ref, err := loadList(logger, src, refresh)
		if err != nil {
			a.Release()
			return nil, err
		}
		a.lists = append(a.lists, l)
		a.refs = append(a.refs, ref)
	}
	return a, nil
}

// Release gives the route's lists back to the pool.
func (a *Lists) Release() {
	for i := range a.refs {
		_ = a.refs[i].Release()
	}
	a.refs, a.lists = nil, nil
}

// Statuses lists a route's lists for the admin API, its written ranges
// first.
func (a *Lists) Statuses() []ListStatus {
	var out []ListStatus
	if n := a.static.Len(); n > 0 {
		out = append(out, ListStatus{Source: "inline", Kind: "inline", Ranges: n})
	}
	for _, l := range a.lists {
		out = append(out, l.status())
	}
	return out
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
