package webhookidempotency

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/archive"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/cfparse"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/forward"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/reconcile"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/results"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// Reconciliation (docs/reconcile.md): the route's configuration of
// internal/reconcile, which recovers on a schedule what the provider
// failed to deliver, through the route's own dedup.

// ReconcileConfig recovers what the provider failed to deliver: Stripe's
// undelivered events enter the route as if delivered; GitHub is asked to
// redeliver its failed deliveries. One pass runs at a time across
// instances; the dedup makes a pass safe to repeat.
type ReconcileConfig struct {
	// The time between passes, at least 1m. Default: 15m.
	Every caddy.Duration `json:"every,omitempty"`

	// How far back a pass looks: at most the route's ttl, and 30d for
	// Stripe, 3d for GitHub. Default: 3d, or the ttl when shorter.
	Lookback caddy.Duration `json:"lookback,omitempty"`

	// Stripe: a restricted key with read access to events. Placeholders
	// are resolved at provision; it is never logged, stored or shown.
	APIKey string `json:"api_key,omitempty"`

	// Stripe: the event types the endpoint is subscribed to (at most 20,
	// `*` wildcards allowed). Default: every type.
	Events []string `json:"events,omitempty"`

	// GitHub: a token that may read and redeliver the hook's deliveries.
	// Placeholders are resolved at provision; it is never logged, stored
	// or shown.
	Token string `json:"token,omitempty"`

	// GitHub: the hook, `repos/<owner>/<repo>/hooks/<id>` or
	// `orgs/<org>/hooks/<id>`.
	Hook string `json:"hook,omitempty"`

	// The provider's API, for tests and proxies. Default: the provider's.
	APIURL string `json:"api_url,omitempty"`
}

// unmarshalCaddyfile parses the reconcile block; the dispenser is on
// `reconcile`:
//
//	reconcile {
//		every    <duration>
//		lookback <duration>
//		api_key  <restricted key>
//		events   <type>...
//		token    <token>
//		hook     repos/<owner>/<repo>/hooks/<id> | orgs/<org>/hooks/<id>
//		api_url  <url>
//	}
func (rc *ReconcileConfig) unmarshalCaddyfile(d *caddyfile.Dispenser) error {
	if d.NextArg() {
		return d.Errf("reconcile takes a block, not '%s'", d.Val())
	}
	return cfparse.Block(d, "reconcile", reconcileOptions, func(name, v string, args []string) (err error) {
		switch name {
		case "every":
			rc.Every, err = cfparse.PositiveDuration("reconcile every", v)
		case "lookback":
			rc.Lookback, err = cfparse.PositiveDuration("reconcile lookback", v)
		case "api_key":
			rc.APIKey = v
		case "events":
			rc.Events = append(rc.Events, args...)
		case "token":
			rc.Token = v
		case "hook":
			rc.Hook = v
		case "api_url":
			rc.APIURL = v
			err = cfparse.CheckHTTPURL("reconcile api_url", v)
		}
		return err
	})
}

// reconcileOptions are the subdirectives of the reconcile block.
var reconcileOptions = map[string]cfparse.Arity{
	"every": cfparse.One, "lookback": cfparse.One, "api_key": cfparse.One, "events": cfparse.Some,
	"token": cfparse.One, "hook": cfparse.One, "api_url": cfparse.One,
}

// newReconciler builds the route's reconciler from its resolved
// configuration: its store, inbox or redeliver_to, key rule and handoff.
func (h *Handler) newReconciler() (*reconcile.Reconciler, error) {
	rc := h.Reconcile
	repl := caddy.NewReplacer()
	resolve := func(what, v string) (string, error) {
		r, err := repl.ReplaceOrErr(v, true, true)
		if err != nil {
			return "", fmt.Errorf("reconcile %s: resolving it: %v", what, err)
		}
		return r, nil
	}
	var provider reconcile.Provider
	switch h.Provider {
	case "stripe":
		if rc.Token != "" || rc.Hook != "" {
			return nil, errors.New("reconcile for stripe takes api_key (and events), not token or hook")
		}
		key, err := resolve("api_key", rc.APIKey)
		if err != nil {
			return nil, err
		}
		if h.rejectDiffs {
			return nil, errors.New("reconcile for stripe with `mismatch reject`: a recovered event's body is Stripe's event as its API lists it, not byte for byte what Stripe delivers, so Stripe's own retry of it would get 422; use `mismatch replay`")
		}
		if len(h.keys) > 0 && h.keys[0].kind == keyBody {
			return nil, errors.New("reconcile for stripe needs a key other than body (the default json:id): a recovered event's body differs from the delivery's")
		}
		provider = &reconcile.Stripe{APIKey: key, APIURL: rc.APIURL, Types: rc.Events}
	case "github":
		if rc.APIKey != "" || len(rc.Events) > 0 {
			return nil, errors.New("reconcile for github takes token and hook, not api_key or events")
		}
		if len(h.keys) == 0 || h.keys[0].kind != keyHeader || h.keys[0].arg != "X-Github-Delivery" {
			return nil, errors.New("reconcile for github needs the key header:X-GitHub-Delivery (the preset's default): GitHub redelivers under the delivery's GUID")
		}
		token, err := resolve("token", rc.Token)
		if err != nil {
			return nil, err
		}
		provider = &reconcile.GitHub{Token: token, Hook: rc.Hook, APIURL: rc.APIURL}
	default:
		return nil, fmt.Errorf("reconcile works with the stripe and github presets, not %q", orNone(h.Provider))
	}
	backend, ok := h.store.backend.(reconcile.Store)
	if !ok {
		return nil, fmt.Errorf("reconcile needs a store that can show keys; the %s store cannot", moduleName(h.store.backend))
	}
	cfg := reconcile.Config{
		Source:    h.Source,
		Namespace: h.namespace(),
		Every:     time.Duration(rc.Every),
		Lookback:  time.Duration(rc.Lookback),
		TTL:       time.Duration(h.TTL),
		Provider:  provider,
		Store:     backend,
		KeyOf:     h.keyOfEvent,
		Logger:    h.logger,
	}
	if cfg.Every == 0 {
		cfg.Every = reconcile.DefaultEvery
	}
	if cfg.Lookback == 0 {
		cfg.Lookback = reconcile.DefaultLookbackFor(provider, cfg.TTL)
	}
	if h.Provider == "stripe" {
		resign := h.verification.Resigner()
		if resign == nil {
			return nil, errors.New("reconcile for stripe signs the events it recovers as Stripe does: it needs the route's secret")
		}
		// each recovered event is signed as Stripe signs a delivery (the
		// inbox signs each attempt again as the route forwards)
		cfg.Signer = resignSigner(resign)
		switch {
		case h.inbox != nil:
			cfg.Sink = reconcile.InboxSink{Inbox: inboxAcceptor{h}}
		case h.archive != nil && h.archive.Config().RedeliverTo != "":
			cfg.Sink = &reconcile.RedeliverSink{
				URL: h.archive.Config().RedeliverTo, Namespace: h.namespace(), Store: h.store.backend,
				TTL: time.Duration(h.TTL), MaxResponse: h.MaxResponse, Prepare: h.prepareRedelivery,
			}
		}
		if h.archive != nil {
			cfg.Archive = h.archiveReconciled
		}
	}
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	return reconcile.New(cfg)
}

// resignSigner signs a recovered event with the route's first secret at
// the time of its entry.
type resignSigner func(r *http.Request, body []byte, publicURL string, secret int, at time.Time) error

func (f resignSigner) Sign(r *http.Request, body []byte, at time.Time) ([]byte, error) {
	return body, f(r, body, "", 0, at)
}

// inboxAcceptor is the route's inbox as a reconciliation sink takes an
// event: its acceptance, and its answer's status.
type inboxAcceptor struct{ h *Handler }

func (a inboxAcceptor) Accept(ctx context.Context, c store.Claim, bodyHash *[32]byte, ev *event.Request) (store.ClaimResult, error) {
	return a.h.store.accept(ctx, a.h.inbox, c, bodyHash, ev)
}

func (a inboxAcceptor) Respond() (status int, body, contentType string) { return a.h.inbox.Respond() }

// keyOfEvent is the route's key of a recovered event, resolved as a
// delivery's is.
func (h *Handler) keyOfEvent(ev *event.Request) (string, error) {
	r := &http.Request{Method: ev.Method, URL: &url.URL{}, Header: event.ParseHeaderBlock(ev.Headers)}
	if u, err := url.ParseRequestURI(ev.URI); err == nil {
		r.URL = u
	}
	sum := sha256.Sum256(ev.Body)
	v, _, err := resolveKey(h.keys, r, ev.Body, &sum)
	return v, err
}

// prepareRedelivery prepares a recovered event's request to redeliver_to
// as the route forwards.
func (h *Handler) prepareRedelivery(r *http.Request, ev *event.Request) error {
	return h.fwd.later.Apply(r, ev.Body, forward.Delivery{Key: ev.Key, Secret: ev.Secret, PublicURL: ev.PublicURL()}, time.Now())
}

// archiveReconciled archives an event a pass entered, result
// `reconciled`.
func (h *Handler) archiveReconciled(ev *event.Request, status int) {
	h.archiveEvent(ev, results.Reconciled, status)
}

// archiveEvent archives an event that is no request of the provider's
// (results.Events), answered status (0 for none).
func (h *Handler) archiveEvent(ev *event.Request, result string, status int) {
	e := &archive.Entry{Request: *ev, Result: result, Status: status, BodyHash: sha256.Sum256(ev.Body)}
	cfg := h.archive.Config()
	if cfg.Bodies {
		body, changed, err := cfg.Redact.Body(ev.Body)
		switch {
		case err != nil:
			e.Omitted = "redaction failed: " + err.Error()
		case changed:
			e.Body, e.HasBody, e.Redacted, e.BodyOwned = body, true, true, true
		default:
			e.Body, e.HasBody = bytes.Clone(ev.Body), true
		}
	}
	h.archive.Add(e)
}
