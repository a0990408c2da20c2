package taskview

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/wire"
)

// The plain progress output of `weft run`, one line per step state change,
// for logs and pipes (progress.go draws the live view).

// plainEvent is one line of the plain output.
type plainEvent struct {
	at    time.Time
	start bool // a step started running
	text  string
}

// plain prints a line for every step whose state, attempt or sub-status
// changed since the previous snapshot. Steps becoming pending or ready are
// not reported. A step seen finished whose running attempt was never seen
// (it ran between two snapshots) gets its running line first, with the
// time it started, so the output does not depend on the polling rate.
func (p *progress) plain(t *wire.Task) error {
	now := p.opts.Now()
	var b strings.Builder
	if !p.started {
		p.started = true
		fmt.Fprintf(&b, "%s task %d %s submitted (%d steps)\n", p.clock(t.CreatedAt), t.ID, Ref(t), len(t.Steps))
	}
	var events []plainEvent
	for i := range t.Steps {
		s := &t.Steps[i]
		prev, ok := p.seen[s.Name]
		cur := stepMark{state: s.State, attempt: s.Attempts, sub: s.Sub, ran: prev.ran}
		if ok && prev.state == cur.state && prev.attempt == cur.attempt && prev.sub == cur.sub {
			continue
		}
		switch s.State {
		case state.StepPending, state.StepReady:
		case state.StepRunning:
			text := fmt.Sprintf("step %s running (attempt %d)", s.Name, s.Attempts)
			if s.Sub != "" {
				text = fmt.Sprintf("step %s running (attempt %d, %s)", s.Name, s.Attempts, s.Sub)
			}
			events = append(events, plainEvent{at: timeOr(s.StartedAt, now), start: true, text: text})
			cur.ran = s.Attempts
		default:
			if s.Attempts > 0 && cur.ran != s.Attempts && s.StartedAt != nil &&
				(s.State == state.StepCompleted || s.State == state.StepFailed || s.State == state.StepWaiting) {
				events = append(events, plainEvent{at: *s.StartedAt, start: true, text: fmt.Sprintf("step %s running (attempt %d)", s.Name, s.Attempts)})
				cur.ran = s.Attempts
			}
			events = append(events, plainEvent{at: p.endTime(s, now), text: p.plainEnd(s)})
		}
		p.seen[s.Name] = cur
	}
	// In time order; within a millisecond, what ended before what started,
	// as a step starts only after its dependencies end.
	sort.SliceStable(events, func(i, j int) bool {
		ti, tj := events[i].at.Truncate(time.Millisecond), events[j].at.Truncate(time.Millisecond)
		if !ti.Equal(tj) {
			return ti.Before(tj)
		}
		return !events[i].start && events[j].start
	})
	for _, ev := range events {
		fmt.Fprintf(&b, "%s %s\n", p.clock(ev.at), ev.text)
	}
	if b.Len() == 0 {
		return nil
	}
	_, err := io.WriteString(p.w, b.String())
	return err
}

// endTime is when a step reached a state other than running.
func (p *progress) endTime(s *wire.Step, now time.Time) time.Time {
	if s.State.Terminal() {
		return timeOr(s.FinishedAt, now)
	}
	return now
}

// plainEnd describes a step that reached a state other than running.
func (p *progress) plainEnd(s *wire.Step) string {
	text := fmt.Sprintf("step %s %s", s.Name, s.State)
	switch s.State {
	case state.StepCompleted:
		if s.StartedAt != nil && s.FinishedAt != nil {
			text += " in " + Duration(s.FinishedAt.Sub(*s.StartedAt))
		}
		return text
	case state.StepWaiting:
		if s.Signal != "" {
			text += fmt.Sprintf(" for signal %q; send it with: %s", s.Signal, SignalCommand(s, p.opts))
			if s.RunAt != nil {
				text += fmt.Sprintf(" (times out in %s)", Duration(max(s.RunAt.Sub(p.opts.Now()), 0)))
			}
			return text
		}
		if s.RunAt != nil {
			what := "until"
			if s.Error != "" {
				what = "retry at"
			}
			text += fmt.Sprintf(" (%s %s)", what, p.clock(*s.RunAt))
		}
	}
	if s.Error != "" {
		text += ": " + cutRunes(OneLine(s.Error), 300)
	}
	return text
}

func (p *progress) clock(t time.Time) string { return t.In(p.opts.Loc).Format("15:04:05.000") }

// Summary is the final line of a run: how the task ended, how long it took
// and how its steps ended.
func Summary(t *wire.Task, now time.Time) string {
	counts := map[state.Step]int{}
	for _, s := range t.Steps {
		counts[s.State]++
	}
	var b strings.Builder
	fmt.Fprintf(&b, "task %d %s in %s (%d/%d steps completed", t.ID, t.State, Duration(Elapsed(t, now)),
		counts[state.StepCompleted]+counts[state.StepResolved], len(t.Steps))
	for _, st := range []state.Step{state.StepFailed, state.StepExpired, state.StepSkipped, state.StepCancelled,
		state.StepRunning, state.StepWaiting, state.StepReady, state.StepPending} {
		if n := counts[st]; n > 0 {
			fmt.Fprintf(&b, ", %d %s", n, st)
		}
	}
	b.WriteString(")")
	if t.Error != "" {
		b.WriteString(": " + cutRunes(OneLine(t.Error), 300))
	}
	return b.String()
}
