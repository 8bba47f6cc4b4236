package batch

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestSplitAndEnvelope(t *testing.T) {
	for _, tc := range []struct {
		name, path, body string
		items            []string
		keepOdd          string // the envelope keeping items 1, 3, …
	}{
		{
			name: "the body is the array (SendGrid)", path: "#",
			body:    `[{"sg_event_id":"a"}, {"sg_event_id":"b"},{"sg_event_id":"c"}]`,
			items:   []string{`{"sg_event_id":"a"}`, `{"sg_event_id":"b"}`, `{"sg_event_id":"c"}`},
			keepOdd: `[{"sg_event_id":"b"}]`,
		},
		{
			name: "the array with white space around it (SendGrid's CRLF)", path: "#",
			body:    " [{\"sg_event_id\":\"a\"},{\"sg_event_id\":\"b\"}]\r\n",
			items:   []string{`{"sg_event_id":"a"}`, `{"sg_event_id":"b"}`},
			keepOdd: " [{\"sg_event_id\":\"b\"}]\r\n",
		},
		{
			name: "an array member (Pix)", path: "pix",
			body:    `{"pix":[{"endToEndId":"E1"},{"endToEndId":"E2"}],"x":1}`,
			items:   []string{`{"endToEndId":"E1"}`, `{"endToEndId":"E2"}`},
			keepOdd: `{"pix":[{"endToEndId":"E2"}],"x":1}`,
		},
		{
			name: "items wrapped in each element (Adyen)", path: "notificationItems",
			body:    `{"live":"false","notificationItems":[{"NotificationRequestItem":{"pspReference":"p1"}},{"NotificationRequestItem":{"pspReference":"p2"}}]}`,
			items:   []string{`{"NotificationRequestItem":{"pspReference":"p1"}}`, `{"NotificationRequestItem":{"pspReference":"p2"}}`},
			keepOdd: `{"live":"false","notificationItems":[{"NotificationRequestItem":{"pspReference":"p2"}}]}`,
		},
		{
			name: "nested arrays (Meta)", path: "entry.#.changes",
			body:    `{"object":"x","entry":[{"id":"1","changes":[{"v":1},{"v":2}]},{"id":"2","changes":[{"v":3}]}]}`,
			items:   []string{`{"v":1}`, `{"v":2}`, `{"v":3}`},
			keepOdd: `{"object":"x","entry":[{"id":"1","changes":[{"v":2}]},{"id":"2","changes":[]}]}`,
		},
		{
			name: "deeper (statuses)", path: "entry.#.changes.#.value.statuses",
			body:    `{"entry":[{"changes":[{"value":{"statuses":[{"id":"w1"},{"id":"w2"}]}},{"value":{"messages":[]}}]}]}`,
			items:   []string{`{"id":"w1"}`, `{"id":"w2"}`},
			keepOdd: `{"entry":[{"changes":[{"value":{"statuses":[{"id":"w2"}]}},{"value":{"messages":[]}}]}]}`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := []byte(tc.body)
			b, err := Split(body, tc.path, 100)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, it := range b.Items {
				got = append(got, string(it.Raw(body)))
			}
			if strings.Join(got, "|") != strings.Join(tc.items, "|") {
				t.Fatalf("items %q, want %q", got, tc.items)
			}
			env := b.Envelope(body, func(i int) bool { return i%2 == 1 })
			if string(env) != tc.keepOdd || !json.Valid(env) {
				t.Fatalf("envelope %s, want %s", env, tc.keepOdd)
			}
			if all := b.Envelope(body, func(int) bool { return true }); !json.Valid(all) {
				t.Fatalf("the envelope of every item is no JSON: %s", all)
			}
		})
	}
}

func TestSplitRefuses(t *testing.T) {
	for _, tc := range []struct{ path, body string }{
		{"#", `{"a":1}`},
		{"items", `{"items":{"a":1}}`},
		{"items", `{"other":[1]}`},
		{"items", `not json`},
	} {
		if _, err := Split([]byte(tc.body), tc.path, 100); err == nil {
			t.Errorf("%s in %s: split", tc.path, tc.body)
		}
	}
	if _, err := Split([]byte(`[1,2,3]`), "#", 2); !errors.Is(err, ErrTooManyItems) || !strings.Contains(err.Error(), "more than 2") {
		t.Fatalf("over the bound: %v", err)
	}
	for _, p := range []string{"", "a..b", "a.*", "a|b", "a.#.#", "a#", "a[0]"} {
		if got, err := ParsePath(p); err == nil {
			t.Errorf("path %q accepted as %q", p, got)
		}
	}
}

func TestParsePath(t *testing.T) {
	for in, want := range map[string]string{
		"value":            "value",
		"value.#":          "value",
		"#":                "#",
		"[*]":              "#",
		"[]":               "#",
		"entry[*].changes": "entry.#.changes",
		"entry[].changes":  "entry.#.changes",
		"entry.#.changes":  "entry.#.changes",
		"a.b[*]":           "a.b",
	} {
		if got, err := ParsePath(in); err != nil || got != want {
			t.Errorf("ParsePath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

func FuzzSplit(f *testing.F) {
	f.Add([]byte(`{"items":[{"id":1},{"id":2}]}`), "items")
	f.Add([]byte(`[1,"two",{"3":[4]}]`), "#")
	f.Add([]byte(`{"entry":[{"changes":[1,2]},{"changes":[3]}]}`), "entry.#.changes")
	f.Fuzz(func(t *testing.T, body []byte, path string) {
		path, err := ParsePath(path)
		if err != nil || !json.Valid(body) {
			return
		}
		b, err := Split(body, path, 1000)
		if err != nil {
			return
		}
		for _, it := range b.Items {
			if !json.Valid(it.Raw(body)) {
				t.Fatalf("item %q of %s is no JSON", it.Raw(body), body)
			}
		}
		if env := b.Envelope(body, func(i int) bool { return i%2 == 0 }); !json.Valid(env) {
			t.Fatalf("envelope %s of %s is no JSON", env, body)
		}
	})
}
