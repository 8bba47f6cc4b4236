package webhookidempotency

import (
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/admin"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/archive"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/cfparse"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/forward"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/inbox"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/reconcile"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/series"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// App is the `webhook_idempotency` app: it holds the default store set by
// the Caddyfile global option of the same name, and the per-configuration
// state that handlers share. Caddy instantiates it for every configuration
// with a webhook_idempotency handler, configured or not.
type App struct {
	// The default store of every handler that configures none. Default:
	// each handler uses the file store at its default path.
	StoreRaw json.RawMessage `json:"store,omitempty" caddy:"namespace=http.webhook_idempotency.stores inline_key=module"`

	// The most memory, in bytes, that the request bodies every
	// webhook_idempotency handler of the process is reading or handling
	// may take together. A request whose body would take them past it
	// is answered 503 with Retry-After (body_timeout) before more of it
	// is read; providers retry. -1 sets no bound (docs/caddyfile.md:
	// Memory). Default: 256MiB.
	BodyBudget int64 `json:"body_budget,omitempty"`

	// The URL of a trace in the operator's trace viewer (Jaeger, Tempo
	// through Grafana, …), with `{trace_id}` where a trace's id goes: the
	// console links each archived event's trace there
	// (docs/operating.md: Traces). Placeholders such as `{env.X}` are
	// resolved at provision time. Default: none (the trace id is shown,
	// not linked).
	TraceURL string `json:"trace_url,omitempty"`

	store    store.Store
	traceURL string // TraceURL, resolved

	// presetSources and inboxes need no lock: Caddy provisions, starts
	// and stops one configuration's modules one after another.
	presetSources map[string]string
	inboxes       []*inbox.Inbox
	reconcilers   []*reconcile.Reconciler
	handlers      []*Handler
}

// CaddyModule returns the Caddy module information.
func (App) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "webhook_idempotency",
		New: func() caddy.Module { return new(App) },
	}
}

// defaultBodyBudget is the default of BodyBudget: room for 51 bodies of
// the default max_body, or thousands of the few kilobytes most webhooks
// are, at once.
const defaultBodyBudget = 256 << 20

// bodyBudget is the budget of the handlers of this configuration: 0 for
// none.
func (a *App) bodyBudget() int64 {
	switch {
	case a.BodyBudget == 0:
		return defaultBodyBudget
	case a.BodyBudget < 0:
		return 0
	}
	return a.BodyBudget
}

// Provision loads the default store.
func (a *App) Provision(ctx caddy.Context) error {
	if a.BodyBudget < -1 {
		return fmt.Errorf("invalid body_budget %d: want a size in bytes, or -1 for none", a.BodyBudget)
	}
	if a.TraceURL != "" {
		a.traceURL = caddy.NewReplacer().ReplaceKnown(a.TraceURL, "")
		if err := checkTraceURL(a.traceURL); err != nil {
			return err
		}
	}
	if a.StoreRaw != nil {
		var err error
		a.store, err = loadStore(ctx, a, "StoreRaw")
		return err
	}
	return nil
}

// Start starts the inbox workers of this configuration's handlers and
// makes its routes the ones the operator surface shows (internal/admin).
func (a *App) Start() error {
	for _, ib := range a.inboxes {
		ib.Start()
	}
	for _, r := range a.reconcilers {
		r.Start()
	}
	routes := make([]admin.Route, len(a.handlers))
	for i, h := range a.handlers {
		routes[i] = adminRoute{h}
	}
	admin.Publish(a, routes, admin.Settings{TraceURL: a.traceURL})
	return nil
}

// Stop stops the inbox workers, letting the deliveries in progress finish;
// the inboxes stop side by side, so a reload waits for one delivery
// timeout at most.
func (a *App) Stop() error {
	admin.Withdraw(a)
	var wg sync.WaitGroup
	for _, ib := range a.inboxes {
		wg.Go(ib.Stop)
	}
	for _, r := range a.reconcilers {
		wg.Go(r.Stop)
	}
	wg.Wait()
	return nil
}

// addInbox records an inbox to start with the configuration; two inboxes
// of one source would share a stream and deliver each other's events.
func (a *App) addInbox(ib *inbox.Inbox) error {
	for _, other := range a.inboxes {
		if other.Source() == ib.Source() {
			return fmt.Errorf("two webhook_idempotency handlers have an inbox for source %q: they would share one stream and deliver each other's events; give each a distinct 'source'", ib.Source())
		}
	}
	a.inboxes = append(a.inboxes, ib)
	return nil
}

// addHandler records a handler of this configuration, for the operator
// surface.
func (a *App) addHandler(h *Handler) {
	a.handlers = append(a.handlers, h)
}

// claimPresetSource records a preset whose name a handler of the loaded
// configuration config took as its source. A second handler taking the
// same one would replay one endpoint's answers to the other, unless it
// has the same configuration: one route that Caddy placed in several
// servers (a site on several ports), one endpoint.
func (a *App) claimPresetSource(preset, config string) error {
	if prev, ok := a.presetSources[preset]; ok && prev != config {
		return presetSourceConflict(preset, "by two webhook_idempotency handlers")
	}
	if a.presetSources == nil {
		a.presetSources = make(map[string]string)
	}
	a.presetSources[preset] = config
	return nil
}

// parseGlobalOption parses the global option block:
//
//	{
//		webhook_idempotency {
//			store       file [<path>] | memory | redis [<redis url>] { ... }
//			body_budget <size> | off
//			trace_url   <url with {trace_id}>
//		}
//	}
func parseGlobalOption(d *caddyfile.Dispenser, _ any) (any, error) {
	app := new(App)
	d.Next() // option name
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		switch d.Val() {
		case "store":
			raw, err := parseStore(d, false)
			if err != nil {
				return nil, err
			}
			app.StoreRaw = raw
		case "body_budget":
			v, err := cfparse.OneValue(d, "body_budget", d.RemainingArgs())
			if err != nil {
				return nil, err
			}
			if v == "off" {
				app.BodyBudget = -1
				break
			}
			size, err := parseSize(v)
			if err != nil {
				return nil, d.Errf("invalid body_budget '%s': %v (or off)", v, err)
			}
			app.BodyBudget = size
		case "trace_url":
			v, err := cfparse.OneValue(d, "trace_url", d.RemainingArgs())
			if err != nil {
				return nil, err
			}
			if err := checkTraceURL(v); err != nil {
				return nil, d.Errf("%v", err)
			}
			app.TraceURL = v
		default:
			return nil, d.Errf("unrecognized global webhook_idempotency option '%s'", d.Val())
		}
	}
	return httpcaddyfile.App{Name: "webhook_idempotency", Value: caddyconfig.JSON(app, nil)}, nil
}

// appFor returns this configuration's App; Caddy makes an empty one when
// the global option is not used.
func appFor(ctx caddy.Context) (*App, error) {
	v, err := ctx.App("webhook_idempotency")
	if err != nil {
		return nil, err
	}
	return v.(*App), nil
}

// Interface guards
var (
	_ caddy.App         = (*App)(nil)
	_ caddy.Provisioner = (*App)(nil)
)

// adminRoute is a handler as the operator surface sees it (admin.Route).
type adminRoute struct{ h *Handler }

func (r adminRoute) Source() string                    { return r.h.Source }
func (r adminRoute) Store() store.Store                { return r.h.store.backend }
func (r adminRoute) StoreModule() string               { return moduleName(r.h.store.backend) }
func (r adminRoute) KeyPrefix() string                 { return r.h.keyPrefix }
func (r adminRoute) TTL() time.Duration                { return time.Duration(r.h.TTL) }
func (r adminRoute) Forwarder() *forward.Forwarder     { return r.h.fwd.later }
func (r adminRoute) Reconciler() *reconcile.Reconciler { return r.h.reconciler }
func (r adminRoute) Refusals() *archive.Archive {
	if r.h.refusals == nil {
		return nil
	}
	return r.h.refusals.list
}
func (r adminRoute) Inbox() *inbox.Inbox                         { return r.h.inbox }
func (r adminRoute) Archive() *archive.Archive                   { return r.h.archive }
func (r adminRoute) Results() map[string]int64                   { return r.h.metrics.results() }
func (r adminRoute) Series() *series.Recorder                    { return r.h.series }
func (r adminRoute) Guards() bool                                { return r.h.guards() }
func (r adminRoute) Guard(key string, info store.KeyInfo) string { return r.h.recordGuard(key, info) }

func (r adminRoute) AllowLists() []any {
	lists := r.h.edgeStatus()
	out := make([]any, len(lists))
	for i, l := range lists {
		out[i] = l
	}
	return out
}

var _ admin.Route = adminRoute{}
