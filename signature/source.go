package signature

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/query"
)

// sourceKind is where a value of a delivery is read.
type sourceKind uint8

const (
	fromHeader sourceKind = iota + 1
	fromJSON
	fromQuery
)

func (k sourceKind) form() string {
	switch k {
	case fromHeader:
		return "header:<Name>"
	case fromJSON:
		return "json:<path>"
	}
	return "query:<name>"
}

// source is a value of a delivery: a header, a JSON member of the body,
// or a query parameter.
type source struct {
	kind sourceKind
	name string   // a header's canonical name, a query parameter's name
	leaf int      // a JSON member's span
	path []string // a JSON member's names, for the signers that write it
}

// parseSource parses `header:<Name>`, `json:<path>` or `query:<name>`,
// of the kinds allowed; JSON paths are added to paths.
func parseSource(s string, paths *jsonPaths, allowed ...sourceKind) (source, error) {
	kindName, arg, ok := strings.Cut(strings.TrimSpace(s), ":")
	var kind sourceKind
	switch kindName {
	case "header":
		kind = fromHeader
	case "json":
		kind = fromJSON
	case "query":
		kind = fromQuery
	}
	permitted := false
	for _, a := range allowed {
		permitted = permitted || a == kind
	}
	if !ok || kind == 0 || !permitted || arg == "" {
		forms := make([]string, len(allowed))
		for i, a := range allowed {
			forms[i] = a.form()
		}
		return source{}, fmt.Errorf("%q: want %s", s, strings.Join(forms, " or "))
	}
	switch kind {
	case fromHeader:
		return source{kind: kind, name: http.CanonicalHeaderKey(arg)}, nil
	case fromQuery:
		return source{kind: kind, name: arg}, nil
	}
	leaf, err := paths.add(arg)
	if err != nil {
		return source{}, fmt.Errorf("%q: %v", s, err)
	}
	segs, _ := splitJSONPath(arg) // paths.add checked it
	return source{kind: kind, leaf: leaf, path: segs}, nil
}

// queryParam returns the first value of a query parameter, decoded as
// the module's query key sources decode it, and whether it is present.
func queryParam(rawQuery, name string) (string, bool) {
	if v := query.Value(rawQuery, name); v != "" {
		return v, true
	}
	// empty or absent: present when its name is in the query
	for rawQuery != "" {
		var pair string
		pair, rawQuery, _ = strings.Cut(rawQuery, "&")
		k, _, _ := strings.Cut(pair, "=")
		if k == name {
			return "", true
		}
		if strings.ContainsAny(k, "%+") {
			if u, err := url.QueryUnescape(k); err == nil && u == name {
				return "", true
			}
		}
	}
	return "", false
}
