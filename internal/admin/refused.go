package admin

import (
	"fmt"
	"net/http"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/archive"
)

// A source's refused requests (docs/admin.md: Refusals): what it refused,
// newest first, with the reason.

// refusals returns the source's list of refusals, or a 404 error.
func (s *adminSource) refusals() (*archive.Archive, error) {
	for _, rt := range s.routes {
		if l := rt.Refusals(); l != nil {
			return l, nil
		}
	}
	return nil, apiError(http.StatusNotFound, fmt.Errorf("the store of source %q keeps no list of refusals", s.name))
}

// handleRefused lists the source's refused requests, newest first, with
// the archive's filters (since, until, result, status, key, count,
// cursor).
func handleRefused(w http.ResponseWriter, r *http.Request, src *adminSource) error {
	l, err := src.refusals()
	if err != nil {
		return err
	}
	q, err := parseArchiveQuery(r.URL.Query(), maxArchiveCount)
	if err != nil {
		return apiError(http.StatusBadRequest, err)
	}
	events, cursor, err := l.Find(r.Context(), q)
	if err != nil {
		return storeError(src.name, err)
	}
	return writeJSON(w, refusedList{Refused: events, Cursor: cursor})
}

// refusedList is a page of refused requests.
type refusedList struct {
	Refused []archive.Event `json:"refused"`
	// Cursor gives the next page, as the archive's does; "" at the end.
	Cursor string `json:"cursor"`
}
