package admin

import (
	"fmt"
	"net/http"
	"strconv"
)

// The delivery control of a source's inbox (docs/inbox.md#watching-delivery):
// counts, the groups that have waited longest and what holds them, the
// partitions and the rate limit.

// Paging of the groups.
const (
	defaultGroupsCount = 20
	maxGroupsCount     = 1000
)

// handleInbox reports the inbox's delivery control, with up to `groups`
// (default 20, at most 1000) of its longest-waiting groups.
func handleInbox(w http.ResponseWriter, r *http.Request, src *adminSource) error {
	ib, err := src.inbox()
	if err != nil {
		return err
	}
	count := defaultGroupsCount
	if v := r.URL.Query().Get("groups"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxGroupsCount {
			return apiError(http.StatusBadRequest, fmt.Errorf("invalid groups %q: want a number from 1 to %d", v, maxGroupsCount))
		}
		count = n
	}
	d, err := ib.Delivery(r.Context(), count)
	if err != nil {
		return storeError(ib.Source(), err)
	}
	return writeJSON(w, d)
}
