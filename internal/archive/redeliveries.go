package archive

import (
	"context"
	"errors"
	"io"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
)

// Redeliveries (docs/archive.md#attempts): an archived event redelivered
// to redeliver_to keeps each redelivery as an attempt of its own, after
// the event's own attempt, with what keep_response keeps of the answer,
// redacted as the event's other attempts are. The memory store changes
// the event in its ring; the file store rewrites the event's history in
// one commit; the redis store, whose stream entries cannot be changed,
// keeps them beside the stream (redis_redeliveries.go). Each store keeps
// the newest event.MaxAttempts attempts of an event and the count of all.

// errGone is why a redelivery is not kept: its event left the archive
// (max_events or retention) while it was sent.
var errGone = errors.New("the event left the archive (max_events or retention) before its redelivery was recorded")

// redeliveryAnswerMax bounds what is read of a redelivery's answer body
// past what keep_response keeps, so that the connection can be used
// again.
const redeliveryAnswerMax = 64 << 10

// ReadAnswer reads a redelivery's answer body: what keep_response may
// keep of it, then the rest up to 64 KiB unread.
func (a *Archive) ReadAnswer(resp *http.Response) []byte {
	var body []byte
	if keep := a.cfg.KeepResponse; keep > 0 {
		body, _ = io.ReadAll(io.LimitReader(resp.Body, int64(keep)+1))
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, redeliveryAnswerMax))
	return body
}

// RedeliveryAttempt returns a redelivery to redeliver_to, started at
// start, as an attempt: redeliver_to (its query redacted as a request's
// URI is) is its destination, and it is attempt 1 there (each redelivery
// is a delivery of its own); resp is the answer (nil, with err, when there
// was none) and body what ReadAnswer read of it.
func (a *Archive) RedeliveryAttempt(start time.Time, resp *http.Response, body []byte, err error) event.Attempt {
	rd := a.cfg.Redact
	at := event.Attempt{At: start, Destination: rd.URI(a.cfg.RedeliverTo), Number: 1, Latency: time.Since(start)}
	if err != nil {
		at.Error = event.ErrorLine(rd.Error(err).Error())
		return at
	}
	at.Status = resp.StatusCode
	if keep := a.cfg.KeepResponse; keep > 0 {
		var cut bool
		at.Headers, at.Truncated = event.KeptHeaders(resp.Header, rd.RedactsHeader, keep)
		at.Body, cut = event.KeptBody(body, keep-len(at.Headers))
		at.Truncated = at.Truncated || cut
		if len(at.Body) > 0 {
			at.Body = append([]byte(nil), at.Body...)
		}
	}
	return at
}

// Redelivered keeps at, a redelivery of the event with id, as an attempt
// of that event. It never fails the redelivery: a failure to keep it is
// logged and returned, for the caller to go on with the redelivery's
// outcome.
func (a *Archive) Redelivered(ctx context.Context, id event.ID, at event.Attempt) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.backend.timeout())
	defer cancel()
	err := a.backend.redelivered(ctx, id, &at)
	if err != nil {
		a.logger.Warn("recording a redelivery in the archive failed; the event's history misses it",
			zap.String("source", a.cfg.Source), zap.String("id", id.String()), zap.String("destination", at.Destination),
			zap.Int("status", at.Status), zap.Error(err))
	}
	return err
}
