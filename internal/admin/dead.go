package admin

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/inbox"
)

// The dead letters of a source's inbox (docs/inbox.md#watching-and-redelivering):
// list, one, redeliver one, redeliver all, discard one; of every destination,
// or with `?destination=<url or id>` of one (docs/inbox.md#routes).

// Paging of the dead-letter list.
const (
	defaultDeadCount = 100
	maxDeadCount     = 1000
)

// redelivered is the answer to a dead letter's redelivery: the event's new
// stream id.
type redelivered struct {
	ID string `json:"id"`
}

// handleDead lists dead-lettered events, oldest first: up to `count`
// (default 100, at most 1000) from the stream id `start` on, inclusive
// ("-", the default, for the first).
func handleDead(w http.ResponseWriter, r *http.Request, src *adminSource) error {
	ib, err := src.inbox()
	if err != nil {
		return err
	}
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
	events, err := ib.DeadLetters(r.Context(), q.Get("destination"), start, count)
	if err != nil {
		return inboxError(ib, err)
	}
	if events == nil {
		events = []inbox.DeadLetter{}
	}
	return writeJSON(w, events)
}

// deadLetterInbox returns the source's inbox, once it has checked a dead
// letter's id from the path: a whole id, since <ms> alone would name every
// event of that millisecond.
func deadLetterInbox(src *adminSource, id string) (*inbox.Inbox, error) {
	ib, err := src.inbox()
	if err != nil {
		return nil, err
	}
	if !validStreamID(id) || !strings.Contains(id, "-") {
		return nil, errNoDead(ib, id)
	}
	return ib, nil
}

func errNoDead(ib *inbox.Inbox, id string) error {
	return apiError(http.StatusNotFound, fmt.Errorf("no dead-lettered event %q for source %q", id, ib.Source()))
}

// handleDeadLetter answers one dead-lettered event, as the list shows it
// (its attempts included); 404 when there is no such event.
func handleDeadLetter(w http.ResponseWriter, r *http.Request, src *adminSource, id string) error {
	ib, err := deadLetterInbox(src, id)
	if err != nil {
		return err
	}
	dl, err := ib.DeadLetter(r.Context(), r.URL.Query().Get("destination"), id)
	if errors.Is(err, inbox.ErrNoDeadEvent) {
		return errNoDead(ib, id)
	}
	if err != nil {
		return inboxError(ib, err)
	}
	return writeJSON(w, dl)
}

// handleRedeliverDead moves a dead-lettered event back into the inbox
// stream, where it is delivered again with a fresh retry schedule.
func handleRedeliverDead(w http.ResponseWriter, r *http.Request, src *adminSource, id string) error {
	ib, err := deadLetterInbox(src, id)
	if err != nil {
		return err
	}
	newID, err := ib.Redeliver(r.Context(), r.URL.Query().Get("destination"), id)
	if errors.Is(err, inbox.ErrNoDeadEvent) {
		return errNoDead(ib, id)
	}
	if err != nil {
		return inboxError(ib, err)
	}
	return writeJSON(w, redelivered{ID: newID})
}

// handleRedeliverAllDead moves every dead-lettered event back into the
// inbox stream and answers how many.
func handleRedeliverAllDead(w http.ResponseWriter, r *http.Request, src *adminSource) error {
	ib, err := src.inbox()
	if err != nil {
		return err
	}
	n, err := ib.RedeliverAll(r.Context(), r.URL.Query().Get("destination"))
	if err != nil {
		return inboxError(ib, err)
	}
	return writeJSON(w, struct {
		Redelivered int `json:"redelivered"`
	}{n})
}

// handleDiscardDead deletes a dead-lettered event: 204, or 404 when there
// is no such event.
func handleDiscardDead(w http.ResponseWriter, r *http.Request, src *adminSource, id string) error {
	ib, err := deadLetterInbox(src, id)
	if err != nil {
		return err
	}
	deleted, err := ib.Discard(r.Context(), r.URL.Query().Get("destination"), id)
	if err != nil {
		return inboxError(ib, err)
	}
	if !deleted {
		return errNoDead(ib, id)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// inboxError is the error of an inbox call: 404 for a destination the
// source does not have, 409 for a dead letter id several destinations
// have, else the store's 503.
func inboxError(ib *inbox.Inbox, err error) error {
	switch {
	case errors.Is(err, inbox.ErrNoDestination):
		return apiError(http.StatusNotFound, fmt.Errorf("source %q has no such destination: give its URL or its id, as GET /webhook_idempotency/%s/inbox lists them", ib.Source(), ib.Source()))
	case errors.Is(err, inbox.ErrAmbiguousDeadEvent):
		return apiError(http.StatusConflict, fmt.Errorf("dead letters of several destinations of source %q have this id: give ?destination=<url or id>", ib.Source()))
	}
	return storeError(ib.Source(), err)
}
