package reconcile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
)

// A provider's API as a pass calls it: a request, its retries, and the
// waits the provider's rate limits ask for (docs/reconcile.md: Rate
// limits). The key or token goes in a header and nowhere else: not in a
// URL, an error or a log line.

// Bounds of the calls to a provider's API.
const (
	// maxTries is how many times a call that failed on its way (a
	// transport error, a 5xx, a rate limit) is tried.
	maxTries = 6
	// maxBody bounds a response of the provider's API.
	maxBody = 32 << 20
	// backoffBase is the first wait after a failed call; it doubles.
	backoffBase = time.Second
	// maxBackoff bounds a wait that no header asked for.
	maxBackoff = 5 * time.Minute
)

// RateLimitedError ends a pass whose provider asked for a wait longer than
// a pass waits: the next pass runs no earlier than Until.
type RateLimitedError struct {
	Until time.Time
}

func (e *RateLimitedError) Error() string {
	return "rate limited by the provider until " + e.Until.UTC().Format(time.RFC3339)
}

// APIError is an answer of the provider's API that is not a success and
// not worth trying again (a 4xx other than a rate limit).
type APIError struct {
	Method, Path string
	Status       int
	// Reason is the provider's short reason (Stripe's error type and
	// code, GitHub's message), without the key or token.
	Reason string
}

func (e *APIError) Error() string {
	s := fmt.Sprintf("%s %s: %d %s", e.Method, e.Path, e.Status, http.StatusText(e.Status))
	if e.Reason != "" {
		s += " (" + e.Reason + ")"
	}
	return s
}

// limitPolicy is how a provider signals its rate limits.
type limitPolicy struct {
	// limited reports whether an answer is a rate limit (429 always is).
	limited func(resp *apiResponse) bool
	// floor is the least wait after a rate limit that names no time.
	floor time.Duration
	// mutationGap is the least time between two requests that change
	// something (GitHub asks for a second between them).
	mutationGap time.Duration
	// reason is the provider's short reason of an error answer.
	reason func(body []byte) string
}

// apiClient calls one provider's API for a pass.
type apiClient struct {
	p      *pass
	base   *url.URL
	header http.Header
	policy limitPolicy

	pausedUntil  time.Time // the provider's quota is spent until then
	lastMutation time.Time
}

// apiResponse is an answer, its body read.
type apiResponse struct {
	Status int
	Header http.Header
	Body   []byte
}

// do sends a request to path (below the base URL) with query and body,
// tries it again while it fails on its way or is rate limited, and returns
// a 2xx answer, an *APIError, a *RateLimitedError or a transport error.
func (c *apiClient) do(ctx context.Context, method, path string, query url.Values, body []byte) (*apiResponse, error) {
	r := c.p.r
	u := *c.base
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	u.RawQuery = query.Encode()
	rateLimits := 0
	for attempt := 1; ; attempt++ {
		if err := c.wait(ctx, method); err != nil {
			return nil, err
		}
		resp, err := c.send(ctx, method, u.String(), body)
		if err != nil {
			if ctx.Err() != nil || attempt == maxTries {
				return nil, fmt.Errorf("%s %s: %w", method, path, err)
			}
			if err := c.pause(ctx, backoff(attempt, backoffBase)); err != nil {
				return nil, err
			}
			continue
		}
		c.p.sum.Calls++
		c.noteQuota(resp)
		switch {
		case resp.Status >= 200 && resp.Status <= 299:
			return resp, nil
		case resp.Status == http.StatusTooManyRequests || c.policy.limited != nil && c.policy.limited(resp):
			rateLimits++
			if attempt == maxTries {
				return nil, &RateLimitedError{Until: r.now().Add(c.limitWait(resp, rateLimits))}
			}
			if err := c.pause(ctx, c.limitWait(resp, rateLimits)); err != nil {
				return nil, err
			}
		case resp.Status >= 500 || resp.Status == http.StatusRequestTimeout:
			if attempt == maxTries {
				return nil, c.apiError(method, path, resp)
			}
			wait := event.RetryAfter(resp.Header.Get("Retry-After"), r.now())
			if err := c.pause(ctx, max(wait, backoff(attempt, backoffBase))); err != nil {
				return nil, err
			}
		default:
			return nil, c.apiError(method, path, resp)
		}
	}
}

// send sends one request and reads its answer.
func (c *apiClient) send(ctx context.Context, method, target string, body []byte) (*apiResponse, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return nil, err
	}
	for name, values := range c.header {
		req.Header[name] = values
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.p.r.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxBody {
		return nil, fmt.Errorf("the answer is larger than %d bytes", maxBody)
	}
	return &apiResponse{Status: resp.StatusCode, Header: resp.Header, Body: b}, nil
}

// wait waits before a request while the provider's quota is spent, and
// between two changes where the provider asks for a gap.
func (c *apiClient) wait(ctx context.Context, method string) error {
	now := c.p.r.now()
	if d := c.pausedUntil.Sub(now); d > 0 {
		if err := c.pause(ctx, d); err != nil {
			return err
		}
		c.pausedUntil = time.Time{}
	}
	if method != http.MethodGet && c.policy.mutationGap > 0 {
		if !c.lastMutation.IsZero() {
			if d := c.lastMutation.Add(c.policy.mutationGap).Sub(c.p.r.now()); d > 0 {
				if err := c.pause(ctx, d); err != nil {
					return err
				}
			}
		}
		c.lastMutation = c.p.r.now()
	}
	return nil
}

// pause waits d, the lease renewed meanwhile; a wait longer than a pass
// waits ends the pass with a *RateLimitedError.
func (c *apiClient) pause(ctx context.Context, d time.Duration) error {
	r := c.p.r
	if d > r.maxWait() {
		return &RateLimitedError{Until: r.now().Add(d)}
	}
	return r.sleep(ctx, d)
}

// maxWait is the longest wait within a pass: Every, at most 15 minutes.
func (r *Reconciler) maxWait() time.Duration { return min(r.cfg.Every, 15*time.Minute) }

// noteQuota reads the quota headers GitHub sends with every answer
// (x-ratelimit-remaining, x-ratelimit-reset): once it is spent, no request
// is sent before the reset.
func (c *apiClient) noteQuota(resp *apiResponse) {
	if resp.Header.Get("X-Ratelimit-Remaining") != "0" {
		return
	}
	if reset, ok := unixHeader(resp.Header.Get("X-Ratelimit-Reset")); ok {
		c.pausedUntil = reset.Add(time.Second)
	}
}

// limitWait is the wait a rate-limited answer asks for (GitHub's rule,
// which fits Stripe too): Retry-After when it is given; else, when the
// quota is spent, until x-ratelimit-reset; else the policy's floor,
// doubling with each rate limit in a row.
func (c *apiClient) limitWait(resp *apiResponse, n int) time.Duration {
	now := c.p.r.now()
	if d := event.RetryAfter(resp.Header.Get("Retry-After"), now); d > 0 {
		return d
	}
	if resp.Header.Get("X-Ratelimit-Remaining") == "0" {
		if reset, ok := unixHeader(resp.Header.Get("X-Ratelimit-Reset")); ok && reset.After(now) {
			return reset.Sub(now) + time.Second
		}
	}
	return backoff(n, c.policy.floor)
}

// apiError is the error of an answer not worth trying again.
func (c *apiClient) apiError(method, path string, resp *apiResponse) error {
	e := &APIError{Method: method, Path: path, Status: resp.Status}
	if c.policy.reason != nil {
		e.Reason = c.p.r.scrub(c.policy.reason(resp.Body))
	}
	return e
}

// backoff is base doubled n-1 times, at most maxBackoff.
func backoff(n int, base time.Duration) time.Duration {
	d := base
	for i := 1; i < n && d < maxBackoff; i++ {
		d *= 2
	}
	return min(d, maxBackoff)
}

// unixHeader reads a header of Unix seconds.
func unixHeader(v string) (time.Time, bool) {
	secs, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || secs <= 0 {
		return time.Time{}, false
	}
	return time.Unix(secs, 0), true
}

// reasonOf returns the strings at paths in a JSON error body, joined with
// " / ", at most 200 bytes.
func reasonOf(body []byte, paths ...string) string {
	var parts []string
	for _, res := range gjson.GetManyBytes(body, paths...) {
		if res.Type == gjson.String && res.Str != "" {
			parts = append(parts, res.Str)
		}
	}
	s := strings.Join(parts, " / ")
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}

// errIs reports whether err is an *APIError with one of the statuses.
func errIs(err error, statuses ...int) bool {
	var e *APIError
	if !errors.As(err, &e) {
		return false
	}
	for _, s := range statuses {
		if e.Status == s {
			return true
		}
	}
	return false
}
