// Package webhookidempotency is a Caddy HTTP middleware that makes webhook
// endpoints safe: it verifies the sender's signature on the raw body,
// deduplicates deliveries through a store, passes the first delivery to the
// next handler, records its answer and replays that answer to every
// duplicate.
package webhookidempotency

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

func init() {
	caddy.RegisterModule(Handler{})
	caddy.RegisterModule(App{})
}

// Handler deduplicates webhook deliveries: the first delivery of a key is
// passed to the next handler and its response recorded; every duplicate gets
// the recorded response, with `Idempotent-Replayed: true`, without reaching
// the next handler.
type Handler struct {
	// A label that namespaces keys: two handlers with different sources
	// never share keys. Required, unless a provider preset supplies it
	// (the preset's name).
	Source string `json:"source,omitempty"`

	// A provider preset (SPEC §5): `stripe`, `github`, `shopify`, `slack`,
	// `standard`, `svix`, `whatsapp`, `ifood`, `mercadopago`, `pagbank`,
	// `paddle`, `twilio`, `square`, `gitlab`, `stone` or `evolution`. It
	// sets the source, the verification scheme and the default key.
	// Default: none.
	Provider string `json:"provider,omitempty"`

	// Signature verification. Default: the provider's scheme, or none
	// without a provider.
	Verify *VerifyConfig `json:"verify,omitempty"`

	// Key sources tried in order; the first non-empty one is the key:
	// `header:<Name>`, `json:<path>`, `query:<name>` or `body` (SHA-256
	// of the body). Default: the provider's key, else
	// `["header:Idempotency-Key", "body"]`.
	Key []string `json:"key,omitempty"`

	// How long a completed response is kept and replayed. Default: 24h.
	TTL caddy.Duration `json:"ttl,omitempty"`

	// How long a claim lasts without being renewed; it is renewed while
	// the request is handled, so a request that dies frees its key after
	// at most one lease. Default: 30s.
	Lease caddy.Duration `json:"lease,omitempty"`

	// What a duplicate of an in-flight key gets: `conflict` (409 with
	// Retry-After), `wait` (wait for the first request, then replay) or
	// `proceed` (call the next handler without claiming). Default:
	// `conflict`.
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
	// Default: 5MiB.
	MaxBody int64 `json:"max_body,omitempty"`

	// The largest response body recorded, in bytes; a larger response is
	// sent untouched and recorded without its body. Default: 1MiB.
	MaxResponse int64 `json:"max_response,omitempty"`

	// Request methods that are processed; others pass through untouched.
	// Default: `["POST", "PUT", "PATCH", "DELETE"]`.
	Methods []string `json:"methods,omitempty"`

	// What happens when the store fails: `open` passes the request on
	// without deduplication, `closed` answers 503 with Retry-After.
	// Default: `open`; with an inbox, `closed` (and `open` is refused).
	Fail string `json:"fail,omitempty"`

	// The store module (`memory` or `redis`). Default: the store of the
	// global `webhook_idempotency` option, else `memory`.
	StoreRaw json.RawMessage `json:"store,omitempty" caddy:"namespace=http.webhook_idempotency.stores inline_key=module"`

	// Inbox mode (SPEC §7): accept a new delivery at once, store it in
	// Redis and deliver it to the application in the background, with
	// retries and a dead-letter stream. Requires the redis store.
	// Default: off (the next handler is called).
	Inbox *InboxConfig `json:"inbox,omitempty"`

	store       Store
	inbox       *inbox
	ownedStore  *MemoryStore // a default store this handler provisioned itself
	verifier    signature.Verifier
	keys        []keySource
	keyPrefix   string // "<key_prefix>:<source>:"
	methods     []string
	cacheable   statusSet
	failClosed  bool
	rejectDiffs bool
	logger      *zap.Logger
	metrics     *handlerMetrics
	sourceValue any // Source, boxed once for the replacer
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.webhook_idempotency",
		New: func() caddy.Module { return new(Handler) },
	}
}

// Defaults of SPEC §2 and §3.
const (
	defaultTTL         = 24 * time.Hour
	defaultLease       = 30 * time.Second
	defaultWaitTimeout = 10 * time.Second
	defaultMaxBody     = 5 << 20
	defaultMaxResponse = 1 << 20
	defaultKeyPrefix   = "idem"
)

var defaultMethods = []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// now is the clock; tests may replace it.
var now = time.Now

// Provision sets defaults and builds the runtime state.
func (h *Handler) Provision(ctx caddy.Context) error {
	h.logger = ctx.Logger()

	presetSource := false
	if h.Provider != "" {
		if _, ok := providers[h.Provider]; !ok {
			return fmt.Errorf("unknown provider %q", h.Provider)
		}
		if h.Source == "" {
			h.Source = h.Provider
			presetSource = true
		}
		if len(h.Key) == 0 {
			h.Key = providers[h.Provider].defaultKey
		}
	}
	if h.Source == "" {
		return errors.New("source is required (or a provider preset that supplies it)")
	}
	if len(h.Key) == 0 {
		h.Key = []string{"header:Idempotency-Key", "body"}
	}
	h.sourceValue = h.Source
	if err := h.registerMetrics(ctx); err != nil {
		return fmt.Errorf("registering metrics: %v", err)
	}
	if h.TTL == 0 {
		h.TTL = caddy.Duration(defaultTTL)
	}
	if h.Lease == 0 {
		h.Lease = caddy.Duration(defaultLease)
	}
	if h.InFlight == "" {
		h.InFlight = inFlightConflict
	}
	if h.WaitTimeout == 0 {
		h.WaitTimeout = caddy.Duration(defaultWaitTimeout)
	}
	if h.Mismatch == "" {
		h.Mismatch = mismatchReplay
	}
	if h.MaxBody == 0 {
		h.MaxBody = defaultMaxBody
	}
	if h.MaxResponse == 0 {
		h.MaxResponse = defaultMaxResponse
	}
	if h.Inbox != nil && h.Fail == failOpen {
		return errors.New("inbox mode never fails open: an event that was not stored must not be accepted (remove 'fail open')")
	}
	if h.Fail == "" {
		h.Fail = failOpen
		if h.Inbox != nil {
			h.Fail = failClosed // nothing is accepted that was not stored
		}
	}
	h.failClosed = h.Fail == failClosed
	h.rejectDiffs = h.Mismatch == mismatchReject

	h.methods = defaultMethods
	if len(h.Methods) > 0 {
		h.methods = make([]string, len(h.Methods))
		for i, m := range h.Methods {
			h.methods[i] = strings.ToUpper(m)
		}
	}

	var err error
	if h.keys, err = parseKeySources(h.Key); err != nil {
		return err
	}
	if h.cacheable, err = parseStatusSet(h.CacheStatus); err != nil {
		return err
	}

	if err := h.provisionVerifier(); err != nil {
		return err
	}
	h.warnVerifyConfig()

	app, err := appFor(ctx)
	if err != nil {
		return err
	}
	if app != nil && presetSource {
		if err := app.claimPresetSource(h.Source); err != nil {
			return err
		}
	}

	switch {
	case h.StoreRaw != nil:
		mod, err := ctx.LoadModule(h, "StoreRaw")
		if err != nil {
			return fmt.Errorf("loading store: %v", err)
		}
		h.store = mod.(Store)
	case app != nil && app.store != nil:
		h.store = app.store
	default:
		h.ownedStore = new(MemoryStore)
		if err := h.ownedStore.Provision(ctx); err != nil {
			return err
		}
		h.store = h.ownedStore
	}

	prefix := defaultKeyPrefix
	if p, ok := h.store.(interface{ KeyPrefix() string }); ok {
		prefix = p.KeyPrefix()
	}
	h.keyPrefix = prefix + ":" + h.Source + ":"

	if h.Inbox != nil {
		if h.inbox, err = newInbox(h.Inbox, h); err != nil {
			return err
		}
		if app != nil {
			// workers start and stop with the configuration
			return app.addInbox(h.inbox)
		}
		h.inbox.start()
	}
	return nil
}

// Validate checks the configuration.
func (h *Handler) Validate() error {
	switch h.InFlight {
	case inFlightConflict, inFlightWait, inFlightProceed:
	default:
		return fmt.Errorf("in_flight must be conflict, wait or proceed, got %q", h.InFlight)
	}
	switch h.Mismatch {
	case mismatchReplay, mismatchReject:
	default:
		return fmt.Errorf("mismatch must be replay or reject, got %q", h.Mismatch)
	}
	switch h.Fail {
	case failOpen, failClosed:
	default:
		return fmt.Errorf("fail must be open or closed, got %q", h.Fail)
	}
	if h.TTL < 0 || h.Lease < 0 || h.WaitTimeout < 0 {
		return errors.New("ttl, lease and wait_timeout must not be negative")
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
// through the context are cleaned up by Caddy.
func (h *Handler) Cleanup() error {
	if h.inbox != nil {
		h.inbox.stop()
	}
	if h.ownedStore != nil {
		err := h.ownedStore.Cleanup()
		h.ownedStore = nil
		return err
	}
	return nil
}

// Option values.
const (
	inFlightConflict = "conflict"
	inFlightWait     = "wait"
	inFlightProceed  = "proceed"
	mismatchReplay   = "replay"
	mismatchReject   = "reject"
	failOpen         = "open"
	failClosed       = "closed"
)

// statusSet is a set of HTTP status codes 100-999.
type statusSet [16]uint64

func (s *statusSet) add(code int) { s[code/64] |= 1 << (code % 64) }
func (s *statusSet) has(code int) bool {
	return code >= 0 && code < 1024 && s[code/64]&(1<<(code%64)) != 0
}
func (s *statusSet) addRange(lo, hi int) {
	for c := lo; c <= hi; c++ {
		s.add(c)
	}
}
func (s *statusSet) remove(codes ...int) {
	for _, c := range codes {
		s[c/64] &^= 1 << (c % 64)
	}
}

// parseStatusSet parses `cache_status` entries; nil gives the default.
func parseStatusSet(list []string) (statusSet, error) {
	var s statusSet
	if len(list) == 0 {
		s.addRange(200, 299)
		s.addRange(400, 499)
		s.remove(408, 409, 425, 429)
		return s, nil
	}
	for _, v := range list {
		if err := addStatus(&s, v); err != nil {
			return s, err
		}
	}
	return s, nil
}

func addStatus(s *statusSet, v string) error {
	if len(v) == 3 && (v[1] == 'x' || v[1] == 'X') && (v[2] == 'x' || v[2] == 'X') && v[0] >= '1' && v[0] <= '5' {
		if v[0] == '1' || v[0] == '5' {
			return fmt.Errorf("cache status %q is never recorded: %s", v, statusNeverRecorded)
		}
		class := int(v[0]-'0') * 100
		s.addRange(class, class+99)
		return nil
	}
	code, err := strconv.Atoi(v)
	if err != nil || code < 100 || code > 599 {
		return fmt.Errorf("invalid cache status %q: want a code 200-499 or a class 2xx, 3xx or 4xx", v)
	}
	if code < 200 || code >= 500 {
		return fmt.Errorf("cache status %q is never recorded: %s", v, statusNeverRecorded)
	}
	s.add(code)
	return nil
}

// statusNeverRecorded says why 1xx and 5xx answers are refused in
// cache_status: a 5xx must be processed again when the provider retries
// (SPEC §8), and a 1xx is not a final answer.
const statusNeverRecorded = "a 5xx answer must be processed again when the provider retries, and a 1xx is not a final answer"

// App is the `webhook_idempotency` app: it holds the default store set by
// the Caddyfile global option of the same name, and the per-configuration
// state that handlers share.
type App struct {
	// The default store of every handler that configures none. Default:
	// each handler uses the memory store.
	StoreRaw json.RawMessage `json:"store,omitempty" caddy:"namespace=http.webhook_idempotency.stores inline_key=module"`

	store Store

	// presetSources and inboxes need no lock: Caddy provisions, starts
	// and stops one configuration's modules one after another.
	presetSources map[string]bool
	inboxes       []*inbox
}

// CaddyModule returns the Caddy module information.
func (App) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "webhook_idempotency",
		New: func() caddy.Module { return new(App) },
	}
}

// Provision loads the default store.
func (a *App) Provision(ctx caddy.Context) error {
	if a.StoreRaw != nil {
		mod, err := ctx.LoadModule(a, "StoreRaw")
		if err != nil {
			return fmt.Errorf("loading store: %v", err)
		}
		a.store = mod.(Store)
	}
	return nil
}

// Start starts the inbox workers of this configuration's handlers.
func (a *App) Start() error {
	for _, ib := range a.inboxes {
		ib.start()
	}
	return nil
}

// Stop stops the inbox workers, letting the deliveries in progress finish;
// the inboxes stop side by side, so a reload waits for one delivery
// timeout at most.
func (a *App) Stop() error {
	var wg sync.WaitGroup
	for _, ib := range a.inboxes {
		wg.Go(ib.stop)
	}
	wg.Wait()
	return nil
}

// addInbox records an inbox to start with the configuration; two inboxes
// of one source would share a stream and deliver each other's events.
func (a *App) addInbox(ib *inbox) error {
	for _, other := range a.inboxes {
		if other.source == ib.source {
			return fmt.Errorf("two webhook_idempotency handlers have an inbox for source %q: they would share one stream and deliver each other's events; give each a distinct 'source'", ib.source)
		}
	}
	a.inboxes = append(a.inboxes, ib)
	return nil
}

// claimPresetSource records a source that a handler took from its preset; a
// second handler taking the same one would replay one endpoint's answers to
// the other (SPEC §3.4).
func (a *App) claimPresetSource(source string) error {
	if a.presetSources[source] {
		return fmt.Errorf("two webhook_idempotency handlers use the %q preset without a source: they would share keys and replay one endpoint's answers to the other; give each a distinct 'source'", source)
	}
	if a.presetSources == nil {
		a.presetSources = make(map[string]bool)
	}
	a.presetSources[source] = true
	return nil
}

// appFor returns this configuration's App (an empty one when the global
// option is not used), or nil in a bare context: unit tests provision
// handlers with a caddy.Context that has no configuration, where ctx.App
// panics.
func appFor(ctx caddy.Context) (app *App, err error) {
	defer func() {
		if recover() != nil {
			app, err = nil, nil
		}
	}()
	v, err := ctx.App("webhook_idempotency")
	if err != nil {
		return nil, err
	}
	return v.(*App), nil
}

// Interface guards
var (
	_ caddy.Provisioner  = (*Handler)(nil)
	_ caddy.Validator    = (*Handler)(nil)
	_ caddy.CleanerUpper = (*Handler)(nil)
	_ caddy.App          = (*App)(nil)
	_ caddy.Provisioner  = (*App)(nil)
)
