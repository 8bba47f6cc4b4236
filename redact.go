package webhookidempotency

import (
	"net/http"
	"net/url"
	"strings"
)

// Redaction of what the admin API and the console show of a stored request
// (docs/inbox.md, "Secrets in stored events"). What is stored keeps every
// byte, since it is what the application gets; what is shown never holds a
// secret that the request carried.

// secretHeaders returns the headers of the route that carry a secret
// itself rather than a signature: the header of a `verify token` (or of the
// token schemes of `stone` and `evolution`). Headers whose names look
// secret are redacted anyway (secretName).
func (h *Handler) secretHeaders() []string {
	if h.Verify == nil || h.Verify.Header == "" || h.Verify.Scheme == "hmac" {
		return nil
	}
	return []string{h.Verify.Header}
}

// redactedValue replaces a secret's value.
const redactedValue = "[redacted]"

// redactRequest returns what may be shown of a stored request: uri with
// the value of every query parameter whose name looks secret replaced by
// "[redacted]", and a copy of header with the value of every header that
// carries a secret replaced: Authorization, Proxy-Authorization, cookies,
// any header whose name looks secret (X-Api-Key, X-Gitlab-Token,
// asaas-access-token, …), and routeSecrets, the route's own secret headers
// (such as its `verify token` header, see Handler.secretHeaders). header
// may be nil; the original is never modified.
func redactRequest(uri string, header http.Header, routeSecrets []string) (string, http.Header) {
	var out http.Header
	if header != nil {
		out = make(http.Header, len(header))
		for name, values := range header {
			if secretName(name) || containsFold(routeSecrets, name) {
				redacted := make([]string, len(values))
				for i := range redacted {
					redacted[i] = redactedValue
				}
				values = redacted
			}
			out[name] = values
		}
	}
	return redactQuery(uri), out
}

// redactQuery replaces the values of the secret-looking query parameters of
// uri, leaving every other byte as it is.
func redactQuery(uri string) string {
	path, query, ok := strings.Cut(uri, "?")
	if !ok {
		return uri
	}
	query, fragment, hasFragment := strings.Cut(query, "#")
	pairs := strings.Split(query, "&")
	changed := false
	for i, pair := range pairs {
		name, _, hasValue := strings.Cut(pair, "=")
		if n, err := url.QueryUnescape(name); err == nil {
			name = n
		}
		if hasValue && secretName(name) {
			pairs[i] = pair[:strings.IndexByte(pair, '=')+1] + redactedValue
			changed = true
		}
	}
	if !changed {
		return uri
	}
	out := path + "?" + strings.Join(pairs, "&")
	if hasFragment {
		out += "#" + fragment
	}
	return out
}

// secretFragments are the parts of a header or query parameter name that
// mark its value as a secret, matched against the name in lower case
// without '-', '_' and '.'.
var secretFragments = []string{
	"authorization", "cookie", "token", "secret", "password", "passwd",
	"apikey", "accesskey", "privatekey", "credential", "signature", "session",
}

// secretNames are whole names (normalized the same way) that carry secrets.
var secretNames = []string{"auth", "key", "sig", "pwd", "code"}

// secretName reports whether a header or query parameter name looks like
// it carries a secret.
func secretName(name string) bool {
	n := strings.ToLower(strings.NewReplacer("-", "", "_", "", ".", "").Replace(name))
	for _, f := range secretFragments {
		if strings.Contains(n, f) {
			return true
		}
	}
	for _, w := range secretNames {
		if n == w {
			return true
		}
	}
	return false
}

// containsFold reports whether list holds name, ignoring case.
func containsFold(list []string, name string) bool {
	for _, v := range list {
		if strings.EqualFold(v, name) {
			return true
		}
	}
	return false
}
