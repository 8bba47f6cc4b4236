package admin

import (
	"fmt"
	"net/http"
	"strconv"
)

// The delivery control of a source's inbox (docs/inbox.md#watching-delivery):
// counts, the groups that have waited longest and what holds them, the
// partitions, the rate limit and each destination's; and pausing and
// resuming its deliveries (docs/inbox.md#pause-and-resume).

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

// paused is the answer to a pause or a resume.
type paused struct {
	Source string `json:"source"`
	// Destination is the destination paused or resumed, absent for the
	// whole source.
	Destination string `json:"destination,omitempty"`
	Paused      bool   `json:"paused"`
}

// handlePause pauses the deliveries of the source, or with
// `?destination=<url or id>` of one destination; events are still
// accepted.
func handlePause(w http.ResponseWriter, r *http.Request, src *adminSource) error {
	return setPaused(w, r, src, true)
}

// handleResume resumes them.
func handleResume(w http.ResponseWriter, r *http.Request, src *adminSource) error {
	return setPaused(w, r, src, false)
}

func setPaused(w http.ResponseWriter, r *http.Request, src *adminSource, on bool) error {
	ib, err := src.inbox()
	if err != nil {
		return err
	}
	dest := r.URL.Query().Get("destination")
	if err := ib.Pause(r.Context(), dest, on); err != nil {
		return inboxError(ib, err)
	}
	return writeJSON(w, paused{Source: ib.Source(), Destination: dest, Paused: on})
}
