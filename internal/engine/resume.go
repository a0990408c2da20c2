package engine

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/weftrun/weft/internal/durable"
	"github.com/weftrun/weft/internal/textsafe"
	"github.com/weftrun/weft/store"
)

// This file folds a durable function's next step into the write of the
// call it waited for. A function that waits for one call this engine runs
// (a step's code or a sleep) is kept here with what its run knew; when the
// call completes, the engine replays the function over that and the call's
// result in-process, and the call's outcome carries what the function did
// next (store.Resume): the calls it made, or the result it returned. One
// write instead of two (the call's end, then a claim and a run of the
// function step), and no read of the task. The store applies it only where
// the function step's counts are those replayed over; otherwise the
// function step runs as usual.

// resumable is what a run of a function step knew when it made one call
// that runs on this engine: the calls its task recorded, then that call.
type resumable struct {
	fn      durable.Func
	step    store.ClaimedStep // the function step, as claimed
	journal []durable.Recorded
}

// resumables keeps, by task, the functions that wait for one call, and
// the tasks whose function step this engine claimed in the transaction
// that inserted them (new: their function has made no call yet).
type resumables struct {
	bounded[int64, *resumable]
	new bounded[int64, store.Fence]
}

// inserted notes that the function step of task id was claimed under f in
// the transaction that inserted the task.
func (rs *resumables) inserted(id int64, f store.Fence) { rs.new.put(id, f) }

// isNew reports, once, whether step c is a function step claimed in the
// transaction that inserted its task: its task recorded no call. By
// fence: should that claim be released unrun, a later claim of the step
// may come after calls another engine's run made.
func (rs *resumables) isNew(c *store.ClaimedStep) bool {
	f, ok := rs.new.take(c.TaskID)
	return ok && f == c.Fence
}

// keep remembers the function of step, which replayed over journal and
// made calls, if it made one call that runs on an engine.
func (rs *resumables) keep(fn durable.Func, step store.ClaimedStep, journal []durable.Recorded, calls []durable.Request) {
	if len(calls) != 1 || (calls[0].Item.Call != durable.CallStep && calls[0].Item.Call != durable.CallSleep) {
		return
	}
	journal = append(journal, durable.Recorded{Name: calls[0].Name, Call: calls[0].Item.Call})
	rs.put(step.TaskID, &resumable{fn: fn, step: step, journal: journal})
}

// after sets o.Resume, for call c that completed with outcome o, to what
// its function did next, where this engine kept the function waiting for
// c: the calls it made, or the result it returned.
func (rs *resumables) after(ctx context.Context, e *Engine, c *store.ClaimedStep, o *store.Outcome) {
	r, ok := rs.take(c.TaskID)
	if !ok {
		return
	}
	last := len(r.journal) - 1
	if r.journal[last].Name != c.Name {
		return
	}
	journal := r.journal
	journal[last].Ended, journal[last].Succeeded, journal[last].Result = true, true, o.Result
	// Under the call's context, so that a cancel or a shutdown stops the
	// function's code too: a run cut short makes no calls, and its step
	// runs as usual.
	out := durable.Drive(ctx, c.TaskID, journal, r.fn, r.step.Input)
	if ctx.Err() != nil {
		return
	}
	if len(out.Calls) == 0 {
		// It returned: its step completes with the result in the call's
		// write, a result that can be stored; a failure, or a wait for a
		// call an operator reopened, runs its step as usual.
		if out.Waiting || out.Err != nil {
			return
		}
		result := out.Value
		if len(result) == 0 {
			result = json.RawMessage(`null`)
		}
		result = textsafe.ValidJSON(result)
		if _, err := textsafe.Find(result); err != nil {
			return
		}
		o.Resume = &store.Resume{StepID: r.step.ID, Returned: true, Result: result, Recorded: len(journal), Succeeded: succeededIn(journal)}
		return
	}
	var made *callsMade
	if err := e.madeCalls(ctx, &r.step, len(journal), out.Calls); !errors.As(err, &made) {
		return // past its step limit: its step runs and fails as usual
	}
	o.Resume = &store.Resume{StepID: r.step.ID, Calls: made.calls, Reason: made.Error(), Recorded: len(journal), Succeeded: succeededIn(journal)}
	for _, req := range out.Calls {
		if req.Run != nil {
			e.calls.put(pendingCall{c.TaskID, req.Name}, req.Run)
		}
	}
	rs.keep(r.fn, r.step, journal, out.Calls)
}

// succeededIn counts the calls of journal that succeeded.
func succeededIn(journal []durable.Recorded) int {
	n := 0
	for _, rec := range journal {
		if rec.Ended && rec.Succeeded {
			n++
		}
	}
	return n
}
