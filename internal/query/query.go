// Package query reads single values from raw URL query strings.
package query

import (
	"net/url"
	"strings"
)

// Value returns the first value of name in a raw query without parsing the
// whole query into a map. A name or value that is percent- or
// plus-encoded is decoded; a value that does not decode is returned as
// sent.
func Value(rawQuery, name string) string {
	for rawQuery != "" {
		var pair string
		pair, rawQuery, _ = strings.Cut(rawQuery, "&")
		k, v, _ := strings.Cut(pair, "=")
		if k == name {
			if strings.ContainsAny(v, "%+") {
				if u, err := url.QueryUnescape(v); err == nil {
					return u
				}
			}
			return v
		} else if strings.ContainsAny(k, "%+") {
			if u, err := url.QueryUnescape(k); err == nil && u == name {
				if uv, err := url.QueryUnescape(v); err == nil {
					return uv
				}
				return v
			}
		}
	}
	return ""
}
