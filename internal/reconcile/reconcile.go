// Package reconcile is reconciliation (docs/reconcile.md): on a schedule,
// one instance at a time, it asks a provider which events it failed to
// deliver to the route and recovers those the route never took. Stripe's
// undelivered events enter the route (its inbox, or the archive's
// redeliver_to) as if Stripe had delivered them; GitHub's failed deliveries
// are redelivered by GitHub at the route's request. The route's dedup
// decides: an event whose key the route completed, accepted or is
// processing right now is left alone, so a pass is safe to repeat, and an
// event recovered while the provider also retries it is executed once.
//
// The package knows nothing of Caddy. The handler builds a Reconciler from
// a resolved Config: the route's store, its rule for an event's key, a sink
// that enters an event into the route, and the signer of the deliveries to
// the application.
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/metrics"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// Defaults and bounds of a configuration (docs/reconcile.md: Configuration).
const (
	// DefaultEvery is the time between passes.
	DefaultEvery = 15 * time.Minute
	// DefaultLookback is how far back a pass looks, when the route's ttl
	// is not shorter (DefaultLookbackFor).
	DefaultLookback = 3 * 24 * time.Hour
	// MinEvery is the shortest time between passes: each pass costs API
	// calls against the provider's rate limit.
	MinEvery = time.Minute
)

// Store is what reconciliation needs of the route's store: the contract's
// claims (the pass's lease, its state, and a sink's claim of an event's
// key) and the inspection of a key, which tells whether the route took an
// event without taking its key (a provider's redelivery must find the key
// free).
type Store interface {
	store.Store
	store.KeyAdmin
}

// Signer signs a recovered event toward the application as its provider
// signs deliveries: it sets the signature headers on r and returns the body
// to send. signature.Signer satisfies it.
type Signer interface {
	Sign(r *http.Request, body []byte, at time.Time) ([]byte, error)
}

// Config is a reconciler's resolved configuration: every value set and
// checked by the handler (Check states the rules).
type Config struct {
	// Source is the route's source.
	Source string
	// Namespace is the route's key namespace, `<key_prefix>:<source>`:
	// an event's store key is `<Namespace>:<key>`, and the pass's own keys
	// are `{<Namespace>}:reconcile` (the lease) and
	// `{<Namespace>}:reconcile:state`, which no delivery's key can be.
	Namespace string
	// Every is the time between passes (DefaultEvery).
	Every time.Duration
	// Lookback is how far back a pass looks. It must not exceed TTL: an
	// event older than the route's ttl may have been completed and
	// forgotten, and would be taken again.
	Lookback time.Duration
	// TTL is the route's ttl, how long a completed key is remembered.
	TTL time.Duration
	// Provider is the provider's side of a pass: *Stripe or *GitHub.
	Provider Provider
	// Store is the route's store.
	Store Store
	// Sink enters a recovered event into the route (Stripe); the GitHub
	// provider needs none (GitHub redelivers).
	Sink Sink
	// Signer signs a recovered event toward the application (Stripe).
	Signer Signer
	// KeyOf is the route's rule for a delivery's key, applied to a
	// recovered event as the route applies it to a delivery: it returns
	// the key value (without the namespace). Nil takes the provider's
	// event id (the presets' default key).
	KeyOf func(ev *event.Request) (string, error)
	// Archive, when not nil, archives an event the pass entered, with the
	// status that took it (result `reconciled`).
	Archive func(ev *event.Request, status int)
	// Client sends the requests to the provider's API; nil for a client
	// with a 30 s timeout that follows no redirect.
	Client *http.Client
	// Logger is the handler's logger.
	Logger *zap.Logger
}

// DefaultLookbackFor is a route's lookback when none is configured:
// DefaultLookback, shortened to the route's ttl (an event older than it may
// have been completed and forgotten) and to what the provider keeps.
func DefaultLookbackFor(p Provider, ttl time.Duration) time.Duration {
	l := min(DefaultLookback, p.MaxLookback())
	if ttl > 0 {
		l = min(l, ttl)
	}
	return l
}

// Check returns the first rule the configuration breaks, naming the
// option.
func (c *Config) Check() error {
	switch {
	case c.Provider == nil:
		return errors.New("reconcile: no provider")
	case c.Store == nil:
		return errors.New("reconcile: no store")
	case c.Every < MinEvery:
		return fmt.Errorf("reconcile every %s is too short: at least %s (each pass costs API calls)", c.Every, MinEvery)
	case c.Lookback <= 0:
		return fmt.Errorf("reconcile lookback %s must be positive", c.Lookback)
	case c.Lookback > c.Provider.MaxLookback():
		return fmt.Errorf("reconcile lookback %s is longer than %s keeps events (%s)", c.Lookback, c.Provider.Name(), c.Provider.MaxLookback())
	case c.TTL > 0 && c.Lookback > c.TTL:
		return fmt.Errorf("reconcile lookback %s is longer than the route's ttl %s: an event completed more than ttl ago is forgotten and would be taken again; raise ttl to at least the lookback, or shorten the lookback", c.Lookback, c.TTL)
	case c.Provider.needsSink() && c.Sink == nil:
		return fmt.Errorf("reconcile for %s enters events into the route: it needs the route's inbox or the archive's redeliver_to", c.Provider.Name())
	case c.Provider.needsSink() && c.Signer == nil:
		return fmt.Errorf("reconcile for %s needs a signer for the deliveries to the application", c.Provider.Name())
	}
	return c.Provider.check()
}

// Timing of every reconciler.
var (
	// leaseTTL is the pass's lease; it is renewed every third of it.
	leaseTTL = 30 * time.Second
	// stateTTL is how long the shared state outlives the last pass.
	stateTTL = 90 * 24 * time.Hour
	// storeTimeout bounds the store calls made after a pass ended (its
	// state and the release of its lease).
	storeTimeout = 5 * time.Second
)

// ErrBusy is the error of a pass that did not run because another holds the
// lease, on this instance or another sharing the store.
var ErrBusy = errors.New("a reconciliation pass of this source is running")

// errLeaseLost ends a pass whose lease another instance took (it expired).
var errLeaseLost = errors.New("the pass's lease expired and another instance took it")

// Reconciler runs one route's passes: on its schedule once started, or at
// once on Run.
type Reconciler struct {
	cfg      Config
	logger   *zap.Logger
	client   *http.Client
	leaseKey string
	stateKey string
	lease    time.Duration

	// now and sleep are the clock; tests record the waits instead.
	now   func() time.Time
	sleep func(ctx context.Context, d time.Duration) error

	recovered   prometheus.Counter
	lastSuccess prometheus.Gauge

	mu      sync.Mutex
	running bool // a pass runs on this instance
	started bool
	stopped bool
	cancel  context.CancelFunc
	done    chan struct{}
	wake    chan struct{}
}

// New builds a reconciler; its schedule starts with Start.
func New(cfg Config) (*Reconciler, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	client := cfg.Client
	if client == nil {
		client = &http.Client{
			Timeout:       30 * time.Second,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	r := &Reconciler{
		cfg:         cfg,
		logger:      cfg.Logger.With(zap.String("source", cfg.Source), zap.String("provider", cfg.Provider.Name())),
		client:      client,
		leaseKey:    "{" + cfg.Namespace + "}:reconcile",
		stateKey:    "{" + cfg.Namespace + "}:reconcile:state",
		lease:       leaseTTL,
		now:         time.Now,
		sleep:       sleep,
		recovered:   metrics.Reconciled.WithLabelValues(cfg.Source),
		lastSuccess: metrics.ReconcileLastSuccess.WithLabelValues(cfg.Source),
		wake:        make(chan struct{}, 1),
	}
	for _, result := range []string{resultOK, resultFailed} {
		metrics.ReconcilePasses.WithLabelValues(cfg.Source, result)
	}
	return r, nil
}

// sleep waits d, or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// Start starts the schedule: a pass whenever the last one of any instance
// sharing the store began Every ago (at once when none ever ran).
func (r *Reconciler) Start() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started || r.stopped {
		return
	}
	r.started = true
	metrics.ReconcileStarted.WithLabelValues(r.cfg.Source).Set(float64(r.now().Unix()))
	metrics.ReconcileInterval.WithLabelValues(r.cfg.Source).Set(r.cfg.Every.Seconds())
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.done = make(chan struct{})
	go r.loop(ctx)
}

// Stop stops the schedule and waits for a pass in progress to end (its
// state is saved, so the next pass resumes it).
func (r *Reconciler) Stop() {
	r.mu.Lock()
	r.stopped = true
	cancel, done := r.cancel, r.done
	r.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// Trigger asks the schedule for a pass now, whatever the last pass's time;
// it reports false when the schedule is not running.
func (r *Reconciler) Trigger() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.started || r.stopped {
		return false
	}
	select {
	case r.wake <- struct{}{}:
	default: // one is pending already
	}
	return true
}

// loop runs passes on the schedule until ctx is done.
func (r *Reconciler) loop(ctx context.Context) {
	defer close(r.done)
	for {
		force := false
		t := time.NewTimer(r.untilNext(ctx))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-r.wake:
			t.Stop()
			force = true
		case <-t.C:
		}
		_, _ = r.run(ctx, force)
	}
}

// untilNext is the wait until the next pass is due, as the shared state
// says, plus a little jitter so that instances do not all try at once.
func (r *Reconciler) untilNext(ctx context.Context) time.Duration {
	st, _, err := r.readState(ctx)
	if err != nil {
		if ctx.Err() == nil {
			r.logger.Warn("reconcile: reading the pass state failed; trying again later", zap.Error(err))
		}
		return min(r.cfg.Every, time.Minute)
	}
	r.observe(st)
	wait := st.due(r.cfg.Every).Sub(r.now())
	spread := min(r.cfg.Every/10, 30*time.Second)
	return max(wait, 0) + rand.N(spread+1)
}

// Run runs a pass now, whatever the last pass's time; it returns ErrBusy
// when another pass holds the lease.
func (r *Reconciler) Run(ctx context.Context) (Summary, error) { return r.run(ctx, true) }

// run runs a pass, or with force false only when one is due, and records
// its outcome in the metrics and the log.
func (r *Reconciler) run(ctx context.Context, force bool) (Summary, error) {
	r.mu.Lock()
	if r.running {
		r.mu.Unlock()
		return Summary{}, ErrBusy
	}
	r.running = true
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.running = false
		r.mu.Unlock()
	}()

	sum, err := r.pass(ctx, force)
	switch {
	case errors.Is(err, ErrBusy):
		r.logger.Debug("reconcile: another pass is running")
	case sum.Skipped:
	case err != nil:
		metrics.ReconcilePasses.WithLabelValues(r.cfg.Source, resultFailed).Inc()
		r.logger.Warn("reconcile: pass stopped part-way; the next pass resumes it",
			zap.Int("recovered", sum.Recovered), zap.Int("known", sum.Known), zap.Int("api_calls", sum.Calls),
			zap.String("error", r.scrub(err.Error())))
	default:
		metrics.ReconcilePasses.WithLabelValues(r.cfg.Source, resultOK).Inc()
		log := r.logger.Debug
		if sum.Recovered > 0 {
			log = r.logger.Info
		}
		log("reconcile: pass done", zap.Int("recovered", sum.Recovered), zap.Int("known", sum.Known),
			zap.Int("api_calls", sum.Calls), zap.Bool("resumed", sum.Resumed), zap.Duration("took", sum.Ended.Sub(sum.Started)))
	}
	if err != nil && !errors.Is(err, ErrBusy) {
		err = &scrubbedError{msg: r.scrub(err.Error()), err: err}
	}
	return sum, err
}

// scrubbedError is an error whose text lost the provider's key or token;
// errors.As still finds what it wraps.
type scrubbedError struct {
	msg string
	err error
}

func (e *scrubbedError) Error() string { return e.msg }
func (e *scrubbedError) Unwrap() error { return e.err }

// Results of a pass.
const (
	resultOK     = "ok"
	resultFailed = "failed"
)

// Summary is what one pass did.
type Summary struct {
	// Skipped is true when the pass was not due (another instance ran one
	// less than Every ago).
	Skipped bool
	// Resumed is true when the pass took up where a failed one stopped.
	Resumed bool
	Started time.Time
	Ended   time.Time
	// Recovered counts the events the pass entered (stripe) or had the
	// provider redeliver (github).
	Recovered int
	// Known counts the events the provider listed as undelivered that the
	// route had taken (completed, accepted or in flight).
	Known int
	// Calls counts the requests to the provider's API.
	Calls int
}

// pass takes the lease, runs the provider's pass from the shared state and
// saves its outcome there.
func (r *Reconciler) pass(ctx context.Context, force bool) (Summary, error) {
	owner := store.NewOwner()
	res, err := r.cfg.Store.Claim(ctx, r.leaseKey, owner, r.lease)
	if err != nil {
		return Summary{}, fmt.Errorf("taking the pass's lease: %w", err)
	}
	if res.State != store.StateClaimed {
		return Summary{}, ErrBusy
	}
	pctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stopRenewing := r.renew(pctx, cancel, owner)
	defer func() {
		stopRenewing()
		sctx, done := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
		defer done()
		if err := r.cfg.Store.Release(sctx, r.leaseKey, owner); err != nil && !errors.Is(err, store.ErrNotOwner) {
			r.logger.Warn("reconcile: releasing the pass's lease failed; it expires on its own", zap.Error(err))
		}
	}()

	st, prev, err := r.readState(pctx)
	if err != nil {
		return Summary{}, err
	}
	now := r.now()
	if !force && now.Before(st.due(r.cfg.Every)) {
		r.observe(st)
		return Summary{Skipped: true}, nil
	}
	p := &pass{r: r, st: st, prev: prev, owner: owner, sum: Summary{Started: now}}
	earliest := now.Add(-r.cfg.Lookback)
	if st.Pass != nil {
		p.sum.Resumed = true
		p.sum.Recovered, p.sum.Known = st.Pass.Recovered, st.Pass.Known
		p.since = st.Pass.Since
		if p.since.Before(earliest) {
			p.since = earliest
			p.st.Pass.Since = earliest
		}
	} else {
		p.since = earliest
		p.st.Pass = &passState{Since: p.since}
	}
	p.st.LastStart = now
	if err := p.save(pctx); err != nil {
		return p.sum, err
	}

	runErr := r.cfg.Provider.run(pctx, p)
	if cause := context.Cause(pctx); runErr != nil && cause != nil && ctx.Err() == nil {
		runErr = cause // the lease was lost
	}
	p.sum.Ended = r.now()
	p.st.LastEnd = p.sum.Ended
	p.st.Recovered = p.sum.Recovered
	if runErr == nil {
		p.st.LastResult, p.st.LastError = resultOK, ""
		p.st.LastSuccess = p.sum.Ended
		p.st.NotBefore = time.Time{}
		p.st.Pass = nil
	} else {
		p.st.LastResult, p.st.LastError = resultFailed, r.scrub(runErr.Error())
		p.st.Pass.Recovered, p.st.Pass.Known = p.sum.Recovered, p.sum.Known
		var limited *RateLimitedError
		if errors.As(runErr, &limited) {
			p.st.NotBefore = limited.Until
		}
	}
	if !errors.Is(runErr, errLeaseLost) {
		sctx, done := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
		err := p.save(sctx)
		done()
		if err != nil && runErr == nil {
			runErr = fmt.Errorf("saving the pass's outcome: %w", err)
		}
	}
	if runErr == nil {
		r.lastSuccess.Set(float64(p.sum.Ended.Unix()))
	}
	return p.sum, runErr
}

// renew keeps the lease while the pass runs; when another instance has
// taken it (it expired), or it could not be renewed before it expired, the
// pass is cancelled. The returned function stops renewing.
func (r *Reconciler) renew(ctx context.Context, cancel context.CancelCauseFunc, owner string) (stop func()) {
	quit, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(r.lease / 3)
		defer t.Stop()
		expires := time.Now().Add(r.lease)
		for {
			select {
			case <-quit:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			err := r.cfg.Store.Renew(ctx, r.leaseKey, owner, r.lease)
			switch {
			case err == nil:
				expires = time.Now().Add(r.lease)
			case errors.Is(err, store.ErrNotOwner):
				cancel(errLeaseLost)
				return
			case time.Now().After(expires):
				cancel(errLeaseLost)
				return
			default:
				r.logger.Warn("reconcile: renewing the pass's lease failed; trying again", zap.Error(err))
			}
		}
	}()
	return func() {
		close(quit)
		<-stopped
	}
}

// observe takes the shared state's last success into this instance's
// gauge, whichever instance ran the pass.
func (r *Reconciler) observe(st state) {
	if !st.LastSuccess.IsZero() {
		r.lastSuccess.Set(float64(st.LastSuccess.Unix()))
	}
}

// scrub removes the provider's key or token from s: no error text from a
// provider's API, a transport or a store reaches a log, the state or the
// admin API with it.
func (r *Reconciler) scrub(s string) string {
	if secret := r.cfg.Provider.secret(); secret != "" {
		s = strings.ReplaceAll(s, secret, "[redacted]")
	}
	return s
}
