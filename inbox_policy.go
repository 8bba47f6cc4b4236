package webhookidempotency

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/cfparse"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/inbox"
	"github.com/webhookguard/caddy-webhook-idempotency/providers"
)

// The inbox's delivery policy (docs/inbox.md#delivery-policy): the
// application's own answer (`respond app within`), routes and drops, the
// breaker and newer_than; their configuration, rules and resolution into
// inbox.Config.

// InboxRouteConfig is a destination of the events that match a rule,
// besides deliver_to.
type InboxRouteConfig struct {
	// The events the route takes: `<key source>=<glob>`, the key source
	// `header:<Name>`, `json:<path>` or `query:<name>`, the glob matching
	// its value as a whole (`*` any run of characters, `?` one, `\` a
	// literal next character), e.g. `json:type=invoice.*`. Required.
	Match string `json:"match"`

	// The URL its events are delivered to. Placeholders such as `{env.X}`
	// are resolved at provision time. Required.
	To string `json:"to"`

	// The waits between its attempts. Default: the inbox's retries.
	Retries []caddy.Duration `json:"retries,omitempty"`

	// Its rate limit, `<n>/<s|m|h>`. Default: none (the inbox's rate is
	// deliver_to's).
	Rate string `json:"rate,omitempty"`

	// The key sources of its groups. Default: the inbox's order_by.
	OrderBy []string `json:"order_by,omitempty"`

	// TLS toward it. Default: the system's roots, no client certificate
	// (the inbox's tls is deliver_to's).
	TLS *InboxTLSConfig `json:"tls,omitempty"`
}

// hasOptions tells whether the route sets options of its own.
func (rc *InboxRouteConfig) hasOptions() bool {
	return len(rc.Retries) > 0 || rc.Rate != "" || len(rc.OrderBy) > 0 || rc.TLS != nil
}

// InboxBreakerConfig is a destination's breaker: once Percent of its last
// Of attempts failed, deliveries to it stop; one attempt goes through
// after Cooldown, which doubles up to 10m while such probes fail.
type InboxBreakerConfig struct {
	// The share of failed attempts that opens it, 1 to 100. Required.
	Percent int `json:"percent"`
	// The number of last attempts looked at, 1 to 1000. Required.
	Of int `json:"of"`
	// The first wait before a probe, at most 10m. Default: 30s.
	Cooldown caddy.Duration `json:"cooldown,omitempty"`
}

// Defaults and bounds of the policy's options.
const (
	defaultBreakerCooldown = 30 * time.Second
	maxBreakerOf           = 1000
)

// parseRespond reads `respond <status>` or `respond app [within
// <duration>]`.
func (ib *InboxConfig) parseRespond(d *caddyfile.Dispenser, args []string) error {
	if len(args) == 0 || args[0] != "app" {
		v, err := cfparse.OneValue(d, "inbox 'respond'", args)
		if err != nil {
			return err
		}
		if ib.Respond, err = checkInboxRespond(v); err != nil {
			return d.Errf("%v", err)
		}
		return nil
	}
	switch {
	case len(args) == 1:
	case len(args) == 3 && args[1] == "within":
		within, err := cfparse.PositiveDuration("inbox respond app within", args[2])
		if err != nil {
			return d.Errf("%v", err)
		}
		ib.RespondAppWithin = within
	default:
		return d.Errf("inbox 'respond app' takes 'within <duration>' or nothing (the preset's default), got '%s'", strings.Join(args[1:], " "))
	}
	ib.RespondApp = true
	return nil
}

// parseRoute reads `route <key source>=<glob> <url> [{ retries …; rate …;
// order_by …; tls { … } }]`; the dispenser is on `route`.
func (ib *InboxConfig) parseRoute(d *caddyfile.Dispenser) error {
	args := d.RemainingArgs()
	if len(args) != 2 {
		return d.Errf("inbox 'route' takes a rule and a URL, `route <key source>=<glob> <url>`, got %d values", len(args))
	}
	rc := InboxRouteConfig{Match: args[0], To: args[1]}
	if _, _, err := parseRule("route", rc.Match); err != nil {
		return d.Errf("%v", err)
	}
	if err := checkRouteURL(rc.To); err != nil {
		return d.Errf("%v", err)
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		name := d.Val()
		if !rc.hasOptions() {
			if err := ib.checkRoute(rc.To, true); err != nil {
				return d.Errf("%v", err)
			}
		}
		if name == "tls" {
			if rc.TLS != nil {
				return d.Err("inbox route tls given twice")
			}
			rc.TLS = new(InboxTLSConfig)
			if err := rc.TLS.unmarshalCaddyfile(d); err != nil {
				return err
			}
			continue
		}
		args := d.RemainingArgs()
		var err error
		switch name {
		case "retries":
			if err := cfparse.SomeValues(d, "inbox route 'retries'", args); err != nil {
				return err
			}
			for _, a := range args {
				dur, err := cfparse.PositiveDuration("inbox route retry", a)
				if err != nil {
					return d.Errf("%v", err)
				}
				rc.Retries = append(rc.Retries, dur)
			}
		case "rate":
			if rc.Rate, err = cfparse.OneValue(d, "inbox route 'rate'", args); err == nil {
				_, err = parseInboxRate(rc.Rate)
			}
		case "order_by":
			if err := cfparse.SomeValues(d, "inbox route 'order_by'", args); err != nil {
				return err
			}
			rc.OrderBy = args
			_, err = parseOrderBy(args)
		default:
			return d.Errf("unrecognized inbox route subdirective '%s' (want retries, rate, order_by or tls)", name)
		}
		if err != nil {
			return d.Errf("%v", err)
		}
	}
	ib.Routes = append(ib.Routes, rc)
	return nil
}

// checkRoute is the rule between a route to a URL, with options or not,
// and the inbox's earlier routes: the options of a destination are given
// once, on the first route to its URL; deliver_to's are the inbox's.
func (ib *InboxConfig) checkRoute(to string, options bool) error {
	if !options {
		return nil
	}
	if to == ib.DeliverTo {
		return fmt.Errorf("inbox route to %s (deliver_to) takes no options: deliver_to's are the inbox's", to)
	}
	for _, o := range ib.Routes {
		if o.To == to {
			return fmt.Errorf("inbox route to %s has options, and an earlier route to it sets them: give a destination's options once, on its first route", to)
		}
	}
	return nil
}

// checkRouteURL checks a route's URL.
func checkRouteURL(v string) error { return cfparse.CheckHTTPURL("inbox route", v) }

// parseRule parses `<key source>=<glob>` (of a route or a drop): the key
// source, then the glob after the first `=`.
func parseRule(what, rule string) (keySource, string, error) {
	src, glob, ok := strings.Cut(rule, "=")
	if !ok || glob == "" {
		return keySource{}, "", fmt.Errorf("invalid inbox %s rule '%s': want <key source>=<glob>, such as json:type=invoice.*", what, rule)
	}
	if src == "body" {
		return keySource{}, "", fmt.Errorf("invalid inbox %s rule '%s': the body is no value to match; want header:<name>, json:<path> or query:<name>", what, rule)
	}
	ks, err := parseKeySource(src)
	if err != nil {
		return keySource{}, "", fmt.Errorf("invalid inbox %s rule '%s': %v", what, rule, err)
	}
	if strings.HasSuffix(glob, `\`) && !strings.HasSuffix(glob, `\\`) {
		return keySource{}, "", fmt.Errorf("invalid inbox %s rule '%s': the glob ends with a lone '\\'", what, rule)
	}
	return ks, glob, nil
}

// ruleMatcher returns the test of a rule on a stored event: its key
// source's value matches the glob as a whole; an event without the value
// matches no glob.
func ruleMatcher(ks keySource, glob string) func(ev *event.Request) bool {
	return func(ev *event.Request) bool {
		v := eventValue(ks, ev)
		return v != "" && globMatch(glob, v)
	}
}

// globMatch reports whether s matches pattern as a whole: `*` matches any
// run of bytes (`/` and `.` included), `?` one byte, `\` makes the next
// byte literal. Linear in len(s) times the number of stars at worst.
func globMatch(pattern, s string) bool {
	p, i := 0, 0
	star, mark := -1, 0
	for i < len(s) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, i
			p++
			continue
		case p < len(pattern) && pattern[p] == '?':
			p++
			i++
			continue
		case p+1 < len(pattern) && pattern[p] == '\\' && pattern[p+1] == s[i]:
			p += 2
			i++
			continue
		case p < len(pattern) && pattern[p] != '\\' && pattern[p] == s[i]:
			p++
			i++
			continue
		case star >= 0:
			p, mark = star+1, mark+1
			i = mark
			continue
		}
		return false
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// parseBreaker parses `<p>% of <n> [cooldown <duration>]`.
func parseBreaker(args []string) (*InboxBreakerConfig, error) {
	bad := fmt.Errorf("invalid inbox breaker '%s': want <p>%% of <n> [cooldown <duration>], such as 50%% of 20", strings.Join(args, " "))
	if (len(args) != 3 && len(args) != 5) || args[1] != "of" || (len(args) == 5 && args[3] != "cooldown") {
		return nil, bad
	}
	pct, ok := strings.CutSuffix(args[0], "%")
	if !ok {
		return nil, bad
	}
	bc := &InboxBreakerConfig{}
	var err error
	if bc.Percent, err = strconv.Atoi(pct); err != nil {
		return nil, bad
	}
	if bc.Of, err = strconv.Atoi(args[2]); err != nil {
		return nil, bad
	}
	if len(args) == 5 {
		if bc.Cooldown, err = cfparse.PositiveDuration("inbox breaker cooldown", args[4]); err != nil {
			return nil, err
		}
	}
	return bc, bc.check()
}

// check applies the breaker's bounds.
func (bc *InboxBreakerConfig) check() error {
	if bc.Percent < 1 || bc.Percent > 100 {
		return fmt.Errorf("invalid inbox breaker %d%%: want 1%% to 100%%", bc.Percent)
	}
	if bc.Of < 1 || bc.Of > maxBreakerOf {
		return fmt.Errorf("invalid inbox breaker 'of %d': want 1 to %d attempts", bc.Of, maxBreakerOf)
	}
	if bc.Cooldown < 0 || time.Duration(bc.Cooldown) > inbox.MaxCooldown {
		return fmt.Errorf("invalid inbox breaker cooldown %s: want a positive duration up to %s", time.Duration(bc.Cooldown), inbox.MaxCooldown)
	}
	return nil
}

// parseNewerThan parses newer_than's key source.
func parseNewerThan(v string) (keySource, error) {
	if v == "body" {
		return keySource{}, fmt.Errorf("invalid inbox newer_than 'body': want header:<name>, json:<path> or query:<name>, a value that grows with each event, such as json:updated_at")
	}
	ks, err := parseKeySource(v)
	if err != nil {
		return keySource{}, fmt.Errorf("invalid inbox newer_than: %v", err)
	}
	return ks, nil
}

// defaultAnswerWithin is respond app within's default for a preset: its
// provider's documented timeout (docs/providers.md) less a fifth, at least
// a second, in whole seconds; 0 when the provider documents none. The
// margin covers the provider's network and the recording of the answer.
func defaultAnswerWithin(p *providers.Preset) time.Duration {
	if p == nil || p.Timeout == 0 {
		return 0
	}
	margin := max(p.Timeout/5, time.Second)
	return (p.Timeout - margin).Truncate(time.Second)
}

// resolveAnswerWithin resolves respond app within: its deadline (0 for
// off) and the inbox's timeout, which must leave an attempt the whole
// deadline.
func (h *Handler) resolveAnswerWithin() (within, timeout time.Duration, err error) {
	cfg := h.Inbox
	timeout = time.Duration(cfg.Timeout)
	if !cfg.RespondApp && cfg.RespondAppWithin == 0 {
		return 0, cmp0(timeout, defaultInboxTimeout), nil
	}
	within = time.Duration(cfg.RespondAppWithin)
	if within < 0 {
		return 0, 0, fmt.Errorf("invalid inbox respond app within %s: want a positive duration", within)
	}
	if within == 0 {
		p, _ := providers.Lookup(h.Provider)
		if within = defaultAnswerWithin(p); within == 0 {
			return 0, 0, fmt.Errorf("inbox 'respond app' needs 'within <duration>': %s", noTimeoutReason(h.Provider))
		}
	}
	if timeout == 0 {
		return within, max(defaultInboxTimeout, within), nil
	}
	if timeout < within {
		return 0, 0, fmt.Errorf("inbox respond app within %s is longer than the inbox timeout %s: an attempt ends at its timeout; raise timeout or shorten within", within, timeout)
	}
	return within, timeout, nil
}

// noTimeoutReason says why respond app has no default deadline.
func noTimeoutReason(preset string) string {
	if preset == "" {
		return "the route has no preset, whose provider's timeout would set it"
	}
	return "the " + preset + " preset's provider documents no timeout (docs/providers.md)"
}

// cmp0 returns d, or def when d is zero.
func cmp0(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// policyConfig resolves the delivery policy into ic: routes, the breaker,
// newer_than and the application's answer.
func (h *Handler) policyConfig(ic *inbox.Config) error {
	cfg := h.Inbox
	repl := caddy.NewReplacer()
	for i, rc := range cfg.Routes {
		ks, glob, err := parseRule("route", rc.Match)
		if err != nil {
			return err
		}
		r := inbox.Route{URL: repl.ReplaceKnown(rc.To, ""), Rule: rc.Match, Match: ruleMatcher(ks, glob)}
		if err := checkRouteURL(r.URL); err != nil {
			return err
		}
		prior := InboxConfig{DeliverTo: cfg.DeliverTo, Routes: cfg.Routes[:i]}
		if err := prior.checkRoute(rc.To, rc.hasOptions()); err != nil {
			return err
		}
		for _, d := range rc.Retries {
			if err := checkPositive("route retry", d); err != nil {
				return err
			}
			r.Retries = append(r.Retries, time.Duration(d))
		}
		if rc.Rate != "" {
			if r.Rate, err = parseInboxRate(rc.Rate); err != nil {
				return err
			}
		}
		if len(rc.OrderBy) > 0 {
			sources, err := parseOrderBy(rc.OrderBy)
			if err != nil {
				return err
			}
			r.OrderBy, r.GroupOf = rc.OrderBy, groupResolver(sources)
		}
		if rc.TLS != nil {
			if r.TLS, err = rc.TLS.tlsConfig(); err != nil {
				return err
			}
		}
		ic.Routes = append(ic.Routes, r)
	}
	if bc := cfg.Breaker; bc != nil {
		if err := bc.check(); err != nil {
			return err
		}
		ic.Breaker = inbox.Breaker{Percent: bc.Percent, Of: bc.Of, Cooldown: cmp0(time.Duration(bc.Cooldown), defaultBreakerCooldown)}
	}
	if cfg.NewerThan != "" {
		ks, err := parseNewerThan(cfg.NewerThan)
		if err != nil {
			return err
		}
		ordered := len(cfg.OrderBy) > 0
		for _, rc := range cfg.Routes {
			ordered = ordered || len(rc.OrderBy) > 0
		}
		if !ordered {
			return fmt.Errorf("inbox newer_than compares an event with the largest value its order_by group has delivered: give order_by")
		}
		ic.NewerThan = func(ev *event.Request) string { return eventValue(ks, ev) }
	}
	var err error
	if ic.AnswerWithin, ic.Timeout, err = h.resolveAnswerWithin(); err != nil {
		return err
	}
	ic.MaxAnswer = int64(h.MaxResponse)
	if h.archive != nil {
		ic.Archive = h.archiveEnded
	}
	return nil
}

// archiveEnded archives an event the inbox ended without delivering it
// (results.Stale).
func (h *Handler) archiveEnded(ev *event.Request, result string) { h.archiveEvent(ev, result, 0) }

// dropRules parses the inbox's drop rules.
func dropRules(list []string) ([]func(ev *event.Request) bool, error) {
	out := make([]func(ev *event.Request) bool, 0, len(list))
	for _, rule := range list {
		ks, glob, err := parseRule("drop", rule)
		if err != nil {
			return nil, err
		}
		out = append(out, ruleMatcher(ks, glob))
	}
	return out, nil
}
