package storetest

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/wire"
)

// runningTests are the conformance tests of what holds and bounds running
// steps: complete heartbeats that release what the holder never received,
// the holder's view of one step, and step timeouts kept in the database.
var runningTests = []struct {
	name string
	fn   func(t *testing.T, h *harness)
}{
	{"HeartbeatReleasesUnheld", testHeartbeatReleasesUnheld},
	{"TimeoutSetsDeadline", testTimeoutDeadline},
	{"LeavingRunningClearsDeadline", testDeadlineCleared},
	{"OverdueSteps", testOverdueSteps},
	{"BatchItemsTakeTemplateTimeout", testBatchItemTimeout},
	{"HeldStep", testHeldStep},
	{"TaskEndedTellsEveryListener", testTaskEnded},
}

// testTaskEnded: a store that tells when its transactions end a task
// (store.TaskEnder) closes the channel every listener took, once a task
// completes or is cancelled, and not for a step that leaves its task
// running.
func testTaskEnded(t *testing.T, h *harness) {
	te, ok := h.s.(store.TaskEnder)
	if !ok {
		t.Skip("the store does not tell when tasks end")
	}
	closed := func(c <-chan struct{}) bool {
		select {
		case <-c:
			return true
		default:
			return false
		}
	}
	id := h.insert(store.TaskInsert{Steps: chain("a", "b")})[0].Task.ID
	first, second := te.TaskEnded(), te.TaskEnded()
	a := h.claim("e1", 10)
	require.Equal(t, []string{"a"}, names(a))
	h.ok(a[0], `{}`)
	require.False(t, closed(first), "a step that leaves its task running")
	b := h.claim("e1", 10)
	require.Equal(t, []string{"b"}, names(b))
	h.ok(b[0], `{}`)
	require.Equal(t, state.TaskCompleted, h.task(id).State)
	require.True(t, closed(first), "the task completed")
	require.True(t, closed(second), "every listener is told")

	next := te.TaskEnded()
	require.False(t, closed(next), "a channel for the next end")
	parked := h.insert(store.TaskInsert{Steps: chain("c")})[0].Task.ID
	_, err := h.s.CancelTask(h.ctx, parked, "e1", "no longer needed")
	require.NoError(t, err)
	require.True(t, closed(next), "the task cancelled")
}

// drainWake empties the store's wake channel.
func (h *harness) drainWake() {
	select {
	case <-h.s.Wake():
	default:
	}
}

func testHeartbeatReleasesUnheld(t *testing.T, h *harness) {
	type claimed = []store.ClaimedStep
	tests := []struct {
		name string
		// held lists the fences the heartbeat reports, from the two
		// steps the engine claimed.
		held     func(got claimed) []store.Fence
		complete bool
		// cutoff is ClaimedBefore, from the time of the claim.
		cutoff func(claimedAt time.Time) time.Time
		// released are indexes into the claimed steps. A listed fence
		// that is not one of theirs is expected back as lost.
		released []int
	}{
		{
			name:     "complete list, claimed before the cutoff",
			held:     func(got claimed) []store.Fence { return []store.Fence{got[0].Fence} },
			complete: true,
			cutoff:   func(at time.Time) time.Time { return at.Add(time.Second) },
			released: []int{1},
		},
		{
			name:     "complete list, claimed after the cutoff",
			held:     func(got claimed) []store.Fence { return []store.Fence{got[0].Fence} },
			complete: true,
			cutoff:   func(at time.Time) time.Time { return at.Add(-time.Second) },
		},
		{
			name:     "complete list, claimed at the cutoff",
			held:     func(got claimed) []store.Fence { return []store.Fence{got[0].Fence} },
			complete: true,
			cutoff:   func(at time.Time) time.Time { return at },
		},
		{
			name:     "complete list, no cutoff",
			held:     func(got claimed) []store.Fence { return []store.Fence{got[0].Fence} },
			complete: true,
			cutoff:   func(time.Time) time.Time { return time.Time{} },
		},
		{
			name:   "incomplete list",
			held:   func(got claimed) []store.Fence { return []store.Fence{got[0].Fence} },
			cutoff: func(at time.Time) time.Time { return at.Add(time.Second) },
		},
		{
			name:     "complete list, nothing held",
			held:     func(claimed) []store.Fence { return nil },
			complete: true,
			cutoff:   func(at time.Time) time.Time { return at.Add(time.Second) },
			released: []int{0, 1},
		},
		{
			// A listed fence of another attempt is lost, and the attempt
			// that does run is not held by this holder.
			name: "complete list with a stale fence",
			held: func(got claimed) []store.Fence {
				stale := got[1].Fence
				stale.LeaseID++
				return []store.Fence{got[0].Fence, stale}
			},
			complete: true,
			cutoff:   func(at time.Time) time.Time { return at.Add(time.Second) },
			released: []int{1},
		},
	}
	for i, tt := range tests {
		// Each case claims its own two steps (by handler) under its own
		// engine, on the same store.
		engine, handler := "x"+string(rune('a'+i)), "h"+string(rune('a'+i))
		h.register(engine)
		steps := []store.StepInsert{{Name: "only", Handler: handler, MaxAttempts: 3}}
		h.insert(store.TaskInsert{Steps: steps}, store.TaskInsert{Steps: steps})
		claimedAt := h.clock.Now()
		got := h.claimWith(store.ClaimParams{EngineID: engine, Limit: 2, Handlers: []string{handler}})
		require.Len(t, got, 2, tt.name)
		h.clock.Advance(time.Minute)
		h.drainWake()

		held := tt.held(got)
		res, err := h.s.Heartbeat(h.ctx, store.HeartbeatParams{EngineID: engine, Now: h.clock.Now(), Held: held,
			Complete: tt.complete, ClaimedBefore: tt.cutoff(claimedAt)})
		require.NoError(t, err, tt.name)
		require.Equal(t, len(tt.released), res.Released, tt.name)
		var wantLost []store.Fence
		for _, f := range held {
			if f != got[0].Fence && f != got[1].Fence {
				wantLost = append(wantLost, f)
			}
		}
		require.ElementsMatch(t, wantLost, res.Lost, tt.name)

		for j, c := range got {
			step := h.task(c.TaskID).Steps[0]
			if !slices.Contains(tt.released, j) {
				require.Equal(t, state.StepRunning, step.State, "%s: step %d", tt.name, j)
				require.Equal(t, 1, step.Attempts, "%s: step %d", tt.name, j)
				continue
			}
			require.Equal(t, state.StepReady, step.State, "%s: step %d", tt.name, j)
			require.Zero(t, step.Attempts, "%s: the attempt the holder never received is given back", tt.name)
			entries, err := h.s.Audit(h.ctx, c.TaskID)
			require.NoError(t, err)
			last := entries[len(entries)-1]
			require.Equal(t, store.AuditEntry{ID: last.ID, TaskID: c.TaskID, Step: "only", From: "running", To: "ready", At: last.At,
				Attempt: 1, EngineID: engine, Reason: "released: not held by its worker"}, last, tt.name)
		}
		if len(tt.released) == 0 {
			continue
		}
		select {
		case <-h.s.Wake():
		default:
			t.Fatalf("%s: releasing steps must wake the engines waiting for work", tt.name)
		}
		// The released steps are claimable at once, under the attempt
		// number they had.
		again := h.claimWith(store.ClaimParams{EngineID: engine, Limit: 10, Handlers: []string{handler}})
		require.Len(t, again, len(tt.released), tt.name)
		for _, c := range again {
			require.Equal(t, 1, c.Attempts, tt.name)
		}
	}
	// A heartbeat of an engine declared dead releases nothing and says so.
	_, err := h.s.Reap(h.ctx, h.clock.Now(), h.clock.Now(), []string{"xa"}, "e1")
	require.NoError(t, err)
	_, err = h.s.Heartbeat(h.ctx, store.HeartbeatParams{EngineID: "xa", Now: h.clock.Now(), Complete: true, ClaimedBefore: h.clock.Now()})
	require.ErrorIs(t, err, store.ErrEngineLost)
}

// requireAt checks that a time is set and equal to want.
func requireAt(t *testing.T, want time.Time, got *time.Time, msgAndArgs ...any) {
	t.Helper()
	require.NotNil(t, got, msgAndArgs...)
	require.True(t, want.Equal(*got), "want %s, got %s", want, *got)
}

func (h *harness) step(id int64) *store.Step {
	h.t.Helper()
	st, err := h.s.GetStep(h.ctx, id)
	require.NoError(h.t, err)
	return st
}

func (h *harness) overdue(now time.Time) []store.ClaimedStep {
	h.t.Helper()
	got, err := h.s.OverdueSteps(h.ctx, now, 100)
	require.NoError(h.t, err)
	return got
}

func testTimeoutDeadline(t *testing.T, h *harness) {
	h.register("e1")
	id := h.insert(store.TaskInsert{Workflow: "timed", Version: "7", Steps: []store.StepInsert{
		{Name: "timed", Handler: "h", MaxAttempts: 3, Timeout: 30 * time.Second},
		{Name: "plain", Handler: "h", MaxAttempts: 3},
	}})[0].Task.ID
	for _, st := range h.task(id).Steps {
		require.Nil(t, st.Deadline, "%s: no deadline before a claim", st.Name)
	}
	claimedAt := h.clock.Now()
	got := h.claim("e1", 2)
	require.Len(t, got, 2)
	timed, plain := claimNamed(t, got, "timed"), claimNamed(t, got, "plain")
	requireAt(t, claimedAt.Add(30*time.Second), timed.Deadline, "the claim returns the deadline")
	require.Nil(t, plain.Deadline, "a step without a timeout has no deadline")
	requireAt(t, claimedAt.Add(30*time.Second), h.step(timed.ID).Deadline, "GetStep returns it")
	for _, st := range h.task(id).Steps {
		if st.Name == "timed" {
			requireAt(t, claimedAt.Add(30*time.Second), st.Deadline, "GetTask returns it")
		} else {
			require.Nil(t, st.Deadline)
		}
	}
	b, err := json.Marshal(wire.StepOf(*h.step(plain.ID)))
	require.NoError(t, err)
	require.NotContains(t, string(b), "deadline", "no deadline, no field")
	b, err = json.Marshal(wire.StepOf(*h.step(timed.ID)))
	require.NoError(t, err)
	require.Contains(t, string(b), `"deadline":`)

	// The maintenance leader wakes for the deadline.
	next, ok, err := h.s.NextWake(h.ctx)
	require.NoError(t, err)
	require.True(t, ok)
	requireAt(t, claimedAt.Add(30*time.Second), &next)

	// A retry's new claim gets a new deadline; the attempt in between has
	// none.
	h.clock.Advance(10 * time.Second)
	require.NoError(t, h.complete(store.Outcome{Fence: timed.Fence, EngineID: "e1", State: state.StepReady, Error: "flaky"})[0])
	require.Nil(t, h.step(timed.ID).Deadline)
	_, ok, err = h.s.NextWake(h.ctx)
	require.NoError(t, err)
	require.False(t, ok, "nothing is due any more")
	reclaimedAt := h.clock.Now()
	again := h.claim("e1", 1)
	require.Len(t, again, 1)
	require.Equal(t, 2, again[0].Attempts)
	requireAt(t, reclaimedAt.Add(30*time.Second), again[0].Deadline)
	requireAt(t, reclaimedAt.Add(30*time.Second), h.step(timed.ID).Deadline)
	h.ok(again[0], `{}`)
	require.Nil(t, h.step(timed.ID).Deadline)
}

// testDeadlineCleared runs a step with a timeout out of running every way
// there is, and checks that no deadline is left behind.
func testDeadlineCleared(t *testing.T, h *harness) {
	tests := []struct {
		name  string
		leave func(engine string, c store.ClaimedStep)
		// want is the state the step is left in.
		want state.Step
	}{
		{"completed", func(engine string, c store.ClaimedStep) {
			require.NoError(t, h.complete(store.Outcome{Fence: c.Fence, EngineID: engine, State: state.StepCompleted})[0])
		}, state.StepCompleted},
		{"failed", func(engine string, c store.ClaimedStep) {
			require.NoError(t, h.complete(store.Outcome{Fence: c.Fence, EngineID: engine, State: state.StepFailed, Error: "timed out"})[0])
		}, state.StepFailed},
		{"retried later", func(engine string, c store.ClaimedStep) {
			require.NoError(t, h.complete(store.Outcome{Fence: c.Fence, EngineID: engine, State: state.StepWaiting,
				RunAt: h.clock.Now().Add(time.Hour), Error: "timed out"})[0])
		}, state.StepWaiting},
		{"snoozed", func(engine string, c store.ClaimedStep) {
			require.NoError(t, h.complete(store.Outcome{Fence: c.Fence, EngineID: engine, State: state.StepWaiting,
				RunAt: h.clock.Now().Add(time.Hour), Snooze: true})[0])
		}, state.StepWaiting},
		{"released lease", func(engine string, c store.ClaimedStep) {
			n, err := h.s.ReleaseLease(h.ctx, engine, c.Fence.LeaseID)
			require.NoError(t, err)
			require.Equal(t, 1, n)
		}, state.StepReady},
		{"released by a complete heartbeat", func(engine string, c store.ClaimedStep) {
			res, err := h.s.Heartbeat(h.ctx, store.HeartbeatParams{EngineID: engine, Now: h.clock.Now(), Complete: true,
				ClaimedBefore: h.clock.Now().Add(time.Second)})
			require.NoError(t, err)
			require.Equal(t, 1, res.Released)
		}, state.StepReady},
		{"cancelled", func(engine string, c store.ClaimedStep) {
			running, err := h.s.CancelTask(h.ctx, c.TaskID, engine, "stop")
			require.NoError(t, err)
			require.Equal(t, []store.Fence{c.Fence}, running)
		}, state.StepCancelled},
		{"reaped", func(engine string, c store.ClaimedStep) {
			n, err := h.s.Reap(h.ctx, h.clock.Now(), h.clock.Now(), []string{engine}, "maintainer")
			require.NoError(t, err)
			require.Equal(t, 1, n)
		}, state.StepReady},
	}
	for i, tt := range tests {
		engine, handler := fmt.Sprintf("engine-%d", i), fmt.Sprintf("handler-%d", i)
		h.register(engine)
		h.insert(store.TaskInsert{Steps: []store.StepInsert{{Name: "s", Handler: handler, MaxAttempts: 3, Timeout: time.Minute}}})
		got := h.claimWith(store.ClaimParams{EngineID: engine, Limit: 1, Handlers: []string{handler}})
		require.Len(t, got, 1, tt.name)
		require.NotNil(t, got[0].Deadline, tt.name)
		tt.leave(engine, got[0])
		st := h.step(got[0].ID)
		require.Equal(t, tt.want, st.State, tt.name)
		require.Nil(t, st.Deadline, "%s: leaving running clears the deadline", tt.name)
	}
	require.Empty(t, h.overdue(h.clock.Now().Add(24*time.Hour)), "no step that left running is overdue")
}

func testOverdueSteps(t *testing.T, h *harness) {
	h.register("e1")
	h.register("e2")
	require.Empty(t, h.overdue(h.clock.Now()))
	start := h.clock.Now()
	timeouts := []time.Duration{50 * time.Second, 10 * time.Second, 0, 30 * time.Second}
	var steps []store.StepInsert
	for i, d := range timeouts {
		steps = append(steps, store.StepInsert{Name: fmt.Sprintf("s%d", i), Handler: "h", MaxAttempts: 2, Timeout: d})
	}
	h.insert(store.TaskInsert{Namespace: "timed", Workflow: "wf-timed", Version: "3", Input: json.RawMessage(`{"big":"input"}`), Steps: steps})
	got := h.claim("e1", 2)
	got = append(got, h.claim("e2", 2)...)
	require.Len(t, got, 4)
	byName := map[string]store.ClaimedStep{}
	for _, c := range got {
		byName[c.Name] = c
	}

	tests := []struct {
		name  string
		at    time.Duration // after the claims
		limit int
		want  []string
	}{
		{"before any deadline", 9 * time.Second, 10, nil},
		{"at a deadline, not yet before now", 10 * time.Second, 10, nil},
		{"one overdue", 11 * time.Second, 10, []string{"s1"}},
		{"earliest deadline first", 31 * time.Second, 10, []string{"s1", "s3"}},
		{"every timed step, never the untimed one", time.Hour, 10, []string{"s1", "s3", "s0"}},
		{"bounded by limit", time.Hour, 2, []string{"s1", "s3"}},
		{"no limit, nothing", time.Hour, 0, nil},
	}
	for _, tt := range tests {
		over, err := h.s.OverdueSteps(h.ctx, start.Add(tt.at), tt.limit)
		require.NoError(t, err, tt.name)
		if len(tt.want) == 0 {
			require.Empty(t, over, tt.name)
			continue
		}
		require.Equal(t, tt.want, names(over), tt.name)
	}

	over := h.overdue(start.Add(11 * time.Second))
	require.Len(t, over, 1)
	o, c := over[0], byName["s1"]
	require.Equal(t, c.Fence, o.Fence)
	require.Equal(t, c.ID, o.ID)
	require.Equal(t, c.TaskID, o.TaskID)
	require.Equal(t, "s1", o.Name)
	require.Equal(t, 1, o.Index)
	require.Equal(t, "h", o.Handler)
	require.Equal(t, "timed", o.Namespace)
	require.Equal(t, "", o.Kind)
	require.Equal(t, state.StepRunning, o.State)
	require.Equal(t, 1, o.Attempts)
	require.Equal(t, 2, o.MaxAttempts)
	require.Equal(t, c.EngineID, o.EngineID)
	require.Equal(t, "wf-timed", o.Workflow)
	require.Equal(t, "3", o.Version)
	requireAt(t, start.Add(10*time.Second), o.Deadline)
	requireAt(t, start, o.StartedAt)
	require.Nil(t, o.Input, "the input is not loaded")
	require.Nil(t, o.Deps, "nor are the dependencies")

	// The engine records the timeout as a failure under the step's retry
	// policy; the fence keeps a stale one out.
	res := h.complete(store.Outcome{Fence: o.Fence, EngineID: o.EngineID, State: state.StepReady, Error: "timed out after 10s"})
	require.NoError(t, res[0])
	require.Equal(t, []string{"s3"}, names(h.overdue(start.Add(31*time.Second))), "a step that left running is not overdue")
	require.ErrorIs(t, h.complete(store.Outcome{Fence: o.Fence, EngineID: o.EngineID, State: state.StepFailed})[0], store.ErrStaleLease)

	// The store fails nothing itself.
	require.Equal(t, state.StepRunning, h.step(byName["s3"].ID).State)
}

func testBatchItemTimeout(t *testing.T, h *harness) {
	h.register("e1")
	steps := []store.StepInsert{{Name: "split", Handler: "h", Kind: store.KindBatch, MaxAttempts: 1}}
	h.insert(store.TaskInsert{Steps: steps})
	split := h.claim("e1", 1)
	require.Len(t, split, 1)
	require.Nil(t, split[0].Deadline)
	require.NoError(t, h.complete(store.Outcome{Fence: split[0].Fence, State: state.StepCompleted, Spawn: &store.Spawn{
		Template: store.StepInsert{Name: "work", Handler: "worker", MaxAttempts: 2, Timeout: 5 * time.Second},
		Items:    []json.RawMessage{json.RawMessage(`1`), json.RawMessage(`2`)},
	}})[0])
	claimedAt := h.clock.Now()
	items := h.claim("e1", 10)
	require.Len(t, items, 2)
	for _, c := range items {
		requireAt(t, claimedAt.Add(5*time.Second), c.Deadline, c.Name)
	}
	over := h.overdue(claimedAt.Add(6 * time.Second))
	require.ElementsMatch(t, []string{"split[0]", "split[1]"}, names(over))
	for _, o := range over {
		require.Equal(t, store.KindItem, o.Kind)
		require.Equal(t, "work", o.Template)
		require.NotEmpty(t, o.Item)
	}
}

func testHeldStep(t *testing.T, h *harness) {
	h.register("e1")
	h.insert(store.TaskInsert{Workflow: "wf-held", Version: "2", Input: json.RawMessage(`{"x":1}`), Steps: []store.StepInsert{
		{Name: "a", Handler: "h", MaxAttempts: 3, Timeout: time.Minute},
		{Name: "b", Handler: "h", MaxAttempts: 3, Deps: []int{0}},
	}})
	claimedAt := h.clock.Now()
	c := h.claim("e1", 1)[0]

	got, err := h.s.HeldStep(h.ctx, "e1", c.Fence)
	require.NoError(t, err)
	require.Equal(t, c.Fence, got.Fence)
	require.Equal(t, c.ID, got.ID)
	require.Equal(t, "a", got.Name)
	require.Equal(t, state.StepRunning, got.State)
	require.Equal(t, "e1", got.EngineID)
	require.Equal(t, 1, got.Attempts)
	require.Equal(t, "wf-held", got.Workflow)
	require.Equal(t, "2", got.Version)
	requireAt(t, claimedAt, got.StartedAt)
	requireAt(t, claimedAt.Add(time.Minute), got.Deadline)
	require.Nil(t, got.Input, "the input is not loaded")
	require.Nil(t, got.Deps)

	other := func(change func(f *store.Fence)) store.Fence {
		f := c.Fence
		change(&f)
		return f
	}
	tests := []struct {
		name   string
		engine string
		fence  store.Fence
		want   error
	}{
		{"another attempt", "e1", other(func(f *store.Fence) { f.Attempt++ }), store.ErrStaleLease},
		{"another lease", "e1", other(func(f *store.Fence) { f.LeaseID++ }), store.ErrStaleLease},
		{"another engine", "e2", c.Fence, store.ErrStaleLease},
		{"a step that is not running", "e1", other(func(f *store.Fence) { f.StepID = h.task(c.TaskID).Steps[1].ID; f.Attempt = 0 }), store.ErrStaleLease},
		{"an unknown step", "e1", other(func(f *store.Fence) { f.StepID = 987654321 }), store.ErrNotFound},
	}
	for _, tt := range tests {
		got, err := h.s.HeldStep(h.ctx, tt.engine, tt.fence)
		require.ErrorIs(t, err, tt.want, tt.name)
		require.Nil(t, got, tt.name)
		if tt.want == store.ErrStaleLease {
			require.NotErrorIs(t, err, store.ErrNotFound, tt.name)
			if tt.engine != "e1" {
				// The asker is not the holder: it learns that it does not
				// hold the step, not who does.
				require.NotContains(t, err.Error(), "e1", tt.name)
			}
		}
	}

	// Once the step has ended, its fence holds nothing.
	h.ok(c, `{}`)
	_, err = h.s.HeldStep(h.ctx, "e1", c.Fence)
	require.ErrorIs(t, err, store.ErrStaleLease)
}
