package webhookidempotency

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/dustin/go-humanize"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("webhook_idempotency", parseCaddyfile)
	httpcaddyfile.RegisterDirectiveOrder("webhook_idempotency", httpcaddyfile.Before, "reverse_proxy")
	httpcaddyfile.RegisterGlobalOption("webhook_idempotency", parseGlobalOption)
}

// parseCaddyfile sets up the handler from Caddyfile tokens. Across the
// Caddyfile's sites it also refuses two handlers that take the same source
// from a preset, naming both lines (Provision catches the rest of the
// config).
func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	// the dispenser was reset after the matcher lookahead: read the
	// directive's own position, then rewind for the parser
	h.Next()
	file, line := h.File(), h.Line()
	h.Reset()
	m := new(Handler)
	if err := m.UnmarshalCaddyfile(h.Dispenser); err != nil {
		return nil, err
	}
	if m.Provider != "" && m.Source == "" {
		stateKey := "webhook_idempotency.preset_source." + m.Provider
		if prev, ok := h.State[stateKey].(string); ok {
			return nil, fmt.Errorf("%s:%d: the %q preset is used without a 'source' here and at %s: both routes would share keys and replay one endpoint's answers to the other; give each a distinct 'source'",
				file, line, m.Provider, prev)
		}
		h.State[stateKey] = fmt.Sprintf("%s:%d", file, line)
	}
	return m, nil
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens. Syntax:
//
//	webhook_idempotency [<matcher>] [<provider>] [<option> <value>]... {
//		source        <label>
//		provider      <name>
//		secret        <secret>...
//		verify        <scheme> | off {
//			secret     <secret>...
//			header     <name>
//			algorithm  sha1|sha256|sha512
//			encoding   hex|base64
//			prefix     <string>
//			tolerance  <duration>
//			url        <public url>
//		}
//		header        <name>
//		key           <key source>...
//		ttl           <duration>
//		lease         <duration>
//		in_flight     conflict | wait [<timeout>] | proceed
//		cache_status  <code or class>...
//		mismatch      replay | reject
//		max_body      <size>
//		max_response  <size>
//		methods       <method>...
//		fail          open | closed
//		store         memory | redis [<redis url>] {
//			...
//		}
//		inbox         [<deliver_to>] {
//			...
//		}
//	}
//
// Any option that takes one value may also be written as `<option> <value>`
// on the directive line.
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // directive name
	var keySet, headerSet bool
	for first := true; d.NextArg(); first = false {
		name := d.Val()
		if inlineOptions[name] {
			var err error
			if name == "store" {
				h.StoreRaw, err = parseStore(d, true)
			} else if !d.NextArg() {
				return d.Errf("option '%s' on the directive line needs a value", name)
			} else if name == "verify" {
				err = h.parseVerify(d, []string{d.Val()}, true)
			} else {
				err = h.parseOption(d, name, []string{d.Val()}, &keySet, &headerSet)
			}
			if err != nil {
				return err
			}
			continue
		}
		if _, ok := providers[name]; ok && first {
			h.Provider = name
			continue
		}
		if first {
			return d.Errf("unknown provider or option '%s'", name)
		}
		return d.Errf("unknown option '%s' on the directive line", name)
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		name := d.Val()
		if !blockOptions[name] {
			return d.Errf("unrecognized subdirective '%s'", name)
		}
		var err error
		switch name {
		case "store":
			h.StoreRaw, err = parseStore(d, false)
		case "verify":
			err = h.parseVerify(d, d.RemainingArgs(), false)
		case "inbox":
			err = h.parseInbox(d)
		default:
			err = h.parseOption(d, name, d.RemainingArgs(), &keySet, &headerSet)
		}
		if err != nil {
			return err
		}
		if (name == "inbox" || name == "store") && h.Inbox != nil && strings.Contains(string(h.StoreRaw), `"module":"memory"`) {
			return d.Errf("inbox mode requires the redis store, not memory: an accepted event must survive a restart")
		}
	}
	return nil
}

// inlineOptions are the options that may be given on the directive line.
var inlineOptions = map[string]bool{
	"source": true, "provider": true, "secret": true, "verify": true, "header": true,
	"key": true, "ttl": true, "lease": true, "in_flight": true, "cache_status": true,
	"mismatch": true, "max_body": true, "max_response": true, "methods": true,
	"fail": true, "store": true,
}

// blockOptions are the subdirectives of the block: the inline options and
// inbox.
var blockOptions = func() map[string]bool {
	m := map[string]bool{"inbox": true}
	for k := range inlineOptions {
		m[k] = true
	}
	return m
}()

// parseInbox parses the inbox block:
//
//	inbox [<deliver_to>] {
//		deliver_to  <url>
//		respond     <status>
//		retries     <duration>...
//		jitter      <percent>
//		timeout     <duration>
//		concurrency <n>
//	}
func (h *Handler) parseInbox(d *caddyfile.Dispenser) error {
	if h.Inbox != nil {
		return d.Err("inbox given twice")
	}
	ib := new(InboxConfig)
	h.Inbox = ib
	// made here, so that it names the line of `inbox`, not the end of its block
	errNoURL := d.Err("inbox needs deliver_to: the URL events are delivered to")
	checkURL := func(v string) error {
		if !strings.Contains(v, "{") && !strings.HasPrefix(v, "http://") && !strings.HasPrefix(v, "https://") {
			return d.Errf("invalid inbox deliver_to '%s': want an http:// or https:// URL", v)
		}
		return nil
	}
	if d.NextArg() {
		if err := checkURL(d.Val()); err != nil {
			return err
		}
		ib.DeliverTo = d.Val()
		if d.NextArg() {
			return d.Errf("inbox takes one deliver_to URL, got extra argument '%s'", d.Val())
		}
	}
	one := func(name string) (string, error) {
		if !d.NextArg() || d.Val() == "" {
			return "", d.Errf("inbox '%s' needs a value", name)
		}
		v := d.Val()
		if d.NextArg() {
			return "", d.Errf("inbox '%s' takes exactly one value, got extra '%s'", name, d.Val())
		}
		return v, nil
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		name := d.Val()
		switch name {
		case "deliver_to":
			v, err := one(name)
			if err != nil {
				return err
			}
			if err := checkURL(v); err != nil {
				return err
			}
			if ib.DeliverTo != "" {
				return d.Errf("inbox deliver_to given twice: '%s' and '%s'", ib.DeliverTo, v)
			}
			ib.DeliverTo = v
		case "respond":
			v, err := one(name)
			if err != nil {
				return err
			}
			code, err := strconv.Atoi(v)
			if err != nil || code < 200 || code > 299 {
				return d.Errf("invalid inbox respond '%s': want a 2xx status, so the provider stops retrying", v)
			}
			ib.Respond = code
		case "retries":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return d.Errf("inbox 'retries' needs at least one duration")
			}
			ib.Retries = ib.Retries[:0]
			for _, a := range args {
				dur, err := parsePositiveDuration(a)
				if err != nil {
					return d.Errf("invalid inbox retry '%s': %v", a, err)
				}
				ib.Retries = append(ib.Retries, dur)
			}
		case "jitter":
			v, err := one(name)
			if err != nil {
				return err
			}
			if !strings.HasSuffix(v, "%") {
				return d.Errf("invalid inbox jitter '%s': want a percentage such as 10%%", v)
			}
			if _, err := parsePercent(v); err != nil {
				return d.Errf("invalid inbox jitter '%s': %v", v, err)
			}
			ib.Jitter = v
		case "timeout":
			v, err := one(name)
			if err != nil {
				return err
			}
			dur, err := parsePositiveDuration(v)
			if err != nil {
				return d.Errf("invalid inbox timeout '%s': %v", v, err)
			}
			ib.Timeout = dur
		case "concurrency":
			v, err := one(name)
			if err != nil {
				return err
			}
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return d.Errf("invalid inbox concurrency '%s': want a positive integer", v)
			}
			ib.Concurrency = n
		default:
			return d.Errf("unrecognized inbox subdirective '%s'", name)
		}
	}
	if ib.DeliverTo == "" {
		return errNoURL
	}
	return nil
}

// parseOption applies one single-line option with its values.
func (h *Handler) parseOption(d *caddyfile.Dispenser, name string, args []string, keySet, headerSet *bool) error {
	one := func() (string, error) {
		if len(args) != 1 {
			return "", d.Errf("'%s' takes exactly one value, got %d", name, len(args))
		}
		if args[0] == "" {
			return "", d.Errf("'%s' has an empty value", name)
		}
		return args[0], nil
	}
	atLeastOne := func() error {
		if len(args) == 0 {
			return d.Errf("'%s' needs at least one value", name)
		}
		for _, a := range args {
			if a == "" {
				return d.Errf("'%s' has an empty value", name)
			}
		}
		return nil
	}
	switch name {
	case "source":
		v, err := one()
		if err != nil {
			return err
		}
		if strings.ContainsAny(v, ":{}") {
			return d.Errf("invalid source '%s': it must not contain ':', '{' or '}'", v)
		}
		h.Source = v
	case "provider":
		v, err := one()
		if err != nil {
			return err
		}
		if _, ok := providers[v]; !ok {
			return d.Errf("unknown provider '%s'", v)
		}
		h.Provider = v
	case "secret":
		if err := atLeastOne(); err != nil {
			return err
		}
		if h.Verify == nil {
			h.Verify = new(VerifyConfig)
		}
		h.Verify.Secrets = append(h.Verify.Secrets, args...)
	case "header":
		v, err := one()
		if err != nil {
			return err
		}
		if *keySet {
			return d.Errf("'header' and 'key' both set the key: use one")
		}
		if !validHeaderName(v) {
			return d.Errf("invalid header '%s': not a valid header name", v)
		}
		*headerSet = true
		h.Key = []string{"header:" + v, "body"}
	case "key":
		if err := atLeastOne(); err != nil {
			return err
		}
		if *headerSet {
			return d.Errf("'header' and 'key' both set the key: use one")
		}
		for _, a := range args {
			if _, err := parseKeySource(a); err != nil {
				return d.Errf("%v", err)
			}
		}
		*keySet = true
		h.Key = append(h.Key, args...)
	case "ttl", "lease":
		v, err := one()
		if err != nil {
			return err
		}
		dur, err := parsePositiveDuration(v)
		if err != nil {
			return d.Errf("invalid %s '%s': %v", name, v, err)
		}
		if name == "ttl" {
			h.TTL = dur
		} else {
			h.Lease = dur
		}
	case "in_flight":
		if err := atLeastOne(); err != nil {
			return err
		}
		switch args[0] {
		case inFlightConflict, inFlightProceed:
			if len(args) != 1 {
				return d.Errf("in_flight %s takes no timeout", args[0])
			}
		case inFlightWait:
			if len(args) > 2 {
				return d.Errf("too many arguments to in_flight wait: want an optional timeout")
			}
			if len(args) == 2 {
				dur, err := parsePositiveDuration(args[1])
				if err != nil {
					return d.Errf("invalid in_flight wait timeout '%s': %v", args[1], err)
				}
				h.WaitTimeout = dur
			}
		default:
			return d.Errf("invalid in_flight '%s': want conflict, wait [<timeout>] or proceed", args[0])
		}
		h.InFlight = args[0]
	case "cache_status":
		if err := atLeastOne(); err != nil {
			return err
		}
		var s statusSet
		for _, a := range args {
			if err := addStatus(&s, a); err != nil {
				return d.Errf("%v", err)
			}
		}
		h.CacheStatus = append(h.CacheStatus, args...)
	case "mismatch":
		v, err := one()
		if err != nil {
			return err
		}
		if v != mismatchReplay && v != mismatchReject {
			return d.Errf("invalid mismatch '%s': want replay or reject", v)
		}
		h.Mismatch = v
	case "max_body", "max_response":
		v, err := one()
		if err != nil {
			return err
		}
		size, err := parseSize(v)
		if err != nil {
			return d.Errf("invalid %s '%s': %v", name, v, err)
		}
		if name == "max_body" {
			h.MaxBody = size
		} else {
			h.MaxResponse = size
		}
	case "methods":
		if err := atLeastOne(); err != nil {
			return err
		}
		for _, m := range args {
			if !validMethod(m) {
				return d.Errf("invalid method '%s'", m)
			}
			h.Methods = append(h.Methods, strings.ToUpper(m))
		}
	case "fail":
		v, err := one()
		if err != nil {
			return err
		}
		if v != failOpen && v != failClosed {
			return d.Errf("invalid fail '%s': want open or closed", v)
		}
		h.Fail = v
	}
	return nil
}

// parseVerify parses `verify <scheme>|off { ... }`; inline, there is no
// block.
func (h *Handler) parseVerify(d *caddyfile.Dispenser, args []string, inline bool) error {
	if len(args) > 1 {
		return d.Errf("verify takes one scheme, got %d arguments", len(args))
	}
	if h.Verify == nil {
		h.Verify = new(VerifyConfig)
	}
	v := h.Verify
	if len(args) == 1 {
		if !knownScheme(args[0]) {
			return d.Errf("unknown verify scheme '%s': want a provider name, hmac, token or off", args[0])
		}
		v.Scheme = args[0]
	}
	if inline {
		return nil
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		name := d.Val()
		sub := d.RemainingArgs()
		one := func() (string, error) {
			if len(sub) != 1 {
				return "", d.Errf("verify '%s' takes exactly one value, got %d", name, len(sub))
			}
			if sub[0] == "" {
				return "", d.Errf("verify '%s' has an empty value", name)
			}
			return sub[0], nil
		}
		switch name {
		case "secret":
			if len(sub) == 0 {
				return d.Errf("verify 'secret' needs at least one value")
			}
			for _, s := range sub {
				if s == "" {
					return d.Errf("verify 'secret' has an empty value")
				}
			}
			v.Secrets = append(v.Secrets, sub...)
		case "header":
			val, err := one()
			if err != nil {
				return err
			}
			v.Header = val
		case "algorithm":
			val, err := one()
			if err != nil {
				return err
			}
			switch val {
			case "sha1", "sha256", "sha512":
			default:
				return d.Errf("invalid algorithm '%s': want sha1, sha256 or sha512", val)
			}
			v.Algorithm = val
		case "encoding":
			val, err := one()
			if err != nil {
				return err
			}
			if val != "hex" && val != "base64" {
				return d.Errf("invalid encoding '%s': want hex or base64", val)
			}
			v.Encoding = val
		case "prefix":
			val, err := one()
			if err != nil {
				return err
			}
			v.Prefix = val
		case "tolerance":
			val, err := one()
			if err != nil {
				return err
			}
			dur, err := parsePositiveDuration(val)
			if err != nil {
				return d.Errf("invalid tolerance '%s': %v", val, err)
			}
			v.Tolerance = dur
		case "url":
			val, err := one()
			if err != nil {
				return err
			}
			if !strings.HasPrefix(val, "http://") && !strings.HasPrefix(val, "https://") && !strings.HasPrefix(val, "{") {
				return d.Errf("invalid url '%s': want an absolute http(s) URL", val)
			}
			v.URL = val
		default:
			return d.Errf("unrecognized verify subdirective '%s'", name)
		}
	}
	return nil
}

// parseStore parses `store <module> [args] [{ ... }]` with the store
// module's own Caddyfile parser and returns the module's JSON. The
// dispenser is on the `store` token; inline, only the module name is given
// and there is no block.
func parseStore(d *caddyfile.Dispenser, inline bool) (json.RawMessage, error) {
	if !d.NextArg() {
		return nil, d.Errf("store needs a type: memory or redis")
	}
	name := d.Val()
	info, err := caddy.GetModule("http.webhook_idempotency.stores." + name)
	if err != nil {
		return nil, d.Errf("unknown store '%s': want memory or redis", name)
	}
	unm, ok := info.New().(caddyfile.Unmarshaler)
	if !ok {
		return nil, d.Errf("store '%s' cannot be configured from a Caddyfile", name)
	}
	segment := caddyfile.NewDispenser([]caddyfile.Token{d.Token()})
	if !inline {
		segment = d.NewFromNextSegment()
	}
	if err := unm.UnmarshalCaddyfile(segment); err != nil {
		return nil, err
	}
	return caddyconfig.JSONModuleObject(unm, "module", name, nil), nil
}

// parseGlobalOption parses the global option block:
//
//	{
//		webhook_idempotency {
//			store memory | redis [<redis url>] { ... }
//		}
//	}
func parseGlobalOption(d *caddyfile.Dispenser, _ any) (any, error) {
	app := new(App)
	d.Next() // option name
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		switch d.Val() {
		case "store":
			raw, err := parseStore(d, false)
			if err != nil {
				return nil, err
			}
			app.StoreRaw = raw
		default:
			return nil, d.Errf("unrecognized global webhook_idempotency option '%s'", d.Val())
		}
	}
	return httpcaddyfile.App{Name: "webhook_idempotency", Value: caddyconfig.JSON(app, nil)}, nil
}

// parsePositiveDuration parses a duration with caddy.ParseDuration (`1d`
// works) and refuses zero and negative values.
func parsePositiveDuration(s string) (caddy.Duration, error) {
	dur, err := caddy.ParseDuration(s)
	if err != nil {
		return 0, err
	}
	if dur <= 0 {
		return 0, fmt.Errorf("must be positive")
	}
	return caddy.Duration(dur), nil
}

// parseSize parses `1MiB`, `512KB` or plain bytes.
func parseSize(s string) (int64, error) {
	n, err := humanize.ParseBytes(s)
	if err != nil {
		return 0, err
	}
	if n == 0 || n > 1<<40 {
		return 0, fmt.Errorf("must be between 1 byte and 1TiB")
	}
	return int64(n), nil
}

// validMethod reports whether m is an HTTP method token.
func validMethod(m string) bool {
	if m == "" {
		return false
	}
	for i := 0; i < len(m); i++ {
		c := m[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z') {
			return false
		}
	}
	return true
}

// UnmarshalCaddyfile sets up the memory store from Caddyfile tokens:
//
//	store memory {
//		max_entries <n>
//	}
func (m *MemoryStore) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // "memory"
	if d.NextArg() {
		return d.Errf("store memory takes no arguments, got '%s'", d.Val())
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		switch d.Val() {
		case "max_entries":
			if !d.NextArg() {
				return d.ArgErr()
			}
			var n int
			if _, err := fmt.Sscanf(d.Val(), "%d", &n); err != nil || n <= 0 || fmt.Sprint(n) != d.Val() {
				return d.Errf("invalid max_entries '%s': want a positive integer", d.Val())
			}
			m.MaxEntries = n
			if d.NextArg() {
				return d.ArgErr()
			}
		default:
			return d.Errf("unrecognized memory store subdirective '%s'", d.Val())
		}
	}
	return nil
}

// Interface guards
var (
	_ caddyfile.Unmarshaler = (*Handler)(nil)
	_ caddyfile.Unmarshaler = (*MemoryStore)(nil)
)
