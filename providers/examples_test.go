package providers

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"
)

// TestExamples: every embedded example is JSON, named in the README with
// its source, beside the licence of its source; a delivery with a given id
// is the file with only the id where the preset keys, and a new one has a
// fresh id and fresh members each time.
func TestExamples(t *testing.T) {
	readme, err := os.ReadFile("examples/README.md")
	if err != nil {
		t.Fatal(err)
	}
	presets := ExamplePresets()
	if strings.Join(presets, " ") != "github paddle stripe" {
		t.Fatalf("presets with examples: %v", presets)
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 678901000, time.UTC)
	for _, preset := range presets {
		if _, err := os.Stat(filepath.Join("examples", preset, "LICENSE")); err != nil {
			t.Errorf("%s: no licence beside the examples: %v", preset, err)
		}
		if !bytes.Contains(readme, []byte("## "+preset+"/")) {
			t.Errorf("the README has no section %s/", preset)
		}
		header, jsonPath := IDPlace(preset)
		for _, event := range ExampleEvents(preset) {
			file, _ := os.ReadFile(filepath.Join("examples", preset, event+".json"))
			if !json.Valid(file) || !bytes.Contains(readme, []byte("`"+event+".json`")) {
				t.Errorf("%s/%s.json: valid %v, in the README %v", preset, event, json.Valid(file), bytes.Contains(readme, []byte("`"+event+".json`")))
			}
			same, err := NewExample(preset, event, "given-id", now)
			if err != nil {
				t.Fatal(err)
			}
			want := file
			if jsonPath != "" {
				want, _ = setMember(file, jsonPath, `"given-id"`)
			}
			if !bytes.Equal(same.Body, want) || (header != "" && same.Header.Get(header) != "given-id") {
				t.Errorf("%s %s with an id: %s, %v", preset, event, same.Body, same.Header)
			}
			a, _ := NewExample(preset, event, "", now)
			b, _ := NewExample(preset, event, "", now)
			if a.ID == b.ID || a.ID == "" || !json.Valid(a.Body) {
				t.Errorf("%s %s: new deliveries have ids %q and %q", preset, event, a.ID, b.ID)
			}
			for _, m := range lookupExamples(t, preset).fresh {
				if gjson.GetBytes(a.Body, m.path).Raw == gjson.GetBytes(file, m.path).Raw {
					t.Errorf("%s %s: %s sent as published", preset, event, m.path)
				}
			}
		}
	}
	// Stripe: the event's id and creation time
	ex, _ := NewExample("stripe", "customer.created", "", now)
	if gjson.GetBytes(ex.Body, "id").String() != ex.ID || gjson.GetBytes(ex.Body, "created").Int() != now.Unix() ||
		gjson.GetBytes(ex.Body, "data.object.created").Raw != "1234567890" || ex.Header.Get("Content-Type") != "application/json; charset=utf-8" {
		t.Errorf("stripe: %s", ex.Body)
	}
	// GitHub: the delivery header and the event's name
	ex, _ = NewExample("github", "pull_request.opened", "", now)
	if len(ex.ID) != 36 || ex.Header.Get("X-GitHub-Delivery") != ex.ID || ex.Header.Get("X-GitHub-Event") != "pull_request" {
		t.Errorf("github: %v", ex.Header)
	}
	// Paddle: the notification's id, the event's id and time
	ex, _ = NewExample("paddle", "price.created", "", now)
	if gjson.GetBytes(ex.Body, "notification_id").String() != ex.ID || gjson.GetBytes(ex.Body, "occurred_at").String() != "2026-01-02T03:04:05.678901Z" ||
		!strings.HasPrefix(gjson.GetBytes(ex.Body, "event_id").String(), "evt_") {
		t.Errorf("paddle: %s", ex.Body)
	}
	for _, tc := range []struct{ preset, event, want string }{
		{"stripe", "nope", `no stripe example of event type "nope": want one of charge.dispute.created,`},
		{"stripe", "../github/push", `no stripe example of event type "../github/push"`},
		{"twilio", "x", "no example payloads of twilio are embedded: the presets with examples are github, paddle, stripe"},
		{"nope", "x", `unknown preset "nope"`},
	} {
		if _, err := NewExample(tc.preset, tc.event, "", now); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s %s: %v", tc.preset, tc.event, err)
		}
	}
	if _, err := setMember([]byte(`{"a":1}`), "b", strconv.Quote("x")); err == nil {
		t.Error("setMember of an absent member")
	}
}

// lookupExamples is a preset's examples rule.
func lookupExamples(t *testing.T, preset string) *examplesRule {
	t.Helper()
	p, ok := Lookup(preset)
	if !ok || p.examples == nil {
		t.Fatalf("%s has no examples", preset)
	}
	return p.examples
}
