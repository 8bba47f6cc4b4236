package inbox

import (
	"context"
	"io"
	"net/http"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
)

// Attempts (docs/inbox.md#attempts). Every attempt at any destination of
// an event, with what is kept of the application's answer, goes into the
// event's history: one per key and source, shared by the event's
// destinations (a fan-out's attempts are one history, each attempt naming
// its destination), kept beside the queue in the inbox's store. A history
// holds the newest event.MaxAttempts attempts and the count of all; it
// lives attemptLife after its last attempt, and with an archive at most
// the archive's max_events histories are kept, the longest untouched
// dropped first.
//
// An attempt is recorded with its outcome: on the file store in the
// commit that records the outcome, on Redis by one more command before it.
// A failure to record it is logged and the outcome recorded all the same.

// attemptLog is a store's side of the histories of a source's events.
type attemptLog interface {
	// read returns the history of each key's event (none for a key with
	// no history), in one round trip.
	read(ctx context.Context, keys []string) ([]event.History, error)
}

// logged is an attempt on its way to its event's history.
type logged struct {
	key     string // the event's key value
	attempt event.Attempt
	life    time.Duration // how long the history lives from now
	max     int           // the most histories of the source; 0 for no bound
}

// attemptLife is how long an event's history lives after its last
// attempt: as long as its key may (the accept ttl), or the archive's
// retention when that is longer (Config.AttemptsLife).
func (ib *Inbox) attemptLife() time.Duration {
	return max(ib.src.acceptTTL, ib.cfg.AttemptsLife)
}

// toLog returns m's attempt as it goes into its history.
func (ib *Inbox) toLog(m *message, a event.Attempt) *logged {
	return &logged{key: m.ev.Key, attempt: a, life: ib.attemptLife(), max: ib.cfg.AttemptsMax}
}

// Attempts returns the history of the event of each key (none for a key
// without one): what every destination attempted, oldest first, in one
// round trip.
func (ib *Inbox) Attempts(ctx context.Context, keys ...string) ([]event.History, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	return ib.src.q.attempts().read(ctx, keys)
}

// attemptOf is an attempt to this destination that got resp (nil when
// it got none, err saying why), started at start; body is what was read
// of the answer's body.
func (ib *Inbox) attemptOf(number int, start time.Time, resp *http.Response, body []byte, err error) event.Attempt {
	a := event.Attempt{At: start, Destination: ib.cfg.Redact.URI(ib.dest.url), Number: number, Latency: time.Since(start)}
	if err != nil {
		a.Error = event.ErrorLine(ib.cfg.Redact.Error(err).Error())
		return a
	}
	a.Status = resp.StatusCode
	if keep := ib.cfg.KeepResponse; keep > 0 {
		a.Headers, a.Truncated = event.KeptHeaders(resp.Header, ib.cfg.Redact.RedactsHeader, keep)
		var cut bool
		a.Body, cut = event.KeptBody(body, keep-len(a.Headers))
		a.Truncated = a.Truncated || cut
		if len(a.Body) > 0 {
			a.Body = append([]byte(nil), a.Body...)
		}
	}
	return a
}

// readAnswer reads an answer's body: up to what keep_response may keep
// (after the headers), then the rest up to 64 KiB unread, so the
// connection can be used again.
func (ib *Inbox) readAnswer(resp *http.Response) []byte {
	var body []byte
	if ib.cfg.KeepResponse > 0 {
		body, _ = io.ReadAll(io.LimitReader(resp.Body, int64(ib.cfg.KeepResponse)+1))
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	return body
}
