package webhookidempotency

import (
	"context"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// Delivery: the workers of an inbox read its stream, deliver each event to
// deliver_to, and record the outcome: delivered, scheduled for a retry, or
// dead-lettered.

// Lua shared by the inbox scripts: fields(entry, skip) copies a stream
// entry's field list without the fields named in skip.
const luaFields = `
local function fields(f, skip)
	local out = {}
	for i = 1, #f, 2 do
		if not skip[f[i]] then
			out[#out+1] = f[i]
			out[#out+1] = f[i+1]
		end
	end
	return out
end
local function add(out, ...)
	local a = {...}
	for i = 1, #a do out[#out+1] = a[i] end
	return out
end
`

var (
	// KEYS: stream [, idempotency key]. ARGV: group, id, ttl. A delivered
	// event leaves the stream, and its key (when given) is kept for ttl.
	inboxAckScript = redis.NewScript(`
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
if KEYS[2] then
	redis.call('PEXPIRE', KEYS[2], ARGV[3])
end
return redis.call('XDEL', KEYS[1], ARGV[2])
`)

	// KEYS: stream, retry set. ARGV: group, id, due (ms), member. The event
	// stays in the stream, acknowledged, until it is due.
	inboxScheduleScript = redis.NewScript(`
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[4])
return redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
`)

	// KEYS: stream, retry set. ARGV: now (ms), limit. Moves due events back
	// into the stream as new entries carrying their attempt count.
	inboxMoveScript = redis.NewScript(luaFields + `
local skip = {attempts = true, last_status = true, last_error = true}
local due = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
for _, m in ipairs(due) do
	local id, attempts, status, err = string.match(m, '^([^\n]*)\n([^\n]*)\n([^\n]*)\n(.*)$')
	if id then
		local e = redis.call('XRANGE', KEYS[1], id, id)
		if e[1] then
			local out = add(fields(e[1][2], skip), 'attempts', attempts, 'last_status', status, 'last_error', err)
			redis.call('XADD', KEYS[1], '*', unpack(out))
			redis.call('XDEL', KEYS[1], id)
		end
	end
	redis.call('ZREM', KEYS[2], m)
end
return #due
`)

	// KEYS: stream, dead stream. ARGV: group, id, attempts, status, error,
	// failed (ms). Moves an event to the dead-letter stream.
	inboxDeadScript = redis.NewScript(luaFields + `
local skip = {attempts = true, last_status = true, last_error = true, failed = true}
local e = redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[2])
if e[1] then
	local out = add(fields(e[1][2], skip), 'attempts', ARGV[3], 'last_status', ARGV[4], 'last_error', ARGV[5], 'failed', ARGV[6])
	redis.call('XADD', KEYS[2], '*', unpack(out))
end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
return redis.call('XDEL', KEYS[1], ARGV[2])
`)
)

// readLoop reads new events, one per free delivery slot.
func (ib *inbox) readLoop(ctx context.Context) {
	defer ib.wg.Done()
	ib.ensureGroup()
	for {
		select {
		case ib.slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		rctx, cancel := context.WithTimeout(context.Background(), inboxFetchBlock+ib.store.timeout)
		streams, err := ib.rc.client.XReadGroup(rctx, &redis.XReadGroupArgs{
			Group:    inboxGroup,
			Consumer: ib.consumer,
			Streams:  []string{ib.stream, ">"},
			Count:    1,
			Block:    inboxFetchBlock,
		}).Result()
		cancel()
		if err != nil || len(streams) == 0 || len(streams[0].Messages) == 0 {
			<-ib.slots
			if err != nil && !errors.Is(err, redis.Nil) {
				if strings.HasPrefix(err.Error(), "NOGROUP") {
					ib.ensureGroup()
					continue
				}
				ib.warn("reading the inbox stream failed; retrying", err)
				sleepCtx(ctx, time.Second)
			}
			continue
		}
		ib.wg.Add(1)
		go ib.deliver(streams[0].Messages[0], 1)
	}
}

// scheduleLoop moves due retries back into the stream, reclaims events a
// dead worker left unacknowledged, and updates the gauges.
func (ib *inbox) scheduleLoop(ctx context.Context) {
	defer ib.wg.Done()
	poll := ib.pollInterval()
	reclaimEvery := min(max(ib.timeout, 250*time.Millisecond), 5*time.Second)
	ticker := time.NewTicker(poll)
	defer ticker.Stop()
	var lastReclaim, lastGauges time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		ib.moveDue()
		t := time.Now()
		if t.Sub(lastReclaim) >= reclaimEvery {
			lastReclaim = t
			ib.reclaim(ctx)
		}
		if t.Sub(lastGauges) >= time.Second {
			lastGauges = t
			if c, err := ib.counts(context.Background()); err == nil {
				ib.metrics.setCounts(c)
			}
		}
	}
}

// pollInterval is how often due retries are looked for: a quarter of the
// shortest wait, between 20ms and 500ms.
func (ib *inbox) pollInterval() time.Duration {
	shortest := ib.retries[0]
	for _, d := range ib.retries {
		shortest = min(shortest, d)
	}
	return min(max(shortest/4, 20*time.Millisecond), 500*time.Millisecond)
}

// moveDue moves the retries that are due back into the stream.
func (ib *inbox) moveDue() {
	ctx, cancel := ib.bg()
	defer cancel()
	err := inboxMoveScript.Run(ctx, ib.rc.client, []string{ib.stream, ib.retry}, now().UnixMilli(), 100).Err()
	if err != nil {
		ib.warn("moving due inbox retries failed; retrying", err)
	}
}

// reclaim takes over events that have stayed unacknowledged for several
// delivery timeouts: their worker died. One event per free slot.
func (ib *inbox) reclaim(ctx context.Context) {
	minIdle := time.Duration(inboxReclaimAfter) * ib.timeout
	for ctx.Err() == nil {
		select {
		case ib.slots <- struct{}{}:
		default:
			return
		}
		rctx, cancel := ib.bg()
		msgs, _, err := ib.rc.client.XAutoClaim(rctx, &redis.XAutoClaimArgs{
			Stream:   ib.stream,
			Group:    inboxGroup,
			Consumer: ib.consumer,
			MinIdle:  minIdle,
			Start:    "0-0",
			Count:    1,
		}).Result()
		cancel()
		if err != nil || len(msgs) == 0 {
			<-ib.slots
			if err != nil && !errors.Is(err, redis.Nil) && !strings.HasPrefix(err.Error(), "NOGROUP") {
				ib.warn("reclaiming inbox events failed; retrying", err)
			}
			return
		}
		// every earlier delivery of this entry was an attempt that a dead
		// worker never recorded
		deliveries := int64(2)
		rctx, cancel = ib.bg()
		if p, err := ib.rc.client.XPendingExt(rctx, &redis.XPendingExtArgs{
			Stream: ib.stream, Group: inboxGroup, Start: msgs[0].ID, End: msgs[0].ID, Count: 1,
		}).Result(); err == nil && len(p) == 1 {
			deliveries = p[0].RetryCount
		}
		cancel()
		ib.logger.Info("reclaimed an unacknowledged inbox event", zap.String("id", msgs[0].ID), zap.Int64("deliveries", deliveries))
		ib.wg.Add(1)
		go ib.deliver(msgs[0], deliveries)
	}
}

// deliver makes one delivery attempt and records its outcome. deliveries
// is the number of times the consumer group has handed this stream entry
// out, this time included: more than one means workers died delivering it.
func (ib *inbox) deliver(msg redis.XMessage, deliveries int64) {
	defer ib.wg.Done()
	defer func() { <-ib.slots }()
	ev := msg.Values
	attempts, _ := strconv.Atoi(str(ev[fieldAttempts]))
	base, _ := strconv.Atoi(str(ev[fieldBase]))
	attempt := attempts + int(max(deliveries, 1))
	logger := ib.logger.With(zap.String("id", msg.ID), zap.String("key", str(ev[fieldKey])), zap.Int("attempt", attempt))

	// an event whose deliveries keep killing their worker is not tried for ever
	if attempt-base > len(ib.retries)+1 {
		if err := ib.deadLetter(msg.ID, attempt-1, 0, "retries exhausted: the worker delivering it stopped without an answer"); err != nil {
			logger.Warn("dead-lettering an inbox event failed; it will be reclaimed", zap.Error(err))
		}
		return
	}
	status, asked, derr := ib.post(ev, attempt)

	var err error
	switch {
	case derr == nil && status >= 200 && status <= 299:
		err = ib.delivered(msg.ID, str(ev[fieldStoreKey]))
		if err == nil {
			ib.metrics.delivered.Inc()
			logger.Debug("inbox event delivered", zap.Int("status", status))
		}
	case derr == nil && permanentFailure(status):
		err = ib.deadLetter(msg.ID, attempt, status, "permanent failure: HTTP "+strconv.Itoa(status))
		if err == nil {
			logger.Warn("inbox event dead-lettered: the application refused it", zap.Int("status", status))
		}
	default:
		reason := "HTTP " + strconv.Itoa(status)
		if derr != nil {
			reason = derr.Error()
		}
		if n := attempt - base - 1; n < len(ib.retries) {
			due := now().Add(ib.retryWait(n, asked))
			err = ib.schedule(msg.ID, attempt, status, reason, due)
			if err == nil {
				ib.metrics.retried.Inc()
				logger.Info("inbox delivery failed; retry scheduled", zap.Int("status", status), zap.String("error", reason), zap.Time("due", due))
			}
		} else {
			err = ib.deadLetter(msg.ID, attempt, status, "retries exhausted: "+reason)
			if err == nil {
				logger.Warn("inbox event dead-lettered: retries exhausted", zap.Int("status", status), zap.String("error", reason))
			}
		}
	}
	if err != nil {
		// the event stays pending and is reclaimed: delivered again, never lost
		logger.Warn("recording an inbox delivery's outcome failed; the event will be reclaimed and attempted again", zap.Error(err))
	}
}

// permanentFailure reports whether a status means the application refuses
// the event for good: a 4xx other than 408, 425 and 429.
func permanentFailure(status int) bool {
	return status >= 400 && status <= 499 && status != http.StatusRequestTimeout &&
		status != http.StatusTooEarly && status != http.StatusTooManyRequests
}

// post sends one attempt to deliver_to and returns its status and, for a
// 429 or 503, the wait its Retry-After asks for (0 when it asks none).
func (ib *inbox) post(ev map[string]any, attempt int) (int, time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), ib.timeout)
	defer cancel()
	req, err := outgoingFromFields(ev).request(ctx, ib.deliverTo)
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Webhook-Attempt", strconv.Itoa(attempt))
	resp, err := ib.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return 0, 0, fmt.Errorf("timeout after %s", ib.timeout)
		}
		return 0, 0, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	var wait time.Duration
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		wait = retryAfter(resp.Header.Get("Retry-After"), now())
	}
	return resp.StatusCode, wait, nil
}

// retryWait is the wait before retry n: the schedule's step with jitter,
// or longer when the application asked for more with Retry-After, but
// never longer than the schedule's last step.
func (ib *inbox) retryWait(n int, asked time.Duration) time.Duration {
	wait := ib.withJitter(ib.retries[n])
	return max(wait, min(asked, ib.retries[len(ib.retries)-1]))
}

// withJitter varies d at random by up to the jitter fraction either way.
func (ib *inbox) withJitter(d time.Duration) time.Duration {
	if ib.jitter == 0 {
		return d
	}
	return time.Duration(float64(d) * (1 + ib.jitter*(2*mrand.Float64()-1)))
}

// delivered acknowledges a delivered event and completes its key: its
// duplicates are answered for ttl from now.
func (ib *inbox) delivered(id, storeKey string) error {
	ctx, cancel := ib.bg()
	defer cancel()
	keys := []string{ib.stream, storeKey}
	if ib.cluster || storeKey == "" {
		keys = keys[:1] // the key is on another slot: a call of its own
	}
	ttl := redisMillis(ib.ttl)
	if err := inboxAckScript.Run(ctx, ib.rc.client, keys, inboxGroup, id, ttl).Err(); err != nil {
		return err
	}
	if len(keys) == 1 && storeKey != "" {
		if err := ib.rc.client.PExpire(ctx, storeKey, ib.ttl).Err(); err != nil {
			ib.logger.Warn("shortening a delivered event's key to ttl failed; it expires later", zap.String("key", storeKey), zap.Error(err))
		}
	}
	return nil
}

// schedule acknowledges a failed attempt and schedules the next one.
func (ib *inbox) schedule(id string, attempts, status int, reason string, due time.Time) error {
	ctx, cancel := ib.bg()
	defer cancel()
	member := id + "\n" + strconv.Itoa(attempts) + "\n" + strconv.Itoa(status) + "\n" + oneLine(reason)
	return inboxScheduleScript.Run(ctx, ib.rc.client, []string{ib.stream, ib.retry},
		inboxGroup, id, (due.UnixNano()+int64(time.Millisecond)-1)/int64(time.Millisecond), member).Err()
}

// deadLetter moves an event to the dead-letter stream.
func (ib *inbox) deadLetter(id string, attempts, status int, reason string) error {
	ctx, cancel := ib.bg()
	defer cancel()
	err := inboxDeadScript.Run(ctx, ib.rc.client, []string{ib.stream, ib.dead},
		inboxGroup, id, attempts, status, oneLine(reason), now().UnixMilli()).Err()
	if err == nil {
		ib.metrics.deadLettered.Inc()
	}
	return err
}

// removeConsumer deletes this worker set from the consumer group when it
// holds no pending event (deleting it otherwise would lose them).
func (ib *inbox) removeConsumer() {
	ctx, cancel := ib.bg()
	defer cancel()
	pending, err := ib.rc.client.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: ib.stream, Group: inboxGroup, Start: "-", End: "+", Count: 1, Consumer: ib.consumer,
	}).Result()
	if err == nil && len(pending) == 0 {
		_ = ib.rc.client.XGroupDelConsumer(ctx, ib.stream, inboxGroup, ib.consumer).Err()
	}
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

func unixMilli(s string) time.Time {
	ms, err := strconv.ParseInt(s, 10, 64)
	if err != nil || ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

// oneLine keeps an error text on one line, at most 300 bytes.
func oneLine(s string) string {
	s = strings.NewReplacer("\r", " ", "\n", " ").Replace(s)
	if len(s) > 300 {
		s = s[:300]
	}
	return s
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
