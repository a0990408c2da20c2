package taskview

import (
	"fmt"
	"time"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/wire"
)

// Standing is where an unfinished task stands, for a list of tasks: its
// most telling active step, how it stands and how many other steps are
// active. The dashboard's task list and `weft tasks` show it.
type Standing struct {
	Step wire.Step
	// Label is "running", "retry" (waiting after a failed attempt),
	// "signal" (waiting for a signal), "waiting" (for a timer) or "ready".
	Label string
	More  int
}

// StandingOf picks the step to show of a task's active steps (its ready,
// running and waiting ones): a running one, else a waiting one, else a
// ready one, the first of each. A durable function's step waiting for its
// calls comes last: the calls say what it waits for. ok is false when none
// is active.
func StandingOf(active []wire.Step) (s Standing, ok bool) {
	if len(active) == 0 {
		return Standing{}, false
	}
	rank := func(s wire.Step) int {
		switch {
		case s.Kind == store.KindFunction && s.State == state.StepWaiting:
			return 3
		case s.State == state.StepRunning:
			return 0
		case s.State == state.StepWaiting:
			return 1
		}
		return 2
	}
	best := active[0]
	for _, s := range active[1:] {
		if rank(s) < rank(best) {
			best = s
		}
	}
	s = Standing{Step: best, More: len(active) - 1, Label: string(best.State)}
	if best.State == state.StepWaiting {
		switch {
		case best.Kind == store.KindSignal:
			s.Label = "signal"
		case best.Attempts > 0:
			s.Label = "retry"
		}
	}
	return s, true
}

// Text is the standing in a few words, its times in loc ("15:04", with
// the day unless it is today's): "charge running 2/5", "charge retries
// at 15:04 after 2/5", "approve waits for signal approve until 15:04",
// "cool-off waits until Jan 2 15:04", "ship ready"; then "+2 more" when
// other steps are active.
func (s Standing) Text(now time.Time, loc *time.Location) string {
	st := &s.Step
	at := func(prefix string) string {
		if st.RunAt == nil {
			return ""
		}
		return prefix + clockTime(*st.RunAt, now, loc)
	}
	var out string
	switch s.Label {
	case "running":
		out = fmt.Sprintf("%s %s %d/%d", st.Name, StepState(st), st.Attempts, st.MaxAttempts)
	case "retry":
		out = fmt.Sprintf("%s retries%s after %d/%d", st.Name, at(" at "), st.Attempts, st.MaxAttempts)
	case "signal":
		out = fmt.Sprintf("%s waits for signal %s%s", st.Name, st.Signal, at(" until "))
	case "waiting":
		out = st.Name + " waits" + at(" until ")
	default:
		out = st.Name + " " + s.Label
	}
	if s.More > 0 {
		out += fmt.Sprintf(" +%d more", s.More)
	}
	return out
}

// clockTime is t's time of day in loc, with its date unless it falls on
// now's day.
func clockTime(t, now time.Time, loc *time.Location) string {
	t, now = t.In(loc), now.In(loc)
	if y, m, d := t.Date(); y == now.Year() && m == now.Month() && d == now.Day() {
		return t.Format("15:04")
	}
	if t.Year() == now.Year() {
		return t.Format("Jan 2 15:04")
	}
	return t.Format("2006-01-02 15:04")
}
