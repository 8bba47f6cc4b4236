package webhookidempotency

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"
)

func init() {
	caddy.RegisterModule(AdminAPI{})
}

// AdminAPI is a module that adds the /webhook_idempotency/ endpoints to
// Caddy's admin API (docs/inbox.md): the number of pending, scheduled and dead
// events of each inbox running in this process, the list of a source's
// dead-lettered events, and their redelivery. Caddy loads it by itself;
// it has no configuration.
//
//	GET  /webhook_idempotency/                              every inbox's counts
//	GET  /webhook_idempotency/<source>                      one inbox's counts
//	GET  /webhook_idempotency/<source>/dead?start=&count=   dead-lettered events
//	POST /webhook_idempotency/<source>/dead/<id>/redeliver  deliver a dead event again
type AdminAPI struct{}

// adminPrefix is the path every route of AdminAPI starts with.
const adminPrefix = "/webhook_idempotency/"

// Paging of the dead-letter list.
const (
	defaultDeadCount = 100
	maxDeadCount     = 1000
)

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

// inboxStatus is one inbox's counts, as the admin API reports them.
type inboxStatus struct {
	Source string `json:"source"`
	inboxCounts
}

// redelivered is the answer to a redelivery: the event's new stream id.
type redelivered struct {
	ID string `json:"id"`
}

// handle routes a request by its path: /, /<source>, /<source>/dead and
// /<source>/dead/<id>/redeliver under the prefix. Path segments are
// unescaped, so a source or id may be percent-encoded.
func (a AdminAPI) handle(w http.ResponseWriter, r *http.Request) error {
	rest, ok := strings.CutPrefix(r.URL.EscapedPath(), adminPrefix)
	if !ok {
		return apiError(http.StatusNotFound, errors.New("not found"))
	}
	if rest == "" {
		if err := allowMethod(w, r, http.MethodGet); err != nil {
			return err
		}
		return a.handleList(w, r)
	}
	segs := strings.Split(rest, "/")
	for i, s := range segs {
		v, err := url.PathUnescape(s)
		if err != nil || v == "" {
			return apiError(http.StatusNotFound, errors.New("not found"))
		}
		segs[i] = v
	}
	var method string
	var serve func(http.ResponseWriter, *http.Request, *inbox) error
	switch {
	case len(segs) == 1:
		method, serve = http.MethodGet, a.handleCounts
	case len(segs) == 2 && segs[1] == "dead":
		method, serve = http.MethodGet, a.handleDead
	case len(segs) == 4 && segs[1] == "dead" && segs[3] == "redeliver":
		method, serve = http.MethodPost, func(w http.ResponseWriter, r *http.Request, ib *inbox) error {
			return a.handleRedeliver(w, r, ib, segs[2])
		}
	default:
		return apiError(http.StatusNotFound, errors.New("not found"))
	}
	if err := allowMethod(w, r, method); err != nil {
		return err
	}
	ib, err := runningInbox(segs[0])
	if err != nil {
		return err
	}
	return serve(w, r, ib)
}

// handleList reports the counts of every inbox running in this process,
// sorted by source.
func (AdminAPI) handleList(w http.ResponseWriter, r *http.Request) error {
	running := runningInboxes()
	out := make([]inboxStatus, 0, len(running))
	for _, ib := range running {
		c, err := ib.counts(r.Context())
		if err != nil {
			return storeError(ib.source, err)
		}
		out = append(out, inboxStatus{Source: ib.source, inboxCounts: c})
	}
	return writeJSON(w, out)
}

// handleCounts reports one inbox's counts.
func (AdminAPI) handleCounts(w http.ResponseWriter, r *http.Request, ib *inbox) error {
	c, err := ib.counts(r.Context())
	if err != nil {
		return storeError(ib.source, err)
	}
	return writeJSON(w, inboxStatus{Source: ib.source, inboxCounts: c})
}

// handleDead lists dead-lettered events, oldest first: up to `count`
// (default 100, at most 1000) from the stream id `start` on, inclusive
// ("-", the default, for the first).
func (AdminAPI) handleDead(w http.ResponseWriter, r *http.Request, ib *inbox) error {
	q := r.URL.Query()
	count := int64(defaultDeadCount)
	if v := q.Get("count"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 || n > maxDeadCount {
			return apiError(http.StatusBadRequest, fmt.Errorf("invalid count %q: want a number from 1 to %d", v, maxDeadCount))
		}
		count = n
	}
	start := "-"
	if v := q.Get("start"); v != "" && v != "-" {
		if !validStreamID(v) {
			return apiError(http.StatusBadRequest, fmt.Errorf("invalid start %q: want a stream id such as 1712345678901-0", v))
		}
		start = v
	}
	events, err := ib.deadEvents(r.Context(), start, count)
	if err != nil {
		return storeError(ib.source, err)
	}
	if events == nil {
		events = []deadEvent{}
	}
	return writeJSON(w, events)
}

// handleRedeliver moves a dead-lettered event back into the inbox stream,
// where it is delivered again with a fresh retry schedule.
func (AdminAPI) handleRedeliver(w http.ResponseWriter, r *http.Request, ib *inbox, id string) error {
	// a whole id: <ms> alone would name every event of that millisecond
	if !validStreamID(id) || !strings.Contains(id, "-") {
		return apiError(http.StatusNotFound, fmt.Errorf("no dead-lettered event %q for source %q", id, ib.source))
	}
	newID, err := ib.redeliver(r.Context(), id)
	if errors.Is(err, errNoDeadEvent) {
		return apiError(http.StatusNotFound, fmt.Errorf("no dead-lettered event %q for source %q", id, ib.source))
	}
	if err != nil {
		return storeError(ib.source, err)
	}
	return writeJSON(w, redelivered{ID: newID})
}

// runningInbox returns the inbox running in this process for source, or a
// 404 error.
func runningInbox(source string) (*inbox, error) {
	ib := inboxFor(source)
	if ib == nil {
		return nil, apiError(http.StatusNotFound, fmt.Errorf("no inbox running for source %q", source))
	}
	return ib, nil
}

// allowMethod returns a 405 error, with the Allow header set, unless the
// request's method is method.
func allowMethod(w http.ResponseWriter, r *http.Request, method string) error {
	if r.Method == method {
		return nil
	}
	w.Header().Set("Allow", method)
	return apiError(http.StatusMethodNotAllowed, fmt.Errorf("method %s not allowed: use %s", r.Method, method))
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

// storeError is the 503 error of a failed Redis call.
func storeError(source string, err error) error {
	return apiError(http.StatusServiceUnavailable, fmt.Errorf("redis unavailable for the inbox of source %q: %v", source, err))
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
