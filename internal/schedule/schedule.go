// Package schedule turns a workflow's cron schedules into tick times: it
// parses cron expressions (with github.com/robfig/cron/v3), resolves their
// time zones and decides, under a schedule's catch-up policy, which ticks
// to fire after a gap. It holds no state: the ticks fired and the next one
// due live in the store.
package schedule

import (
	"errors"
	"fmt"
	"strings"
	"time"
	_ "time/tzdata" // time zones resolve the same on every machine

	"github.com/robfig/cron/v3"
)

// Catch-up policies: what happens to ticks that passed while no engine
// fired them.
const (
	// Skip drops ticks missed by more than Grace; a tick that is merely
	// late fires. The default.
	Skip = "skip"
	// Latest fires the most recent missed tick only.
	Latest = "latest"
	// All fires every missed tick, oldest first, bounded by the
	// schedule's max_catch_up (the most recent ones when more were
	// missed).
	All = "all"
)

// Policies lists the catch-up policies.
var Policies = []string{Skip, Latest, All}

// Bounds of max_catch_up.
const (
	DefaultMaxCatchUp = 10
	MaxMaxCatchUp     = 1000
)

// Grace is how late a tick may fire and still count as on time under
// Skip: a maintenance round that wakes a little after the tick, or a
// leader that takes over within it, still fires it.
const Grace = time.Minute

// parser accepts five fields, an optional leading seconds field, and the
// descriptors (@hourly, @daily, @every 30s, ...).
var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ErrNeverFires: a cron expression names no time in the next five years.
var ErrNeverFires = errors.New("it names no time in the next five years (a date that never comes?)")

// Cron is a parsed schedule expression in its time zone.
type Cron struct {
	s   cron.Schedule
	loc *time.Location
}

// Parse parses a cron expression, interpreted in the IANA time zone tz
// ("" means UTC).
func Parse(expr, tz string) (*Cron, error) {
	if strings.TrimSpace(expr) == "" {
		return nil, errors.New("cron expression is empty")
	}
	if f := strings.Fields(expr)[0]; strings.HasPrefix(f, "TZ=") || strings.HasPrefix(f, "CRON_TZ=") {
		return nil, fmt.Errorf("cron expression %q: give the time zone in time_zone, not in the expression", expr)
	}
	loc, err := Location(tz)
	if err != nil {
		return nil, err
	}
	s, err := parser.Parse(expr)
	if err != nil {
		return nil, fmt.Errorf("cron expression %q: %w", expr, err)
	}
	if s.Next(time.Now().In(loc)).IsZero() {
		// A date that never comes (30 February): the parser looks five
		// years ahead and gives up.
		return nil, fmt.Errorf("cron expression %q: %w", expr, ErrNeverFires)
	}
	if rest, ok := strings.CutPrefix(strings.TrimSpace(expr), "@every "); ok {
		// The parser rounds sub-second parts away; say so instead.
		if d, err := time.ParseDuration(strings.TrimSpace(rest)); err == nil && (d < time.Second || d%time.Second != 0) {
			return nil, fmt.Errorf("cron expression %q: @every takes whole seconds, at least 1s", expr)
		}
	}
	return &Cron{s: s, loc: loc}, nil
}

// Location resolves an IANA time zone name; "" means UTC.
func Location(tz string) (*time.Location, error) {
	if tz == "" {
		return time.UTC, nil
	}
	switch {
	case tz == "Local", tz == "localtime", tz == "posixrules":
		// Local is the process's zone; the others are files of the zone
		// database that name the machine's default zone.
		return nil, fmt.Errorf("time zone %q depends on the machine: name an IANA zone such as Europe/Paris", tz)
	case strings.HasPrefix(tz, "right/"):
		return nil, fmt.Errorf("time zone %q counts leap seconds, which schedules do not: name the zone without right/", tz)
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, fmt.Errorf("unknown time zone %q (want an IANA name such as America/New_York)", tz)
	}
	return loc, nil
}

// Next returns the first tick strictly after t, or the zero time if there
// is none in the five years after t. Ticks are whole seconds.
// Daylight-saving transitions follow the parser's rules: a wall-clock time
// skipped by a spring-forward transition does not occur that day, and one
// repeated by a fall-back transition occurs twice (at each of its two
// instants); @every counts elapsed time and ignores wall clocks.
func (c *Cron) Next(t time.Time) time.Time {
	return c.s.Next(t.In(c.loc)).UTC()
}

// Plan is what to do with a schedule whose next tick is due.
type Plan struct {
	// Fire are the ticks to submit a task for, oldest first.
	Fire []time.Time
	// Missed counts the due ticks not fired.
	Missed int
	// Next is the first tick after now: the schedule's next due time.
	Next time.Time
}

// maxWalk bounds how many ticks one plan walks through before it jumps
// ahead (a one-second schedule after a month's gap).
const maxWalk = 10_000

// Decide plans the ticks due from next (the schedule's stored next tick,
// due: not after now) up to now under policy, firing at most maxCatchUp of
// them (0 means DefaultMaxCatchUp).
func (c *Cron) Decide(next, now time.Time, policy string, maxCatchUp int) Plan {
	if maxCatchUp <= 0 {
		maxCatchUp = DefaultMaxCatchUp
	}
	keep := 1
	if policy == All {
		keep = maxCatchUp
	}
	// The last keep due ticks, in a ring, and how many were due.
	ring := make([]time.Time, 0, keep)
	due, kept, walked := 0, 0, 0
	t := next
	// A zero tick is none: no time comes (Next).
	for !t.IsZero() && !t.After(now) {
		if len(ring) < keep {
			ring = append(ring, t)
		} else {
			ring[kept%keep] = t
		}
		due++
		kept++
		if walked++; walked == maxWalk {
			// Far behind: jump to a little before the ticks kept
			// matter, estimating the spacing from those walked.
			step := t.Sub(next) / time.Duration(walked)
			if back := now.Add(-step * time.Duration(keep+1)); back.After(t) {
				skipped := int(back.Sub(t) / max(step, time.Second))
				t = c.Next(back)
				due += skipped
				walked = 0
				continue
			}
		}
		t = c.Next(t)
	}
	p := Plan{Next: t}
	if due == 0 {
		return p
	}
	// Unroll the ring oldest first.
	last := make([]time.Time, 0, len(ring))
	if kept > keep {
		start := kept % keep
		last = append(append(last, ring[start:]...), ring[:start]...)
	} else {
		last = append(last, ring...)
	}
	switch policy {
	case All, Latest:
		p.Fire = last
	default: // Skip
		if latest := last[len(last)-1]; now.Sub(latest) <= Grace {
			p.Fire = last
		}
	}
	p.Missed = due - len(p.Fire)
	return p
}
