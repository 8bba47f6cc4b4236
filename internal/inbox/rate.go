package inbox

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Rate: deliveries to deliver_to at most so fast, paced by a GCRA (the
// generic cell rate algorithm): the limiter keeps one time, the
// theoretical arrival time (TAT) of the next delivery; a delivery takes
// the later of TAT and now, and moves TAT one interval (per/n) on. Every
// delivery reserves its own moment, so deliveries are evenly spaced and
// none waits for another to ask again. On Redis the TAT is one hash per
// source shared by every instance (redis_rate.go); on the file store it is
// the process's own (this file).
//
// A 429 without Retry-After slows the source down: the interval doubles
// (the rate halves) for every instance, down to 1/2^maxSlowLevel of the
// rate; a further 429 halves it again once the last halving is at least
// slowEvery old; each slowStep without one doubles it back
// (docs/inbox.md#rate).

// Rate is a delivery rate: at most N deliveries per Per.
type Rate struct {
	N   int
	Per time.Duration
}

// The slow-down rule.
const (
	maxSlowLevel = 4                // the rate is never slowed below 1/16
	slowEvery    = time.Second      // at most one halving a second
	slowStep     = time.Minute      // each minute without a 429 doubles it back
	maxRateN     = 1_000_000        // deliveries per unit, at most
	minInterval  = time.Microsecond // the limiter's resolution
)

// ParseRate parses `<n>/<s|m|h>`, such as `10/s` or `600/m`.
func ParseRate(v string) (Rate, error) {
	n, unit, ok := strings.Cut(v, "/")
	count, err := strconv.Atoi(n)
	if !ok || err != nil || count <= 0 || count > maxRateN {
		return Rate{}, fmt.Errorf("invalid inbox rate '%s': want <n>/<s|m|h> with n from 1 to %d, such as 10/s", v, maxRateN)
	}
	per := map[string]time.Duration{"s": time.Second, "m": time.Minute, "h": time.Hour}[unit]
	if per == 0 {
		return Rate{}, fmt.Errorf("invalid inbox rate '%s': the unit after '/' must be s, m or h", v)
	}
	return Rate{N: count, Per: per}, nil
}

// String writes the rate as ParseRate reads it.
func (r Rate) String() string {
	unit := map[time.Duration]string{time.Second: "s", time.Minute: "m", time.Hour: "h"}[r.Per]
	if unit == "" {
		return fmt.Sprintf("%d/%s", r.N, r.Per)
	}
	return strconv.Itoa(r.N) + "/" + unit
}

// interval is the time between two deliveries at the full rate.
func (r Rate) interval() time.Duration { return max(r.Per/time.Duration(r.N), minInterval) }

// perSecond is the rate in deliveries a second, at a slow-down level.
func (r Rate) perSecond(level int) float64 {
	return float64(r.N) / r.Per.Seconds() / math.Pow(2, float64(level))
}

// limiter paces the deliveries of a source.
type limiter interface {
	// reserve takes the next n delivery moments and returns how long from
	// now the first is, and the time from each to the next.
	reserve(ctx context.Context, n int) (wait, step time.Duration, err error)
	// slowDown applies the slow-down rule after a 429 without
	// Retry-After.
	slowDown(ctx context.Context) error
	// state reads the limiter as the admin API shows it.
	state(ctx context.Context) (RateState, error)
}

// RateState is a source's rate limit as the admin API shows it.
type RateState struct {
	// Limit is the configured rate (`10/s`).
	Limit string `json:"limit"`
	// PerSecond is the configured rate in deliveries a second.
	PerSecond float64 `json:"per_second"`
	// Current is the rate in force now, in deliveries a second: lower
	// than PerSecond while a 429 slows the source down.
	Current float64 `json:"current_per_second"`
	// Slowed tells whether a 429 without Retry-After slows the source
	// down now; SlowedUntil is when the rate is whole again, if no 429
	// comes meanwhile.
	Slowed      bool       `json:"slowed"`
	SlowedUntil *time.Time `json:"slowed_until,omitempty"`
	// Throttled tells whether deliveries are waiting for the limiter now:
	// the next free moment is more than one interval away.
	Throttled bool `json:"throttled"`
	// NextFree is when the next delivery may start (the limiter's TAT);
	// zero when one may start now.
	NextFree *time.Time `json:"next_free,omitempty"`
}

// gcra is the limiter's arithmetic, in microseconds, shared by the local
// limiter and (as Lua) the Redis one: level decays one step per slowStep
// since at.
type gcra struct {
	tat   int64 // unix microseconds
	level int
	at    int64 // unix microseconds of the last change of level
}

// settle applies the decay of the level up to now.
func (g *gcra) settle(now int64) {
	if g.level == 0 {
		return
	}
	steps := int((now - g.at) / slowStep.Microseconds())
	if steps >= g.level {
		g.level, g.at = 0, now
	} else if steps > 0 {
		g.level -= steps
		g.at += int64(steps) * slowStep.Microseconds()
	}
}

// reserve takes the next n moments at interval iv (full rate) and returns
// the wait from now to the first, and the step between them.
func (g *gcra) reserve(now, iv int64, n int) (wait, step int64) {
	g.settle(now)
	start := max(g.tat, now)
	step = iv << g.level
	g.tat = start + step*int64(n)
	return start - now, step
}

// slowDown halves the rate unless it was halved less than slowEvery ago.
func (g *gcra) slowDown(now int64) {
	g.settle(now)
	if g.level > 0 && now-g.at < slowEvery.Microseconds() {
		return
	}
	g.level, g.at = min(g.level+1, maxSlowLevel), now
}

// view is the state at now of a limiter of rate r.
func (g gcra) view(now int64, r Rate) RateState {
	g.settle(now)
	st := RateState{Limit: r.String(), PerSecond: r.perSecond(0), Current: r.perSecond(g.level), Slowed: g.level > 0}
	if g.level > 0 {
		until := time.UnixMicro(g.at + int64(g.level)*slowStep.Microseconds()).UTC()
		st.SlowedUntil = &until
	}
	if g.tat > now {
		next := time.UnixMicro(g.tat).UTC()
		st.NextFree = &next
		st.Throttled = g.tat-now > r.interval().Microseconds()<<g.level
	}
	return st
}

// gcraCell is a limiter's state in a process, kept across config reloads
// with the source's queue.
type gcraCell struct {
	mu sync.Mutex
	g  gcra
}

// localLimiter is the limiter of one process (the file store).
type localLimiter struct {
	rate Rate
	cell *gcraCell
}

func (l *localLimiter) reserve(_ context.Context, n int) (time.Duration, time.Duration, error) {
	l.cell.mu.Lock()
	defer l.cell.mu.Unlock()
	wait, step := l.cell.g.reserve(time.Now().UnixMicro(), l.rate.interval().Microseconds(), n)
	return time.Duration(wait) * time.Microsecond, time.Duration(step) * time.Microsecond, nil
}

func (l *localLimiter) slowDown(context.Context) error {
	l.cell.mu.Lock()
	defer l.cell.mu.Unlock()
	l.cell.g.slowDown(time.Now().UnixMicro())
	return nil
}

func (l *localLimiter) state(context.Context) (RateState, error) {
	l.cell.mu.Lock()
	defer l.cell.mu.Unlock()
	return l.cell.g.view(time.Now().UnixMicro(), l.rate), nil
}

// Interface guard
var _ limiter = (*localLimiter)(nil)
