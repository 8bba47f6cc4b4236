package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
)

func init() {
	caddy.RegisterModule(Console{})
	httpcaddyfile.RegisterHandlerDirective("webhook_idempotency_console", parseConsoleCaddyfile)
	// a handler that answers, as Caddy's own metrics is
	httpcaddyfile.RegisterDirectiveOrder("webhook_idempotency_console", httpcaddyfile.After, "metrics")
}

// Console is an HTTP handler that serves the console and the admin API
// on a route of a site (docs/admin.md#on-a-site-webhook_idempotency_console),
// which the operator protects with Caddy's own means (basic_auth,
// forward_auth, client certificates): the page at the route's root, its files below
// console/, and the routes of the admin endpoint's /webhook_idempotency/
// below api/, served by the same handlers. Mounted with
// `handle_path /ops/*`, /ops/ is the page, /ops/api/ the sources and
// /ops/api/<source>/events the archive of a source.
//
// A browser's requests to the API are accepted from the page's own
// origin only: a state change (POST, DELETE) must carry an Origin naming
// the host it was sent to, and Sec-Fetch-Site, when the browser sends it,
// must be same-origin; a read is refused when the browser marks it as
// another site's. Requests with neither header are a program's (curl),
// which holds the route's credentials, and are accepted.
//
// It has no configuration.
type Console struct {
	logger *zap.Logger
}

// CaddyModule returns the Caddy module information.
func (Console) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.webhook_idempotency_console",
		New: func() caddy.Module { return new(Console) },
	}
}

// Provision sets up the handler.
func (c *Console) Provision(ctx caddy.Context) error {
	c.logger = ctx.Logger()
	return nil
}

// parseConsoleCaddyfile builds the handler of the directive.
func parseConsoleCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	c := new(Console)
	err := c.UnmarshalCaddyfile(h.Dispenser)
	return c, err
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens. Syntax:
//
//	webhook_idempotency_console [<matcher>]
func (c *Console) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // directive name
	if d.NextArg() {
		return d.Errf("webhook_idempotency_console takes no arguments, got '%s'", d.Val())
	}
	if d.NextBlock(0) {
		return d.Errf("webhook_idempotency_console has no options, got '%s'", d.Val())
	}
	return nil
}

// ServeHTTP serves the page, its files and the API; it never calls next.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request, _ caddyhttp.Handler) error {
	if err := c.serve(w, r); err != nil {
		c.writeError(w, r, err)
	}
	return nil
}

// serve routes a request by its path below the route's root.
func (c *Console) serve(w http.ResponseWriter, r *http.Request) error {
	rest := strings.TrimPrefix(r.URL.EscapedPath(), "/")
	if api, ok := strings.CutPrefix(rest, "api"); ok && (api == "" || api[0] == '/') {
		if err := checkOrigin(r); err != nil {
			return err
		}
		return serveAPI(w, r, strings.TrimPrefix(api, "/"))
	}
	if err := allowMethods(w, r, http.MethodGet, http.MethodHead); err != nil {
		return err
	}
	if asset, ok := strings.CutPrefix(rest, "console/"); ok {
		return serveConsoleAsset(w, asset)
	}
	if rest != "" {
		return errNotFound
	}
	// the page's URLs are relative to its own, which must end in a slash:
	// /ops, under `handle_path /ops*`, is sent to /ops/
	if orig, ok := r.Context().Value(caddyhttp.OriginalRequestCtxKey).(http.Request); ok && orig.URL != nil {
		if p := orig.URL.EscapedPath(); !strings.HasSuffix(p, "/") {
			to := path.Base(p) + "/"
			if orig.URL.RawQuery != "" {
				to += "?" + orig.URL.RawQuery
			}
			// relative, as the browser resolves it against the URL it
			// asked for, whatever the prefix
			w.Header().Set("Location", to)
			w.WriteHeader(http.StatusMovedPermanently)
			return nil
		}
	}
	return serveConsolePage(w, handlerPageAPI)
}

// writeError answers an error as the admin endpoint does: its status and
// {"error":"…"}. A server-side failure is logged.
func (c *Console) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var ae caddy.APIError
	if !errors.As(err, &ae) {
		ae = caddy.APIError{HTTPStatus: http.StatusInternalServerError, Err: err}
	}
	if ae.Message == "" && ae.Err != nil {
		ae.Message = ae.Err.Error()
	}
	if ae.HTTPStatus >= http.StatusInternalServerError && c.logger != nil {
		c.logger.Error("console request failed", zap.String("method", r.Method), zap.String("uri", r.RequestURI),
			zap.Int("status", ae.HTTPStatus), zap.String("error", ae.Message))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(ae.HTTPStatus)
	_ = json.NewEncoder(w).Encode(ae)
}

// checkOrigin refuses a browser's request to the API that does not come
// from the console's own page, as Caddy's admin endpoint refuses those
// from an origin it does not allow: the origin allowed is the one the
// request was sent to. Browsers set Origin and Sec-Fetch-* themselves; no
// page can forge them.
func checkOrigin(r *http.Request) error {
	site := r.Header.Get("Sec-Fetch-Site")
	mode := r.Header.Get("Sec-Fetch-Mode")
	origin := r.Header.Get("Origin")
	if site == "" && mode == "" && origin == "" {
		return nil // a program, not a browser
	}
	read := r.Method == http.MethodGet || r.Method == http.MethodHead
	switch {
	case mode == "no-cors":
		return errForbidden("a request in no-cors mode (a plain <script>, <img> or form of a page) is refused")
	case read && site == "none":
		return nil // typed in the address bar, or a bookmark
	case site != "" && site != "same-origin":
		return errForbidden(fmt.Sprintf("a %s request is refused: the console's API answers its own page only", site))
	}
	if origin == "" {
		origin = r.Header.Get("Referer")
	}
	if origin == "" {
		if read {
			return nil // browsers send no Origin with a same-origin read
		}
		return errForbidden(fmt.Sprintf("a browser's %s without Origin is refused", r.Method))
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || !strings.EqualFold(u.Host, r.Host) || (r.TLS != nil && u.Scheme != "https") {
		return errForbidden(fmt.Sprintf("a request from origin %q is refused: the console's API answers its own page only", origin))
	}
	return nil
}

// errForbidden is the 403 of a request from another origin.
func errForbidden(msg string) error {
	return apiError(http.StatusForbidden, errors.New(msg))
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Console)(nil)
	_ caddyhttp.MiddlewareHandler = (*Console)(nil)
	_ caddyfile.Unmarshaler       = (*Console)(nil)
)
