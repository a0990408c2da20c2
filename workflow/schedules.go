package workflow

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/weftrun/weft/internal/expr"
	"github.com/weftrun/weft/internal/ident"
	"github.com/weftrun/weft/internal/schedule"
	"github.com/weftrun/weft/internal/textsafe"
)

// Schedule submits a task of its workflow at each tick of a cron
// expression. Registering a workflow version registers its schedules (the
// newest registered version's schedules are the workflow's); the
// maintenance leader fires them, one task per tick across every engine.
type Schedule struct {
	// Name identifies the schedule within its workflow.
	Name string `json:"name"`
	// Cron is a cron expression: five fields (minute hour day-of-month
	// month day-of-week), an optional leading seconds field, or a
	// descriptor such as @hourly, @daily or @every 30s.
	Cron string `json:"cron"`
	// TimeZone is the IANA zone the expression is read in; "" means UTC.
	TimeZone string `json:"time_zone,omitempty"`
	// Input is the JSON object each task is submitted with; nil means {}.
	Input json.RawMessage `json:"input,omitempty"`
	// CatchUp says what happens to ticks missed while no engine ran:
	// CatchUpSkip (the default), CatchUpLatest or CatchUpAll.
	CatchUp CatchUp `json:"catch_up,omitempty"`
	// MaxCatchUp bounds how many missed ticks CatchUpAll submits at once
	// (the most recent ones). Zero means 10.
	MaxCatchUp int `json:"max_catch_up,omitempty"`

	line int
}

// CatchUp is a schedule's policy for ticks missed while no engine ran.
type CatchUp string

// Catch-up policies.
const (
	// CatchUpSkip drops ticks missed by more than a minute; a tick that is
	// merely late still fires.
	CatchUpSkip CatchUp = schedule.Skip
	// CatchUpLatest submits the most recent missed tick only.
	CatchUpLatest CatchUp = schedule.Latest
	// CatchUpAll submits every missed tick, oldest first, at most
	// MaxCatchUp of them (the most recent).
	CatchUpAll CatchUp = schedule.All
)

// ScheduleOption configures a schedule added with Workflow.Schedule.
type ScheduleOption func(*Schedule)

// ScheduleInput sets the input each scheduled task is submitted with,
// marshalled to JSON (an object).
func ScheduleInput(v any) ScheduleOption {
	return func(s *Schedule) {
		b, err := json.Marshal(v)
		if err != nil {
			b, _ = json.Marshal(err.Error()) // not an object: Validate reports it
		}
		s.Input = b
	}
}

// InTimeZone reads the schedule's cron expression in an IANA time zone.
func InTimeZone(tz string) ScheduleOption { return func(s *Schedule) { s.TimeZone = tz } }

// WithCatchUp sets the schedule's catch-up policy and, for CatchUpAll, the
// bound on missed ticks submitted at once (0: the default).
func WithCatchUp(p CatchUp, maxCatchUp int) ScheduleOption {
	return func(s *Schedule) { s.CatchUp, s.MaxCatchUp = p, maxCatchUp }
}

// Schedule adds a cron schedule and returns the workflow, so calls chain.
func (w *Workflow) Schedule(name, cron string, opts ...ScheduleOption) *Workflow {
	s := Schedule{Name: name, Cron: cron}
	for _, o := range opts {
		o(&s)
	}
	w.Schedules = append(w.Schedules, s)
	return w
}

// validateSchedules checks each schedule's name, expression, time zone,
// input and policy.
func (w *Workflow) validateSchedules(add addFunc) {
	seen := map[string]bool{}
	for i, s := range w.Schedules {
		field := func(f string) string { return fmt.Sprintf("schedules[%d].%s", i, f) }
		if ident.Valid(s.Name) {
			field = func(f string) string { return fmt.Sprintf("schedules.%s.%s", s.Name, f) }
		}
		switch {
		case s.Name == "":
			add("", s.line, field("name"), "every schedule needs a name")
		case !ident.Valid(s.Name):
			add("", s.line, field("name"), "%q: want %s", s.Name, ident.Rule)
		case seen[s.Name]:
			add("", s.line, field("name"), "duplicate schedule %q", s.Name)
		}
		seen[s.Name] = true
		if _, err := schedule.Parse(s.Cron, s.TimeZone); err != nil {
			f := "cron"
			if _, tzErr := schedule.Location(s.TimeZone); tzErr != nil {
				f = "time_zone"
			}
			add("", s.line, field(f), "%v", err)
		}
		input := s.Input
		if len(input) > 0 {
			var obj map[string]json.RawMessage
			if err := json.Unmarshal(input, &obj); err != nil || obj == nil {
				add("", s.line, field("input"), "must be a JSON object")
				input = nil
			} else if path, err := textsafe.Find(input); err != nil {
				add("", s.line, field("input"), "%s %v", path, err)
			}
		} else {
			input = json.RawMessage(`{}`)
		}
		if input != nil {
			// Every task of the schedule has this input: a key that
			// cannot be computed from it would drop every tick.
			for _, k := range w.inputKeys() {
				key, err := expr.CompileKey(k.src)
				if err != nil {
					continue // said where the key is
				}
				if _, err := key.Eval(input); err != nil {
					add("", s.line, field("input"), "%s cannot be computed from it: %v", k.field, err)
				}
			}
		}
		if s.CatchUp != "" && !slices.Contains(schedule.Policies, string(s.CatchUp)) {
			add("", s.line, field("catch_up"), "unknown policy %q (want skip, latest or all)", s.CatchUp)
		}
		if s.MaxCatchUp < 0 || s.MaxCatchUp > schedule.MaxMaxCatchUp {
			add("", s.line, field("max_catch_up"), "must be from 1 to %d, got %d", schedule.MaxMaxCatchUp, s.MaxCatchUp)
		}
	}
}

// inputKey is a key expression a submission computes from its input: a
// concurrency or rate limit's key.
type inputKey struct{ field, src string }

// inputKeys lists the workflow's key expressions, each with where it is.
func (w *Workflow) inputKeys() []inputKey {
	var out []inputKey
	if c := w.Concurrency; c != nil && c.Key != "" {
		out = append(out, inputKey{"concurrency.key", c.Key})
	}
	for _, st := range w.Steps {
		if c := st.Concurrency; c != nil && c.Key != "" {
			out = append(out, inputKey{fmt.Sprintf("step %q concurrency.key", st.Name), c.Key})
		}
		if r := st.RateLimit; r != nil && r.Key != "" {
			out = append(out, inputKey{fmt.Sprintf("step %q rate_limit.key", st.Name), r.Key})
		}
	}
	return out
}
