package reconcile

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/inbox"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/redact"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
	"github.com/webhookguard/caddy-webhook-idempotency/store/filestore"
	"github.com/webhookguard/caddy-webhook-idempotency/store/redisstore"
)

// The harness of the package's tests: real stores (a bbolt file in a
// temporary directory, a real redis-server), real inboxes, a real
// application that records what it gets, and reconcilers whose waits are
// recorded instead of slept.

// endpointSecret is the Stripe endpoint's signing secret the application
// verifies deliveries with.
const endpointSecret = "whsec_test_reconcile_endpoint"

// openFileStore opens a file store at path; the returned function closes
// it (a restart of the one instance that has the file).
func openFileStore(t *testing.T, path string) (*filestore.Store, func()) {
	t.Helper()
	ctx, cancel := testkit.NewContext(t)
	s := &filestore.Store{Path: path}
	if err := s.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	closed := false
	closeFn := func() {
		if !closed {
			closed = true
			_ = s.Cleanup()
			cancel()
		}
	}
	t.Cleanup(closeFn)
	return s, closeFn
}

// openRedisStore opens a redis store on addr: one instance's handle.
func openRedisStore(t *testing.T, addr string) *redisstore.Store {
	t.Helper()
	ctx, cancel := testkit.NewContext(t)
	s := &redisstore.Store{Addresses: []string{addr}, Timeout: caddy.Duration(5 * time.Second)}
	if err := s.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.Cleanup()
		cancel()
	})
	return s
}

// newFileStore is a file store in a fresh directory.
func newFileStore(t *testing.T) *filestore.Store {
	s, _ := openFileStore(t, filepath.Join(t.TempDir(), "store.db"))
	return s
}

// app is the application: a real HTTP server that hands every request,
// its body read, to fn.
type app struct {
	*httptest.Server
}

func newApp(t *testing.T, fn func(w http.ResponseWriter, r *http.Request, body []byte)) *app {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("the application reading a request: %v", err)
			return
		}
		fn(w, r, body)
	}))
	t.Cleanup(srv.Close)
	return &app{srv}
}

// waits records the waits a reconciler asked for, without waiting.
type waits struct {
	mu sync.Mutex
	d  []time.Duration
}

func (w *waits) sleep(ctx context.Context, d time.Duration) error {
	w.mu.Lock()
	w.d = append(w.d, d)
	w.mu.Unlock()
	return ctx.Err()
}

func (w *waits) all() []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.d)
}

// newReconciler builds a reconciler whose waits go to w (nil: real waits).
func newReconciler(t *testing.T, cfg Config, w *waits) *Reconciler {
	t.Helper()
	if cfg.Source == "" {
		cfg.Source = "stripe"
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "idem:" + cfg.Source
	}
	if cfg.Every == 0 {
		cfg.Every = DefaultEvery
	}
	if cfg.Lookback == 0 {
		cfg.Lookback = 24 * time.Hour
	}
	if cfg.TTL == 0 {
		cfg.TTL = 24 * time.Hour
	}
	if cfg.Signer == nil {
		cfg.Signer = signature.NewStripeSigner(endpointSecret)
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if w != nil {
		r.sleep = w.sleep
	}
	t.Cleanup(r.Stop)
	return r
}

// newInbox is a real inbox on s that delivers to the application.
func newInbox(t *testing.T, s store.Store, source, deliverTo string) *inbox.Inbox {
	t.Helper()
	rd, _ := redact.New(nil)
	ib, err := inbox.New(inbox.Config{
		Source: source, DeliverTo: deliverTo, Respond: 202,
		Retries: []time.Duration{50 * time.Millisecond, 50 * time.Millisecond},
		Timeout: 5 * time.Second, Concurrency: 4, TTL: time.Hour, Namespace: "idem:" + source,
		Redact: rd, Logger: zap.NewNop(),
	}, s)
	if err != nil {
		t.Fatal(err)
	}
	ib.Start()
	t.Cleanup(ib.Stop)
	return ib
}

// The inbox is the sink's acceptor as it is.
var _ Acceptor = (*inbox.Inbox)(nil)
