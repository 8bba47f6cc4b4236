package signature

import (
	"fmt"
	"strings"
)

// Parameter lists: a value made of `name=value` items separated by `,` or
// `;` (Stripe's and Calendly's `t=…,v1=…`, Paddle's `ts=…;h1=…`, Hook0's
// `t=…,h=…,v1=…`), from which a template reads its signature or its
// timestamp by name (SignatureLocation.Param, TimestampLocation.Param).
// Names are compared exactly; spaces around names and values are ignored;
// at most maxHeaderItems items are looked at.

// checkParam checks the name of a parameter ("" for none).
func checkParam(name string) (string, error) {
	switch {
	case name == "":
		return "", nil
	case strings.ContainsAny(name, ",;= \t"):
		return "", fmt.Errorf("param %q: a name without `,`, `;`, `=` or spaces", name)
	}
	return name, nil
}

// cutParam returns the first item of a parameter list, its name and value
// trimmed, and the rest of the list.
func cutParam(list string) (name, value, rest string) {
	item := list
	if i := strings.IndexAny(list, ",;"); i >= 0 {
		item, rest = list[:i], list[i+1:]
	}
	name, value, _ = strings.Cut(item, "=")
	return strings.TrimSpace(name), strings.TrimSpace(value), rest
}

// paramValue returns the value of the first item of a parameter list
// named name, and whether there is one.
func paramValue(list, name string) (string, bool) {
	for i := 0; list != "" && i < maxHeaderItems; i++ {
		var key, val string
		key, val, list = cutParam(list)
		if key == name {
			return val, true
		}
	}
	return "", false
}
