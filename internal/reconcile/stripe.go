package reconcile

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/tidwall/gjson"
	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
)

// Stripe reconciles a Stripe webhook endpoint (docs/reconcile.md: Stripe):
// every page of `GET /v1/events?delivery_success=false&created[gte]=…`, and
// each event whose key the route has not taken enters the route, signed as
// Stripe signs a delivery.
type Stripe struct {
	// APIKey is the key the pass reads events with: a restricted key
	// (rk_…) with read access to Events and nothing else.
	APIKey string
	// APIURL is Stripe's API. Default: https://api.stripe.com.
	APIURL string
	// Types, when set, are the event types the endpoint is subscribed to
	// (Stripe's `types` filter, at most 20, `*` wildcards allowed): Stripe
	// lists the events that any endpoint of the account failed to take,
	// and without it the route is given the types it did not subscribe to
	// as well. Default: every type.
	Types []string
}

// stripeAPI is Stripe's API.
const stripeAPI = "https://api.stripe.com"

// stripeMaxTypes is the most event types Stripe's `types` filter takes.
const stripeMaxTypes = 20

// The headers of a Stripe delivery, besides Stripe-Signature
// (https://docs.stripe.com/webhooks).
const (
	stripeContentType = "application/json; charset=utf-8"
	stripeUserAgent   = "Stripe/1.0 (+https://stripe.com/docs/webhooks)"
)

// Name implements Provider.
func (*Stripe) Name() string { return "stripe" }

// MaxLookback implements Provider: Stripe lists events of the last 30 days
// ("List events, going back up to 30 days", Stripe's API reference).
func (*Stripe) MaxLookback() time.Duration { return 30 * 24 * time.Hour }

func (*Stripe) needsSink() bool  { return true }
func (s *Stripe) secret() string { return s.APIKey }

func (s *Stripe) check() error {
	if s.APIKey == "" {
		return errors.New("reconcile for stripe needs api_key: a restricted key with read access to Events")
	}
	if s.APIURL != "" {
		if err := checkAPIURL(s.APIURL); err != nil {
			return err
		}
	}
	if len(s.Types) > stripeMaxTypes {
		return fmt.Errorf("reconcile events: Stripe filters on at most %d event types, not %d", stripeMaxTypes, len(s.Types))
	}
	return nil
}

// stripeCursor is where a Stripe pass is: the last event of the last page
// it finished. Stripe lists events newest first, and a list cursor is an
// object, so events created while the pass runs do not shift its pages.
type stripeCursor struct {
	StartingAfter string `json:"starting_after"`
}

// stripeList is a page of Stripe's list of events.
type stripeList struct {
	Data    []json.RawMessage `json:"data"`
	HasMore bool              `json:"has_more"`
}

// run implements Provider.
func (s *Stripe) run(ctx context.Context, p *pass) error {
	base := s.APIURL
	if base == "" {
		base = stripeAPI
	}
	api, err := p.api(base, http.Header{
		"Authorization": {"Bearer " + s.APIKey},
		"User-Agent":    {userAgent},
	}, limitPolicy{floor: backoffBase, reason: stripeReason})
	if err != nil {
		return err
	}
	var cur stripeCursor
	resumed := p.cursor(&cur)
	for {
		q := url.Values{
			"delivery_success": {"false"},
			"created[gte]":     {strconv.FormatInt(p.since.Unix(), 10)},
			"limit":            {"100"},
		}
		if cur.StartingAfter != "" {
			q.Set("starting_after", cur.StartingAfter)
		}
		for i, t := range s.Types {
			q.Set("types["+strconv.Itoa(i)+"]", t)
		}
		resp, err := api.do(ctx, http.MethodGet, "/v1/events", q, nil)
		if err != nil && resumed && errIs(err, http.StatusBadRequest, http.StatusNotFound) {
			// the event the saved cursor names is gone from the list
			p.r.logger.Info("reconcile: Stripe refused the saved cursor; the pass starts from the newest event", zap.Error(err))
			cur, resumed = stripeCursor{}, false
			continue
		}
		if err != nil {
			return err
		}
		resumed = false
		var page stripeList
		if err := json.Unmarshal(resp.Body, &page); err != nil {
			return fmt.Errorf("GET /v1/events: reading the answer: %w", err)
		}
		for _, raw := range page.Data {
			if err := s.recover(ctx, p, raw); err != nil {
				return err
			}
		}
		if len(page.Data) == 0 || !page.HasMore {
			return nil
		}
		cur.StartingAfter = gjson.GetBytes(page.Data[len(page.Data)-1], "id").Str
		if cur.StartingAfter == "" {
			return errors.New("GET /v1/events: an event without an id")
		}
		if err := p.checkpoint(ctx, cur); err != nil {
			return err
		}
	}
}

// recover enters one undelivered event as Stripe would deliver it.
func (s *Stripe) recover(ctx context.Context, p *pass, raw json.RawMessage) error {
	id := gjson.GetBytes(raw, "id").Str
	if id == "" {
		return errors.New("GET /v1/events: an event without an id")
	}
	body, err := stripeBody(raw)
	if err != nil {
		return fmt.Errorf("event %s: %w", id, err)
	}
	ev := &event.Request{
		Method:  http.MethodPost,
		Proto:   "https",
		Headers: "Content-Type: " + stripeContentType + "\r\nUser-Agent: " + stripeUserAgent + "\r\n",
		Body:    body,
	}
	return p.enter(ctx, ev, id)
}

// stripeBody writes an event of the list as Stripe writes a delivery's
// body: the event object, indented by two spaces from the left margin. The
// list nests it deeper; re-indenting changes white space only (strings and
// numbers are copied as they are). What differs from the delivery Stripe
// would have sent is said in docs/reconcile.md (Stripe: what the
// application receives).
func stripeBody(raw json.RawMessage) ([]byte, error) {
	var b bytes.Buffer
	b.Grow(len(raw))
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// stripeReason is Stripe's short reason of an error: its type and code
// (its message may quote the key's last characters, so it is left out).
func stripeReason(body []byte) string {
	return reasonOf(body, "error.type", "error.code")
}

// userAgent identifies the module's requests to the providers' APIs.
const userAgent = "caddy-webhook-idempotency (reconcile)"

// checkAPIURL accepts an http or https URL with a host.
func checkAPIURL(v string) error {
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" {
		return fmt.Errorf("invalid reconcile api_url %q: want an http(s) URL with a host and no query", v)
	}
	return nil
}
