package reconcile

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// githubServer is a scripted GitHub REST API for one hook's deliveries. Its
// answers follow GitHub's published REST description
// (github/rest-api-description, descriptions/api.github.com/
// api.github.com.2022-11-28.yaml), quoted here where this server follows
// it:
//
//	"/repos/{owner}/{repo}/hooks/{hook_id}/deliveries":
//	  get:
//	    operationId: repos/list-webhook-deliveries
//	    parameters: owner, repo, hook-id, per-page, cursor, webhook-delivery-status
//	    responses:
//	      '200': application/json: schema: type: array, items: "$ref": "#/components/schemas/hook-delivery-item"
//	      '400': bad_request   '422': validation_failed
//	"/repos/{owner}/{repo}/hooks/{hook_id}/deliveries/{delivery_id}/attempts":
//	  post:
//	    operationId: repos/redeliver-webhook-delivery
//	    responses: '202': "$ref": "#/components/responses/accepted"   '400'   '422'
//	(and the same two under "/orgs/{org}/hooks/{hook_id}/…")
//
//	per-page: name: per_page, in: query, description: The number of results per page (max 100). schema: integer, default: 30
//	cursor:   name: cursor, in: query, description: 'Used for pagination: the starting delivery from which
//	          the page of deliveries is fetched. Refer to the `link` header for the next and previous page cursors.'
//	          schema: string
//	delivery-id: name: delivery_id, in: path, required: true, schema: integer
//
//	hook-delivery-item:
//	  title: Simple webhook delivery
//	  description: Delivery made by a webhook, without request and response information.
//	  properties:
//	    id:              integer int64   Unique identifier of the webhook delivery.
//	    guid:            string          Unique identifier for the event (shared with all deliveries
//	                                     for all webhooks that subscribe to this event).
//	    delivered_at:    string date-time
//	    redelivery:      boolean         Whether the webhook delivery is a redelivery.
//	    duration:        number          Time spent delivering.
//	    status:          string          Describes the response returned after attempting the delivery.
//	                                     example: failed to connect
//	    status_code:     integer         Status code received when delivery was made. example: 502
//	    event:           string
//	    action:          string, nullable
//	    installation_id: integer int64, nullable
//	    repository_id:   integer int64, nullable
//	    throttled_at:    string date-time, nullable
//	  required: [id, guid, delivered_at, redelivery, duration, status, status_code, event, action,
//	             installation_id, repository_id]
//
// The list is newest first. The `Link` header names the next page's URL
// with its cursor; like GitHub's, those URLs use another path than the
// request's (`/repositories/<id>/hooks/<id>/deliveries`), which the
// client must not follow with its token: it takes the cursor alone. A
// redelivery requested is recorded and, as GitHub does, appears at the
// head of the list as a new delivery of the same GUID (`redelivery:
// true`), answered by the route as onRedeliver says.
type githubServer struct {
	*httptest.Server
	t        *testing.T
	token    string
	hook     string // repos/<owner>/<repo>/hooks/<id> or orgs/<org>/hooks/<id>
	pageSize int    // at most this many a page, whatever per_page asks

	mu          sync.Mutex
	deliveries  []githubItem // newest first
	nextID      int64
	requests    []*http.Request
	redelivered []int64
	// onRequest, when set, runs before request n (1 for the first) is
	// answered; a status other than 0 answers it with the header and a
	// GitHub error body with message.
	onRequest func(n int, r *http.Request) (status int, header http.Header, message string)
	// onOK, when set, adds headers to a successful answer.
	onOK func(n int) http.Header
	// onRedeliver says how the route answered GitHub's redelivery of a
	// GUID (the status_code of the new delivery); nil: 200.
	onRedeliver func(guid string) int
}

// githubItem is one delivery, as hook-delivery-item.
type githubItem struct {
	ID             int64     `json:"id"`
	GUID           string    `json:"guid"`
	DeliveredAt    time.Time `json:"delivered_at"`
	Redelivery     bool      `json:"redelivery"`
	Duration       float64   `json:"duration"`
	Status         string    `json:"status"`
	StatusCode     int       `json:"status_code"`
	Event          string    `json:"event"`
	Action         *string   `json:"action"`
	InstallationID *int64    `json:"installation_id"`
	RepositoryID   *int64    `json:"repository_id"`
	ThrottledAt    *string   `json:"throttled_at"`
}

func newGitHubServer(t *testing.T, token, hook string) *githubServer {
	s := &githubServer{t: t, token: token, hook: hook, pageSize: 100, nextID: 1000}
	s.Server = httptest.NewServer(s)
	t.Cleanup(s.Close)
	return s
}

// githubStatus is GitHub's status text of a delivery's answer.
func githubStatus(code int) string {
	switch {
	case code == 0:
		return "failed to connect"
	case code >= 200 && code <= 299:
		return "OK"
	case code == 504:
		return "timed out"
	}
	return "Invalid HTTP Response: " + strconv.Itoa(code)
}

// deliver adds a delivery of guid at the head of the list (the newest),
// delivered age ago, answered code; it returns its id.
func (s *githubServer) deliver(guid string, redelivery bool, code int, age time.Duration) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deliverLocked(guid, redelivery, code, age)
}

func (s *githubServer) deliverLocked(guid string, redelivery bool, code int, age time.Duration) int64 {
	s.nextID++
	action := "opened"
	repo := int64(1296269)
	it := githubItem{
		ID: s.nextID, GUID: guid, DeliveredAt: time.Now().Add(-age).UTC().Truncate(time.Second),
		Redelivery: redelivery, Duration: 0.27, Status: githubStatus(code), StatusCode: code,
		Event: "issues", Action: &action, RepositoryID: &repo,
	}
	s.deliveries = append([]githubItem{it}, s.deliveries...)
	return it.ID
}

// redeliveries returns the delivery ids whose redelivery was requested.
func (s *githubServer) redeliveries() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int64(nil), s.redelivered...)
}

// lists returns the query of every list request so far.
func (s *githubServer) lists() []url.Values {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []url.Values
	for _, r := range s.requests {
		if r.Method == http.MethodGet {
			out = append(out, r.URL.Query())
		}
	}
	return out
}

func (s *githubServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	if r.Header.Get("Authorization") != "Bearer "+s.token {
		// a GitHub error body: basic-error {message, documentation_url}
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintf(w, `{"message":"Bad credentials (%s)","documentation_url":"https://docs.github.com/rest","status":"401"}`, strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
		return
	}
	// GitHub's media type (go-github still sends its v3 form)
	if accept := r.Header.Get("Accept"); accept != "application/vnd.github+json" && accept != "application/vnd.github.v3+json" ||
		r.Header.Get("X-GitHub-Api-Version") != "2022-11-28" || r.Header.Get("User-Agent") == "" {
		s.t.Errorf("github: %s %s without GitHub's recommended headers: %v", r.Method, r.URL, r.Header)
	}
	s.mu.Lock()
	s.requests = append(s.requests, r)
	n := len(s.requests)
	hook, onOK := s.onRequest, s.onOK
	s.mu.Unlock()
	if hook != nil {
		if status, h, msg := hook(n, r); status != 0 {
			for k, v := range h {
				w.Header()[k] = v
			}
			w.WriteHeader(status)
			fmt.Fprintf(w, `{"message":%q,"documentation_url":"https://docs.github.com/rest"}`, msg)
			return
		}
	}
	if onOK != nil {
		for k, v := range onOK(n) {
			w.Header()[k] = v
		}
	}
	base := "/" + s.hook + "/deliveries"
	switch {
	case r.Method == http.MethodGet && r.URL.Path == base:
		s.list(w, r)
	case r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, base+"/") && strings.HasSuffix(r.URL.Path, "/attempts"):
		id, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, base+"/"), "/attempts"), 10, 64)
		if err != nil {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		s.mu.Lock()
		var guid string
		for _, d := range s.deliveries {
			if d.ID == id {
				guid = d.GUID
			}
		}
		if guid == "" {
			s.mu.Unlock()
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"message":"Not Found"}`)
			return
		}
		s.redelivered = append(s.redelivered, id)
		code := 200
		if s.onRedeliver != nil {
			code = s.onRedeliver(guid)
		}
		s.deliverLocked(guid, true, code, 0)
		s.mu.Unlock()
		// responses/accepted: Accepted, an empty object
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprint(w, `{}`)
	default:
		s.t.Errorf("github: unexpected %s %s", r.Method, r.URL.Path)
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"message":"Not Found"}`)
	}
}

// list answers one page of the deliveries.
func (s *githubServer) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	perPage := 30
	if v := q.Get("per_page"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			w.WriteHeader(http.StatusUnprocessableEntity)
			fmt.Fprint(w, `{"message":"Validation Failed"}`)
			return
		}
		perPage = n
	}
	perPage = min(perPage, s.pageSize)
	s.mu.Lock()
	list := append([]githubItem(nil), s.deliveries...)
	s.mu.Unlock()
	start := 0
	if c := q.Get("cursor"); c != "" {
		id, err := strconv.ParseInt(strings.TrimPrefix(c, "v1_"), 10, 64)
		if err != nil || !strings.HasPrefix(c, "v1_") {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"message":"Invalid cursor"}`)
			return
		}
		// the cursor is the first delivery of the page, by id: ids grow,
		// so deliveries made since do not shift it
		start = len(list)
		for i, d := range list {
			if d.ID <= id {
				start = i
				break
			}
		}
	}
	end := min(start+perPage, len(list))
	if end < len(list) {
		next := fmt.Sprintf("%s/repositories/1296269/hooks/%s/deliveries?per_page=%d&cursor=v1_%d",
			s.URL, s.hook[strings.LastIndexByte(s.hook, '/')+1:], perPage, list[end].ID)
		w.Header().Set("Link", fmt.Sprintf(`<%s>; rel="next"`, next))
	}
	_ = json.NewEncoder(w).Encode(list[start:end])
}
