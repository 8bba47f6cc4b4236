package jsonmember

import "testing"

// Get reads what gjson reads, and finds a member given twice on the
// path: in any object on the way, in any case, escaped or not; members
// given twice elsewhere are not its concern.
func TestGet(t *testing.T) {
	for _, tc := range []struct {
		body, path, want, ambiguous string
	}{
		{`{"id":"a"}`, "id", `"a"`, ""},
		{`{"id":"a","id":"b"}`, "id", "", "id"},
		{`{"id":"a","Id":"b"}`, "id", "", "id"},
		{`{"Id":"b"}`, "id", "", ""},
		{`{"\u0069d":"b","id":"a"}`, "id", "", "id"},
		{`{"data":{"id":"a"},"data":{"id":"b"}}`, "data.id", "", "data"},
		{`{"data":{"id":"a","x":1,"x":2},"y":[1,1]}`, "data.id", `"a"`, ""},
		{`{"data":{"id":"a"},"other":{"id":"b","id":"c"}}`, "data.id", `"a"`, ""},
		{`{"e":[{"id":"a"},{"id":"b","id":"c"}]}`, "e.0.id", `"a"`, ""},
		{`{"e":[{"id":"a"},{"id":"b","id":"c"}]}`, "e.1.id", "", "id"},
		{`{"e":[{"id":"a"}]}`, "e.5.id", "", ""},
		{`{"e":{"0":"x"}}`, "e.0", `"x"`, ""},
		{`{"a.b":"x","a.b":"y"}`, `a\.b`, "", "a.b"},
		{`{"a":"x"}`, "a.b", "", ""},
		{`[{"id":1}]`, "0.id", "1", ""},
		{"\ufeff{\"id\":\"a\"}", "id", `"a"`, ""},
		// not JSON: nothing is read from it
		{`{"id":"a",}`, "id", "", ""},
		{`{"id":"a"`, "id", "", ""},
		{`{"id":"a" "x":1}`, "id", "", ""},
		{`{"entry":["changes":[{"value":{"messages":[{"id":"wamid.1"}]}}]}]}`, "entry.0.chapges.0.value.messages.0.id", "", ""},
		{`[,,]`, "0", "", ""},
	} {
		res, ambiguous := Get([]byte(tc.body), tc.path)
		if res.Raw != tc.want || ambiguous != tc.ambiguous {
			t.Errorf("Get(%s, %q) = %q, ambiguous %q; want %q, %q", tc.body, tc.path, res.Raw, ambiguous, tc.want, tc.ambiguous)
		}
	}
}
