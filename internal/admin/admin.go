// Package admin is the module's operator surface (docs/admin.md,
// docs/operating.md#commands): the /webhook_idempotency/ endpoints of
// Caddy's admin API, the console they serve, the
// webhook_idempotency_console handler that serves both on a site's route,
// and the `caddy webhook-idempotency` commands. It reads and acts on the
// running configuration through the Route view each handler publishes
// (route.go), and knows nothing else of the handler.
package admin

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/archive"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/inbox"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/series"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

func init() {
	caddy.RegisterModule(AdminAPI{})
}

// AdminAPI is a module that adds the /webhook_idempotency/ endpoints to
// Caddy's admin API (docs/admin.md): every source of the running
// configuration with its counts, a key's state and forgetting it, the
// archive (search, one event, redelivery, export), the inbox's dead
// letters (list, redelivery, discard) and the console. Caddy loads it by
// itself; it has no configuration.
//
//	GET    /webhook_idempotency/                                every source
//	GET    /webhook_idempotency/console                         the console
//	GET    /webhook_idempotency/<source>                        one source
//	GET    /webhook_idempotency/<source>/minutes[?window=]      its series: 1h, 24h or 7d
//	GET    /webhook_idempotency/<source>/keys/<key>             a key's state
//	DELETE /webhook_idempotency/<source>/keys/<key>             forget a key
//	GET    /webhook_idempotency/<source>/keys?key=<key>         the same, any key
//	DELETE /webhook_idempotency/<source>/keys?key=<key>         (`.` and `..` too)
//	GET    /webhook_idempotency/<source>/events[?…]             search the archive
//	GET    /webhook_idempotency/<source>/events/export[?…]      the archive as NDJSON
//	GET    /webhook_idempotency/<source>/events/<id>            one archived event
//	POST   /webhook_idempotency/<source>/events/<id>/redeliver  redeliver it
//	POST   /webhook_idempotency/<source>/events/redeliver?…     redeliver a filtered set
//	GET    /webhook_idempotency/<source>/inbox[?groups=N]       inbox delivery control
//	POST   /webhook_idempotency/<source>/pause[?destination=]   pause its deliveries
//	POST   /webhook_idempotency/<source>/resume[?destination=]  resume them
//	GET    /webhook_idempotency/<source>/refused[?…]            refused requests
//	GET    /webhook_idempotency/<source>/reconcile              reconciliation status
//	POST   /webhook_idempotency/<source>/reconcile[?wait=true]  a pass now
//	GET    /webhook_idempotency/<source>/dead[?start=&count=]   dead letters
//	POST   /webhook_idempotency/<source>/dead/<id>/redeliver    redeliver one
//	POST   /webhook_idempotency/<source>/dead/redeliver         redeliver all
//	GET    /webhook_idempotency/<source>/dead/<id>              one dead letter
//	DELETE /webhook_idempotency/<source>/dead/<id>              discard one
type AdminAPI struct{}

// adminPrefix is the path every route of AdminAPI starts with.
const adminPrefix = "/webhook_idempotency/"

// CaddyModule returns the Caddy module information.
func (AdminAPI) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "admin.api.webhook_idempotency",
		New: func() caddy.Module { return new(AdminAPI) },
	}
}

// Routes returns the route of the /webhook_idempotency/ endpoints.
func (a AdminAPI) Routes() []caddy.AdminRoute {
	return []caddy.AdminRoute{
		{
			Pattern: adminPrefix,
			Handler: caddy.AdminHandlerFunc(a.handle),
		},
	}
}

// adminHandler serves one route for one source.
type adminHandler func(w http.ResponseWriter, r *http.Request, src *adminSource) error

// adminMethods maps each method a route allows to its handler.
type adminMethods map[string]adminHandler

// idHandler serves a route for the key or id in its path (see withID).
type idHandler func(w http.ResponseWriter, r *http.Request, src *adminSource, id string) error

// handle routes a request of the admin endpoint by its path: the console
// at /webhook_idempotency/console and its files below it, the API below
// /webhook_idempotency/ (a source named console keeps its routes but its
// summary).
func (a AdminAPI) handle(w http.ResponseWriter, r *http.Request) error {
	rest, ok := strings.CutPrefix(r.URL.EscapedPath(), adminPrefix)
	if !ok {
		return errNotFound
	}
	if page, asset, ok := strings.Cut(rest, "/"); page == "console" && (!ok || consoleAssets[asset] != "") {
		if err := allowMethods(w, r, http.MethodGet); err != nil {
			return err
		}
		if !ok {
			return serveConsolePage(w, adminPageAPI)
		}
		return serveConsoleAsset(w, asset)
	}
	return serveAPI(w, r, rest)
}

// serveAPI routes a request of the API by its path below the API's root
// (escaped, without its leading slash): the same routes on Caddy's admin
// endpoint (below /webhook_idempotency/) and in the console handler (below
// api/). Path segments are unescaped, so a source, key or id may be
// percent-encoded (a key with a '/' must be).
func serveAPI(w http.ResponseWriter, r *http.Request, rest string) error {
	if rest == "" {
		if err := allowMethods(w, r, http.MethodGet); err != nil {
			return err
		}
		return handleSources(w, r)
	}
	segs := strings.Split(rest, "/")
	for i, s := range segs {
		v, err := url.PathUnescape(s)
		if err != nil || v == "" {
			return errNotFound
		}
		segs[i] = v
	}
	methods := sourceRoute(segs[1:])
	if methods == nil {
		return errNotFound
	}
	allowed := make([]string, 0, len(methods))
	for m := range methods {
		allowed = append(allowed, m)
	}
	if err := allowMethods(w, r, allowed...); err != nil {
		return err
	}
	src, err := findSource(segs[0])
	if err != nil {
		return err
	}
	return methods[r.Method](w, r, src)
}

// sourceRoute returns the handlers of a path under /<source>.
func sourceRoute(p []string) adminMethods {
	n := len(p)
	switch {
	case n == 0:
		return adminMethods{http.MethodGet: handleSource}
	case n == 1 && p[0] == "minutes":
		return adminMethods{http.MethodGet: handleMinutes}
	case n == 2 && p[0] == "keys":
		return adminMethods{
			http.MethodGet:    withID(handleKey, p[1]),
			http.MethodDelete: withID(handleForget, p[1]),
		}
	case n == 1 && p[0] == "keys":
		// the key in the query: a path segment `.` or `..` is one a
		// browser (and curl) removes before sending, even percent-encoded
		return adminMethods{
			http.MethodGet:    withQueryKey(handleKey),
			http.MethodDelete: withQueryKey(handleForget),
		}
	case n == 2 && p[0] == "events" && p[1] == "export":
		return adminMethods{http.MethodGet: handleExport}
	case p[0] == "events":
		return archiveRoutes.route(p[1:])
	case p[0] == "dead":
		return deadRoutes.route(p[1:])
	case n == 1 && p[0] == "refused":
		return adminMethods{http.MethodGet: handleRefused}
	case n == 1 && p[0] == "reconcile":
		return adminMethods{http.MethodGet: handleReconcileStatus, http.MethodPost: handleReconcileRun}
	case n == 1 && p[0] == "inbox":
		return adminMethods{http.MethodGet: handleInbox}
	case n == 1 && p[0] == "pause":
		return adminMethods{http.MethodPost: handlePause}
	case n == 1 && p[0] == "resume":
		return adminMethods{http.MethodPost: handleResume}
	}
	return nil
}

// eventRoutes are the handlers of a list of events under a source: the
// archive's (/events) or the inbox's dead letters (/dead).
type eventRoutes struct {
	list         adminHandler         // GET /
	redeliverAll adminHandler         // POST /redeliver
	one          map[string]idHandler // /<id>, by method
	redeliver    idHandler            // POST /<id>/redeliver
}

var (
	archiveRoutes = eventRoutes{
		list:         handleEvents,
		redeliverAll: handleRedeliverEvents,
		one:          map[string]idHandler{http.MethodGet: handleEvent},
		redeliver:    handleRedeliverEvent,
	}
	deadRoutes = eventRoutes{
		list:         handleDead,
		redeliverAll: handleRedeliverAllDead,
		one:          map[string]idHandler{http.MethodGet: handleDeadLetter, http.MethodDelete: handleDiscardDead},
		redeliver:    handleRedeliverDead,
	}
)

// route returns the handlers of a path under the list.
func (l eventRoutes) route(p []string) adminMethods {
	switch {
	case len(p) == 0:
		return adminMethods{http.MethodGet: l.list}
	case len(p) == 1 && p[0] == "redeliver":
		return adminMethods{http.MethodPost: l.redeliverAll}
	case len(p) == 1:
		m := make(adminMethods, len(l.one))
		for method, h := range l.one {
			m[method] = withID(h, p[0])
		}
		return m
	case len(p) == 2 && p[1] == "redeliver":
		return adminMethods{http.MethodPost: withID(l.redeliver, p[0])}
	}
	return nil
}

// withQueryKey binds the key of the query's `key` parameter to its
// handler; without one the answer is a 400.
func withQueryKey(handle idHandler) adminHandler {
	return func(w http.ResponseWriter, r *http.Request, src *adminSource) error {
		key := r.URL.Query().Get("key")
		if key == "" {
			return apiError(http.StatusBadRequest, errors.New("missing key: give it as keys/<key> or keys?key=<key>"))
		}
		return handle(w, r, src, key)
	}
}

// withID binds the key or id of a route's path to its handler.
func withID(handle idHandler, id string) adminHandler {
	return func(w http.ResponseWriter, r *http.Request, src *adminSource) error {
		return handle(w, r, src, id)
	}
}

// adminSource is a source of the running configuration and its routes
// (usually one; several routes may share a source deliberately).
type adminSource struct {
	name   string
	routes []Route
}

// findSource returns a source of the running configuration, or a 404.
func findSource(name string) (*adminSource, error) {
	rs := sourceRoutes(name)
	if len(rs) == 0 {
		return nil, apiError(http.StatusNotFound, fmt.Errorf("no webhook_idempotency route for source %q in the running configuration", name))
	}
	return &adminSource{name: name, routes: rs}, nil
}

// inbox returns the source's inbox, or a 404 error.
func (s *adminSource) inbox() (*inbox.Inbox, error) {
	for _, rt := range s.routes {
		if ib := rt.Inbox(); ib != nil {
			return ib, nil
		}
	}
	return nil, apiError(http.StatusNotFound, fmt.Errorf("source %q has no inbox", s.name))
}

// archive returns the source's archive, or a 404 error.
func (s *adminSource) archive() (*archive.Archive, error) {
	for _, rt := range s.routes {
		if a := rt.Archive(); a != nil {
			return a, nil
		}
	}
	return nil, apiError(http.StatusNotFound, fmt.Errorf("source %q has no archive (configure 'archive' on its route)", s.name))
}

// sourceStatus is a source as the admin API reports it.
type sourceStatus struct {
	Source string `json:"source"`
	// Store is the store module of the source's first route.
	Store string `json:"store"`
	// Routes is the number of handlers with this source.
	Routes int `json:"routes"`
	// Results counts requests by result, as kept in the store: every
	// instance's since ResultsSince. When the store did not answer, this
	// process's since it started, and ResultsSince is left out.
	Results      map[string]int64 `json:"results"`
	ResultsSince time.Time        `json:"results_since,omitzero"`
	// Deliveries counts the inbox's delivery attempts by outcome
	// (delivered, retried, dead_lettered), as kept in the store, when the
	// source has an inbox.
	Deliveries map[string]int64 `json:"deliveries,omitempty"`
	// Inbox tells whether a route of the source has an inbox; its counts
	// (pending, scheduled, dead) follow when it has.
	Inbox bool `json:"inbox"`
	*inbox.Counts
	// Paused tells, for a source with an inbox, whether its deliveries are
	// paused (all of them: each destination says whether it is).
	Paused *bool `json:"paused,omitempty"`
	// Destinations are the inbox's destinations, deliver_to's first: each
	// one's URL, route, pause, breaker and counts.
	Destinations []inbox.Destination `json:"destinations,omitempty"`
	// Archive is the number of archived events, when the source has an
	// archive.
	Archive *archiveStatus `json:"archive,omitempty"`
	// StoreHealth is what the source's store reports of its own health,
	// when it checks it (the file store: its file deleted or replaced
	// under the running Caddy, docs/stores.md); absent otherwise.
	StoreHealth *storeHealth `json:"store_health,omitempty"`
	// Unavailable says why the store did not answer for the source's
	// inbox or archive counts (in the list of every source, which lists
	// the others as ever); those counts are then left out.
	Unavailable string `json:"unavailable,omitempty"`
	// AllowIPs are the address lists of the source's routes (allow_ips):
	// where each comes from, its size, when it was last loaded and the
	// error of its last attempt.
	AllowIPs []any `json:"allow_ips,omitempty"`
}

// archiveStatus is an archive as the admin API reports it.
type archiveStatus struct {
	// Events is absent when the store did not answer.
	Events      *int64 `json:"events,omitempty"`
	Retention   string `json:"retention"`
	MaxEvents   int    `json:"max_events"`
	Bodies      bool   `json:"bodies"`
	RedeliverTo string `json:"redeliver_to,omitempty"`
}

// storeHealth is a store's report of its own health (store.HealthReporter).
type storeHealth struct {
	// Healthy is false when the store no longer keeps what it is given
	// although its calls succeed.
	Healthy bool `json:"healthy"`
	// Error says why the store is unhealthy; "" when it is healthy.
	Error string `json:"error"`
}

// health is what the source's stores report of their health: unhealthy
// when one of its routes' stores is; nil when none reports it.
func (s *adminSource) health() *storeHealth {
	var h *storeHealth
	for _, rt := range s.routes {
		hr, ok := rt.Store().(store.HealthReporter)
		if !ok {
			continue
		}
		if h == nil {
			h = &storeHealth{Healthy: true}
		}
		if err := hr.Health(); err != nil && h.Healthy {
			*h = storeHealth{Error: err.Error()}
		}
	}
	return h
}

// status reads a source's counts.
func (s *adminSource) status(r *http.Request) (sourceStatus, error) {
	first := s.routes[0]
	st := sourceStatus{
		Source: s.name,
		Store:  first.StoreModule(),
		Routes: len(s.routes),
		// no store call: a file store checks its files every 5 s
		StoreHealth: s.health(),
	}
	// the counts are read beside the inbox's and the archive's, so that a
	// store that does not answer costs its timeout once
	var tot series.Totals
	var totErr error
	var wg sync.WaitGroup
	wg.Go(func() { tot, totErr = first.Series().Totals(r.Context()) })
	var failed error // the first store error; the other counts are still read
	for _, rt := range s.routes {
		st.AllowIPs = append(st.AllowIPs, rt.AllowLists()...)
	}
	ib, _ := s.inbox()
	if ib != nil {
		st.Inbox = true
		if c, err := ib.Counts(r.Context()); err != nil {
			failed = err
		} else {
			st.Counts = &c
		}
		if paused, err := ib.Paused(r.Context()); err != nil {
			failed = cmp.Or(failed, err)
		} else {
			st.Paused = &paused
		}
		if d, err := ib.Destinations(r.Context()); err != nil {
			failed = cmp.Or(failed, err)
		} else {
			st.Destinations = d
		}
	}
	if a, err := s.archive(); err == nil {
		cfg := a.Config()
		st.Archive = &archiveStatus{
			Retention: cfg.Retention.String(), MaxEvents: cfg.MaxEvents,
			Bodies: cfg.Bodies, RedeliverTo: cfg.RedeliverTo,
		}
		if n, err := a.Size(r.Context()); err != nil {
			failed = cmp.Or(failed, err)
		} else {
			st.Archive.Events = &n
		}
	}
	wg.Wait()
	switch {
	case totErr != nil:
		failed = cmp.Or(failed, totErr)
		st.Results = first.Results()
	case ib != nil:
		st.Results, st.ResultsSince, st.Deliveries = tot.Results, tot.Since, tot.Deliveries
	default:
		st.Results, st.ResultsSince = tot.Results, tot.Since
	}
	if failed != nil {
		return st, storeError(s.name, failed)
	}
	return st, nil
}

// handleSources reports every source of the running configuration,
// sorted. The sources' stores are asked at once, so a store that does not
// answer costs the list its timeout once; a source whose store did not
// answer is listed with what is known without it, marked unavailable.
func handleSources(w http.ResponseWriter, r *http.Request) error {
	var srcs []*adminSource
	for _, name := range runningSourceNames() {
		if src, err := findSource(name); err == nil { // else the configuration changed meanwhile
			srcs = append(srcs, src)
		}
	}
	out := make([]sourceStatus, len(srcs))
	var wg sync.WaitGroup
	for i, src := range srcs {
		wg.Go(func() {
			st, err := src.status(r)
			if err != nil {
				st.Unavailable = unavailableReason(err)
			}
			out[i] = st
		})
	}
	wg.Wait()
	return writeJSON(w, out)
}

// unavailableReason is the message of a store error, for a source marked
// unavailable.
func unavailableReason(err error) string {
	var ae caddy.APIError
	if errors.As(err, &ae) && ae.Err != nil {
		return ae.Err.Error()
	}
	return err.Error()
}

// handleSource reports one source.
func handleSource(w http.ResponseWriter, r *http.Request, src *adminSource) error {
	st, err := src.status(r)
	if err != nil {
		return err
	}
	return writeJSON(w, st)
}

// errNotFound answers a path the API does not have.
var errNotFound = apiError(http.StatusNotFound, errors.New("not found"))

// allowMethods returns a 405 error, with the Allow header set, unless the
// request's method is one of methods.
func allowMethods(w http.ResponseWriter, r *http.Request, methods ...string) error {
	if slices.Contains(methods, r.Method) {
		return nil
	}
	slices.Sort(methods)
	allow := strings.Join(methods, ", ")
	w.Header().Set("Allow", allow)
	return apiError(http.StatusMethodNotAllowed, fmt.Errorf("method %s not allowed: use %s", r.Method, allow))
}

// validStreamID reports whether s is a Redis stream id: <ms> or <ms>-<seq>.
func validStreamID(s string) bool {
	ms, seq, hasSeq := strings.Cut(s, "-")
	if _, err := strconv.ParseUint(ms, 10, 64); err != nil {
		return false
	}
	if hasSeq {
		if _, err := strconv.ParseUint(seq, 10, 64); err != nil {
			return false
		}
	}
	return true
}

// storeError is the 503 error of a failed store call.
func storeError(source string, err error) error {
	return apiError(http.StatusServiceUnavailable, fmt.Errorf("store unavailable for source %q: %v", source, err))
}

// apiError builds the error Caddy's admin server renders as JSON.
func apiError(status int, err error) error {
	return caddy.APIError{HTTPStatus: status, Err: err}
}

// writeJSON answers 200 with v as JSON. A failed write means the client
// went away: there is no one left to tell.
func writeJSON(w http.ResponseWriter, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return apiError(http.StatusInternalServerError, err)
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(append(b, '\n'))
	return nil
}

// Interface guards
var (
	_ caddy.Module      = (*AdminAPI)(nil)
	_ caddy.AdminRouter = (*AdminAPI)(nil)
)
