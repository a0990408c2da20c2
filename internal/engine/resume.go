package engine

import (
	"context"
	"encoding/json"
	"errors"
	"sync"

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

// functionCache is what an engine keeps of its runs of durable functions:
// the code of the step calls they made (calls), the functions that wait
// for one call, by task (waiting), and the tasks whose function step it
// claimed in the transaction that inserted them (new: their function has
// made no call yet).
type functionCache struct {
	calls   pendingCalls
	waiting bounded[int64, *resumable]
	new     bounded[int64, store.Fence]
}

// inserted notes that the function step of task id was claimed under f in
// the transaction that inserted the task.
func (fc *functionCache) inserted(id int64, f store.Fence) { fc.new.put(id, f) }

// isNew reports, once, whether step c is a function step claimed in the
// transaction that inserted its task: its task recorded no call. By
// fence: should that claim be released unrun, a later claim of the step
// may come after calls another engine's run made.
func (fc *functionCache) isNew(c *store.ClaimedStep) bool {
	f, ok := fc.new.take(c.TaskID)
	return ok && f == c.Fence
}

// made keeps what the run of function step step, over journal, made: the
// code of its step calls and, if it made one call that runs on an engine,
// the function, to resume after it.
func (fc *functionCache) made(fn durable.Func, step store.ClaimedStep, journal []durable.Recorded, calls []durable.Request) {
	for _, req := range calls {
		if req.Run != nil {
			fc.calls.put(pendingCall{step.TaskID, req.Name}, req.Run)
		}
	}
	if len(calls) != 1 || (calls[0].Item.Call != durable.CallStep && calls[0].Item.Call != durable.CallSleep) {
		return
	}
	journal = append(journal, durable.Recorded{Name: calls[0].Name, Call: calls[0].Item.Call})
	fc.waiting.put(step.TaskID, &resumable{fn: fn, step: step, journal: journal})
}

// after sets o.Resume, for call c that completed with outcome o, to what
// its function did next, where this engine kept the function waiting for
// c: the calls it made, or the result it returned.
func (f *functions) after(ctx context.Context, c *store.ClaimedStep, o *store.Outcome) {
	r, ok := f.waiting.take(c.TaskID)
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
	if err := f.madeCalls(ctx, &r.step, len(journal), out.Calls); !errors.As(err, &made) {
		return // past its step limit: its step runs and fails as usual
	}
	o.Resume = &store.Resume{StepID: r.step.ID, Calls: made.calls, Reason: made.Error(), Recorded: len(journal), Succeeded: succeededIn(journal)}
	f.made(r.fn, r.step, journal, out.Calls)
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

// pendingCalls keeps the code of the step calls that this engine's runs
// of durable functions made, until their steps are claimed: a call claimed
// here runs it without reading its task and replaying the function. It
// holds at most maxPending, the oldest dropped first (their calls replay,
// as a call claimed elsewhere does).
type pendingCalls = bounded[pendingCall, func(context.Context) (json.RawMessage, error)]

type pendingCall struct {
	task int64
	name string
}

// maxPending bounds each of the engine's caches of durable functions.
const maxPending = 4096

// bounded is a map of at most maxPending entries, the oldest dropped
// first, whose entries are taken once.
type bounded[K comparable, V any] struct {
	mu    sync.Mutex
	m     map[K]V
	order []K
}

func (b *bounded[K, V]) put(k K, v V) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = map[K]V{}
	}
	if _, ok := b.m[k]; !ok {
		b.order = append(b.order, k)
	}
	b.m[k] = v
	for len(b.m) > maxPending && len(b.order) > 0 {
		delete(b.m, b.order[0])
		b.order = b.order[1:]
	}
	if len(b.order) > 2*maxPending {
		// Taken entries leave their keys behind: keep only the live ones.
		live := b.order[:0]
		for _, k := range b.order {
			if _, ok := b.m[k]; ok {
				live = append(live, k)
			}
		}
		b.order = live
	}
}

// take returns and forgets the entry of k, if there is one.
func (b *bounded[K, V]) take(k K) (V, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	v, ok := b.m[k]
	delete(b.m, k)
	return v, ok
}
