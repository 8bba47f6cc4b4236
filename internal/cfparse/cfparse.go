// Package cfparse holds the Caddyfile helpers every parser of the module
// shares: the handler's, its verify, inbox and archive blocks', and the
// store backends'. Errors name the subdirective (`'ttl'`, `verify
// 'header'`, `redis store 'db'`) and, through the dispenser, the line.
package cfparse

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// OneValue returns the one, non-empty value of a subdirective.
func OneValue(d *caddyfile.Dispenser, what string, args []string) (string, error) {
	if len(args) != 1 {
		return "", d.Errf("%s takes exactly one value, got %d", what, len(args))
	}
	if args[0] == "" {
		return "", d.Errf("%s has an empty value", what)
	}
	return args[0], nil
}

// SomeValues checks that a subdirective has values, none of them empty.
func SomeValues(d *caddyfile.Dispenser, what string, args []string) error {
	if len(args) == 0 {
		return d.Errf("%s needs at least one value", what)
	}
	for _, a := range args {
		if a == "" {
			return d.Errf("%s has an empty value", what)
		}
	}
	return nil
}

// NextValue reads the one value of the subdirective the dispenser is on.
func NextValue(d *caddyfile.Dispenser, what string) (string, error) {
	return OneValue(d, what, d.RemainingArgs())
}

// Arity is how many values a subdirective takes.
type Arity uint8

const (
	// One is exactly one value (most subdirectives).
	One Arity = iota
	// Some is one or more values.
	Some
	// None is no value: a flag such as `tls`.
	None
)

// Check checks the values of a subdirective and returns the first ("" for
// a flag).
func (a Arity) Check(d *caddyfile.Dispenser, what string, args []string) (string, error) {
	switch a {
	case Some:
		if err := SomeValues(d, what, args); err != nil {
			return "", err
		}
		return args[0], nil
	case None:
		if len(args) > 0 {
			return "", d.Errf("%s takes no value, got %d", what, len(args))
		}
		return "", nil
	}
	return OneValue(d, what, args)
}

// Block reads the subdirectives of the block the dispenser is at. block
// names it in errors (`unrecognized inbox subdirective 'x'`, `inbox
// 'respond' takes exactly one value, got 2`); options are its
// subdirectives and the values each takes. set applies one whose values are
// checked, v being the first; its error is reported at the subdirective's
// line.
func Block(d *caddyfile.Dispenser, block string, options map[string]Arity, set func(name, v string, args []string) error) error {
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		name := d.Val()
		args := d.RemainingArgs()
		a, ok := options[name]
		if !ok {
			return d.Errf("unrecognized %s subdirective '%s'", block, name)
		}
		v, err := a.Check(d, block+" '"+name+"'", args)
		if err != nil {
			return err
		}
		if err := set(name, v, args); err != nil {
			return d.Errf("%v", err)
		}
	}
	return nil
}

// PositiveDuration parses the duration of an option with
// caddy.ParseDuration (`1d` works) and refuses zero and negative values;
// errors name the option: `invalid ttl '0s': must be positive`.
func PositiveDuration(what, v string) (caddy.Duration, error) {
	dur, err := caddy.ParseDuration(v)
	if err == nil && dur <= 0 {
		err = errors.New("must be positive")
	}
	if err != nil {
		return 0, fmt.Errorf("invalid %s '%s': %v", what, v, err)
	}
	return caddy.Duration(dur), nil
}

// HasPlaceholder reports whether v holds a placeholder such as `{env.X}`,
// which only Provision can resolve.
func HasPlaceholder(v string) bool { return strings.Contains(v, "{") }

// Keyword is a word an option takes and what it stands for.
type Keyword[T any] struct {
	Word  string
	Value T
}

// Keywords are the words an option takes, in the order its errors list
// them.
type Keywords[T any] []Keyword[T]

// Parse returns what word stands for; errors name the option and list the
// words: `invalid encoding 'base32': want hex or base64`.
func (ks Keywords[T]) Parse(option, word string) (T, error) {
	for _, k := range ks {
		if k.Word == word {
			return k.Value, nil
		}
	}
	var zero T
	return zero, fmt.Errorf("invalid %s '%s': want %s", option, word, ks)
}

// String lists the words: `a, b or c`.
func (ks Keywords[T]) String() string {
	words := make([]string, len(ks))
	for i, k := range ks {
		words[i] = k.Word
	}
	last := len(words) - 1
	return strings.Join(words[:last], ", ") + " or " + words[last]
}

// OnOff are the words of a switch such as `bodies on | off`.
var OnOff = Keywords[bool]{{"on", true}, {"off", false}}

// CheckHTTPURL checks an absolute http(s) URL with a host, such as an
// inbox's deliver_to or a verify url; errors name the option. A URL with a
// placeholder is checked once Provision has resolved it.
func CheckHTTPURL(what, v string) error {
	if HasPlaceholder(v) {
		return nil
	}
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return fmt.Errorf("invalid %s '%s': want an absolute http:// or https:// URL with a host", what, v)
	}
	return nil
}

// ParseStatusSpec parses a status code (100-599) or a class (`2xx`, any
// case) into the codes it covers: the rule of `cache_status` entries and of
// the admin API's status filters.
func ParseStatusSpec(v string) (lo, hi int, ok bool) {
	if len(v) == 3 && v[0] >= '1' && v[0] <= '5' && strings.EqualFold(v[1:], "xx") {
		class := int(v[0]-'0') * 100
		return class, class + 99, true
	}
	code, err := strconv.Atoi(v)
	if err != nil || code < 100 || code > 599 {
		return 0, 0, false
	}
	return code, code, true
}
