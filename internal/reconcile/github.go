package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// GitHub reconciles a repository's or an organization's webhook
// (docs/reconcile.md: GitHub): the hook's deliveries over the lookback,
// grouped by GUID (a redelivery shares its event's GUID); each GUID whose
// latest attempt failed and that the route never took is redelivered by
// GitHub (`POST …/deliveries/<id>/attempts`), and reaches the route as
// GitHub's own delivery. A GUID the route completed while GitHub counted
// the attempt as failed (the answer took longer than GitHub's 10 s) is
// left alone.
type GitHub struct {
	// Token reads and redelivers the hook's deliveries: a fine-grained
	// token with write access to the repository's (or organization's)
	// webhooks, or a classic token with the repo (admin:org_hook) scope.
	Token string
	// Hook is the hook's path: repos/<owner>/<repo>/hooks/<id> or
	// orgs/<org>/hooks/<id>.
	Hook string
	// APIURL is GitHub's API. Default: https://api.github.com.
	APIURL string
}

// githubAPI is GitHub's API.
const githubAPI = "https://api.github.com"

// githubHook is the rule of Hook.
var githubHook = regexp.MustCompile(`^(repos/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+|orgs/[A-Za-z0-9_.-]+)/hooks/[0-9]+$`)

// Name implements Provider.
func (*GitHub) Name() string { return "github" }

// MaxLookback implements Provider: GitHub keeps a hook's deliveries for 3
// days (https://docs.github.com/en/webhooks/testing-and-troubleshooting-webhooks/redelivering-webhooks).
func (*GitHub) MaxLookback() time.Duration { return 3 * 24 * time.Hour }

func (*GitHub) needsSink() bool  { return false }
func (g *GitHub) secret() string { return g.Token }

func (g *GitHub) check() error {
	if g.Token == "" {
		return errors.New("reconcile for github needs token: one that may read and redeliver the hook's deliveries")
	}
	segments := strings.Split(g.Hook, "/")
	if !githubHook.MatchString(g.Hook) || slices.Contains(segments, "..") || slices.Contains(segments, ".") {
		return fmt.Errorf("invalid reconcile hook %q: want repos/<owner>/<repo>/hooks/<id> or orgs/<org>/hooks/<id>", g.Hook)
	}
	if g.APIURL != "" {
		return checkAPIURL(g.APIURL)
	}
	return nil
}

// githubDelivery is an item of a hook's deliveries, as GitHub's REST
// description's `hook-delivery-item` schema gives it (the fields used).
type githubDelivery struct {
	ID          int64     `json:"id"`
	GUID        string    `json:"guid"`
	DeliveredAt time.Time `json:"delivered_at"`
	Redelivery  bool      `json:"redelivery"`
	Status      string    `json:"status"`
	StatusCode  int       `json:"status_code"`
	Event       string    `json:"event"`
}

// ok reports whether the attempt succeeded: GitHub's status `OK`, or a
// 2xx (docs.github.com: "a failed delivery will have a status value that
// is not OK").
func (d *githubDelivery) ok() bool {
	return d.Status == "OK" || d.StatusCode >= 200 && d.StatusCode <= 299
}

// githubCursor is where a GitHub pass is: the cursor of the next page, and
// the GUIDs whose latest attempt was judged on an earlier page and whose
// earlier attempts may still come (those whose latest attempt was a
// redelivery, until their original shows): an earlier attempt is never
// taken for the latest, however the pass is cut.
type githubCursor struct {
	Cursor string   `json:"cursor,omitempty"`
	Open   []string `json:"open,omitempty"`
}

// run implements Provider.
func (g *GitHub) run(ctx context.Context, p *pass) error {
	base := g.APIURL
	if base == "" {
		base = githubAPI
	}
	api, err := p.api(base, http.Header{
		"Authorization":        {"Bearer " + g.Token},
		"Accept":               {"application/vnd.github+json"},
		"X-Github-Api-Version": {"2022-11-28"},
		"User-Agent":           {userAgent},
	}, limitPolicy{limited: githubLimited, floor: time.Minute, mutationGap: time.Second, reason: githubReason})
	if err != nil {
		return err
	}
	var cur githubCursor
	resumed := p.cursor(&cur)
	open := make(map[string]bool, len(cur.Open))
	for _, guid := range cur.Open {
		open[guid] = true
	}
	list := "/" + g.Hook + "/deliveries"
	for {
		q := url.Values{"per_page": {"100"}}
		if cur.Cursor != "" {
			q.Set("cursor", cur.Cursor)
		}
		resp, err := api.do(ctx, http.MethodGet, list, q, nil)
		if err != nil && resumed && cur.Cursor != "" && errIs(err, http.StatusBadRequest, http.StatusNotFound, http.StatusUnprocessableEntity) {
			// a cursor GitHub no longer knows: start over (the dedup
			// makes it safe)
			cur, resumed = githubCursor{}, false
			clear(open)
			continue
		}
		if err != nil {
			return err
		}
		resumed = false
		var page []githubDelivery
		if err := json.Unmarshal(resp.Body, &page); err != nil {
			return fmt.Errorf("GET %s: reading the answer: %w", list, err)
		}
		done := len(page) == 0
		for i := range page {
			d := &page[i]
			if d.DeliveredAt.Before(p.since) {
				// newest first: the rest of the list is older still
				done = true
				continue
			}
			if open[d.GUID] {
				if !d.Redelivery {
					delete(open, d.GUID) // its original: nothing older
				}
				continue
			}
			if d.Redelivery {
				open[d.GUID] = true
			}
			if err := g.judge(ctx, p, api, d); err != nil {
				return err
			}
		}
		next := githubNext(resp.Header.Values("Link"))
		if done || next == "" {
			return nil
		}
		cur.Cursor = next
		cur.Open = slices.Sorted(func(yield func(string) bool) {
			for guid := range open {
				if !yield(guid) {
					return
				}
			}
		})
		if err := p.checkpoint(ctx, cur); err != nil {
			return err
		}
	}
}

// judge acts on a GUID's latest attempt: a failed one whose key the route
// never took is redelivered.
func (g *GitHub) judge(ctx context.Context, p *pass, api *apiClient, d *githubDelivery) error {
	if d.ok() {
		return nil
	}
	ev := &event.Request{
		Method: http.MethodPost,
		Headers: "X-Github-Delivery: " + d.GUID + "\r\nX-Github-Event: " + d.Event +
			"\r\nX-Github-Hook-Id: " + g.Hook[strings.LastIndexByte(g.Hook, '/')+1:] + "\r\n",
	}
	key, storeKey, err := p.storeKey(ev, d.GUID)
	if err != nil {
		return err
	}
	st, err := p.state(ctx, storeKey)
	if err != nil {
		return err
	}
	if st != store.KeyAbsent {
		// completed (the app answered after GitHub's 10 s) or in
		// flight: the route has it
		p.sum.Known++
		return nil
	}
	path := "/" + g.Hook + "/deliveries/" + strconv.FormatInt(d.ID, 10) + "/attempts"
	if _, err := api.do(ctx, http.MethodPost, path, nil, nil); err != nil {
		return err
	}
	p.redelivered(key, d.GUID)
	return nil
}

// githubNext returns the cursor of the Link header's next page, "" on the
// last page. The request for it is built from the configured API URL,
// never from the link's own, so the token goes nowhere else.
func githubNext(links []string) string {
	for _, line := range links {
		for link := range strings.SplitSeq(line, ",") {
			target, params, ok := strings.Cut(link, ";")
			if !ok || !strings.Contains(strings.ReplaceAll(params, " ", ""), `rel="next"`) {
				continue
			}
			target = strings.Trim(strings.TrimSpace(target), "<>")
			if u, err := url.Parse(target); err == nil {
				return u.Query().Get("cursor")
			}
		}
	}
	return ""
}

// githubLimited reports whether a 403 is one of GitHub's rate limits
// rather than a refusal: its quota is spent, it asks for a wait, or it
// says so (https://docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api).
func githubLimited(resp *apiResponse) bool {
	if resp.Status != http.StatusForbidden {
		return false
	}
	return resp.Header.Get("Retry-After") != "" || resp.Header.Get("X-Ratelimit-Remaining") == "0" ||
		strings.Contains(strings.ToLower(githubReason(resp.Body)), "rate limit")
}

// githubReason is GitHub's message of an error.
func githubReason(body []byte) string { return reasonOf(body, "message") }
