package model

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

func TestOverlapChecker(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		lines []string
		alive map[string]bool
		want  int
	}{
		{"one run", []string{"start 1 a 1 100 9", "end 1 a 1 100 9"}, nil, 0},
		{"runs one after the other", []string{"start 1 a 1 100 9", "end 1 a 1 100 9", "start 1 a 2 101 8", "end 1 a 2 101 8"}, nil, 0},
		{"two steps at once", []string{"start 1 a 1 100 9", "start 1 b 1 101 9", "end 1 a 1 100 9", "end 1 b 1 101 9"}, nil, 0},
		{"same step in two tasks", []string{"start 1 a 1 100 9", "start 2 a 1 101 9", "end 1 a 1 100 9", "end 2 a 1 101 9"}, nil, 0},
		{"overlap shown by a later end", []string{"start 1 a 1 100 9", "start 1 a 2 101 8", "end 1 a 1 100 9", "end 1 a 2 101 8"}, nil, 1},
		{"overlap with a run still alive", []string{"start 1 a 1 100 9", "start 1 a 2 101 8"}, map[string]bool{"100": true}, 1},
		{"a killed run (no end line, gone) is not an overlap", []string{"start 1 a 1 100 9", "start 1 a 2 101 8", "end 1 a 2 101 8"}, map[string]bool{}, 0},
		{"reported once", []string{"start 1 a 1 100 9", "start 1 a 2 101 8", "end 1 a 1 100 9"}, map[string]bool{"100": true}, 1},
		{"remote runs", []string{"start 3 r 1 r1 remote", "start 3 r 2 r2 remote", "end 3 r 1 r1 remote", "end 3 r 2 r2 remote"}, nil, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := &OverlapChecker{Alive: func(r string) bool { return tt.alive[r] }}
			got := c.Feed(tt.lines)
			require.Len(t, got, tt.want, "%v", got)
			require.Zero(t, c.Malformed())
		})
	}
	t.Run("fed line by line", func(t *testing.T) {
		t.Parallel()
		c := &OverlapChecker{}
		var got []Overlap
		for _, l := range []string{"start 1 a 1 100 9", "start 1 a 2 101 8", "end 1 a 2 101 8", "end 1 a 1 100 9"} {
			got = append(got, c.Feed([]string{l})...)
		}
		require.Len(t, got, 1)
		require.Equal(t, "100", got[0].First.Runner)
		require.Equal(t, "101", got[0].Second.Runner)
		require.Contains(t, got[0].String(), "two places at once")
	})
}

func TestIDTracker(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var ids IDTracker
	require.NoError(t, ids.Task(1, "ma/plain", at))
	require.NoError(t, ids.Task(1, "ma/plain", at), "the same task seen again")
	require.NoError(t, ids.Task(2, "ma/plain", at))
	err := ids.Task(1, "ma/plain", at.Add(time.Second))
	require.ErrorContains(t, err, "task id 1 reused")
	require.ErrorContains(t, ids.Task(2, "mb/sig", at), "task id 2 reused")

	require.NoError(t, ids.Step(10, 1, "a"))
	require.NoError(t, ids.Step(10, 1, "a"))
	require.ErrorContains(t, ids.Step(10, 3, "a"), "step id 10 reused")
}

func TestTaskStateAgrees(t *testing.T) {
	t.Parallel()
	step := func(st state.Step, kind string) store.Step { return store.Step{Name: "s", State: st, Kind: kind} }
	tests := []struct {
		name  string
		task  store.Task
		wrong bool
	}{
		{"pending, its first step ready", store.Task{State: state.TaskPending, Steps: []store.Step{step(state.StepReady, store.KindSignal)}}, false},
		{"pending, its first step due later", store.Task{State: state.TaskPending, Steps: []store.Step{step(state.StepWaiting, "")}}, false},
		{"pending, its first step waits for a signal", store.Task{State: state.TaskPending, Steps: []store.Step{step(state.StepWaiting, store.KindSignal)}}, true},
		{"pending, a step runs", store.Task{State: state.TaskPending, Steps: []store.Step{step(state.StepRunning, "")}}, true},
		{"running, waiting for a signal", store.Task{State: state.TaskRunning, Steps: []store.Step{step(state.StepWaiting, store.KindSignal)}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.wrong, TaskStateAgrees(&tt.task) != "")
		})
	}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	now := time.Now()
	later := now.Add(time.Minute)
	step := func(name string, st state.Step, kind string) store.Step {
		return store.Step{ID: int64(len(name)), Name: name, State: st, Kind: kind, Handler: "exec", Namespace: "ma"}
	}
	tests := []struct {
		name   string
		task   store.Task
		env    Env
		reason string
		ready  int
		unheld int
	}{
		{"running step", store.Task{State: state.TaskRunning, Steps: []store.Step{step("a", state.StepRunning, "")}}, Env{}, "running", 0, 0},
		{"waiting for a signal", store.Task{State: state.TaskRunning, Steps: []store.Step{step("w", state.StepWaiting, store.KindSignal)}}, Env{}, "signal", 0, 0},
		{"ready step, served", store.Task{State: state.TaskRunning, Steps: []store.Step{step("a", state.StepReady, "")}}, Env{}, "ready", 1, 0},
		{"a ready signal step must be taken up too", store.Task{State: state.TaskRunning, Steps: []store.Step{step("w", state.StepReady, store.KindSignal)}}, Env{}, "ready", 1, 0},
		{"ready, paused", store.Task{State: state.TaskRunning, Steps: []store.Step{step("a", state.StepReady, "")}}, Env{Paused: map[string]bool{"ma": true}}, "paused", 0, 0},
		{"ready, limited", store.Task{State: state.TaskRunning, Steps: []store.Step{step("a", state.StepReady, "")}}, Env{Limited: map[string]bool{"ma": true}}, "limited", 0, 0},
		{"ready later (backoff)", store.Task{State: state.TaskRunning, Steps: []store.Step{func() store.Step { s := step("a", state.StepReady, ""); s.RunAt = &later; return s }()}}, Env{Now: now}, "timer", 0, 0},
		{"remote handler, no remote worker", store.Task{State: state.TaskRunning, Steps: []store.Step{func() store.Step { s := step("r", state.StepReady, ""); s.Handler = "remote.work"; return s }()}}, Env{}, "unserved", 0, 0},
		{"running under a live engine", store.Task{State: state.TaskRunning, Steps: []store.Step{func() store.Step { s := step("a", state.StepRunning, ""); s.EngineID = "e1"; return s }()}}, Env{Live: map[string]bool{"e1": true}}, "running", 0, 0},
		{"running under a dead engine", store.Task{State: state.TaskRunning, Steps: []store.Step{func() store.Step { s := step("a", state.StepRunning, ""); s.EngineID = "e0"; return s }()}}, Env{Live: map[string]bool{"e1": true}}, "running", 0, 1},
		{"nothing to wait for", store.Task{State: state.TaskRunning, Steps: []store.Step{step("a", state.StepFailed, ""), step("b", state.StepPending, "")}}, Env{}, "", 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := Classify(&tt.task, tt.env)
			require.Equal(t, tt.reason, w.Reason, w.Detail)
			require.Len(t, w.Ready, tt.ready)
			require.Len(t, w.Unheld, tt.unheld)
		})
	}
}

func TestWaitTracker(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	w := &WaitTracker{Bound: 10 * time.Second}
	stranded := TaskWait{Task: 1, Detail: "task 1"}
	ready := TaskWait{Task: 2, Reason: "ready", Ready: []ReadyStep{{ID: 7, Name: "w", Attempt: 1, Kind: store.KindSignal}}}
	require.Empty(t, w.Observe(t0, []TaskWait{stranded, ready}))
	require.Empty(t, w.Observe(t0.Add(5*time.Second), []TaskWait{stranded, ready}))
	got := w.Observe(t0.Add(11*time.Second), []TaskWait{stranded, ready})
	require.Len(t, got, 2)
	require.Equal(t, InvStranded, got[0].Invariant)
	require.Equal(t, InvUnclaimed, got[1].Invariant)
	require.Empty(t, w.Observe(t0.Add(12*time.Second), []TaskWait{stranded, ready}), "each reported once")

	// A step claimed in between (gone from one observation) starts over.
	w2 := &WaitTracker{Bound: 10 * time.Second}
	require.Empty(t, w2.Observe(t0, []TaskWait{ready}))
	require.Empty(t, w2.Observe(t0.Add(5*time.Second), nil))
	require.Empty(t, w2.Observe(t0.Add(11*time.Second), []TaskWait{ready}))
	require.Empty(t, w2.Observe(t0.Add(12*time.Second), []TaskWait{{Task: 2, Reason: "signal"}}))

	// While every slot is busy a ready step waits for one: its clock
	// starts again, and runs out a bound after the last busy look.
	w3 := &WaitTracker{Bound: 10 * time.Second}
	require.Empty(t, w3.Observe(t0, []TaskWait{ready}))
	require.Empty(t, w3.ObserveSaturated(t0.Add(9*time.Second), []TaskWait{ready}))
	require.Empty(t, w3.Observe(t0.Add(18*time.Second), []TaskWait{ready}))
	got = w3.Observe(t0.Add(20*time.Second), []TaskWait{ready})
	require.Len(t, got, 1)
	require.Equal(t, InvUnclaimed, got[0].Invariant)

	// A running step whose holder is not live must be reclaimed within the
	// bound; a busy look does not excuse it, and one reclaimed in between
	// (gone from one observation) starts over.
	unheld := TaskWait{Task: 3, Reason: "running", Unheld: []UnheldStep{{ID: 9, Name: "a", Attempt: 1, Holder: "e0"}}}
	w4 := &WaitTracker{Bound: 10 * time.Second}
	require.Empty(t, w4.Observe(t0, []TaskWait{unheld}))
	require.Empty(t, w4.ObserveSaturated(t0.Add(9*time.Second), []TaskWait{unheld}))
	got = w4.Observe(t0.Add(11*time.Second), []TaskWait{unheld})
	require.Len(t, got, 1)
	require.Equal(t, InvUnheld, got[0].Invariant)
	require.Contains(t, got[0].Detail, "e0")
	require.Empty(t, w4.Observe(t0.Add(12*time.Second), []TaskWait{unheld}), "reported once")
	w5 := &WaitTracker{Bound: 10 * time.Second}
	require.Empty(t, w5.Observe(t0, []TaskWait{unheld}))
	require.Empty(t, w5.Observe(t0.Add(5*time.Second), []TaskWait{{Task: 3, Reason: "running"}}))
	require.Empty(t, w5.Observe(t0.Add(11*time.Second), []TaskWait{unheld}))
}

func TestAuditAgrees(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	task := &store.Task{ID: 1, State: state.TaskCompleted, Steps: []store.Step{{Name: "a", State: state.StepCompleted}, {Name: "b", State: state.StepSkipped}}}
	good := []store.AuditEntry{
		{ID: 1, From: "", To: "pending", At: t0},
		{ID: 2, Step: "a", From: "", To: "ready", At: t0},
		{ID: 5, Step: "a", From: "running", To: "completed", At: t0.Add(2 * time.Second)},
		{ID: 6, Step: "b", From: "pending", To: "skipped", At: t0.Add(2 * time.Second)},
		{ID: 7, From: "running", To: "completed", At: t0.Add(2 * time.Second)},
		// Claims are recorded late: a higher id, an earlier time.
		{ID: 9, Step: "a", From: "ready", To: "running", At: t0.Add(time.Second)},
		{ID: 10, From: "pending", To: "running", At: t0.Add(time.Second)},
	}
	require.Empty(t, AuditAgrees(task, good))
	bad := append(good[:len(good):len(good)], store.AuditEntry{ID: 11, Step: "a", From: "completed", To: "ready", At: t0.Add(3 * time.Second)})
	got := AuditAgrees(task, bad)
	require.Len(t, got, 1)
	require.Contains(t, got[0], "step a is completed")
	task.State = state.TaskFailed
	require.Len(t, AuditAgrees(task, good), 1)
}

func TestGenerateIsAFunctionOfTheSeed(t *testing.T) {
	t.Parallel()
	a, b := Generate(42, 500), Generate(42, 800)
	require.Equal(t, a, b[:500], "a longer sequence extends a shorter one")
	require.NotEqual(t, a, Generate(43, 500))
	seen := map[string]bool{}
	for _, o := range Generate(1, 20000) {
		seen[o.Kind] = true
	}
	require.Len(t, seen, len(Kinds()), "every kind of op is generated")

	var buf bytes.Buffer
	require.NoError(t, FormatOps(&buf, a))
	back, err := ParseOps(strings.NewReader("# a comment\n\n" + buf.String()))
	require.NoError(t, err)
	require.Equal(t, a, back)
	back, err = ParseOps(strings.NewReader("3: cancel 7\n"))
	require.NoError(t, err)
	require.Equal(t, []Op{{Kind: OpCancel, Arg: 7}}, back)
	_, err = ParseOps(strings.NewReader("explode 1\n"))
	require.ErrorContains(t, err, `unknown operation "explode"`)
	_, err = ParseOps(strings.NewReader("cancel x\n"))
	require.ErrorContains(t, err, "line 1")
}

func TestShrink(t *testing.T) {
	t.Parallel()
	ops := Generate(7, 200)
	// The "bug" needs a stop-engine after a submit-long, and a signal
	// somewhere: the minimal failing sequence has those three ops.
	fails := func(_ context.Context, seq []Op) (bool, error) {
		long, stop, sig := false, false, false
		for _, o := range seq {
			switch {
			case o.Kind == OpSubmitLong:
				long = true
			case o.Kind == OpStopEngine && long:
				stop = true
			case o.Kind == OpSignal:
				sig = true
			}
		}
		return stop && sig, nil
	}
	ops = append(ops, Op{Kind: OpSubmitLong, Arg: 1}, Op{Kind: OpStopEngine, Arg: 2})
	ok, _ := fails(context.Background(), ops)
	require.True(t, ok)
	got, err := Shrink(context.Background(), ops, time.Minute, fails)
	require.NoError(t, err)
	require.Len(t, got, 3, "%v", got)
	ok, _ = fails(context.Background(), got)
	require.True(t, ok, "the shrunk sequence still fails")

	// A budget that runs out returns the shortest failing sequence so far.
	calls := 0
	slow := func(ctx context.Context, seq []Op) (bool, error) { calls++; return fails(ctx, seq) }
	got, err = Shrink(context.Background(), ops, time.Nanosecond, slow)
	require.NoError(t, err)
	require.LessOrEqual(t, calls, 1)
	ok, _ = fails(context.Background(), got)
	require.True(t, ok)
}
