package model

import (
	"fmt"
	"strings"
)

// The ledger: every handler of the model's workflows appends a line when it
// starts and one when it ends, outside the database:
//
//	start TASK STEP ATTEMPT RUNNER ENGINE
//	end   TASK STEP ATTEMPT RUNNER ENGINE
//
// RUNNER names the run (the shell's pid for exec steps, "rN" for the remote
// worker's runs) and ENGINE who runs it (the `weft` process's pid, or
// "remote"). Lines are appended with O_APPEND by every process, so the
// file's order is the order in which they happened.

// LedgerRun is one handler run from the ledger.
type LedgerRun struct {
	Task, Step, Attempt, Runner, Engine string
	Line                                int // of its start line, 1-based
}

func (r LedgerRun) String() string {
	return fmt.Sprintf("task %s step %s attempt %s (runner %s on engine %s, ledger line %d)", r.Task, r.Step, r.Attempt, r.Runner, r.Engine, r.Line)
}

// Overlap is two runs of the same step at once.
type Overlap struct {
	First, Second LedgerRun
}

func (o Overlap) String() string {
	return fmt.Sprintf("step ran in two places at once: %s was still running when %s started", o.First, o.Second)
}

// OverlapChecker reads ledger lines in order and reports runs of one step
// that overlap. A run that started and has no end line yet is open; when
// another run of the same step starts:
//   - if the open run's end line comes later, they overlapped;
//   - if the open run never writes an end line, it overlapped when its
//     runner was still alive at the second start (Alive is asked at once,
//     right after the line is read, so "alive now" means "alive then").
//     A runner that is gone without an end line was killed: not an overlap.
type OverlapChecker struct {
	// Alive reports whether a runner is still running (nil: never).
	Alive func(runner string) bool
	open  map[string][]*openRun // by "TASK STEP"
	line  int
	bad   int
}

type openRun struct {
	LedgerRun
	overlappedBy *LedgerRun
	reported     bool
}

// Malformed counts the lines that were not start or end lines.
func (c *OverlapChecker) Malformed() int { return c.bad }

// Feed takes the next complete lines of the ledger and returns the
// overlaps they show.
func (c *OverlapChecker) Feed(lines []string) []Overlap {
	if c.open == nil {
		c.open = map[string][]*openRun{}
	}
	var out []Overlap
	for _, l := range lines {
		c.line++
		f := strings.Fields(l)
		if len(f) != 6 || (f[0] != "start" && f[0] != "end") {
			c.bad++
			continue
		}
		run := LedgerRun{Task: f[1], Step: f[2], Attempt: f[3], Runner: f[4], Engine: f[5], Line: c.line}
		key := run.Task + " " + run.Step
		switch f[0] {
		case "start":
			var keep []*openRun
			for _, o := range c.open[key] {
				if o.Runner == run.Runner {
					continue // a runner is one run: a stale entry
				}
				if c.Alive != nil && c.Alive(o.Runner) {
					if !o.reported {
						o.reported = true
						out = append(out, Overlap{First: o.LedgerRun, Second: run})
					}
					keep = append(keep, o)
					continue
				}
				// Gone without an end line (killed), or alive-ness unknown:
				// an end line later still shows an overlap.
				r := run
				o.overlappedBy = &r
				keep = append(keep, o)
			}
			c.open[key] = append(keep, &openRun{LedgerRun: run})
		case "end":
			runs := c.open[key]
			for i, o := range runs {
				if o.Runner != run.Runner {
					continue
				}
				if o.overlappedBy != nil && !o.reported {
					out = append(out, Overlap{First: o.LedgerRun, Second: *o.overlappedBy})
				}
				c.open[key] = append(runs[:i:i], runs[i+1:]...)
				break
			}
			if len(c.open[key]) == 0 {
				delete(c.open, key)
			}
		}
	}
	return out
}
