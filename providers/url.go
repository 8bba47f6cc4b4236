package providers

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// publicURL is the URL the schemes that sign one (`twilio`, `square`,
// `hubspot`) check: cfg.URL, resolved at provision, else the request's.
func (cfg VerifyConfig) publicURL() signature.PublicURL {
	configured := cfg.URL
	return func(dst []byte, r *http.Request) []byte {
		return appendPublicURL(dst, r, configured)
	}
}

// appendPublicURL appends the public URL of r: the configured one (with
// the request's query string when it has none), else the URL rebuilt from
// the request. X-Forwarded-Proto and X-Forwarded-Host are honoured only
// when the server marked the request as coming from a trusted proxy
// (`trusted_proxies`); otherwise any client could choose the URL that is
// checked.
func appendPublicURL(dst []byte, r *http.Request, configured string) []byte {
	uri := requestURI(r)
	if configured != "" {
		dst = append(dst, configured...)
		if !strings.Contains(configured, "?") {
			if _, query, ok := strings.Cut(uri, "?"); ok {
				dst = append(append(dst, '?'), query...)
			}
		}
		return dst
	}
	scheme, host := "http", r.Host
	if r.TLS != nil {
		scheme = "https"
	}
	if trusted, _ := caddyhttp.GetVar(r.Context(), caddyhttp.TrustedProxyVarKey).(bool); trusted {
		if p := firstListItem(r.Header.Get("X-Forwarded-Proto")); p == "http" || p == "https" {
			scheme = p
		}
		if h := firstListItem(r.Header.Get("X-Forwarded-Host")); h != "" {
			host = h
		}
	}
	dst = append(append(append(dst, scheme...), "://"...), host...)
	return append(dst, uri...)
}

// requestURI is the path and query the client asked for, before any
// rewrite.
func requestURI(r *http.Request) string {
	if orig, ok := r.Context().Value(caddyhttp.OriginalRequestCtxKey).(http.Request); ok && orig.RequestURI != "" {
		return originForm(orig.RequestURI)
	}
	if r.RequestURI != "" {
		return originForm(r.RequestURI)
	}
	return r.URL.RequestURI()
}

// originForm returns the path and query of a request target, which a
// client may send in absolute form (`http://host/path?query`).
func originForm(uri string) string {
	if strings.HasPrefix(uri, "/") {
		return uri
	}
	if u, err := url.ParseRequestURI(uri); err == nil {
		return u.RequestURI()
	}
	return uri
}

// firstListItem is the first element of a comma-separated header value.
func firstListItem(v string) string {
	first, _, _ := strings.Cut(v, ",")
	return strings.TrimSpace(first)
}
