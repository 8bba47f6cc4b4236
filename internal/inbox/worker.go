package inbox

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/forward"
)

// Delivery: the workers read the queue, deliver each event to deliver_to,
// and record the outcome: delivered, scheduled for a retry, or
// dead-lettered.

// SuspectedHeader carries, to the application, the key under which the
// same signed bytes came first (replay_guard flag).
const SuspectedHeader = "Webhook-Replay-Suspected"

// OrderBrokenHeader carries, to the application, the id of the dead
// letter that was the head of the event's group before it: the group's
// order has a gap (order_by).
const OrderBrokenHeader = "Webhook-Order-Broken"

// startReaders starts a reader for each lane that has none. Called with
// ib.mu held or from the scheduler.
func (ib *Inbox) startReaders() {
	for _, lane := range ib.q.lanes() {
		ib.readers.Add(1)
		ib.wg.Add(1)
		go ib.readLoop(ib.ctx, lane)
	}
}

// maxRead is the most events one read of a lane takes.
const maxRead = 16

// readLoop reads the new events of a lane, one per free delivery slot,
// and starts each delivery once the rate limit lets it: as many events in
// one read as slots are free. The one reader of a queue waits for events
// holding those slots; one of several takes what it can without waiting,
// and waits holding one slot only, so that an idle lane keeps no slot
// from a busy one.
func (ib *Inbox) readLoop(ctx context.Context, lane int) {
	defer ib.wg.Done()
	for {
		if ib.q.retired(lane) {
			sleepCtx(ctx, layoutEvery)
			if ctx.Err() != nil {
				return
			}
			continue
		}
		if ib.held(ctx, lane) {
			if ctx.Err() != nil {
				return
			}
			continue
		}
		select {
		case ib.slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		held := 1
		for held < maxRead && ib.trySlot() {
			held++
		}
		var msgs []message
		var err error
		if held > 1 && ib.readers.Load() == 1 {
			msgs, err = ib.q.next(ctx, lane, held, fetchBlock)
		} else if held > 1 {
			if msgs, err = ib.q.next(ctx, lane, held, -1); err == nil && len(msgs) == 0 {
				ib.releaseSlots(held - 1)
				held = 1
			}
		}
		if held == 1 && err == nil && len(msgs) == 0 {
			msgs, err = ib.q.next(ctx, lane, 1, fetchBlock)
		}
		ib.releaseSlots(held - len(msgs))
		if err != nil && ctx.Err() == nil {
			ib.warn("reading the inbox queue failed; retrying", err)
			sleepCtx(ctx, time.Second)
		}
		if n := ib.pace(ctx, msgs); n < len(msgs) {
			ib.releaseSlots(len(msgs) - n) // the inbox stops: the rest went back
			return
		}
	}
}

// trySlot takes a delivery slot if one is free.
func (ib *Inbox) trySlot() bool {
	select {
	case ib.slots <- struct{}{}:
		return true
	default:
		return false
	}
}

// releaseSlots gives n delivery slots back.
func (ib *Inbox) releaseSlots(n int) {
	for range n {
		<-ib.slots
	}
}

// putBack returns an event read but not attempted to the queue, at once,
// as it was (the hand-outs to workers that died before count).
func (ib *Inbox) putBack(m message) {
	bg, cancel := ib.bg()
	defer cancel()
	if err := ib.q.schedule(bg, m, m.ev.Attempts+int(max(m.deliveries, 1))-1, m.ev.LastStatus, m.ev.LastError, time.Now()); err != nil {
		ib.logger.Warn("putting an inbox event back failed; it will be reclaimed", zap.String("id", m.id), zap.Error(err))
	}
}

// pace starts the delivery of each of msgs (read together from one lane)
// once the rate limit lets it: one reservation takes a moment for each,
// and the events not started yet are held meanwhile, the queue told every
// timeout that their worker is alive, so that no other worker reclaims
// them. It returns how many it started: when the inbox stops first, the
// rest go back into the queue, their attempts not made.
func (ib *Inbox) pace(ctx context.Context, msgs []message) int {
	if ib.limit == nil {
		for _, m := range msgs {
			ib.startDelivery(m)
		}
		return len(msgs)
	}
	var wait, step time.Duration
	for {
		bg, cancel := ib.bg()
		w, s, err := ib.limit.reserve(bg, len(msgs))
		cancel()
		if err == nil {
			wait, step = w, s
			break
		}
		ib.warn("reading the inbox rate limit failed; retrying", err)
		if !ib.sleepHolding(ctx, msgs, time.Second) {
			return 0
		}
	}
	at := time.Now().Add(wait)
	for i, m := range msgs {
		if !ib.sleepHolding(ctx, msgs[i:], time.Until(at.Add(time.Duration(i)*step))) {
			return i
		}
		ib.startDelivery(m)
	}
	return len(msgs)
}

// startDelivery delivers m in a goroutine of its own.
func (ib *Inbox) startDelivery(m message) {
	ib.wg.Add(1)
	go ib.deliver(m)
}

// sleepHolding waits d while msgs are held, touching them every timeout;
// false when the inbox stopped first, msgs then put back.
func (ib *Inbox) sleepHolding(ctx context.Context, msgs []message, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return true
		}
		sleepCtx(ctx, min(left, ib.cfg.Timeout))
		if ctx.Err() != nil {
			for _, m := range msgs {
				ib.putBack(m) // not attempted
			}
			return false
		}
		bg, cancel := ib.bg()
		if time.Until(deadline) > 0 {
			if err := ib.q.touch(bg, msgs); err != nil {
				ib.warn("renewing a held inbox event failed; another worker may take it over", err)
			}
		}
		cancel()
	}
}

// scheduleLoop makes due retries deliverable, reclaims events a dead worker
// left in delivery, reads the partitions of other configurations, and
// updates the gauges.
func (ib *Inbox) scheduleLoop(ctx context.Context) {
	defer ib.wg.Done()
	poll := ib.pollInterval()
	reclaimEvery := min(max(ib.cfg.Timeout, 250*time.Millisecond), 5*time.Second)
	ticker := time.NewTicker(poll)
	defer ticker.Stop()
	var lastReclaim, lastGauges, lastLayout, lastDestinations time.Time
	for {
		t := time.Now()
		if t.Sub(lastLayout) >= layoutEvery {
			lastLayout = t
			bg, cancel := ib.bg()
			if err := ib.q.refresh(bg); err != nil {
				ib.warn("reading the inbox partitions in use failed; retrying", err)
			}
			cancel()
			ib.startReaders()
		}
		if ib.src == ib && t.Sub(lastDestinations) >= destinationsEvery {
			lastDestinations = t
			ib.refreshDestinations(ctx, ib.st)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		bg, cancel := ib.bg()
		if err := ib.q.moveDue(bg, time.Now()); err != nil {
			ib.warn("moving due inbox retries failed; retrying", err)
		}
		cancel()
		t = time.Now()
		if t.Sub(lastReclaim) >= reclaimEvery {
			lastReclaim = t
			ib.reclaim(ctx)
		}
		if t.Sub(lastGauges) >= time.Second {
			lastGauges = t
			if c, err := ib.Counts(context.Background()); err == nil && ib.src == ib {
				ib.metrics.setCounts(c) // the source's: every destination's
				ib.cfg.Series.Backlog(c.Pending + c.Scheduled)
			}
			if ib.metrics.rate != nil {
				if st, err := ib.limit.state(context.Background()); err == nil {
					ib.metrics.rate.Set(st.Current)
				}
			}
		}
	}
}

// bg returns a context for one background call; the queue bounds the call
// by its store's timeout.
func (ib *Inbox) bg() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 30*time.Second)
}

// pollInterval is how often due retries are looked for: a quarter of the
// shortest wait, between 20ms and 500ms.
func (ib *Inbox) pollInterval() time.Duration {
	shortest := ib.cfg.Retries[0]
	for _, d := range ib.cfg.Retries {
		shortest = min(shortest, d)
	}
	return min(max(shortest/4, 20*time.Millisecond), 500*time.Millisecond)
}

// reclaim takes over events that have stayed in delivery for several
// delivery timeouts: their worker died. Each waits for a free slot (a
// reader may hold the free ones while it waits for new events, and gives
// them back within a read's wait).
func (ib *Inbox) reclaim(ctx context.Context) {
	minIdle := time.Duration(reclaimAfter) * ib.cfg.Timeout
	bg, cancel := ib.bg()
	lanes, err := ib.q.reclaimable(bg, minIdle)
	cancel()
	if err != nil {
		ib.warn("reclaiming inbox events failed; retrying", err)
		return
	}
	for _, lane := range lanes {
		for ctx.Err() == nil {
			if !ib.waitSlot(ctx, 2*fetchBlock) {
				return
			}
			bg, cancel := ib.bg()
			m, ok, err := ib.q.reclaim(bg, lane, minIdle)
			cancel()
			if err != nil || !ok {
				<-ib.slots
				if err != nil {
					ib.warn("reclaiming inbox events failed; retrying", err)
				}
				break
			}
			ib.logger.Info("reclaimed an unacknowledged inbox event", zap.String("id", m.id), zap.Int64("deliveries", m.deliveries))
			if ib.pace(ctx, []message{m}) == 0 {
				<-ib.slots
				return
			}
		}
	}
}

// waitSlot takes a delivery slot, waiting up to d for one.
func (ib *Inbox) waitSlot(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case ib.slots <- struct{}{}:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}

// deliver makes one delivery attempt and records its outcome.
func (ib *Inbox) deliver(m message) {
	defer ib.wg.Done()
	defer ib.releaseSlot(m)
	defer m.answer.finish()
	if m.probe {
		defer ib.probing.Store(false)
	}
	ev := &m.ev
	attempt := ev.Attempts + int(max(m.deliveries, 1))
	logger := ib.logger.With(zap.String("id", m.id), zap.String("key", ev.Key), zap.Int("attempt", attempt))
	bg, cancel := ib.bg()
	defer cancel()
	if ib.holds(m) {
		// paused, or the breaker stops deliveries: the event waits, its
		// attempt not made
		ib.putBack(m)
		return
	}

	// an event whose deliveries keep killing their worker is not tried for ever
	if attempt-ev.Base > len(ib.cfg.Retries)+1 {
		_, span := ib.startAttempt(ev, attempt)
		defer span.End()
		if err := ib.deadLetter(bg, m, attempt-1, 0, "retries exhausted: the worker delivering it stopped without an answer"); err != nil {
			logger.Warn("dead-lettering an inbox event failed; it will be reclaimed", zap.Error(err))
		} else {
			traceAttempt(span, outcomeDeadLettered, 0, time.Time{}, reasonExhausted)
		}
		return
	}
	// a stale event is not attempted: it has no attempt's span
	if ib.stale(bg, m, logger) {
		return
	}
	actx, span := ib.startAttempt(ev, attempt)
	defer span.End()
	status, asked, tried, derr := ib.post(actx, ev, attempt, m.answer)
	if derr == nil {
		ib.cfg.Series.App(tried.Latency)
	}
	ib.countAttempt(status, derr, m.probe)
	// recorded with the outcome, in the same commit or just before it
	m.logged = ib.toLog(&m, tried)

	var err error
	switch {
	case derr == nil && status >= 200 && status <= 299:
		d := ib.doneWith(m)
		if d.record = m.answer.take(); d.record != nil {
			d.guard = m.answer.guard
		}
		err = ib.q.delivered(bg, m, d)
		if err == nil {
			m.answer.recordedAs(d.record)
			ib.metrics.delivered.Inc()
			var lag time.Duration
			if !ev.Received.IsZero() {
				lag = time.Since(ev.Received)
				ib.metrics.lag.Observe(lag.Seconds())
			}
			ib.cfg.Series.Delivered(lag)
			logger.Debug("inbox event delivered", zap.Int("status", status))
			traceAttempt(span, outcomeDelivered, status, time.Time{}, "")
		}
	case derr == nil && status == http.StatusLoopDetected:
		err = ib.deadLetter(bg, m, attempt, status, "delivery loop: HTTP 508 from deliver_to, which leads back to a route this event came through; point deliver_to at the application")
		if err == nil {
			traceAttempt(span, outcomeDeadLettered, status, time.Time{}, reasonLoop)
			logger.Warn("inbox event dead-lettered: deliver_to leads back to a route the event came through (HTTP 508)", zap.String("deliver_to", ib.cfg.DeliverTo))
		}
	case derr == nil && permanentFailure(status):
		err = ib.deadLetter(bg, m, attempt, status, "permanent failure: HTTP "+strconv.Itoa(status))
		if err == nil {
			traceAttempt(span, outcomeDeadLettered, status, time.Time{}, reasonRefused)
			logger.Warn("inbox event dead-lettered: the application refused it", zap.Int("status", status))
		}
	default:
		reason := "HTTP " + strconv.Itoa(status)
		if derr != nil {
			reason = derr.Error()
		}
		if status == http.StatusTooManyRequests && asked == 0 && ib.limit != nil {
			// the application asks for less without saying how long
			if err := ib.limit.slowDown(bg); err != nil {
				ib.warn("slowing the inbox rate down failed", err)
			}
		}
		if n := attempt - ev.Base - 1; n < len(ib.cfg.Retries) {
			due := time.Now().Add(ib.retryWait(n, asked))
			err = ib.q.schedule(bg, m, attempt, status, event.ErrorLine(reason), due)
			if err == nil {
				ib.metrics.retried.Inc()
				ib.cfg.Series.Retried()
				traceAttempt(span, outcomeRetried, status, due, "")
				logger.Info("inbox delivery failed; retry scheduled", zap.Int("status", status), zap.String("error", reason), zap.Time("due", due))
			}
		} else {
			err = ib.deadLetter(bg, m, attempt, status, "retries exhausted: "+reason)
			if err == nil {
				traceAttempt(span, outcomeDeadLettered, status, time.Time{}, reasonExhausted)
				logger.Warn("inbox event dead-lettered: retries exhausted", zap.Int("status", status), zap.String("error", reason))
			}
		}
	}
	if err != nil {
		// the event stays in delivery and is reclaimed: delivered again, never lost
		logger.Warn("recording an inbox delivery's outcome failed; the event will be reclaimed and attempted again", zap.Error(err))
		traceUnrecorded(span)
	}
}

// deadLetter moves an event to the dead letters and counts it.
func (ib *Inbox) deadLetter(ctx context.Context, m message, attempts, status int, reason string) error {
	err := ib.q.deadLetter(ctx, m, attempts, status, event.ErrorLine(reason), time.Now())
	if err == nil {
		ib.metrics.deadLettered.Inc()
		ib.cfg.Series.DeadLettered()
	}
	return err
}

// permanentFailure reports whether a status means the event cannot be
// delivered for good: a 4xx other than 408, 425 and 429 (the application
// refuses it), or 508 (deliver_to leads back to this route, or to another
// that sent it here: retrying would only go round the loop again).
func permanentFailure(status int) bool {
	if status == http.StatusLoopDetected {
		return true
	}
	return status >= 400 && status <= 499 && status != http.StatusRequestTimeout &&
		status != http.StatusTooEarly && status != http.StatusTooManyRequests
}

// post sends one attempt to deliver_to and returns its status and, for a
// 429 or 503, the wait its Retry-After asks for (0 when it asks none), and
// the attempt as its event's history keeps it; keep, unless nil, captures
// the application's answer. ctx holds the attempt's span, whose context
// the application gets.
func (ib *Inbox) post(ctx context.Context, ev *Event, attempt int, keep *Answer) (int, time.Duration, event.Attempt, error) {
	ctx, cancel := context.WithTimeout(ctx, ib.cfg.Timeout)
	defer cancel()
	start := time.Now()
	failed := func(err error) (int, time.Duration, event.Attempt, error) {
		return 0, 0, ib.attemptOf(attempt, start, nil, nil, err), err
	}
	req, err := ev.NewRequest(ctx, ib.cfg.DeliverTo)
	if err != nil {
		return failed(err)
	}
	if f := ib.cfg.Forward; f != nil {
		// each attempt is signed at its own time (docs/inbox.md: What the
		// application receives); the inbox's own headers are set after,
		// as edge removes every webhook-* header the event came with
		if err := f.Apply(req, ev.Body, forward.Delivery{Key: ev.Key, Secret: ev.Secret, PublicURL: ev.PublicURL()}, time.Now()); err != nil {
			return failed(err)
		}
	}
	req.Header.Set("Webhook-Attempt", strconv.Itoa(attempt))
	if ib.cfg.Namespace != "" {
		event.AddVia(req.Header, ib.cfg.Namespace)
	}
	// only the inbox says these: a stored header of either name (from
	// the sender) is not passed on
	req.Header.Del(SuspectedHeader)
	if ev.Suspected != "" {
		req.Header.Set(SuspectedHeader, strings.TrimPrefix(ev.Suspected, strings.TrimSuffix(ev.StoreKey, ev.Key)))
	}
	req.Header.Del(OrderBrokenHeader)
	if ev.OrderBroken != "" {
		req.Header.Set(OrderBrokenHeader, ev.OrderBroken)
	}
	event.InjectTrace(ctx, req.Header)
	resp, err := ib.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("timeout after %s", ib.cfg.Timeout)
		}
		return failed(err)
	}
	var body []byte
	if keep != nil {
		body = keep.read(resp)
	} else {
		body = ib.readAnswer(resp)
	}
	_ = resp.Body.Close()
	var wait time.Duration
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		wait = event.RetryAfter(resp.Header.Get("Retry-After"), time.Now())
	}
	return resp.StatusCode, wait, ib.attemptOf(attempt, start, resp, body, nil), nil
}

// retryWait is the wait before retry n: the schedule's step with jitter,
// or longer when the application asked for more with Retry-After, but
// never longer than the schedule's last step.
func (ib *Inbox) retryWait(n int, asked time.Duration) time.Duration {
	wait := ib.withJitter(ib.cfg.Retries[n])
	return max(wait, min(asked, ib.cfg.Retries[len(ib.cfg.Retries)-1]))
}

// withJitter varies d at random by up to the jitter fraction either way.
func (ib *Inbox) withJitter(d time.Duration) time.Duration {
	if ib.cfg.Jitter == 0 {
		return d
	}
	return time.Duration(float64(d) * (1 + ib.cfg.Jitter*(2*mrand.Float64()-1)))
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
