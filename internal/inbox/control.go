package inbox

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Control (docs/inbox.md#pause-and-resume, docs/inbox.md#breaker): a
// source, or one destination of it, paused by an operator; a destination
// whose breaker has stopped its deliveries. Both are in the route's store,
// so that they outlive restarts and reloads and every instance on one
// Redis follows them: each instance reads them every controlEvery. A
// paused or broken destination still accepts events; they wait, spending
// no attempt.

// Breaker is the rule of a destination's breaker: once Percent of its last
// Of attempts failed, deliveries to it stop; one attempt, the probe, goes
// through after Cooldown, which doubles up to MaxCooldown while probes
// fail, and a probe that succeeds starts deliveries again.
type Breaker struct {
	Percent  int
	Of       int
	Cooldown time.Duration
}

// MaxCooldown is the longest a breaker waits between two probes.
const MaxCooldown = 10 * time.Minute

// String writes the rule as the configuration does: `50% of 20`.
func (b Breaker) String() string { return fmt.Sprintf("%d%% of %d", b.Percent, b.Of) }

// controlEvery is how often each instance reads the pause and breaker
// state of every destination from the store: a pause, or a breaker opened
// by another instance, is followed within a second.
var controlEvery = 400 * time.Millisecond

// blockedPoll is how often a reader of a paused or broken destination
// looks at its state again.
var blockedPoll = 100 * time.Millisecond

// control is a destination's pause and breaker state in the store.
type control interface {
	// read returns the state: the source's and the destination's pause,
	// and, with b, the breaker's.
	read(ctx context.Context, b *Breaker) (controlState, error)
	// setPaused pauses or resumes the destination, or with source the
	// whole source.
	setPaused(ctx context.Context, source, paused bool) error
	// record counts an attempt's outcome in the breaker of rule b and
	// returns its state; probe marks the probe's.
	record(ctx context.Context, b Breaker, failed, probe bool) (BreakerState, error)
	// probe takes the open breaker's probe for owner, for lease, once its
	// cooldown is over and no other worker holds the probe (or the one
	// that did let it lapse); false otherwise.
	probe(ctx context.Context, b Breaker, owner string, lease time.Duration) (bool, error)
}

// controlState is a destination's control state.
type controlState struct {
	sourcePaused, paused bool
	breaker              BreakerState
}

// BreakerState is a destination's breaker as the admin API shows it.
type BreakerState struct {
	// Rule is the breaker's rule, `50% of 20`.
	Rule string `json:"rule"`
	// State is `closed` (deliveries go on), `open` (stopped until
	// ProbeAt) or `probing` (one attempt let through decides).
	State string `json:"state"`
	// Failed of Attempts are the failures among the last attempts
	// counted, while closed.
	Failed   int `json:"failed"`
	Attempts int `json:"attempts"`
	// OpenedAt is when it opened; ProbeAt when its probe may go; Cooldown
	// the wait before that probe (doubling while probes fail).
	OpenedAt *time.Time `json:"opened_at,omitempty"`
	ProbeAt  *time.Time `json:"probe_at,omitempty"`
	Cooldown string     `json:"cooldown,omitempty"`
}

// Breaker states.
const (
	breakerClosed  = "closed"
	breakerOpen    = "open"
	breakerProbing = "probing"
)

// breakerCell is a breaker's state and its rule's arithmetic, in unix
// milliseconds: the file store's (in the process), and as Lua the redis
// store's (redisBreakerScript), which follows it line for line.
type breakerCell struct {
	state      string
	window     string // the last attempts' outcomes, oldest first: '1' failed, '0' not
	opened     int64
	cooldown   int64
	probeAt    int64
	probeOwner string
	probeUntil int64
}

// record counts an outcome at now.
func (c *breakerCell) record(b Breaker, failed, probe bool, now int64) {
	switch {
	case c.state == "" || c.state == breakerClosed:
		c.state = breakerClosed
		bit := "0"
		if failed {
			bit = "1"
		}
		c.window += bit
		if len(c.window) > b.Of {
			c.window = c.window[len(c.window)-b.Of:]
		}
		if len(c.window) == b.Of && fails(c.window)*100 >= b.Percent*b.Of {
			c.open(b.Cooldown.Milliseconds(), now)
		}
	case c.state == breakerProbing && probe && !failed:
		*c = breakerCell{state: breakerClosed}
	case c.state == breakerProbing && probe:
		c.open(min(2*c.cooldown, MaxCooldown.Milliseconds()), now)
	}
	// attempts that were under way when it opened, and not the probe,
	// change nothing
}

// open stops deliveries for cooldown.
func (c *breakerCell) open(cooldown, now int64) {
	*c = breakerCell{state: breakerOpen, opened: now, cooldown: cooldown, probeAt: now + cooldown}
}

// probe takes the probe for owner.
func (c *breakerCell) probe(owner string, lease, now int64) bool {
	switch {
	case c.state == breakerOpen && now >= c.probeAt,
		c.state == breakerProbing && (c.probeOwner == owner || now >= c.probeUntil):
		c.state, c.probeOwner, c.probeUntil = breakerProbing, owner, now+lease
		return true
	}
	return false
}

// view is the state as the admin API shows it.
func (c *breakerCell) view(b Breaker) BreakerState {
	st := BreakerState{Rule: b.String(), State: c.state}
	if st.State == "" {
		st.State = breakerClosed
	}
	if st.State == breakerClosed {
		st.Failed, st.Attempts = fails(c.window), len(c.window)
		return st
	}
	opened, probeAt := time.UnixMilli(c.opened).UTC(), time.UnixMilli(c.probeAt).UTC()
	st.OpenedAt, st.ProbeAt = &opened, &probeAt
	st.Cooldown = (time.Duration(c.cooldown) * time.Millisecond).String()
	return st
}

// fails counts the failures of a window.
func fails(window string) int {
	n := 0
	for i := range len(window) {
		if window[i] == '1' {
			n++
		}
	}
	return n
}

// gate is a destination's control state as last read, for its readers
// and workers.
type gate struct {
	mu sync.Mutex
	st controlState
	// probeAt is when, by this instance's clock, the open breaker's
	// probe may go.
	probeAt time.Time
}

// set records a state as read.
func (g *gate) set(st controlState) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.st = st
	g.probeAt = time.Time{}
	if st.breaker.ProbeAt != nil {
		g.probeAt = *st.breaker.ProbeAt
	}
}

// state returns the state as last read.
func (g *gate) state() controlState {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.st
}

// setBreaker records a breaker state a worker learnt from its own record,
// and returns the state before and whether it was kept. A closed state from an attempt that was
// not the probe, while the gate holds an open breaker, was recorded before
// another worker's record opened it (their answers crossed): it is not
// kept, for only a probe closes an open breaker (a probe of another
// instance is seen at the next read).
func (g *gate) setBreaker(b BreakerState, probe bool) (before string, kept bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	before = g.st.breaker.State
	if !probe && b.State == breakerClosed && (before == breakerOpen || before == breakerProbing) {
		return before, false
	}
	g.st.breaker = b
	g.probeAt = time.Time{}
	if b.ProbeAt != nil {
		g.probeAt = *b.ProbeAt
	}
	return before, true
}

// passage is what a destination's gate lets through now.
type passage int

const (
	passAll   passage = iota // deliveries go on
	passNone                 // paused, or the breaker is open
	passProbe                // the breaker's probe may go
)

// passage returns what the gate lets through at now.
func (g *gate) passage(now time.Time) passage {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.st.sourcePaused || g.st.paused:
		return passNone
	case g.st.breaker.State == breakerOpen && !now.Before(g.probeAt), g.st.breaker.State == breakerProbing:
		return passProbe
	case g.st.breaker.State == breakerOpen:
		return passNone
	}
	return passAll
}

// holds reports whether m must wait: the destination is paused, or its
// breaker stops deliveries and m is not the probe. An attempt at
// acceptance, which found the gate open, is made.
func (ib *Inbox) holds(m message) bool {
	return !m.probe && m.answer == nil && ib.gate.passage(time.Now()) != passAll
}

// held is the readers' side of the gate: true when the reader of lane must
// not read now (a paused or broken destination), after waiting a moment or
// making the breaker's probe itself.
func (ib *Inbox) held(ctx context.Context, lane int) bool {
	switch ib.gate.passage(time.Now()) {
	case passAll:
		return false
	case passProbe:
		ib.tryProbe(ctx, lane)
	}
	sleepCtx(ctx, blockedPoll)
	return true
}

// tryProbe takes the breaker's probe for this reader and delivers the
// lane's next event as the probe, when one comes within a read's wait.
func (ib *Inbox) tryProbe(ctx context.Context, lane int) {
	if ib.probing.Load() {
		return // this instance's probe is under way
	}
	owner := ib.consumer + ":" + strconv.Itoa(lane)
	bg, cancel := ib.bg()
	ok, err := ib.ctl.probe(bg, ib.cfg.Breaker, owner, ib.reclaimAfter())
	cancel()
	if err != nil {
		ib.warn("taking the inbox breaker's probe failed; retrying", err)
		return
	}
	if !ok || !ib.waitSlot(ctx, fetchBlock) {
		return
	}
	msgs, err := ib.q.next(ctx, lane, 1, fetchBlock)
	if err != nil || len(msgs) == 0 {
		<-ib.slots
		return
	}
	msgs[0].probe = true
	ib.probing.Store(true)
	ib.logger.Info("inbox breaker: probing the destination with one event", zap.String("id", msgs[0].id))
	if ib.pace(ctx, msgs) == 0 {
		ib.probing.Store(false)
		<-ib.slots
	}
}

// countAttempt records an attempt's outcome in the destination's breaker:
// a failure is what is retried (5xx, 408, 425, 429, a timeout, a
// connection error); a 2xx, and a refusal that dead-letters the event (the
// destination answers), are not.
func (ib *Inbox) countAttempt(status int, err error, probe bool) {
	if ib.cfg.Breaker.Of == 0 {
		return
	}
	failed := err != nil || (status < 200 || status > 299) && !permanentFailure(status)
	bg, cancel := ib.bg()
	st, rerr := ib.ctl.record(bg, ib.cfg.Breaker, failed, probe)
	cancel()
	if rerr != nil {
		ib.warn("recording an attempt in the inbox breaker failed", rerr)
		return
	}
	if before, kept := ib.gate.setBreaker(st, probe); kept && st.State != before {
		ib.breakerChanged(before, st)
	}
}

// breakerChanged logs and shows a new breaker state.
func (ib *Inbox) breakerChanged(before string, st BreakerState) {
	switch {
	case st.State == breakerOpen && before == breakerProbing:
		ib.logger.Warn("inbox breaker: the probe failed; deliveries stay stopped", zap.String("cooldown", st.Cooldown))
	case st.State == breakerOpen:
		ib.logger.Warn("inbox breaker opened: deliveries to the destination stop until a probe succeeds",
			zap.String("rule", st.Rule), zap.String("cooldown", st.Cooldown))
	case st.State == breakerClosed && before != "":
		ib.logger.Info("inbox breaker closed: deliveries to the destination go on")
	}
	ib.metrics.breakerOpen.Set(boolGauge(st.State != breakerClosed))
}

// controlLoop reads the control state of every destination of the source
// every controlEvery, and updates the gauges.
func (ib *Inbox) controlLoop(ctx context.Context) {
	defer ib.wg.Done()
	ticker := time.NewTicker(controlEvery)
	defer ticker.Stop()
	for {
		for _, d := range ib.all() {
			d.readControl(ctx)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// readControl reads the destination's control state.
func (ib *Inbox) readControl(ctx context.Context) {
	var b *Breaker
	if ib.cfg.Breaker.Of > 0 {
		b = &ib.cfg.Breaker
	}
	bg, cancel := context.WithTimeout(ctx, 5*time.Second)
	st, err := ib.ctl.read(bg, b)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			ib.warn("reading the inbox's pause and breaker state failed; retrying", err)
		}
		return
	}
	before := ib.gate.state()
	ib.gate.set(st)
	if paused := st.sourcePaused || st.paused; paused != (before.sourcePaused || before.paused) {
		ib.logger.Info("inbox deliveries "+map[bool]string{true: "paused", false: "resumed"}[paused], zap.Bool("source", st.sourcePaused))
	}
	ib.metrics.paused.Set(boolGauge(st.sourcePaused || st.paused))
	if b != nil && st.breaker.State != before.breaker.State && before.breaker.State != "" {
		ib.breakerChanged(before.breaker.State, st.breaker)
	} else if b != nil {
		ib.metrics.breakerOpen.Set(boolGauge(st.breaker.State != breakerClosed))
	}
}

// boolGauge is a gauge's value for a condition.
func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Pause pauses, or resumes, the deliveries of the whole source, or with
// destination of one of its destinations (its URL, as configured or as the
// admin API shows it, or its id): ErrNoDestination when it has no such
// one. Events are still accepted meanwhile; every instance follows within
// a second.
func (ib *Inbox) Pause(ctx context.Context, destination string, paused bool) error {
	d := ib
	if destination != "" {
		if d = ib.destination(destination); d == nil {
			return ErrNoDestination
		}
	}
	if err := d.ctl.setPaused(ctx, destination == "", paused); err != nil {
		return err
	}
	for _, x := range ib.all() {
		x.readControl(ctx)
	}
	return nil
}
