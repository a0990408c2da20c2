// Package chaos runs weft under injected faults (killed workers, a restarted
// or disconnected PostgreSQL) and checks, against a ledger kept outside the
// database and against the database itself, that no task was lost, stuck,
// had a step's outcome recorded twice or an audit trail with a run's claim
// missing or twice. It is a tool (scripts/chaos), not
// part of weft's API.
package chaos

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/weftrun/weft/state"
)

// TaskObs is what the database says about one task at the end of a run.
type TaskObs struct {
	State state.Task
	// Trail is the end of the task's audit trail, oldest first ("TIME
	// STEP FROM->TO by ENGINE: REASON"): what a stuck task's report shows
	// of how it got there.
	Trail []string
	// Completions counts, by step name, the audit rows that move the step
	// to completed.
	Completions map[string]int
	// Claims and RunEnds count, by step name, the audit entries that claim
	// the step (ready to running) and those that end its runs (from
	// running); Starts those that start the task (pending to running).
	Claims, RunEnds map[string]int
	Starts          int
	// StartedBy lists, for each start, the audit entry that records it
	// and the claim it rode on ("entry ID at TIME by ENGINE, claiming
	// STEP"), for the report of a task started more than once.
	StartedBy []string
	// Steps lists the task's steps; Ran marks the ones whose command the
	// ledger must show (exec steps, not signal waits).
	Steps []StepObs
	// Overlaps counts, by step name, the runs of the step that the ledger
	// shows starting while another run of it still went on (Overlaps).
	Overlaps map[string]int
}

// StepObs is one step of a task.
type StepObs struct {
	Name  string
	State state.Step
	Ran   bool // an exec step: it must appear in the ledger
	// Where says, for a step that has not ended, what holds it: its
	// attempts, the engine that runs it, when it may run, its last error
	// (observe.go). It is how a stuck task is read.
	Where string
}

// Report is the outcome of Check: counts of tasks, and a line per problem.
type Report struct {
	Tasks, Lost, Stuck, Duplicated int
	// Unaudited counts tasks whose audit trail misses a run's claim, has
	// one twice, or does not start the task once.
	Unaudited int
	// Reran counts steps the ledger shows more than once (at-least-once
	// execution after a crash: expected, not a failure).
	Reran   int
	Details []string
}

// OK reports whether nothing was lost, stuck, duplicated or unaudited.
func (r Report) OK() bool {
	return r.Lost == 0 && r.Stuck == 0 && r.Duplicated == 0 && r.Unaudited == 0
}

// Ledger maps "TASK STEP" to the number of executions the step's command
// recorded.
type Ledger map[string]int

// The ledger's lines, in the order they were appended:
//
//   - "TASK STEP ATTEMPT PID": a run of the step's command started (PID is
//     the process that runs it, a worker or the server; "remote" for the
//     remote worker);
//   - "TASK STEP ATTEMPT PID end": that run ended, however the command
//     exited (a command killed with SIGKILL writes no end);
//   - "gone PID": the runner saw that process end (killed or stopped):
//     runs it still had are over.

// ParseLedger reads the ledger and counts the starts of each step's runs.
// Malformed lines (there should be none) are counted and skipped.
func ParseLedger(r io.Reader) (Ledger, int, error) {
	l := Ledger{}
	bad := 0
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 4:
			l[f[0]+" "+f[1]]++
		case len(f) == 5 && f[4] == "end", len(f) == 2 && f[0] == "gone":
		default:
			bad++
		}
	}
	return l, bad, sc.Err()
}

// Overlaps reads the ledger and counts, by "TASK STEP", the runs that
// started while another run of the same step had started and not yet
// ended: two places running one step at once. A run ends with its end
// line or with its process ("gone"). A run that a step merely repeats (a
// retry after a failure, a rerun after its worker died) starts after the
// last one ended and is no overlap. Runs of the remote worker, which
// records no ends, are left out.
func Overlaps(r io.Reader) (map[string]int, error) {
	type run struct{ step, id string }
	open := map[string]map[string]bool{} // step -> open runs ("ATTEMPT PID")
	byPID := map[string][]run{}
	out := map[string]int{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 2 && f[0] == "gone":
			for _, ru := range byPID[f[1]] {
				delete(open[ru.step], ru.id)
			}
			delete(byPID, f[1])
		case len(f) == 4 || len(f) == 5 && f[4] == "end":
			if f[3] == "remote" {
				continue
			}
			step, id := f[0]+" "+f[1], f[2]+" "+f[3]
			if len(f) == 5 {
				delete(open[step], id)
				continue
			}
			if len(open[step]) > 0 {
				out[step]++
			}
			if open[step] == nil {
				open[step] = map[string]bool{}
			}
			open[step][id] = true
			byPID[f[3]] = append(byPID[f[3]], run{step, id})
		}
	}
	return out, sc.Err()
}

// Check compares the submitted tasks with the database's view (obs, by
// task id) and the ledger. A task is
//   - lost when it is missing from the database, ended in a state other
//     than completed, or completed while a step is not completed, has no
//     recorded completion, or (for an exec step) never ran per the ledger;
//   - stuck when it is not terminal;
//   - duplicated when any of its steps has more than one audit row moving
//     it to completed, or ran in two places at once (obs Overlaps); a step
//     that merely ran again (a retry, a rerun after its worker died) is
//     not;
//   - unaudited when it ended and its audit trail has, for a step, not as
//     many claims as ends of runs, or not one start of the task.
//
// A task counts once per category.
func Check(submitted []int64, obs map[int64]TaskObs, ledger Ledger) Report {
	r := Report{Tasks: len(submitted)}
	ids := slices.Clone(submitted)
	slices.Sort(ids)
	for _, id := range ids {
		t, ok := obs[id]
		switch {
		case !ok:
			r.Lost++
			r.Details = append(r.Details, fmt.Sprintf("task %d: lost: not in the database", id))
			continue
		case !t.State.Terminal():
			r.Stuck++
			var open []string
			for _, s := range t.Steps {
				if !s.State.Terminal() {
					open = append(open, fmt.Sprintf("step %s %s (%s)", s.Name, s.State, s.Where))
				}
			}
			r.Details = append(r.Details, fmt.Sprintf("task %d: stuck in %s: %s; its history ends: %s", id, t.State, strings.Join(open, "; "), strings.Join(t.Trail, " | ")))
		case t.State != state.TaskCompleted:
			r.Lost++
			r.Details = append(r.Details, fmt.Sprintf("task %d: lost: ended %s", id, t.State))
		default:
			var why []string
			if len(t.Steps) == 0 {
				why = append(why, "no steps")
			}
			for _, s := range t.Steps {
				switch {
				case s.State != state.StepCompleted:
					why = append(why, fmt.Sprintf("step %s is %s", s.Name, s.State))
				case t.Completions[s.Name] == 0:
					why = append(why, fmt.Sprintf("step %s has no recorded completion", s.Name))
				case s.Ran && ledger[fmt.Sprintf("%d %s", id, s.Name)] == 0:
					why = append(why, fmt.Sprintf("step %s never ran (not in the ledger)", s.Name))
				}
			}
			if len(why) > 0 {
				r.Lost++
				r.Details = append(r.Details, fmt.Sprintf("task %d: lost: completed but %s", id, strings.Join(why, "; ")))
			}
		}
		var dups []string
		for name, n := range t.Completions {
			if n > 1 {
				dups = append(dups, fmt.Sprintf("%s completed %d times", name, n))
			}
		}
		for name, n := range t.Overlaps {
			if n > 0 {
				dups = append(dups, fmt.Sprintf("%s ran in two places at once (%d overlapping runs)", name, n))
			}
		}
		if len(dups) > 0 {
			slices.Sort(dups)
			r.Duplicated++
			r.Details = append(r.Details, fmt.Sprintf("task %d: duplicated: %s", id, strings.Join(dups, ", ")))
		}
		if t.State.Terminal() {
			var why []string
			for _, s := range t.Steps {
				if c, e := t.Claims[s.Name], t.RunEnds[s.Name]; c != e {
					why = append(why, fmt.Sprintf("step %s claimed %d times, its runs ended %d times", s.Name, c, e))
				}
			}
			if t.Starts != 1 && (t.State == state.TaskCompleted || t.Starts > 1) {
				why = append(why, fmt.Sprintf("started %d times (%s)", t.Starts, strings.Join(t.StartedBy, "; ")))
			}
			if len(why) > 0 {
				r.Unaudited++
				r.Details = append(r.Details, fmt.Sprintf("task %d: unaudited: %s", id, strings.Join(why, "; ")))
			}
		}
		for _, s := range t.Steps {
			if ledger[fmt.Sprintf("%d %s", id, s.Name)] > 1 {
				r.Reran++
			}
		}
	}
	return r
}
