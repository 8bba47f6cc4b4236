package reconcile

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// Provider is one provider's side of a pass: how it lists what it failed
// to deliver, and how an event is recovered. *Stripe and *GitHub are the
// providers; each is configured by its exported fields.
type Provider interface {
	// Name is the provider's name, as the Caddyfile spells it.
	Name() string
	// MaxLookback is how long the provider keeps what a pass reads.
	MaxLookback() time.Duration

	check() error
	needsSink() bool
	// secret is the key or token, removed from every error text.
	secret() string
	// run runs a pass over p's window from p's cursor, saving the cursor
	// with p.checkpoint after each page.
	run(ctx context.Context, p *pass) error
}

// pass is one pass in progress: its window, its state, its counts.
type pass struct {
	r     *Reconciler
	owner string
	since time.Time
	st    state
	prev  []byte // the state record as last written
	sum   Summary
}

// cursor decodes the provider's cursor saved by the pass this one resumes
// into v; it reports false when there is none.
func (p *pass) cursor(v any) bool {
	if p.st.Pass == nil || len(p.st.Pass.Cursor) == 0 {
		return false
	}
	if err := json.Unmarshal(p.st.Pass.Cursor, v); err != nil {
		p.r.logger.Warn("reconcile: the saved cursor does not decode; the pass starts from the beginning", zap.Error(err))
		return false
	}
	return true
}

// checkpoint saves the provider's cursor after a page, with the counts so
// far: a pass that stops later resumes from here.
func (p *pass) checkpoint(ctx context.Context, cursor any) error {
	js, err := json.Marshal(cursor)
	if err != nil {
		return err
	}
	p.st.Pass.Cursor = js
	p.st.Pass.Recovered, p.st.Pass.Known = p.sum.Recovered, p.sum.Known
	return p.save(ctx)
}

// save writes the pass's state.
func (p *pass) save(ctx context.Context) error {
	rec, err := p.r.writeState(ctx, p.owner, p.prev, p.st)
	if err != nil {
		return err
	}
	p.prev = rec
	return nil
}

// storeKey returns the route's key of ev, and its store key.
func (p *pass) storeKey(ev *event.Request, providerID string) (key, storeKey string, err error) {
	key = providerID
	if p.r.cfg.KeyOf != nil {
		if key, err = p.r.cfg.KeyOf(ev); err != nil {
			return "", "", fmt.Errorf("the route's key of event %s: %w", providerID, err)
		}
	}
	return key, p.r.cfg.Namespace + ":" + key, nil
}

// state returns the route's state of a store key: absent, in flight or
// completed (an inbox's acceptance completes the key).
func (p *pass) state(ctx context.Context, storeKey string) (store.KeyState, error) {
	info, err := p.r.cfg.Store.Inspect(ctx, storeKey)
	if err != nil {
		return "", fmt.Errorf("looking up key %s: %w", storeKey, err)
	}
	return info.State, nil
}

// enter signs ev toward the application as its provider would have sent it
// now, resolves its key as the route does, and enters it through the sink,
// which takes it unless the route has its key already.
func (p *pass) enter(ctx context.Context, ev *event.Request, providerID string) error {
	r := p.r
	now := r.now()
	hr := &http.Request{Method: ev.Method, URL: &url.URL{Path: ev.URI}, Header: event.ParseHeaderBlock(ev.Headers)}
	body, err := r.cfg.Signer.Sign(hr, ev.Body, now)
	if err != nil {
		return fmt.Errorf("signing event %s: %w", providerID, err)
	}
	ev.Body = body
	ev.Headers = event.HeaderBlock(hr.Header, event.SkipInboxHeader, nil)
	ev.Source, ev.Received = r.cfg.Source, now
	if ev.Key, ev.StoreKey, err = p.storeKey(ev, providerID); err != nil {
		return err
	}
	hash := sha256.Sum256(ev.Body)
	entry, err := r.cfg.Sink.Enter(ctx, ev, &hash)
	if err != nil {
		return fmt.Errorf("entering event %s: %w", providerID, err)
	}
	if !entry.Entered {
		p.sum.Known++
		return nil
	}
	p.sum.Recovered++
	r.recovered.Inc()
	if r.cfg.Archive != nil {
		r.cfg.Archive(ev, entry.Status)
	}
	if ce := r.logger.Check(zap.DebugLevel, "reconcile: event recovered"); ce != nil {
		ce.Write(zap.String("key", ev.Key), zap.String("event", providerID), zap.Int("status", entry.Status))
	}
	return nil
}

// redelivered counts an event the provider was asked to redeliver.
func (p *pass) redelivered(key, providerID string) {
	p.sum.Recovered++
	p.r.recovered.Inc()
	if ce := p.r.logger.Check(zap.DebugLevel, "reconcile: redelivery requested"); ce != nil {
		ce.Write(zap.String("key", key), zap.String("delivery", providerID))
	}
}

// api returns a client of the provider's API at base, sending header with
// every request.
func (p *pass) api(base string, header http.Header, policy limitPolicy) (*apiClient, error) {
	u, err := url.Parse(base)
	if err != nil {
		return nil, fmt.Errorf("invalid api_url %q: %v", base, err)
	}
	return &apiClient{p: p, base: u, header: header, policy: policy}, nil
}
