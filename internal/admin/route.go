package admin

import (
	"slices"
	"sync/atomic"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/archive"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/forward"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/inbox"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/reconcile"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/series"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// Route is what the operator surface reads and does of one
// webhook_idempotency route of the running configuration: a small view the
// handler gives, as net/http/pprof serves handlers without knowing the
// server. Several routes may share a source deliberately.
type Route interface {
	// Source is the route's source.
	Source() string
	// Store is the route's store, and StoreModule its module's name
	// (`file`, `memory`, `redis`).
	Store() store.Store
	StoreModule() string
	// KeyPrefix is what the route's store keys start with:
	// `<key_prefix>:<source>:`.
	KeyPrefix() string
	// TTL is how long a completed key is kept.
	TTL() time.Duration
	// Forwarder prepares what the route hands to the application later
	// (a redelivery to redeliver_to): the provider's signature kept,
	// re-signed, replaced or removed, and the route's outbound headers.
	Forwarder() *forward.Forwarder
	// Refusals is the route's list of refused requests, nil when its
	// store keeps none.
	Refusals() *archive.Archive
	// Reconciler is the route's reconciliation, nil when it has none.
	Reconciler() *reconcile.Reconciler
	// Inbox and Archive are the route's, nil when it has none.
	Inbox() *inbox.Inbox
	Archive() *archive.Archive
	// Results counts the source's requests by result since the process
	// started; Series are the counts and series kept in the store.
	Results() map[string]int64
	Series() *series.Recorder
	// AllowLists is the state of each of the route's address lists
	// (allow_ips), as JSON.
	AllowLists() []any
	// Guards tells whether the route claims keys with a guard (the replay
	// guard's `reject`), and Guard is the guard a completed key was
	// claimed with, which forgetting the key forgets first; "" for none.
	Guards() bool
	Guard(key string, info store.KeyInfo) string
}

// running is the routes of the running configuration: a reload publishes
// the new configuration's, which take over, before it stops the old one,
// which then leaves the new one's in place.
var running atomic.Pointer[published]

// published is one configuration's routes and settings.
type published struct {
	owner    any
	routes   []Route
	settings Settings
}

// Settings are what the operator surface takes of a configuration's
// global webhook_idempotency option.
type Settings struct {
	// TraceURL is the URL of a delivery's trace in the operator's trace
	// viewer, `{trace_id}` standing for its trace id; "" for none.
	TraceURL string
}

// Publish makes routes and settings the running configuration's, owner
// naming the configuration (its App) for Withdraw.
func Publish(owner any, routes []Route, s Settings) {
	running.Store(&published{owner: owner, routes: routes, settings: s})
}

// runningSettings returns the settings of the running configuration.
func runningSettings() Settings {
	if p := running.Load(); p != nil {
		return p.settings
	}
	return Settings{}
}

// Withdraw removes owner's routes, unless another configuration's have
// taken their place.
func Withdraw(owner any) {
	if cur := running.Load(); cur != nil && cur.owner == owner {
		running.CompareAndSwap(cur, nil)
	}
}

// sourceRoutes returns the running routes of a source, in the order of the
// configuration.
func sourceRoutes(source string) []Route {
	p := running.Load()
	if p == nil {
		return nil
	}
	var out []Route
	for _, r := range p.routes {
		if r.Source() == source {
			out = append(out, r)
		}
	}
	return out
}

// runningSourceNames returns the sources of the running configuration,
// sorted.
func runningSourceNames() []string {
	p := running.Load()
	if p == nil {
		return nil
	}
	var names []string
	for _, r := range p.routes {
		if !slices.Contains(names, r.Source()) {
			names = append(names, r.Source())
		}
	}
	slices.Sort(names)
	return names
}
