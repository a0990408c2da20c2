package cliview

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/weftrun/weft/internal/taskview"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/wire"
)

// Tasks writes the task list of `weft tasks`: one row each, with a TAGS
// column only when a listed task has tags. The NOW column says where each
// unfinished task stands at now.
func Tasks(w io.Writer, tasks []wire.Task, now time.Time) error {
	w = printable{w}
	tagged := false
	for i := range tasks {
		tagged = tagged || len(tasks[i].Tags) > 0
	}
	tw := newTable(w)
	if tagged {
		fmt.Fprintln(tw, "ID\tWORKFLOW\tSTATE\tNOW\tCREATED\tFINISHED\tTAGS\tERROR")
	} else {
		fmt.Fprintln(tw, "ID\tWORKFLOW\tSTATE\tNOW\tCREATED\tFINISHED\tERROR")
	}
	for i := range tasks {
		t := &tasks[i]
		tags := ""
		if tagged {
			tags = taskview.Abbrev(tagList(t.Tags), 40) + "\t"
		}
		stands := "-"
		if s, ok := taskview.StandingOf(t.Active); ok {
			stands = taskview.Abbrev(s.Text(now, time.Local), 60)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s%s\n", t.ID, taskview.Ref(t), t.State, stands, Time(&t.CreatedAt), Time(t.FinishedAt), tags, taskview.Abbrev(t.Error, 60))
	}
	return flushTable(tw)
}

// Attention writes the attention list of `weft tasks --attention`: each
// task with its reasons, one line each.
func Attention(w io.Writer, tasks []wire.Task) error {
	w = printable{w}
	tw := newTable(w)
	fmt.Fprintln(tw, "ID\tWORKFLOW\tSTATE\tCREATED\tTAGS\tNEEDS ATTENTION")
	for i := range tasks {
		t := &tasks[i]
		for j, reason := range t.Attention {
			if j == 0 {
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", t.ID, taskview.Ref(t), t.State, Time(&t.CreatedAt), taskview.Abbrev(tagList(t.Tags), 30), taskview.Abbrev(reason, 120))
			} else {
				fmt.Fprintf(tw, "\t\t\t\t\t%s\n", taskview.Abbrev(reason, 120))
			}
		}
	}
	return flushTable(tw)
}

// Task writes a task's fields and a table of its steps; a finished task's
// duration is taken at now.
func Task(w io.Writer, t *wire.Task, now time.Time) error {
	w = printable{w}
	tw := newTable(w)
	fmt.Fprintf(tw, "Task:\t%d\n", t.ID)
	fmt.Fprintf(tw, "Workflow:\t%s\n", taskview.Ref(t))
	fmt.Fprintf(tw, "State:\t%s\n", t.State)
	fmt.Fprintf(tw, "Created:\t%s\n", Time(&t.CreatedAt))
	fmt.Fprintf(tw, "Started:\t%s\n", Time(t.StartedAt))
	finished := Time(t.FinishedAt)
	if t.FinishedAt != nil {
		finished += " (" + taskview.Duration(taskview.Elapsed(t, now)) + ")"
	}
	fmt.Fprintf(tw, "Finished:\t%s\n", finished)
	if t.IdempotencyKey != "" {
		fmt.Fprintf(tw, "Key:\t%s\n", t.IdempotencyKey)
	}
	if t.Priority != 0 {
		fmt.Fprintf(tw, "Priority:\t%d\n", t.Priority)
	}
	if t.ParentTaskID != 0 {
		fmt.Fprintf(tw, "Parent:\ttask %d, step %s\n", t.ParentTaskID, orDash(t.ParentStep))
	}
	if len(t.Children) > 0 {
		fmt.Fprintf(tw, "Children:\t%s\n", taskIDs(t.Children))
	}
	if t.Schedule != "" {
		fmt.Fprintf(tw, "Schedule:\t%s/%s/%s, tick %s\n", t.Namespace, t.Workflow, t.Schedule, Time(t.ScheduleTick))
	}
	if len(t.Tags) > 0 {
		fmt.Fprintf(tw, "Tags:\t%s\n", tagList(t.Tags))
	}
	fmt.Fprintf(tw, "Input:\t%s\n", taskview.Abbrev(string(t.Input), 100))
	if t.Error != "" {
		fmt.Fprintf(tw, "Error:\t%s\n", taskview.Abbrev(t.Error, 200))
	}
	if err := flushTable(tw); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = newTable(w)
	fmt.Fprintln(tw, "ID\tSTEP\tSTATE\tATTEMPTS\tERROR\tRESULT")
	for i := range t.Steps {
		s := &t.Steps[i]
		attempts := fmt.Sprintf("%d/%d", s.Attempts, s.MaxAttempts)
		st := taskview.StepState(s)
		switch {
		case s.State == state.StepRunning && s.Progress != nil:
			st += " " + taskview.Abbrev(taskview.StepProgress(s), 40)
		case s.State == state.StepWaiting && s.Signal != "":
			st += " for signal " + s.Signal
		case s.State == state.StepWaiting && s.ChildTaskID != 0:
			st += fmt.Sprintf(" for child task %d", s.ChildTaskID)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", s.ID, s.Name, st, attempts, orDash(taskview.Abbrev(s.Error, 50)), orDash(taskview.Abbrev(string(s.Result), 50)))
	}
	return flushTable(tw)
}

// Audit writes an audit trail as a table, after an empty line.
func Audit(w io.Writer, trail []wire.AuditEntry) error {
	w = printable{w}
	fmt.Fprintln(w)
	tw := newTable(w)
	fmt.Fprintln(tw, "TIME\tSTEP\tFROM\tTO\tATTEMPT\tENGINE\tREASON")
	for _, en := range trail {
		attempt := "-"
		if en.Attempt > 0 {
			attempt = strconv.Itoa(en.Attempt)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", en.At.Local().Format(timeLayout+".000"), orDash(en.Step), orDash(en.From), en.To,
			attempt, orDash(en.EngineID), orDash(taskview.Abbrev(en.Reason, 60)))
	}
	return flushTable(tw)
}

// Step writes a step's fields.
func Step(w io.Writer, s *wire.Step) error {
	w = printable{w}
	tw := newTable(w)
	fmt.Fprintf(tw, "Step:\t%d (%s of task %d)\n", s.ID, s.Name, s.TaskID)
	fmt.Fprintf(tw, "Handler:\t%s\n", orDash(s.Handler))
	fmt.Fprintf(tw, "State:\t%s\n", taskview.StepState(s))
	fmt.Fprintf(tw, "Attempts:\t%d/%d\n", s.Attempts, s.MaxAttempts)
	if s.Signal != "" {
		fmt.Fprintf(tw, "Signal:\t%s\n", s.Signal)
	}
	if s.EngineID != "" {
		fmt.Fprintf(tw, "Engine:\t%s\n", s.EngineID)
	}
	fmt.Fprintf(tw, "Started:\t%s\n", Time(s.StartedAt))
	fmt.Fprintf(tw, "Finished:\t%s\n", Time(s.FinishedAt))
	if s.Progress != nil {
		fmt.Fprintf(tw, "Progress:\t%s\n", taskview.StepProgress(s))
	}
	if s.Error != "" {
		fmt.Fprintf(tw, "Error:\t%s\n", s.Error)
	}
	if len(s.Checkpoint) > 0 {
		fmt.Fprintf(tw, "Checkpoint:\t%s\n", taskview.Abbrev(string(s.Checkpoint), 200))
	}
	fmt.Fprintf(tw, "Result:\t%s\n", orDash(taskview.Abbrev(string(s.Result), 200)))
	return flushTable(tw)
}

// Event writes one lifecycle event as a line of `weft events`: a JSON
// object when jsonOut, else text ending with the event's id.
func Event(w io.Writer, ev wire.Event, jsonOut bool) error {
	w = printable{w}
	if jsonOut {
		b, err := json.Marshal(ev)
		if err != nil {
			return fmt.Errorf("encode event: %w", err)
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	line := fmt.Sprintf("%s  %-15s %s  task %d", ev.At.Local().Format(timeLayout+".000"), ev.Type, ev.Workflow, ev.TaskID)
	if ev.Step != "" {
		line += "  " + ev.Step
	}
	if ev.Attempt > 0 {
		line += fmt.Sprintf("  attempt %d", ev.Attempt)
	}
	if ev.EngineID != "" {
		line += "  by " + ev.EngineID
	}
	if ev.Reason != "" {
		line += "  " + taskview.Abbrev(taskview.OneLine(ev.Reason), 100)
	}
	_, err := fmt.Fprintf(w, "%s  (id %s)\n", line, ev.Cursor)
	return err
}
