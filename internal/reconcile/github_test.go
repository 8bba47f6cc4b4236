package reconcile

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-github/v72/github"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/record"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

const githubToken = "github_pat_11ReconcileTokenForTests_0123456789abcdef"

// completeKey marks key as the route's handler does when the application
// answered: completed with a record.
func completeKey(t *testing.T, s Store, key string) {
	t.Helper()
	ctx := context.Background()
	owner := store.NewOwner()
	if res, err := s.Claim(ctx, key, owner, time.Minute); err != nil || res.State != store.StateClaimed {
		t.Fatalf("claiming %s: %v %v", key, res.State, err)
	}
	var hash [32]byte
	if err := s.Complete(ctx, key, owner, record.Encode(nil, 200, nil, &hash), time.Hour); err != nil {
		t.Fatal(err)
	}
}

func githubReconciler(t *testing.T, s Store, srv *githubServer, w *waits) *Reconciler {
	return newReconciler(t, Config{Source: "github", Store: s, Lookback: 24 * time.Hour,
		Provider: &GitHub{Token: githubToken, Hook: srv.hook, APIURL: srv.URL}}, w)
}

// TestGitHubPassRedeliversWhatTheRouteNeverTook: the deliveries are
// grouped by GUID and each GUID judged by its latest attempt, across
// pages: a GUID whose latest attempt failed and whose key the route never
// took is redelivered once (with its latest delivery's id); a GUID GitHub
// counts as failed but the route completed (its answer took longer than
// GitHub's 10 s), one in flight, one redelivered with success, and one
// older than the lookback are not. A second pass redelivers nothing.
func TestGitHubPassRedeliversWhatTheRouteNeverTook(t *testing.T) {
	for _, tc := range []struct {
		name string
		hook string
		open func(t *testing.T) Store
	}{
		{"repository hook, file store", "repos/octo-org/hello.world/hooks/12", func(t *testing.T) Store { return newFileStore(t) }},
		{"organization hook, redis", "orgs/octo-org/hooks/7", func(t *testing.T) Store { return openRedisStore(t, testkit.StartRedis(t).Addr()) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.open(t)
			srv := newGitHubServer(t, githubToken, tc.hook)
			srv.pageSize = 3
			// oldest first; the server keeps them newest first
			srv.deliver("g-old", false, 0, 30*time.Hour) // before the lookback
			srv.deliver("g-retried-ok", false, 502, 10*time.Hour)
			retriedFail := srv.deliver("g-retried-fail", false, 0, 9*time.Hour)
			for i := range 4 {
				srv.deliver("g-fine-"+strconv.Itoa(i), false, 200, 8*time.Hour)
			}
			failed := srv.deliver("g-failed", false, 503, 7*time.Hour)
			srv.deliver("g-slow", false, 0, 6*time.Hour) // timed out at GitHub, completed by the route
			srv.deliver("g-flight", false, 0, 5*time.Hour)
			retriedFailAgain := srv.deliver("g-retried-fail", true, 500, 4*time.Hour)
			srv.deliver("g-retried-ok", true, 200, 3*time.Hour)
			for i := 4; i < 8; i++ {
				srv.deliver("g-fine-"+strconv.Itoa(i), false, 202, time.Hour)
			}
			completeKey(t, s, "idem:github:g-slow")
			ctx := context.Background()
			if _, err := s.Claim(ctx, "idem:github:g-flight", "live-request", time.Hour); err != nil {
				t.Fatal(err)
			}
			w := &waits{}
			r := githubReconciler(t, s, srv, w)
			sum, err := r.Run(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := srv.redeliveries(), []int64{retriedFailAgain, failed}; !slices.Equal(got, want) {
				t.Errorf("redelivered %v, want %v (g-retried-fail by its latest attempt, then g-failed)", got, want)
			}
			if retriedFail == retriedFailAgain {
				t.Fatal("the test's deliveries share an id")
			}
			if sum.Recovered != 2 || sum.Known != 2 {
				t.Errorf("pass: %+v, want 2 recovered, 2 known (g-slow, g-flight)", sum)
			}
			lists := srv.lists()
			for i, q := range lists {
				if q.Get("per_page") != "100" {
					t.Errorf("list %d asked per_page=%q, want 100", i+1, q.Get("per_page"))
				}
			}
			if len(lists) != 6 || lists[0].Get("cursor") != "" || lists[1].Get("cursor") == "" {
				t.Errorf("lists: %v, want 6 pages of 3 ending at the delivery older than the lookback", lists)
			}
			// GitHub asks for a second between changes
			if ws := w.all(); len(ws) != 1 || ws[0] <= 0 || ws[0] > time.Second {
				t.Errorf("waits %v, want one of up to a second between the two redeliveries", ws)
			}

			// the redeliveries succeeded: their latest attempts are OK
			if sum, err := r.Run(ctx); err != nil || sum.Recovered != 0 || len(srv.redeliveries()) != 2 {
				t.Errorf("second pass: %+v %v, redelivered %v", sum, err, srv.redeliveries())
			}
		})
	}
}

// TestGitHubPassResumesWithoutTakingAnOldAttemptForTheLatest: a pass that
// fails part-way resumes from the next page on another instance; a GUID
// whose successful redelivery came before the cut and whose failed
// original comes after it is not redelivered.
func TestGitHubPassResumesWithoutTakingAnOldAttemptForTheLatest(t *testing.T) {
	addr := testkit.StartRedis(t).Addr()
	srv := newGitHubServer(t, githubToken, "repos/octo/app/hooks/1")
	srv.pageSize = 2
	srv.deliver("g-straddle", false, 502, 20*time.Hour) // page 4
	srv.deliver("g-lost", false, 0, 19*time.Hour)       // page 4
	for i := range 4 {
		srv.deliver("g-fine-"+strconv.Itoa(i), false, 200, 10*time.Hour) // pages 2, 3
	}
	srv.deliver("g-failed", false, 500, 2*time.Hour)  // page 1
	srv.deliver("g-straddle", true, 200, 1*time.Hour) // page 1
	failing := true
	srv.onRequest = func(n int, r *http.Request) (int, http.Header, string) {
		if failing && r.Method == http.MethodGet && n >= 4 {
			return http.StatusBadGateway, nil, "Server Error"
		}
		return 0, nil, ""
	}
	ctx := context.Background()
	r1 := githubReconciler(t, openRedisStore(t, addr), srv, &waits{})
	sum, err := r1.Run(ctx)
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusBadGateway {
		t.Fatalf("first pass: %+v %v, want it stopped by the 502", sum, err)
	}
	if got := srv.redeliveries(); len(got) != 1 {
		t.Fatalf("first pass redelivered %v, want g-failed alone", got)
	}
	failing = false
	r2 := githubReconciler(t, openRedisStore(t, addr), srv, &waits{})
	sum, err = r2.Run(ctx)
	if err != nil || !sum.Resumed {
		t.Fatalf("resumed pass: %+v %v", sum, err)
	}
	var guids []string
	srv.mu.Lock()
	for _, id := range srv.redelivered {
		for _, d := range srv.deliveries {
			if d.ID == id {
				guids = append(guids, d.GUID)
			}
		}
	}
	srv.mu.Unlock()
	if !slices.Equal(guids, []string{"g-failed", "g-lost"}) {
		t.Errorf("redelivered %v, want g-failed and g-lost, never g-straddle (its latest attempt succeeded)", guids)
	}
}

// TestGitHubRateLimits: GitHub's rules for its limits
// (https://docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api):
// a spent quota (x-ratelimit-remaining 0) holds the next request until
// x-ratelimit-reset; a secondary limit waits its retry-after, else at
// least a minute, doubling; a 403 that is no rate limit fails the pass at
// once.
func TestGitHubRateLimits(t *testing.T) {
	s := newFileStore(t)
	srv := newGitHubServer(t, githubToken, "repos/octo/app/hooks/1")
	srv.pageSize = 1
	srv.deliver("g-1", false, 200, 2*time.Hour)
	srv.deliver("g-2", false, 200, time.Hour)
	reset := time.Now().Add(2 * time.Minute).Unix()
	srv.onOK = func(n int) http.Header {
		if n == 1 {
			return http.Header{"X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {strconv.FormatInt(reset, 10)}}
		}
		return nil
	}
	srv.onRequest = func(n int, _ *http.Request) (int, http.Header, string) {
		switch n {
		case 2:
			return http.StatusForbidden, nil, "You have exceeded a secondary rate limit. Please wait a few minutes before you try again."
		case 3:
			return http.StatusTooManyRequests, nil, "You have exceeded a secondary rate limit."
		case 4:
			return http.StatusForbidden, http.Header{"Retry-After": {"5"}}, "You have exceeded a secondary rate limit."
		}
		return 0, nil, ""
	}
	w := &waits{}
	r := githubReconciler(t, s, srv, w)
	ctx := context.Background()
	sum, err := r.Run(ctx)
	if err != nil || sum.Calls != 5 {
		t.Fatalf("pass: %+v %v", sum, err)
	}
	ws := w.all()
	if len(ws) != 4 {
		t.Fatalf("waits %v, want 4", ws)
	}
	untilReset := time.Until(time.Unix(reset, 0))
	if ws[0] < untilReset || ws[0] > untilReset+2*time.Second {
		t.Errorf("wait for the spent quota: %v, want until the reset (%v) and a second", ws[0], untilReset)
	}
	if want := []time.Duration{time.Minute, 2 * time.Minute, 5 * time.Second}; !slices.Equal(ws[1:], want) {
		t.Errorf("waits for secondary limits: %v, want %v", ws[1:], want)
	}

	srv.onOK = nil
	srv.onRequest = func(int, *http.Request) (int, http.Header, string) {
		return http.StatusForbidden, nil, "Resource not accessible by personal access token"
	}
	calls := len(srv.lists())
	_, err = r.Run(ctx)
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusForbidden || !strings.Contains(apiErr.Reason, "not accessible") {
		t.Fatalf("pass with a token lacking the permission: %v", err)
	}
	if got := len(srv.lists()) - calls; got != 1 {
		t.Errorf("a refusal was tried %d times, want once", got)
	}
}

// TestGitHubServerAgreesWithGitHubsClient: GitHub's own Go client
// (go-github) lists the scripted server's deliveries, page by page through
// the Link header's cursor, and redelivers one, as the pass does: the
// scripted answers have the shapes GitHub's client expects.
func TestGitHubServerAgreesWithGitHubsClient(t *testing.T) {
	srv := newGitHubServer(t, githubToken, "repos/octo/app/hooks/3")
	srv.pageSize = 2
	var want []string
	for i := range 5 {
		srv.deliver("g-"+strconv.Itoa(i), false, 200, time.Duration(10-i)*time.Hour)
		want = append([]string{"g-" + strconv.Itoa(i)}, want...)
	}
	c := github.NewClient(nil).WithAuthToken(githubToken)
	base, _ := c.BaseURL.Parse(srv.URL + "/")
	c.BaseURL = base
	ctx := context.Background()
	var got []string
	opts := &github.ListCursorOptions{PerPage: 100}
	for {
		ds, resp, err := c.Repositories.ListHookDeliveries(ctx, "octo", "app", 3, opts)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if d.GetStatus() != "OK" || d.GetStatusCode() != 200 || d.DeliveredAt == nil {
				t.Errorf("go-github read %v", d)
			}
			got = append(got, d.GetGUID())
		}
		if resp.Cursor == "" {
			break
		}
		opts.Cursor = resp.Cursor
	}
	if !slices.Equal(got, want) {
		t.Errorf("go-github listed %v, want %v", got, want)
	}
	id := srv.deliveries[len(srv.deliveries)-1].ID
	_, _, err := c.Repositories.RedeliverHookDelivery(ctx, "octo", "app", 3, id)
	var accepted *github.AcceptedError
	if err != nil && !errors.As(err, &accepted) {
		t.Fatalf("go-github's redelivery: %v", err)
	}
	if got := srv.redeliveries(); !slices.Equal(got, []int64{id}) {
		t.Errorf("redelivered %v", got)
	}
}

// TestGitHubTokenNowhere: GitHub's answer quoting the token that it
// refused leaves no trace of it in the error, the status, the logs or the
// store.
func TestGitHubTokenNowhere(t *testing.T) {
	s := openRedisStore(t, testkit.StartRedis(t).Addr())
	srv := newGitHubServer(t, "another-token", "repos/octo/app/hooks/1")
	srv.deliver("g-1", false, 500, time.Hour)
	logs := captureLogs()
	r := newReconciler(t, Config{Source: "github", Store: s, Logger: logs.logger,
		Provider: &GitHub{Token: githubToken, Hook: srv.hook, APIURL: srv.URL}}, &waits{})
	_, err := r.Run(context.Background())
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusUnauthorized || !strings.Contains(apiErr.Reason, "Bad credentials ([redacted])") {
		t.Fatalf("pass with a refused token: %v", err)
	}
	assertSecretNowhere(t, githubToken, r, s, logs, nil, err)

	// and with the token GitHub takes, a whole pass
	srv.token = githubToken
	if _, err := r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	assertSecretNowhere(t, githubToken, r, s, logs, nil)
}
