package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// check waits (up to the deadline) for every submitted task to end, then
// compares what the database recorded of each with the ledger.
func (r *runner) check(ctx context.Context, submitted []int64) (Report, error) {
	// Every task must end by the deadline.
	deadline := time.Now().Add(r.cfg.Deadline)
	for time.Now().Before(deadline) {
		var open int
		err := r.db.QueryRowContext(ctx, `SELECT count(*) FROM tasks WHERE state NOT IN ('completed', 'failed', 'cancelled', 'expired')`).Scan(&open)
		if err == nil && open == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}

	obs := map[int64]TaskObs{}
	for _, id := range submitted {
		var t *store.Task
		var audit []store.AuditEntry
		err := retry(ctx, func() (err error) {
			if t, err = r.st.GetTask(ctx, id); err != nil {
				return err
			}
			audit, err = r.st.Audit(ctx, id)
			return err
		})
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return Report{}, fmt.Errorf("task %d: %w", id, err)
		}
		o := TaskObs{State: t.State, Completions: map[string]int{}, Claims: map[string]int{}, RunEnds: map[string]int{}}
		for _, s := range t.Steps {
			o.Steps = append(o.Steps, StepObs{Name: s.Name, State: s.State, Ran: s.Kind != store.KindSignal, Where: where(s)})
		}
		for _, e := range audit[max(0, len(audit)-6):] {
			o.Trail = append(o.Trail, fmt.Sprintf("%s %s %s->%s by %s: %s", e.At.UTC().Format("15:04:05.000"), e.Step, e.From, e.To, e.EngineID, e.Reason))
		}
		for i, e := range audit {
			switch {
			case e.Step == "" && e.From == string(state.TaskPending) && e.To == string(state.TaskRunning):
				o.Starts++
				// A start is read back right after the claim it rode on.
				by := fmt.Sprintf("entry %d at %s by %s", e.ID, e.At.UTC().Format("15:04:05.000000"), e.EngineID)
				if i > 0 {
					by += fmt.Sprintf(", claiming %s attempt %d", audit[i-1].Step, audit[i-1].Attempt)
				}
				o.StartedBy = append(o.StartedBy, by)
			case e.Step == "":
			case e.From == string(state.StepReady) && e.To == string(state.StepRunning):
				o.Claims[e.Step]++
			case e.From == string(state.StepRunning):
				o.RunEnds[e.Step]++
			}
			if e.Step != "" && e.To == string(state.StepCompleted) {
				o.Completions[e.Step]++
			}
		}
		obs[id] = o
	}
	text, err := os.ReadFile(r.ledger)
	if err != nil {
		return Report{}, err
	}
	l, bad, err := ParseLedger(bytes.NewReader(text))
	if err != nil {
		return Report{}, err
	}
	if bad > 0 {
		r.logf("%d malformed ledger lines", bad)
	}
	overlaps, err := Overlaps(bytes.NewReader(text))
	if err != nil {
		return Report{}, err
	}
	for key, n := range overlaps {
		if n > 0 {
			r.logf("ledger of %s, with the processes gone meanwhile: %s", key, ledgerOf(text, key))
		}
		id, name, _ := strings.Cut(key, " ")
		tid, err := strconv.ParseInt(id, 10, 64)
		if err != nil {
			continue
		}
		if o, ok := obs[tid]; ok {
			if o.Overlaps == nil {
				o.Overlaps = map[string]int{}
			}
			o.Overlaps[name] += n
			obs[tid] = o
		}
	}
	return Check(submitted, obs, l), nil
}

// where describes what holds a step: its attempts, the engine running it,
// when it may run next, its last error.
func where(s store.Step) string {
	parts := []string{fmt.Sprintf("attempt %d of %d", s.Attempts, s.MaxAttempts)}
	if s.EngineID != "" {
		parts = append(parts, "engine "+s.EngineID)
	}
	if s.RunAt != nil {
		parts = append(parts, "run at "+s.RunAt.UTC().Format("15:04:05.000"))
	}
	if s.StartedAt != nil {
		parts = append(parts, "started "+s.StartedAt.UTC().Format("15:04:05.000"))
	}
	if s.Sub != "" {
		parts = append(parts, s.Sub)
	}
	if s.Error != "" {
		parts = append(parts, fmt.Sprintf("error %q", s.Error))
	}
	return strings.Join(parts, ", ")
}

// ledgerOf is the ledger's lines of step key ("TASK STEP") and the lines
// of processes gone between its first and its last, in order: what a
// report of runs that overlapped is read against.
func ledgerOf(text []byte, key string) string {
	lines := strings.Split(string(text), "\n")
	first, last := -1, -1
	for i, line := range lines {
		if strings.HasPrefix(line, key+" ") {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	if first < 0 {
		return "(none)"
	}
	var out []string
	for _, line := range lines[first : last+1] {
		if strings.HasPrefix(line, key+" ") || strings.HasPrefix(line, "gone ") {
			out = append(out, line)
		}
	}
	return strings.Join(out, "; ")
}
