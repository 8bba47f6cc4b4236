// Package webhookidempotency is a Caddy HTTP middleware that makes webhook
// endpoints safe: it verifies the sender's signature on the raw body,
// deduplicates deliveries through a store, passes the first delivery to the
// next handler, records its answer and replays that answer to every
// duplicate. In inbox mode it accepts a delivery at once and delivers it to
// the application later, with retries.
package webhookidempotency

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/archive"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/inbox"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/reconcile"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/series"
	"github.com/webhookguard/caddy-webhook-idempotency/providers"
	"github.com/webhookguard/caddy-webhook-idempotency/store/filestore"
)

// Handler deduplicates webhook deliveries: the first delivery of a key is
// passed to the next handler and its response recorded; every duplicate gets
// the recorded response, with `Idempotent-Replayed: true`, without reaching
// the next handler.
type Handler struct {
	// A label that namespaces keys: two handlers with different sources
	// never share keys. Required, unless a provider preset supplies it
	// (the preset's name).
	Source string `json:"source,omitempty"`

	// A provider preset, by name (`stripe`, `github`, …; docs/providers.md
	// lists every preset, and package providers declares them). It sets
	// the source, the verification scheme and the default key, and for
	// some providers the default ttl, max_body and in_flight mode.
	// Default: none.
	Provider string `json:"provider,omitempty"`

	// Signature verification. Default: the provider's scheme, or none
	// without a provider.
	Verify *providers.VerifyConfig `json:"verify,omitempty"`

	// The token of Meta's subscription check for the `whatsapp` preset:
	// `GET ?hub.mode=subscribe&hub.verify_token=<token>&hub.challenge=<c>`
	// is answered with the challenge when the token matches (compared in
	// constant time) and with 403 otherwise. Placeholders such as
	// `{env.X}` are resolved at provision time. Default: none (the check
	// is passed on to the next handler).
	VerifyToken string `json:"verify_token,omitempty"`

	// Whether the preset answers its provider's handshake at the edge
	// (docs/providers.md: Handshakes): `on` or `off` (passed on to the
	// next handler). Only presets with a handshake take it (listed by
	// providers.HandshakeProviders, and in that section). Default: `on`.
	Handshake string `json:"handshake,omitempty"`

	// Key sources tried in order; the first non-empty one is the key:
	// `header:<Name>`, `json:<path>`, `query:<name>` or `body` (SHA-256
	// of the body). Default: the provider's key, else
	// `["header:Idempotency-Key", "body"]`.
	Key []string `json:"key,omitempty"`

	// How long a completed response is kept and replayed. Default: 24h,
	// or the provider's retry window when it is longer (Stripe: 3d; see
	// docs/providers.md).
	TTL caddy.Duration `json:"ttl,omitempty"`

	// How long a claim lasts without being renewed; it is renewed while
	// the request is handled, so a request that dies frees its key after
	// at most one lease. Default: 30s.
	Lease caddy.Duration `json:"lease,omitempty"`

	// What a duplicate of an in-flight key gets: `conflict` (409 with
	// Retry-After), `wait` (wait for the first request, then replay) or
	// `proceed` (call the next handler without claiming). Default:
	// `conflict`; `wait` for `asaas`.
	InFlight string `json:"in_flight,omitempty"`

	// How long `wait` waits before answering 409. Default: 10s.
	WaitTimeout caddy.Duration `json:"wait_timeout,omitempty"`

	// Response statuses that are recorded and replayed, as codes (`200`)
	// or classes (`2xx`). Any other status releases the key so the
	// provider's retry is processed. Default: every 2xx and 4xx except
	// 408, 409, 425 and 429.
	CacheStatus []string `json:"cache_status,omitempty"`

	// What a duplicate whose body differs from the recorded one gets,
	// when the key is not the body hash: `replay` (and a warning in the
	// log) or `reject` (422). Default: `replay`.
	Mismatch string `json:"mismatch,omitempty"`

	// The largest request body accepted, in bytes; larger gets 413.
	// Default: 5MiB; 1MiB for `stone` (docs/providers.md: Stone).
	MaxBody int64 `json:"max_body,omitempty"`

	// How long the request body may take to arrive, from the moment the
	// handler starts reading it (the earlier of this and the server's own
	// read timeout applies). A body not received in time gets 408 and
	// nothing is stored. Default: 10s.
	BodyTimeout caddy.Duration `json:"body_timeout,omitempty"`

	// The largest response body recorded, in bytes; a larger response is
	// sent untouched and recorded without its body. Default: 1MiB.
	MaxResponse int64 `json:"max_response,omitempty"`

	// What is kept of each answer of the application, with the event's
	// attempts (docs/archive.md#attempts): its headers (redacted as the
	// archive redacts a request's), then its body, in this many bytes
	// together; 0 keeps neither (each attempt's time, destination,
	// status, latency and error are kept all the same). At most 64KiB.
	// Default: 4KiB.
	KeepResponse *int64 `json:"keep_response,omitempty"`

	// Request methods that are processed; others pass through untouched.
	// Default: `["POST", "PUT", "PATCH", "DELETE"]`.
	Methods []string `json:"methods,omitempty"`

	// What happens when the store fails: `open` passes the request on
	// without deduplication, `closed` answers 503 with Retry-After.
	// Default: `open`; with an inbox, `closed` (and `open` is refused).
	Fail string `json:"fail,omitempty"`

	// What a delivery whose signed bytes were seen within ttl under
	// another id gets, when the key comes from a header or query parameter
	// the signature does not cover (docs/providers.md, "Replay guard"):
	// `flag` (processed, with `Webhook-Replay-Suspected: <first key>` to
	// the application, a WARN and a counter), `reject` (answered as a
	// duplicate of the first) or `off`. Default: `flag`.
	ReplayGuard string `json:"replay_guard,omitempty"`

	// The store module (`file`, `memory` or `redis`). Default: the store
	// of the global `webhook_idempotency` option, else the file store at
	// its default path (docs/stores.md).
	StoreRaw json.RawMessage `json:"store,omitempty" caddy:"namespace=http.webhook_idempotency.stores inline_key=module"`

	// Inbox mode (docs/inbox.md): accept a new delivery at once, store it
	// and deliver it to the application in the background, with retries
	// and dead letters. Requires the file store (the default) or the redis
	// store.
	// Default: off (the next handler is called).
	Inbox *InboxConfig `json:"inbox,omitempty"`

	// Requests whose client address is in none of these lists are
	// answered 403 before their body is read, and nothing is stored
	// (docs/caddyfile.md: Addresses and client certificates): the
	// published lists of providers, ranges written out, and lists fetched
	// from URLs or read from files, refreshed in the background.
	// Default: none (every address).
	AllowIPs *AllowIPsConfig `json:"allow_ips,omitempty"`

	// Requests that did not come over TLS with a client certificate Caddy
	// verified (`client_auth`), whose chain ends in one of these CAs and
	// whose subject matches, are answered 403 before their body is read,
	// and nothing is stored. Default: none (no certificate needed;
	// required by the `efi` preset unless it takes Efí's fallback).
	ClientCert *ClientCertConfig `json:"client_cert,omitempty"`

	// What the application receives of each delivery's signature (kept,
	// re-signed, signed by the edge or stripped), and headers added to
	// every request to it (docs/inbox.md: What the application receives).
	// Default: the signature re-signed for inbox deliveries and
	// redeliveries where the scheme allows it, else kept; kept for the
	// next handler.
	Forward *ForwardConfig `json:"forward,omitempty"`

	// Batches (docs/caddyfile.md: Batches): a request that holds many
	// events is split into its items, each deduplicated by its own key.
	// Default: the preset's batch (sendgrid, adyen, graph, eventgrid, pix
	// and others: docs/providers.md), else none.
	Batch *BatchConfig `json:"batch,omitempty"`

	// Reconciliation (docs/reconcile.md): with the `stripe` or `github`
	// preset, what the provider failed to deliver is recovered on a
	// schedule through the route's dedup. Default: off.
	Reconcile *ReconcileConfig `json:"reconcile,omitempty"`

	// The archive (docs/archive.md): every delivery that passed
	// verification and got a key is kept for audit and reprocessing, with
	// the answer's status and the handling time, on the handler's store.
	// Default: off.
	Archive *ArchiveConfig `json:"archive,omitempty"`

	store        *meteredStore
	archive      *archive.Archive
	inbox        *inbox.Inbox
	drops        []func(ev *event.Request) bool // the inbox's drop rules
	answerWithin time.Duration                  // respond app within; 0 for off
	series       *series.Recorder               // counts and series kept in the store (internal/series)
	seriesDone   func()                         // gives the use of series back
	refusals     *refusals                      // the list of refused requests (refusals.go)
	renewer      *renewer                       // renews the leases of claims in flight (lease.go)
	reconciler   *reconcile.Reconciler
	ownedStore   *filestore.Store          // the default store, when this handler provisioned it
	verification *providers.Verification   // nil: nothing verified
	fwd          forwarders                // the handoffs to the application (forward.go)
	handshake    *providers.HandshakeState // nil: none answered
	edge         *edgeChecks               // allow_ips and client_cert; nil: neither (edge.go)
	keys         []keySource
	batch        *batchRule // nil: whole requests are deduplicated (batch.go)
	nonce        *keySource // the preset's nonce, claimed as the guard (guard.go)
	keyPrefix    string     // "<key_prefix>:<source>:"
	methods      []string
	cacheable    statusSet
	inFlight     inFlightMode
	guardMode    guardMode
	failClosed   bool
	rejectDiffs  bool
	keepResponse int         // bytes kept of each answer with its attempt (keep_response)
	logger       *zap.Logger // carries the source
	metrics      *handlerMetrics
	sourceValue  any           // Source, boxed once for the replacer
	bodyWait     *atomic.Int64 // body_timeout bounded by the server's read timeout, once known (body.go)
	bodyBudget   int64         // the process's body budget, the app's; 0 for none (body.go)
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.webhook_idempotency",
		New: func() caddy.Module { return new(Handler) },
	}
}

// Defaults of the handler's options (docs/caddyfile.md).
const (
	defaultTTL         = 24 * time.Hour
	defaultLease       = 30 * time.Second
	defaultWaitTimeout = 10 * time.Second
	defaultMaxBody     = 5 << 20
	defaultBodyTimeout = 10 * time.Second
	defaultMaxResponse = 1 << 20
)

var (
	defaultMethods = []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}
	defaultKey     = []string{"header:Idempotency-Key", "body"}
)

// now is the clock; tests may replace it.
var now = time.Now

// Provision sets defaults and builds the runtime state.
func (h *Handler) Provision(ctx caddy.Context) error {
	// the configuration as loaded, before any default, of a handler that
	// takes its preset's source: a site on several ports is one route in
	// several servers, each with a handler of this same configuration,
	// which share the source as one endpoint
	var loaded []byte
	if h.Provider != "" && h.Source == "" {
		var err error
		if loaded, err = json.Marshal(h); err != nil {
			return fmt.Errorf("reading the handler's configuration: %v", err)
		}
	}
	presetSource, err := h.applyPreset()
	if err != nil {
		return err
	}
	h.logger = ctx.Logger().With(zap.String("source", h.Source))
	h.sourceValue = h.Source
	h.renewer = new(renewer)
	if h.metrics, err = registerMetrics(ctx, h.Source); err != nil {
		return fmt.Errorf("registering metrics: %v", err)
	}
	if err := h.provisionOptions(); err != nil {
		return err
	}
	if err := h.provisionVerifier(ctx); err != nil {
		return err
	}
	if err := h.provisionHandshake(); err != nil {
		return err
	}
	if err := h.provisionBatch(); err != nil {
		return err
	}
	if err := h.provisionForward(); err != nil {
		return err
	}
	if err := h.provisionEdge(); err != nil {
		return err
	}
	h.markUnsignedKeys()
	h.warnVerifyConfig()

	app, err := appFor(ctx)
	if err != nil {
		return err
	}
	h.bodyBudget = app.bodyBudget()
	if presetSource {
		if err := app.claimPresetSource(h.Provider, string(loaded)); err != nil {
			return err
		}
	}
	if err := h.provisionStore(ctx, app); err != nil {
		return err
	}
	if err := h.checkBatchStore(); err != nil {
		return err
	}
	if h.series, h.seriesDone, err = series.Use(h.Source, h.store.backend, h.logger); err != nil {
		return fmt.Errorf("series: %v", err)
	}
	h.metrics.series = h.series
	if h.refusals, err = h.newRefusals(); err != nil {
		return err
	}
	if h.Archive != nil {
		if h.archive, err = h.newArchive(); err != nil {
			return err
		}
	}
	if h.Inbox != nil {
		if h.inbox, err = h.newInbox(); err != nil {
			return err
		}
		// workers start and stop with the configuration
		if err := app.addInbox(h.inbox); err != nil {
			return err
		}
	}
	if h.Reconcile != nil {
		if h.reconciler, err = h.newReconciler(); err != nil {
			return err
		}
		app.reconcilers = append(app.reconcilers, h.reconciler)
	}
	app.addHandler(h)
	return nil
}

// applyPreset fills the source and key from the provider preset; it
// reports whether the source came from the preset.
func (h *Handler) applyPreset() (presetSource bool, err error) {
	if h.Provider != "" {
		p, ok := providers.Lookup(h.Provider)
		if !ok {
			return false, fmt.Errorf("unknown provider %q", h.Provider)
		}
		if h.Source == "" {
			h.Source = h.Provider
			presetSource = true
		}
		if len(h.Key) == 0 {
			h.Key = p.DefaultKey
		}
		if h.TTL == 0 && p.TTL > 0 {
			h.TTL = caddy.Duration(p.TTL)
		}
		if h.InFlight == "" {
			h.InFlight = p.InFlight
		}
	}
	if h.MaxBody == 0 {
		// the default of the scheme that verifies (a preset's, or the
		// verify scheme of that name)
		h.MaxBody = providers.MaxBody(h.scheme())
	}
	if h.Source == "" {
		return false, errors.New("source is required (or a provider preset that supplies it)")
	}
	if err := checkSource(h.Source); err != nil {
		return false, err
	}
	if len(h.Key) == 0 {
		h.Key = defaultKey
	}
	return presetSource, nil
}

// provisionOptions sets the defaults of the plain options and parses them
// into their runtime form, with the rules the Caddyfile parser applies.
func (h *Handler) provisionOptions() error {
	if h.TTL == 0 {
		h.TTL = caddy.Duration(defaultTTL)
	}
	if h.Lease == 0 {
		h.Lease = caddy.Duration(defaultLease)
	}
	if h.WaitTimeout == 0 {
		h.WaitTimeout = caddy.Duration(defaultWaitTimeout)
	}
	if h.MaxBody == 0 {
		h.MaxBody = defaultMaxBody
	}
	h.bodyWait = new(atomic.Int64)
	if h.BodyTimeout == 0 {
		h.BodyTimeout = caddy.Duration(defaultBodyTimeout)
	}
	if h.MaxResponse == 0 {
		h.MaxResponse = defaultMaxResponse
	}
	h.keepResponse = event.DefaultKeepResponse
	if h.KeepResponse != nil {
		if err := checkKeepResponse(*h.KeepResponse); err != nil {
			return err
		}
		h.keepResponse = int(*h.KeepResponse)
	}
	if h.InFlight == "" {
		h.InFlight = inFlightConflict.String()
	}
	if h.Mismatch == "" {
		h.Mismatch = mismatchReplay
	}
	if h.Fail == "" {
		h.Fail = defaultFail(h.Inbox != nil)
	}
	var err error
	if h.inFlight, _, err = parseInFlight([]string{h.InFlight}); err != nil {
		return err
	}
	if h.rejectDiffs, err = parseMismatch(h.Mismatch); err != nil {
		return err
	}
	if h.guardMode, err = parseReplayGuard(h.ReplayGuard); err != nil {
		return err
	}
	if h.failClosed, err = parseFail(h.Fail, h.Inbox != nil); err != nil {
		return err
	}
	h.methods = defaultMethods
	if len(h.Methods) > 0 {
		h.methods = make([]string, len(h.Methods))
		for i, m := range h.Methods {
			h.methods[i] = strings.ToUpper(m)
		}
	}
	if h.keys, err = parseKeySources(h.Key); err != nil {
		return err
	}
	if p, ok := providers.Lookup(h.Provider); ok && p.Nonce != "" {
		ks, err := parseKeySource(p.Nonce)
		if err != nil {
			return fmt.Errorf("the %s preset's nonce: %v", h.Provider, err)
		}
		h.nonce = &ks
	}
	h.cacheable, err = parseStatusSet(h.CacheStatus)
	return err
}

// Validate checks the configuration.
func (h *Handler) Validate() error {
	if h.TTL < 0 || h.Lease < 0 || h.WaitTimeout < 0 || h.BodyTimeout < 0 {
		return errors.New("ttl, lease, wait_timeout and body_timeout must not be negative")
	}
	if h.MaxBody < 0 || h.MaxResponse < 0 {
		return errors.New("max_body and max_response must not be negative")
	}
	if h.Verify != nil && h.Verify.Tolerance < 0 {
		return fmt.Errorf("verify tolerance must not be negative, got %s", time.Duration(h.Verify.Tolerance))
	}
	return nil
}

// Cleanup releases what this handler provisioned itself; modules it loaded
// through the context are cleaned up by Caddy, and its inbox is stopped by
// the app.
func (h *Handler) Cleanup() error {
	if h.inbox != nil {
		h.inbox.Stop()
	}
	if h.reconciler != nil {
		h.reconciler.Stop()
	}
	h.verification.Release()
	h.releaseEdge()
	if h.archive != nil {
		h.archive.Stop()
	}
	h.refusals.stop()
	if h.seriesDone != nil {
		// after the inbox: its last deliveries are counted
		h.seriesDone()
		h.seriesDone = nil
	}
	if h.ownedStore != nil {
		err := h.ownedStore.Cleanup()
		h.ownedStore = nil
		return err
	}
	return nil
}

// ServeHTTP implements caddyhttp.MiddlewareHandler. It reads as the path
// of a delivery: the client's address and certificate (edge.go), methods,
// body, signature, key, claim, then what the claim found decides the
// answer. A provider's handshake is answered on the way (handshake.go).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) (err error) {
	rs := h.newRequest(w, r, next)
	defer rs.handled()
	if answered, err := rs.edgeRefused(); answered {
		return err
	}
	if answered, err := rs.queryHandshake(); answered {
		return err
	}
	if !slices.Contains(h.methods, r.Method) {
		return rs.skip()
	}
	if rs.looped() {
		return rs.loop()
	}
	err = rs.readBody()
	defer rs.releaseBody()
	if err != nil {
		return rs.bodyFailed(err)
	}
	rs.traceStep(spanVerify)
	defer rs.traceEnd()
	if err := rs.verify(); err != nil {
		return rs.unauthorized(err)
	}
	if answered, err := rs.bodyHandshake(); answered {
		return err
	}
	if err := rs.resolveKey(); err != nil {
		return rs.ambiguous(err)
	}
	if h.batch != nil {
		if answered, err := rs.splitBatch(); answered {
			return err
		}
	}
	if h.archive != nil {
		// every outcome from here on is archived
		rs.trackStatus()
		defer func() { rs.archive(err) }()
	}
	if rs.dropped() {
		return rs.filtered()
	}
	rs.traceStep(spanClaim)
	if rs.batch != nil {
		return rs.serveBatch()
	}
	res, err := rs.claimKey()
	if err != nil {
		return rs.storeFailed(opClaim, err)
	}
	return rs.dispatch(res)
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.Validator             = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)
