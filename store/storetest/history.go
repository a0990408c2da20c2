package storetest

import (
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

var historyTests = []struct {
	name string
	fn   func(*testing.T, *harness)
}{
	{"HistoryInOrderWithFilters", testHistory},
	{"HistoryMissesNothingUnderConcurrentWrites", testHistoryConcurrent},
	{"HistoryResumesAfterEveryEntry", testHistoryResume},
	{"ClaimRecordedWithItsRun", testClaimRecorded},
	{"HistoryRefusesACursorBeyondItsEnd", testHistoryBeyondEnd},
}

// testHistoryBeyondEnd: with CheckAfter, a cursor no event follows is
// accepted where the history has reached it (its end, the last event's),
// and refused beyond the newest event, as one from a database since
// restored or replaced is; without CheckAfter nothing more is read.
func testHistoryBeyondEnd(t *testing.T, h *harness) {
	h.insert(store.TaskInsert{Namespace: "beyond"})
	events := h.history(store.HistoryQuery{Namespace: "beyond"}, 2)
	last := events[len(events)-1].Cursor
	end, err := h.s.HistoryEnd(h.ctx)
	require.NoError(t, err)
	for _, c := range []string{last, end} {
		_, err := h.s.History(h.ctx, store.HistoryQuery{After: c, CheckAfter: true})
		require.NoError(t, err, "cursor %q", c)
	}
	// The cursor's leading number pushed far ahead: a transaction id (on
	// PostgreSQL) or a row id no one used.
	head, rest, _ := strings.Cut(end, ".")
	n, err := strconv.ParseInt(head, 10, 64)
	require.NoError(t, err)
	future := strconv.FormatInt(n+1_000_000, 10) + "." + rest
	_, err = h.s.History(h.ctx, store.HistoryQuery{After: future, CheckAfter: true})
	require.ErrorIs(t, err, store.ErrInvalid, "cursor %q", future)
	_, err = h.s.History(h.ctx, store.HistoryQuery{After: future})
	require.NoError(t, err, "unchecked, it reads nothing")
}

// history reads the events after q.After, page by page, until there are
// want of them (or fails after a deadline). The history may lag behind
// commits: on PostgreSQL it reaches a transaction's entries once every
// older transaction in the cluster has ended.
func (h *harness) history(q store.HistoryQuery, want int) []store.HistoryEvent {
	h.t.Helper()
	var out []store.HistoryEvent
	deadline := time.Now().Add(20 * time.Second)
	for {
		page, err := h.s.History(h.ctx, q)
		require.NoError(h.t, err)
		out = append(out, page...)
		if len(page) > 0 {
			q.After = page[len(page)-1].Cursor
		}
		if len(out) >= want && len(page) == 0 {
			return out
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("history: %d events after %q, want %d", len(out), q.After, want)
		}
		if len(page) == 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// auditCount counts the audit entries of tasks.
func (h *harness) auditCount(tasks ...int64) int {
	h.t.Helper()
	n := 0
	for _, id := range tasks {
		trail, err := h.s.Audit(h.ctx, id)
		require.NoError(h.t, err)
		n += len(trail)
	}
	return n
}

func testHistory(t *testing.T, h *harness) {
	start, err := h.s.HistoryEnd(h.ctx)
	require.NoError(t, err)
	a := h.insert(store.TaskInsert{Namespace: "shop", Workflow: "checkout", Version: "1", Steps: chain("pay", "ship")})[0].Task.ID
	b := h.insert(store.TaskInsert{Namespace: "mail", Workflow: "send", Version: "1"})[0].Task.ID
	pay := h.claimWith(store.ClaimParams{EngineID: "e1", Limit: 1, Namespaces: []string{"shop"}})[0]
	h.ok(pay, `{}`)

	all := h.history(store.HistoryQuery{After: start, Limit: 2}, h.auditCount(a, b))
	var types []string
	for _, e := range all {
		if e.TaskID == a {
			types = append(types, e.Type)
		}
		require.NotEmpty(t, e.Cursor)
		require.False(t, e.At.IsZero())
	}
	require.Equal(t, []string{"task.submitted", "step.ready", "step.pending", "step.claimed", "task.started", "step.completed", "step.ready"}, types)
	seen := map[string]bool{}
	for _, e := range all {
		require.False(t, seen[e.Cursor], "cursors are unique")
		seen[e.Cursor] = true
	}
	claimed := all[indexOf(all, func(e store.HistoryEvent) bool { return e.Type == "step.claimed" })]
	require.Equal(t, "pay", claimed.Step)
	require.Equal(t, "shop/checkout", claimed.Workflow)
	require.Equal(t, "shop", claimed.Namespace)
	require.Equal(t, 1, claimed.Attempt)
	require.Equal(t, "e1", claimed.EngineID)

	// Resuming after an event returns exactly what follows it.
	mid := all[2].Cursor
	require.Equal(t, all[3:], h.history(store.HistoryQuery{After: mid}, len(all)-3))

	for _, tc := range []struct {
		name string
		q    store.HistoryQuery
		task int64
	}{
		{"namespace", store.HistoryQuery{After: start, Namespace: "mail"}, b},
		{"workflow", store.HistoryQuery{After: start, Workflow: "shop/checkout"}, a},
		{"workflow by name", store.HistoryQuery{After: start, Workflow: "checkout"}, a},
		{"workflow by name in its namespace", store.HistoryQuery{After: start, Namespace: "shop", Workflow: "checkout"}, a},
		{"task", store.HistoryQuery{After: start, TaskID: b}, b},
		{"namespaces", store.HistoryQuery{After: start, Namespaces: []string{"mail", "other"}}, b},
		{"namespaces and a workflow", store.HistoryQuery{After: start, Namespaces: []string{"shop"}, Workflow: "checkout"}, a},
	} {
		got := h.history(tc.q, h.auditCount(tc.task))
		require.Len(t, got, h.auditCount(tc.task), tc.name)
		for _, e := range got {
			require.Equal(t, tc.task, e.TaskID, tc.name)
		}
	}

	none, err := h.s.History(h.ctx, store.HistoryQuery{After: start, Namespaces: []string{}})
	require.NoError(t, err)
	require.Empty(t, none, "no namespace reads nothing")

	// The end is after everything so far; what comes later follows it.
	end, err := h.s.HistoryEnd(h.ctx)
	require.NoError(t, err)
	before := h.auditCount(b)
	_, err = h.s.CancelTask(h.ctx, b, "cli:alice", "not needed")
	require.NoError(t, err)
	after := h.history(store.HistoryQuery{After: end, TaskID: b}, h.auditCount(b)-before)
	require.NotEmpty(t, after)
	last := after[indexOf(after, func(e store.HistoryEvent) bool { return e.Step == "" })]
	require.Equal(t, "task.cancelled", last.Type)
	require.Equal(t, "cli:alice", last.EngineID)
	require.Equal(t, string(state.TaskCancelled), last.To)

	for _, q := range []store.HistoryQuery{{After: "x"}, {After: "-1"}, {After: "1.2.3.4"}, {After: "1.1.0"}, {After: "1.1.8192"}, {Limit: -1}, {Limit: 1001}, {Workflow: "a/b/c"}, {Workflow: "shop/checkout@1"}} {
		_, err := h.s.History(h.ctx, q)
		require.ErrorIs(t, err, store.ErrInvalid, "%+v", q)
	}
}

// testHistoryResume: a task starting with its first claimed step and ending
// with its last is written on fewer rows than it has entries; the audit
// trail still lists every transition once, in order, each with its own ID,
// and the history resumed after any entry returns exactly the entries that
// follow it.
func testHistoryResume(t *testing.T, h *harness) {
	type move struct{ step, from, to string }
	for _, tc := range []struct {
		namespace string
		steps     []string // claimed together, then finished together
		moves     []move
	}{
		{"resume", []string{"only"}, []move{
			{"", "", "pending"}, {"only", "", "ready"},
			{"only", "ready", "running"}, {"", "pending", "running"},
			{"only", "running", "completed"}, {"", "running", "completed"},
		}},
		// A run's claim is recorded with its end: the three claimed
		// together and finished together on one row.
		{"resume3", []string{"x", "y", "z"}, []move{
			{"", "", "pending"}, {"x", "", "ready"}, {"y", "", "ready"}, {"z", "", "ready"},
			{"x", "ready", "running"}, {"", "pending", "running"}, {"y", "ready", "running"}, {"z", "ready", "running"},
			{"x", "running", "completed"}, {"y", "running", "completed"}, {"z", "running", "completed"}, {"", "running", "completed"},
		}},
	} {
		start, err := h.s.HistoryEnd(h.ctx)
		require.NoError(t, err)
		var steps []store.StepInsert
		for _, name := range tc.steps {
			steps = append(steps, store.StepInsert{Name: name, Handler: "h", MaxAttempts: 1})
		}
		id := h.insert(store.TaskInsert{Namespace: tc.namespace, Workflow: "one", Version: "1", Steps: steps})[0].Task.ID
		c := h.claimWith(store.ClaimParams{EngineID: "e1", Limit: len(steps), Namespaces: []string{tc.namespace}})
		require.Len(t, c, len(steps))
		var outcomes []store.Outcome
		for _, cl := range c {
			outcomes = append(outcomes, store.Outcome{Fence: cl.Fence, EngineID: "e1", State: state.StepCompleted, Result: json.RawMessage(`{}`)})
		}
		for _, err := range h.complete(outcomes...) {
			require.NoError(t, err)
		}

		trail, err := h.s.Audit(h.ctx, id)
		require.NoError(t, err)
		var moves []move
		ids := map[int64]bool{}
		for i, e := range trail {
			moves = append(moves, move{e.Step, e.From, e.To})
			require.False(t, ids[e.ID], "entry IDs are unique")
			ids[e.ID] = true
			if i > 0 {
				require.Greater(t, e.ID, trail[i-1].ID, "entry IDs grow in the trail's order")
			}
			if e.Step != "" && e.To == string(state.StepRunning) {
				require.Equal(t, 1, e.Attempt, "a claim's entry has its attempt")
				require.Equal(t, "claimed", e.Reason)
			}
		}
		require.Equal(t, tc.moves, moves)
		claimed := len(tc.steps) + 1
		require.Equal(t, "first step claimed", trail[claimed+1].Reason)
		require.Equal(t, "e1", trail[claimed+1].EngineID)
		require.Equal(t, "every step finished", trail[len(trail)-1].Reason)

		q := store.HistoryQuery{After: start, Namespace: tc.namespace, Limit: 1}
		all := h.history(q, len(trail))
		require.Len(t, all, len(trail), "one page of one entry at a time")
		for i, e := range all {
			require.Equal(t, trail[i], e.AuditEntry, "entry %d", i)
		}
		for i, e := range all {
			q.After, q.Limit = e.Cursor, 1000
			rest := h.history(q, len(all)-i-1)
			require.Len(t, rest, len(all)-i-1, "after entry %d (%s)", i, e.Cursor)
			for j, r := range rest {
				require.Equal(t, all[i+1+j].AuditEntry, r.AuditEntry, "after entry %d (%s)", i, e.Cursor)
			}
		}
	}
	end, err := h.s.HistoryEnd(h.ctx)
	require.NoError(t, err)
	for _, ns := range []string{"resume", "resume3"} {
		page, err := h.s.History(h.ctx, store.HistoryQuery{After: end, Namespace: ns})
		require.NoError(t, err)
		require.Empty(t, page, "nothing after the end")
	}
}

// testHistoryConcurrent: while writers commit concurrently, a reader that
// follows the history by cursor sees every audit entry exactly once.
func testHistoryConcurrent(t *testing.T, h *harness) {
	start, err := h.s.HistoryEnd(h.ctx)
	require.NoError(t, err)
	const writers, perWriter = 4, 25
	var wg sync.WaitGroup
	ids := make(chan int64, writers*perWriter)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perWriter; i++ {
				res, err := h.s.InsertTasks(h.ctx, []store.TaskInsert{{Namespace: "conc", Workflow: "wf", Version: "1", Steps: chain("a", "b")}})
				if err != nil {
					t.Error(err)
					return
				}
				ids <- res[0].Task.ID
			}
		}()
	}
	writing := make(chan struct{})
	go func() { wg.Wait(); close(writing) }()

	seen := map[int64]int{}
	cursor := start
	read := func() int {
		page, err := h.s.History(h.ctx, store.HistoryQuery{After: cursor, Namespace: "conc", Limit: 7})
		require.NoError(t, err)
		for _, e := range page {
			seen[e.ID]++
			cursor = e.Cursor
		}
		return len(page)
	}
	for done := false; !done; {
		select {
		case <-writing:
			done = true
		default:
			read()
		}
	}
	close(ids)
	var tasks []int64
	for id := range ids {
		tasks = append(tasks, id)
	}
	want := h.auditCount(tasks...)
	for deadline := time.Now().Add(20 * time.Second); len(seen) < want && time.Now().Before(deadline); {
		if read() == 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	for _, id := range tasks {
		trail, err := h.s.Audit(h.ctx, id)
		require.NoError(t, err)
		for _, e := range trail {
			require.Equal(t, 1, seen[e.ID], "audit entry %d (task %d, %s) seen once", e.ID, id, e.To)
		}
	}
	require.Len(t, seen, want)
}

func indexOf(events []store.HistoryEvent, f func(store.HistoryEvent) bool) int {
	for i, e := range events {
		if f(e) {
			return i
		}
	}
	return -1
}

// testClaimRecorded: a claim writes no audit row. The audit trail shows a
// running step's claim from the step's row (with no ID yet); the history
// gets it, with its task's start where the claim started the task, on the
// row that ends the run, or at a heartbeat of the engine that runs it,
// once either way.
func testClaimRecorded(t *testing.T, h *harness) {
	h.register("e1")
	start, err := h.s.HistoryEnd(h.ctx)
	require.NoError(t, err)
	q := store.HistoryQuery{After: start, Namespace: "fold"}
	id := h.insert(store.TaskInsert{Namespace: "fold", Workflow: "wf", Version: "1", Steps: []store.StepInsert{
		{Name: "a", Handler: "h", MaxAttempts: 1}, {Name: "b", Handler: "h", MaxAttempts: 1}}})[0].Task.ID
	claimedAt := h.clock.Now()
	c := h.claimWith(store.ClaimParams{EngineID: "e1", Limit: 2, Namespaces: []string{"fold"}})
	require.Len(t, c, 2)
	a, b := c[0], c[1]
	if a.Name != "a" {
		a, b = b, a
	}
	// A later task's submission marks how far the history has read.
	marker := h.insert(store.TaskInsert{Namespace: "fold", Workflow: "wf", Version: "1"})[0].Task.ID
	types := func(events []store.HistoryEvent) []string {
		var out []string
		for _, e := range events {
			out = append(out, e.Type+" "+e.Step)
		}
		return out
	}
	next := func(want int) []store.HistoryEvent {
		t.Helper()
		got := h.history(q, want)
		require.Len(t, got, want, "%v", types(got))
		q.After = got[len(got)-1].Cursor
		return got
	}
	require.Equal(t, []string{"task.submitted ", "step.ready a", "step.ready b", "task.submitted ", "step.ready only"}, types(next(5)),
		"no claim yet, task %d", marker)

	claim := func(e store.AuditEntry, step string) {
		t.Helper()
		require.Equal(t, store.AuditEntry{TaskID: id, Step: step, From: "ready", To: "running", At: claimedAt.Truncate(time.Microsecond),
			Attempt: 1, EngineID: "e1", Reason: "claimed"}, store.AuditEntry{TaskID: e.TaskID, Step: e.Step, From: e.From, To: e.To,
			At: e.At.UTC(), Attempt: e.Attempt, EngineID: e.EngineID, Reason: e.Reason})
	}
	// The task's start rides on the claim of one of the two, right after
	// it; that one runs to its end first here, the other lasts.
	trail, err := h.s.Audit(h.ctx, id)
	require.NoError(t, err)
	require.Len(t, trail, 6)
	first, last := a, b
	started := trail[4]
	claim(trail[3], "a")
	if trail[4].Step == "b" {
		first, last, started = b, a, trail[5]
		claim(trail[4], "b")
	} else {
		claim(trail[5], "b")
	}
	require.Equal(t, []any{"", "pending", "running", "first step claimed"}, []any{started.Step, started.From, started.To, started.Reason})
	for _, e := range trail[3:] {
		require.Zero(t, e.ID, "not recorded yet")
	}

	h.clock.Advance(time.Second)
	h.ok(first, `{}`)
	got := next(3)
	require.Equal(t, []string{"step.claimed " + first.Name, "task.started ", "step.completed " + first.Name}, types(got))
	claim(got[0].AuditEntry, first.Name)
	require.Equal(t, claimedAt.Add(time.Second).Truncate(time.Microsecond), got[2].At.UTC())
	trail, err = h.s.Audit(h.ctx, id)
	require.NoError(t, err)
	require.Len(t, trail, 7)
	claim(trail[6], last.Name)
	require.Zero(t, trail[6].ID)
	require.NotZero(t, trail[5].ID)

	// A run that lasts: its engine's heartbeat records its claim.
	h.clock.Advance(time.Second)
	res, err := h.s.Heartbeat(h.ctx, store.HeartbeatParams{EngineID: "e1", Now: h.clock.Now(), Held: []store.Fence{last.Fence}})
	require.NoError(t, err)
	require.Empty(t, res.Lost)
	got = next(1)
	require.Equal(t, []string{"step.claimed " + last.Name}, types(got))
	claim(got[0].AuditEntry, last.Name)
	_, err = h.s.Heartbeat(h.ctx, store.HeartbeatParams{EngineID: "e1", Now: h.clock.Now(), Held: []store.Fence{last.Fence}})
	require.NoError(t, err)

	h.ok(last, `{}`)
	require.Equal(t, []string{"step.completed " + last.Name, "task.completed "}, types(next(2)), "the claim once")
	trail, err = h.s.Audit(h.ctx, id)
	require.NoError(t, err)
	require.Len(t, trail, 9)
	for i, e := range trail {
		if i > 0 {
			require.Greater(t, e.ID, trail[i-1].ID, "entry %d", i)
		}
	}

	// A heartbeat records a task's start with the claim that made it: the
	// marker's.
	claimedAt = h.clock.Now()
	c = h.claimWith(store.ClaimParams{EngineID: "e1", Limit: 1, Namespaces: []string{"fold"}})
	require.Len(t, c, 1)
	require.Equal(t, marker, c[0].TaskID)
	h.clock.Advance(time.Second)
	_, err = h.s.Heartbeat(h.ctx, store.HeartbeatParams{EngineID: "e1", Now: h.clock.Now(), Held: []store.Fence{c[0].Fence}})
	require.NoError(t, err)
	got = next(2)
	require.Equal(t, []string{"step.claimed only", "task.started "}, types(got))
	require.Equal(t, marker, got[1].TaskID)
	require.Equal(t, claimedAt.Truncate(time.Microsecond), got[1].At.UTC(), "at the claim's time")
	h.ok(c[0], `{}`)
	require.Equal(t, []string{"step.completed only", "task.completed "}, types(next(2)))
}
