package providers

import (
	"crypto/rand"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"
)

// The example payloads providers publish, for `caddy webhook-idempotency
// trigger` (docs/operating.md: trigger): a few event types per provider,
// embedded in examples/<preset>/<event type>.json, each directory with the
// licence of its source; examples/README.md names the source of every
// file. A preset whose provider publishes examples declares how it sends
// them (examplesRule); the body goes out as published, byte for byte,
// except for the delivery id where the preset keys and the members the
// provider makes anew for every event.

//go:embed examples
var examplesFS embed.FS

// examplesRule is how a provider sends its example payloads.
type examplesRule struct {
	// eventHeader is the header that names the event type, given the
	// part of the type before its first dot (GitHub's X-GitHub-Event:
	// `pull_request` for `pull_request.opened`); "" for none.
	eventHeader string
	// header is sent with every example.
	header map[string]string
	// newID makes a delivery id in the provider's format.
	newID func() string
	// fresh are the body's members the provider sets anew for every
	// event, as JSON paths and the raw JSON each gets at a time (Stripe's
	// `created`): made anew for a new delivery, left as published when
	// the delivery id is given, so every send under that id is the same
	// delivery, byte for byte.
	fresh []freshMember
}

// freshMember is a body member set anew for every event.
type freshMember struct {
	path  string
	value func(now time.Time) string
}

// Example is a delivery made of a provider's published example payload.
type Example struct {
	// Event is the event type.
	Event string
	// ID is the delivery id, where the preset keys (IDPlace).
	ID string
	// Header is what the provider sends with the event, the id's header
	// included when the preset keys on a header.
	Header http.Header
	// Body is the payload.
	Body []byte
}

// ExampleEvents lists the event types a preset has examples of, sorted;
// nil when its provider publishes none this module embeds.
func ExampleEvents(preset string) []string {
	p, ok := presets[preset]
	if !ok || p.examples == nil {
		return nil
	}
	entries, err := examplesFS.ReadDir(path.Join("examples", preset))
	if err != nil {
		return nil
	}
	var events []string
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".json"); ok {
			events = append(events, name)
		}
	}
	slices.Sort(events)
	return events
}

// NewExample makes a delivery of a preset's example of an event type. With
// id "" it is a new delivery: a fresh id in the provider's format, and the
// members the provider sets for every event made anew at now; a given id
// is put where the preset keys and the rest is sent as published.
func NewExample(preset, event, id string, now time.Time) (*Example, error) {
	p, ok := presets[preset]
	if !ok {
		return nil, fmt.Errorf("unknown preset %q: want one of %s", preset, strings.Join(Names(), ", "))
	}
	if p.examples == nil {
		return nil, fmt.Errorf("no example payloads of %s are embedded: the presets with examples are %s", preset, strings.Join(ExamplePresets(), ", "))
	}
	body, err := examplesFS.ReadFile(path.Join("examples", preset, event+".json"))
	if errors.Is(err, fs.ErrNotExist) || strings.ContainsAny(event, `/\`) {
		return nil, fmt.Errorf("no %s example of event type %q: want one of %s", preset, event, strings.Join(ExampleEvents(preset), ", "))
	}
	if err != nil {
		return nil, err
	}
	rule := p.examples
	ex := &Example{Event: event, ID: id, Header: http.Header{}, Body: body}
	for name, v := range rule.header {
		ex.Header.Set(name, v)
	}
	if rule.eventHeader != "" {
		typ, _, _ := strings.Cut(event, ".")
		ex.Header.Set(rule.eventHeader, typ)
	}
	if ex.ID == "" {
		ex.ID = rule.newID()
		for _, m := range rule.fresh {
			if ex.Body, err = setMember(ex.Body, m.path, m.value(now)); err != nil {
				return nil, fmt.Errorf("%s example %s: %v", preset, event, err)
			}
		}
	}
	header, jsonPath := IDPlace(preset)
	switch {
	case header != "":
		ex.Header.Set(header, ex.ID)
	case jsonPath != "":
		if ex.Body, err = setMember(ex.Body, jsonPath, strconv.Quote(ex.ID)); err != nil {
			return nil, fmt.Errorf("%s example %s: %v", preset, event, err)
		}
	}
	return ex, nil
}

// IDPlace tells where a delivery id goes for a preset: the first header of
// its default key chain, else its first JSON key path (docs/providers.md:
// keys); both "" when it keys on the body alone.
func IDPlace(preset string) (header, jsonPath string) {
	p, ok := presets[preset]
	if !ok {
		return "", ""
	}
	for _, k := range p.DefaultKey {
		if name, ok := strings.CutPrefix(k, "header:"); ok {
			return name, ""
		}
		if path, ok := strings.CutPrefix(k, "json:"); ok && jsonPath == "" {
			jsonPath = path
		}
	}
	return "", jsonPath
}

// ExamplePresets names the presets whose examples are embedded, sorted.
func ExamplePresets() []string {
	var names []string
	for _, name := range Names() {
		if presets[name].examples != nil {
			names = append(names, name)
		}
	}
	return names
}

// setMember replaces the value of an existing member of a JSON body with
// raw JSON, leaving every other byte as it is.
func setMember(body []byte, path, raw string) ([]byte, error) {
	r := gjson.GetBytes(body, path)
	if !r.Exists() || r.Index <= 0 {
		return nil, fmt.Errorf("the body has no member %s to set", path)
	}
	out := make([]byte, 0, len(body)+len(raw))
	out = append(out, body[:r.Index]...)
	out = append(out, raw...)
	return append(out, body[r.Index+len(r.Raw):]...), nil
}

// randomID is prefix and n random bytes in hex.
func randomID(prefix string, n int) func() string {
	return func() string {
		b := make([]byte, n)
		_, _ = rand.Read(b)
		return prefix + hex.EncodeToString(b)
	}
}

// uuidV4 is a random UUID, as GitHub's delivery GUIDs are written.
func uuidV4() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// unixSeconds is a time as a JSON number of seconds.
func unixSeconds(now time.Time) string { return strconv.FormatInt(now.Unix(), 10) }

// rfc3339Micro is a time as a JSON string, UTC, to the microsecond.
func rfc3339Micro(now time.Time) string {
	return strconv.Quote(now.UTC().Format("2006-01-02T15:04:05.000000Z07:00"))
}

// quotedID is a fresh id as a JSON string.
func quotedID(newID func() string) func(time.Time) string {
	return func(time.Time) string { return strconv.Quote(newID()) }
}
