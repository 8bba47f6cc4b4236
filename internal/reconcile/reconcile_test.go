package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// stripeInstance is one instance's reconciler of the stripe route, on its
// own handle to the shared store.
func stripeInstance(t *testing.T, s Store, srv *stripeServer, a *stripeApp) *Reconciler {
	return newReconciler(t, Config{Store: s, Provider: &Stripe{APIKey: stripeKey, APIURL: srv.URL},
		Sink: &RedeliverSink{URL: a.URL, Namespace: "idem:stripe", Store: s, TTL: time.Hour}}, &waits{})
}

// TestTwoInstancesRunOnePassAtATime: two instances sharing one Redis: while
// one runs a pass, the other's pass, asked for or scheduled, does not run;
// once it is done, the other's scheduled pass waits for Every, and one
// asked for finds every event taken.
func TestTwoInstancesRunOnePassAtATime(t *testing.T) {
	addr := testkit.StartRedis(t).Addr()
	a := newStripeApp(t)
	srv := newStripeServer(t, stripeKey)
	srv.add("c", 5, time.Hour)
	entered, release := make(chan struct{}), make(chan struct{})
	srv.onRequest = func(n int, _ url.Values) (int, http.Header) {
		if n == 1 {
			close(entered)
			<-release
		}
		return 0, nil
	}
	r1 := stripeInstance(t, openRedisStore(t, addr), srv, a)
	r2 := stripeInstance(t, openRedisStore(t, addr), srv, a)
	ctx := context.Background()
	type result struct {
		sum Summary
		err error
	}
	first := make(chan result, 1)
	go func() {
		sum, err := r1.Run(ctx)
		first <- result{sum, err}
	}()
	<-entered
	if _, err := r2.Run(ctx); !errors.Is(err, ErrBusy) {
		t.Errorf("a pass asked for on the other instance: %v, want ErrBusy", err)
	}
	if _, err := r2.run(ctx, false); !errors.Is(err, ErrBusy) {
		t.Errorf("a scheduled pass on the other instance: %v, want ErrBusy", err)
	}
	if _, err := r1.Run(ctx); !errors.Is(err, ErrBusy) {
		t.Errorf("a second pass on the same instance: %v, want ErrBusy", err)
	}
	if st, err := r2.Status(ctx); err != nil || st.Running || st.LastStart == nil {
		t.Errorf("the other instance's status during the pass: %+v %v, want the pass's start, not running here", st, err)
	}
	if st, _ := r1.Status(ctx); !st.Running {
		t.Errorf("the running instance's status: %+v, want running", st)
	}
	close(release)
	res := <-first
	if res.err != nil || res.sum.Recovered != 5 {
		t.Fatalf("the pass: %+v %v", res.sum, res.err)
	}
	if n := len(srv.queries()); n != 1 {
		t.Errorf("%d requests to Stripe, want the one of the one pass", n)
	}
	if sum, err := r2.run(ctx, false); err != nil || !sum.Skipped {
		t.Errorf("the other instance's scheduled pass right after: %+v %v, want it skipped until Every has passed", sum, err)
	}
	if sum, err := r2.Run(ctx); err != nil || sum.Recovered != 0 || sum.Known != 5 {
		t.Errorf("the other instance's pass: %+v %v, want every event known", sum, err)
	}
	for id, n := range a.counts() {
		if n != 1 {
			t.Errorf("the application took %s %d times", id, n)
		}
	}
}

// TestLeaseOfAStoppedInstanceExpires: an instance that stopped holding the
// lease (killed mid-pass) holds back the others until the lease expires;
// then another instance resumes its pass.
func TestLeaseOfAStoppedInstanceExpires(t *testing.T) {
	addr := testkit.StartRedis(t).Addr()
	a := newStripeApp(t)
	srv := newStripeServer(t, stripeKey)
	ids := srv.add("k", 150, time.Hour)
	failing := true
	srv.onRequest = func(n int, q url.Values) (int, http.Header) {
		if failing && q.Get("starting_after") != "" {
			return http.StatusServiceUnavailable, nil
		}
		return 0, nil
	}
	ctx := context.Background()
	s1 := openRedisStore(t, addr)
	if _, err := stripeInstance(t, s1, srv, a).Run(ctx); err == nil {
		t.Fatal("the first pass did not fail")
	}
	failing = false
	r2 := stripeInstance(t, openRedisStore(t, addr), srv, a)
	// killed while it held the lease of its next pass: nobody renews it.
	// The lease lasts long enough that the pass right after it comes
	// within it on a loaded machine; then it expires.
	if res, err := s1.Claim(ctx, "{idem:stripe}:reconcile", "killed-instance", 2*time.Second); err != nil || res.State != store.StateClaimed {
		t.Fatalf("claiming the lease: %v %v", res.State, err)
	}
	if _, err := r2.Run(ctx); !errors.Is(err, ErrBusy) {
		t.Fatalf("a pass while the killed instance's lease lasts: %v, want ErrBusy", err)
	}
	var sum Summary
	before := len(srv.queries())
	testkit.WaitFor(t, 30*time.Second, "the lease expires and a pass runs", func() (bool, string) {
		var err error
		sum, err = r2.Run(ctx)
		return err == nil, "last try: " + errString(err)
	})
	if !sum.Resumed || sum.Recovered != 150 || sum.Calls != 1 {
		t.Errorf("the pass after the lease expired: %+v, want it resumed with one call to 150 recovered", sum)
	}
	if q := srv.queries(); len(q) != before+1 || q[before].Get("starting_after") != ids[99] {
		t.Errorf("it asked for %v, want the page after %s alone", q[before:], ids[99])
	}
	if len(a.counts()) != 150 {
		t.Errorf("the application took %d events", len(a.counts()))
	}
}

func errString(err error) string {
	if err == nil {
		return "none"
	}
	return err.Error()
}

// TestPassStopsWhenItsLeaseIsTaken: a pass whose lease another instance
// took (it expired while the pass was stuck) stops, and does not
// overwrite the state the other instance now writes.
func TestPassStopsWhenItsLeaseIsTaken(t *testing.T) {
	srvRedis := testkit.StartRedis(t)
	s := openRedisStore(t, srvRedis.Addr())
	srv := newGitHubServer(t, githubToken, "repos/octo/app/hooks/1")
	srv.deliver("g-1", false, 500, time.Hour)
	stuck := make(chan struct{})
	srv.onRequest = func(n int, r *http.Request) (int, http.Header, string) {
		if n == 1 {
			close(stuck)
			<-r.Context().Done()
		}
		return 0, nil, ""
	}
	r := githubReconciler(t, s, srv, &waits{})
	r.lease = 300 * time.Millisecond
	done := make(chan error, 1)
	go func() {
		_, err := r.Run(context.Background())
		done <- err
	}()
	<-stuck
	// the lease expires and another instance takes it
	c := redis.NewClient(&redis.Options{Addr: srvRedis.Addr()})
	defer c.Close()
	ctx := context.Background()
	if err := c.Del(ctx, "{idem:github}:reconcile").Err(); err != nil {
		t.Fatal(err)
	}
	if res, err := s.Claim(ctx, "{idem:github}:reconcile", "other-instance", time.Minute); err != nil || res.State != store.StateClaimed {
		t.Fatalf("taking the lease: %v %v", res.State, err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, errLeaseLost) {
			t.Errorf("the pass ended with %v, want the lease lost", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the pass did not stop when its lease was taken")
	}
	if got := srv.redeliveries(); len(got) != 0 {
		t.Errorf("the stopped pass redelivered %v", got)
	}
	st, _, err := r.readState(ctx)
	if err != nil || st.LastEnd != (time.Time{}) {
		t.Errorf("the stopped pass wrote its end into the state: %+v %v", st, err)
	}
}

// TestScheduleRunsAndStops: the schedule runs a pass when asked to, and
// stops with the configuration, its goroutine gone.
func TestScheduleRunsAndStops(t *testing.T) {
	s := newFileStore(t)
	a := newStripeApp(t)
	srv := newStripeServer(t, stripeKey)
	srv.add("s", 2, time.Hour)
	var passes atomic.Int32
	srv.onRequest = func(int, url.Values) (int, http.Header) {
		passes.Add(1)
		return 0, nil
	}
	r := stripeInstance(t, s, srv, a)
	if r.Trigger() {
		t.Error("Trigger before Start asked for a pass")
	}
	r.Start()
	if !r.Trigger() {
		t.Fatal("Trigger after Start asked for no pass")
	}
	ctx := context.Background()
	testkit.WaitFor(t, 10*time.Second, "the asked-for pass", func() (bool, string) {
		st, err := r.Status(ctx)
		return err == nil && st.LastResult == resultOK, st.LastResult
	})
	if len(a.counts()) != 2 {
		t.Errorf("the application took %d events", len(a.counts()))
	}
	r.Stop()
	if r.Trigger() {
		t.Error("Trigger after Stop asked for a pass")
	}
	n := passes.Load()
	if n < 1 {
		t.Fatalf("%d passes", n)
	}
	st, _ := r.Status(ctx)
	if st.Running || st.NextPass.Before(time.Now().Add(DefaultEvery-time.Minute)) {
		t.Errorf("status after the pass: %+v, want the next pass about Every later", st)
	}
}

// TestStatusShape: the status the admin API shows, as JSON.
func TestStatusShape(t *testing.T) {
	s := newFileStore(t)
	a := newStripeApp(t)
	srv := newStripeServer(t, stripeKey)
	srv.add("j", 1, time.Hour)
	r := stripeInstance(t, s, srv, a)
	ctx := context.Background()
	if _, err := r.Run(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := r.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	js, _ := json.Marshal(st)
	var m map[string]any
	_ = json.Unmarshal(js, &m)
	for _, k := range []string{"source", "provider", "every", "lookback", "running", "last_start", "last_end", "last_result", "recovered", "last_success", "next_pass", "resuming"} {
		if _, ok := m[k]; !ok {
			t.Errorf("status has no %q: %s", k, js)
		}
	}
	if m["provider"] != "stripe" || m["every"] != "15m0s" || m["recovered"] != float64(1) || m["last_result"] != "ok" {
		t.Errorf("status: %s", js)
	}
	for _, k := range []string{"last_error", "rate_limited_until"} {
		if _, ok := m[k]; ok {
			t.Errorf("status of a good pass has %q: %s", k, js)
		}
	}
}

// TestConfigRules: each rule of the configuration, named in its error.
func TestConfigRules(t *testing.T) {
	s := newFileStore(t)
	sink := &RedeliverSink{URL: "http://127.0.0.1:1", Store: s}
	stripeP := func() Provider { return &Stripe{APIKey: stripeKey} }
	base := func(p Provider) Config {
		return Config{Source: "x", Namespace: "idem:x", Every: DefaultEvery, Lookback: 24 * time.Hour, TTL: 24 * time.Hour,
			Provider: p, Store: s, Sink: sink, Signer: nopSigner{}}
	}
	for _, tc := range []struct {
		name string
		edit func(c *Config)
		want string
	}{
		{"stripe", func(*Config) {}, ""},
		{"github", func(c *Config) { c.Provider, c.Sink = &GitHub{Token: "t", Hook: "repos/a/b/hooks/1"}, nil }, ""},
		{"every too short", func(c *Config) { c.Every = 30 * time.Second }, "every 30s is too short"},
		{"lookback over ttl", func(c *Config) { c.Lookback = 48 * time.Hour }, "lookback 48h0m0s is longer than the route's ttl 24h0m0s"},
		{"stripe keeps 30 days", func(c *Config) { c.Lookback, c.TTL = 31*24*time.Hour, 40*24*time.Hour }, "longer than stripe keeps events"},
		{"github keeps 3 days", func(c *Config) {
			c.Provider, c.Lookback, c.TTL = &GitHub{Token: "t", Hook: "orgs/a/hooks/1"}, 4*24*time.Hour, 30*24*time.Hour
		}, "longer than github keeps events"},
		{"stripe without a sink", func(c *Config) { c.Sink = nil }, "needs the route's inbox or the archive's redeliver_to"},
		{"stripe without a key", func(c *Config) { c.Provider = &Stripe{} }, "needs api_key"},
		{"too many types", func(c *Config) { c.Provider = &Stripe{APIKey: "k", Types: make([]string, 21)} }, "at most 20 event types"},
		{"bad api_url", func(c *Config) { c.Provider = &Stripe{APIKey: "k", APIURL: "ftp://x"} }, "invalid reconcile api_url"},
		{"github without a token", func(c *Config) { c.Provider = &GitHub{Hook: "orgs/a/hooks/1"} }, "needs token"},
		{"github bad hook", func(c *Config) { c.Provider = &GitHub{Token: "t", Hook: "repos/a/hooks/1"} }, "invalid reconcile hook"},
		{"github hook with a path trick", func(c *Config) { c.Provider = &GitHub{Token: "t", Hook: "repos/a/../b/hooks/1"} }, "invalid reconcile hook"},
		{"github hook climbing", func(c *Config) { c.Provider = &GitHub{Token: "t", Hook: "repos/../users/hooks/1"} }, "invalid reconcile hook"},
	} {
		c := base(stripeP())
		tc.edit(&c)
		err := c.Check()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestDefaultLookback: 3 days, or the route's ttl or the provider's
// retention when shorter.
func TestDefaultLookback(t *testing.T) {
	for _, tc := range []struct {
		p    Provider
		ttl  time.Duration
		want time.Duration
	}{
		{&Stripe{}, 24 * time.Hour, 24 * time.Hour},
		{&Stripe{}, 31 * 24 * time.Hour, 3 * 24 * time.Hour},
		{&GitHub{}, 31 * 24 * time.Hour, 3 * 24 * time.Hour},
		{&GitHub{}, time.Hour, time.Hour},
	} {
		if got := DefaultLookbackFor(tc.p, tc.ttl); got != tc.want {
			t.Errorf("%s with ttl %s: %s, want %s", tc.p.Name(), tc.ttl, got, tc.want)
		}
	}
}

type nopSigner struct{}

func (nopSigner) Sign(_ *http.Request, body []byte, _ time.Time) ([]byte, error) { return body, nil }

// countingStore counts the store calls of a pass.
type countingStore struct {
	Store
	calls atomic.Int32
}

func (c *countingStore) Claim(ctx context.Context, key, owner string, lease time.Duration) (store.ClaimResult, error) {
	c.calls.Add(1)
	return c.Store.Claim(ctx, key, owner, lease)
}

func (c *countingStore) Complete(ctx context.Context, key, owner string, rec []byte, ttl time.Duration) error {
	c.calls.Add(1)
	return c.Store.Complete(ctx, key, owner, rec, ttl)
}

func (c *countingStore) Release(ctx context.Context, key, owner string) error {
	c.calls.Add(1)
	return c.Store.Release(ctx, key, owner)
}

func (c *countingStore) Renew(ctx context.Context, key, owner string, lease time.Duration) error {
	c.calls.Add(1)
	return c.Store.Renew(ctx, key, owner, lease)
}

func (c *countingStore) Inspect(ctx context.Context, key string) (store.KeyInfo, error) {
	c.calls.Add(1)
	return c.Store.Inspect(ctx, key)
}

func (c *countingStore) ForgetIf(ctx context.Context, key string, rec []byte) (bool, error) {
	c.calls.Add(1)
	return c.Store.ForgetIf(ctx, key, rec)
}

// TestPassStoreCalls: what docs/reconcile.md says a pass costs in store
// round trips: 9 for the lease and the state (8 on the first pass, with no
// state to replace), 3 per page after the first, 1 per listed event.
func TestPassStoreCalls(t *testing.T) {
	a := newStripeApp(t)
	s := &countingStore{Store: newFileStore(t)}
	srv := newStripeServer(t, stripeKey)
	r := stripeInstance(t, s, srv, a)
	ctx := context.Background()
	for i, want := range []int32{8, 9} {
		s.calls.Store(0)
		if _, err := r.Run(ctx); err != nil {
			t.Fatal(err)
		}
		if got := s.calls.Load(); got != want {
			t.Errorf("pass %d over no event: %d store calls, want %d", i+1, got, want)
		}
	}
	srv.add("n", 150, time.Hour) // two pages
	s.calls.Store(0)
	if _, err := r.Run(ctx); err != nil {
		t.Fatal(err)
	}
	// the sink's claim and completion of each event go through the store
	// too (the route's delivery of it); the pass's own are 9 + 3 + 150
	if got, want := s.calls.Load(), int32(9+3+150+150); got != want {
		t.Errorf("pass over 150 events on two pages: %d store calls, want %d", got, want)
	}
}
