package storetest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// The behaviour the REST server relies on: API keys, operator actions on
// single steps, queue counts and claims restricted to namespaces.

func testAPIKeys(t *testing.T, h *harness) {
	k := store.APIKey{ID: "k1", Name: "ci", Hash: []byte{1, 2, 3, 255}, Permissions: []string{"tasks:read@shop,billing", "tasks:create"}}
	require.NoError(t, h.s.CreateAPIKey(h.ctx, k))
	require.ErrorIs(t, h.s.CreateAPIKey(h.ctx, k), store.ErrConflict)
	got, err := h.s.GetAPIKey(h.ctx, "k1")
	require.NoError(t, err)
	require.Equal(t, "ci", got.Name)
	require.Equal(t, k.Hash, got.Hash)
	require.Equal(t, k.Permissions, got.Permissions)
	require.Nil(t, got.RevokedAt)
	require.True(t, got.CreatedAt.Equal(h.clock.Now()), "created at the store's time")
	_, err = h.s.GetAPIKey(h.ctx, "nope")
	require.ErrorIs(t, err, store.ErrNotFound)

	h.clock.Advance(time.Second)
	require.NoError(t, h.s.CreateAPIKey(h.ctx, store.APIKey{ID: "k2", Name: "ops", Hash: []byte{9}, Permissions: []string{"admin:*"}}))
	list, err := h.s.ListAPIKeys(h.ctx)
	require.NoError(t, err)
	require.Len(t, list, 2)
	require.Equal(t, "k1", list[0].ID, "oldest first")

	require.NoError(t, h.s.RevokeAPIKey(h.ctx, "k1"))
	require.NoError(t, h.s.RevokeAPIKey(h.ctx, "k1"), "revoking twice is a no-op")
	require.ErrorIs(t, h.s.RevokeAPIKey(h.ctx, "nope"), store.ErrNotFound)
	got, err = h.s.GetAPIKey(h.ctx, "k1")
	require.NoError(t, err)
	require.NotNil(t, got.RevokedAt)
	other, err := h.s.GetAPIKey(h.ctx, "k2")
	require.NoError(t, err)
	require.Nil(t, other.RevokedAt, "revoking one key leaves the others")
}

func testGetStep(t *testing.T, h *harness) {
	id := h.insert(store.TaskInsert{Steps: chain("a", "b")})[0].Task.ID
	task := h.task(id)
	st, err := h.s.GetStep(h.ctx, task.Steps[1].ID)
	require.NoError(t, err)
	require.Equal(t, "b", st.Name)
	require.Equal(t, id, st.TaskID)
	require.Equal(t, []string{"a"}, st.DependsOn)
	require.Equal(t, state.StepPending, st.State)
	_, err = h.s.GetStep(h.ctx, 987654)
	require.ErrorIs(t, err, store.ErrNotFound)
}

// failMiddle inserts a -> b -> c plus an independent side step, completes a
// and side, and fails b permanently: the task fails with c skipped.
func (h *harness) failMiddle() (taskID int64, b store.Step) {
	h.t.Helper()
	steps := append(chain("a", "b", "c"), store.StepInsert{Name: "side", Handler: "h", MaxAttempts: 1})
	taskID = h.insert(store.TaskInsert{Steps: steps})[0].Task.ID
	for _, c := range h.claim("e1", 10) {
		h.ok(c, `{"from":"`+c.Name+`"}`)
	}
	bc := h.claim("e1", 1)[0]
	require.Equal(h.t, "b", bc.Name)
	require.NoError(h.t, h.complete(store.Outcome{Fence: bc.Fence, State: state.StepFailed, Error: "bad"})[0])
	task := h.task(taskID)
	require.Equal(h.t, state.TaskFailed, task.State)
	require.Equal(h.t, state.StepSkipped, states(task)["c"])
	return taskID, task.Steps[1]
}

func testRetryStep(t *testing.T, h *harness) {
	id, b := h.failMiddle()
	require.ErrorIs(t, h.s.RetryStep(h.ctx, 424242, "", ""), store.ErrNotFound)
	require.ErrorIs(t, h.s.RetryStep(h.ctx, h.task(id).Steps[0].ID, "", ""), store.ErrConflict, "a completed step is not retried")
	require.NoError(t, h.s.RetryStep(h.ctx, b.ID, "cli:alice", "upstream fixed"))
	trail, err := h.s.Audit(h.ctx, id)
	require.NoError(t, err)
	var retried []store.AuditEntry
	for _, e := range trail {
		if e.Step == "b" && e.From == string(state.StepFailed) && e.To == string(state.StepReady) {
			retried = append(retried, e)
		}
	}
	require.Len(t, retried, 1, "%+v", trail)
	require.Equal(t, "cli:alice", retried[0].EngineID, "the actor is recorded")
	require.Equal(t, "upstream fixed", retried[0].Reason)
	task := h.task(id)
	require.Equal(t, state.TaskRunning, task.State)
	require.Empty(t, task.Error)
	require.Equal(t, map[string]state.Step{"a": state.StepCompleted, "b": state.StepReady, "c": state.StepPending, "side": state.StepCompleted}, states(task))
	b2 := h.claim("e1", 1)[0]
	require.Equal(t, "b", b2.Name)
	require.Equal(t, 1, b2.Attempts, "fresh attempts")
	require.JSONEq(t, `{"from":"a"}`, string(b2.Deps["a"]))
	h.ok(b2, `{"from":"b"}`)
	c := h.claim("e1", 1)[0]
	require.Equal(t, "c", c.Name)
	h.ok(c, `{}`)
	require.Equal(t, state.TaskCompleted, h.task(id).State)
	require.ErrorIs(t, h.s.RetryStep(h.ctx, b.ID, "", ""), store.ErrConflict)
}

func testRetryStepOtherFailure(t *testing.T, h *harness) {
	// join depends on x and y; both fail. Retrying x alone leaves join
	// skipped (y still failed) and the task running until x ends, then
	// failed again.
	steps := []store.StepInsert{
		{Name: "x", Handler: "h", MaxAttempts: 1},
		{Name: "y", Handler: "h", MaxAttempts: 1},
		{Name: "join", Handler: "h", MaxAttempts: 1, Deps: []int{0, 1}},
	}
	id := h.insert(store.TaskInsert{Steps: steps})[0].Task.ID
	for _, c := range h.claim("e1", 10) {
		require.NoError(t, h.complete(store.Outcome{Fence: c.Fence, State: state.StepFailed, Error: "no"})[0])
	}
	task := h.task(id)
	require.Equal(t, state.TaskFailed, task.State)
	require.NoError(t, h.s.RetryStep(h.ctx, task.Steps[0].ID, "", ""))
	task = h.task(id)
	require.Equal(t, state.TaskRunning, task.State)
	require.Equal(t, map[string]state.Step{"x": state.StepReady, "y": state.StepFailed, "join": state.StepSkipped}, states(task))
	h.ok(h.claim("e1", 1)[0], `{}`)
	require.Equal(t, state.TaskFailed, h.task(id).State, "y is still failed")
	require.Empty(t, h.claim("e1", 10), "join stays skipped")
}

func testResolveFailed(t *testing.T, h *harness) {
	id, b := h.failMiddle()
	require.NoError(t, h.s.ResolveStep(h.ctx, store.StepResolution{StepID: b.ID, EngineID: "op"}))
	task := h.task(id)
	require.Equal(t, state.TaskRunning, task.State)
	require.Equal(t, map[string]state.Step{"a": state.StepCompleted, "b": state.StepResolved, "c": state.StepReady, "side": state.StepCompleted}, states(task))
	c := h.claim("e1", 1)[0]
	require.Equal(t, "c", c.Name)
	h.ok(c, `{}`)
	require.Equal(t, state.TaskCompleted, h.task(id).State)
	trail, err := h.s.Audit(h.ctx, id)
	require.NoError(t, err)
	found := false
	for _, e := range trail {
		if e.Step == "b" && e.To == string(state.StepResolved) {
			found = true
			require.Equal(t, "op", e.EngineID)
		}
	}
	require.True(t, found, "the resolution is in the audit trail")
}

func testResolveWithResult(t *testing.T, h *harness) {
	// Resolving a ready step with a result: its dependent sees the result.
	id := h.insert(store.TaskInsert{Steps: chain("manual", "next")})[0].Task.ID
	manual := h.task(id).Steps[0]
	require.NoError(t, h.s.ResolveStep(h.ctx, store.StepResolution{StepID: manual.ID, Result: json.RawMessage(`{"approved":true}`), Reason: "approved by hand"}))
	next := h.claim("e1", 1)
	require.Len(t, next, 1)
	require.Equal(t, "next", next[0].Name)
	require.JSONEq(t, `{"approved":true}`, string(next[0].Deps["manual"]))
	require.Equal(t, state.TaskRunning, h.task(id).State, "the claim of a step whose dependencies never ran starts its task")
	h.ok(next[0], `{}`)
	task := h.task(id)
	require.Equal(t, state.TaskCompleted, task.State)
	require.JSONEq(t, `{"approved":true}`, string(task.Steps[0].Result))

	// A failed leaf step resolved with nothing else left completes its task.
	leaf := h.insert(store.TaskInsert{Steps: []store.StepInsert{{Name: "only", Handler: "h", MaxAttempts: 1}}})[0].Task.ID
	c := h.claim("e1", 1)[0]
	require.NoError(t, h.complete(store.Outcome{Fence: c.Fence, State: state.StepFailed, Error: "x"})[0])
	require.Equal(t, state.TaskFailed, h.task(leaf).State)
	require.NoError(t, h.s.ResolveStep(h.ctx, store.StepResolution{StepID: c.ID}))
	task = h.task(leaf)
	require.Equal(t, state.TaskCompleted, task.State)
	require.Empty(t, task.Error)
}

func testResolveRefused(t *testing.T, h *harness) {
	id := h.insert(store.TaskInsert{Steps: chain("a", "b")})[0].Task.ID
	a := h.claim("e1", 1)[0]
	require.ErrorIs(t, h.s.ResolveStep(h.ctx, store.StepResolution{StepID: a.ID}), store.ErrConflict, "a running step is not resolved")
	h.ok(a, `{}`)
	require.ErrorIs(t, h.s.ResolveStep(h.ctx, store.StepResolution{StepID: a.ID}), store.ErrConflict, "a completed step is not resolved")
	require.ErrorIs(t, h.s.ResolveStep(h.ctx, store.StepResolution{StepID: 777777}), store.ErrNotFound)
	_, err := h.s.CancelTask(h.ctx, id, "", "")
	require.NoError(t, err)
	require.ErrorIs(t, h.s.ResolveStep(h.ctx, store.StepResolution{StepID: h.task(id).Steps[1].ID}), store.ErrConflict, "a cancelled task's step")
}

func testQueueDepth(t *testing.T, h *harness) {
	h.insert(store.TaskInsert{Namespace: "a", Steps: chain("x", "y")}, store.TaskInsert{Namespace: "a"}, store.TaskInsert{Namespace: "b"})
	h.claimWith(store.ClaimParams{EngineID: "e1", Limit: 1, Namespaces: []string{"b"}})
	got, err := h.s.QueueDepth(h.ctx)
	require.NoError(t, err)
	counts := map[string]int{}
	for _, c := range got {
		counts[c.Namespace+"/"+string(c.State)] = c.Count
	}
	require.Equal(t, map[string]int{"a/ready": 2, "a/pending": 1, "b/running": 1}, counts)
}

func testCountUnfinished(t *testing.T, h *harness) {
	for range 5 {
		h.insert(store.TaskInsert{})
	}
	n, err := h.s.CountUnfinishedTasks(h.ctx, 100)
	require.NoError(t, err)
	require.Equal(t, 5, n)
	n, err = h.s.CountUnfinishedTasks(h.ctx, 3)
	require.NoError(t, err)
	require.Equal(t, 3, n, "the count stops at the limit")
	h.ok(h.claim("e1", 1)[0], `{}`)
	n, err = h.s.CountUnfinishedTasks(h.ctx, 100)
	require.NoError(t, err)
	require.Equal(t, 4, n, "a finished task is not counted")
}

func testClaimByNamespace(t *testing.T, h *harness) {
	h.insert(store.TaskInsert{Namespace: "py", Steps: []store.StepInsert{{Name: "a", Handler: "enrich", MaxAttempts: 1}}},
		store.TaskInsert{Namespace: "go", Steps: []store.StepInsert{{Name: "b", Handler: "enrich", MaxAttempts: 1}}},
		store.TaskInsert{Namespace: "py", Steps: []store.StepInsert{{Name: "c", Handler: "other", MaxAttempts: 1}}})
	got := h.claimWith(store.ClaimParams{EngineID: "w1", Limit: 10, Handlers: []string{"enrich"}, Namespaces: []string{"py"}})
	require.Equal(t, []string{"a"}, names(got))
	require.Equal(t, "w1", h.task(got[0].TaskID).Steps[0].EngineID)
}

func testListTasksByTime(t *testing.T, h *harness) {
	early := h.insert(store.TaskInsert{})[0].Task
	h.clock.Advance(time.Hour)
	mid := h.clock.Now()
	late := h.insert(store.TaskInsert{})[0].Task
	after, err := h.s.ListTasks(h.ctx, store.TaskFilter{CreatedAfter: mid})
	require.NoError(t, err)
	require.Len(t, after, 1)
	require.Equal(t, late.ID, after[0].ID)
	before, err := h.s.ListTasks(h.ctx, store.TaskFilter{CreatedBefore: mid})
	require.NoError(t, err)
	require.Len(t, before, 1)
	require.Equal(t, early.ID, before[0].ID)
}

func testSessions(t *testing.T, h *harness) {
	require.NoError(t, h.s.CreateAPIKey(h.ctx, store.APIKey{ID: "k1", Name: "ops", Hash: []byte{1}, Permissions: []string{"tasks:read"}}))
	require.NoError(t, h.s.CreateAPIKey(h.ctx, store.APIKey{ID: "k2", Name: "ci", Hash: []byte{2}, Permissions: []string{"tasks:read"}}))
	now := h.clock.Now()
	ses := store.Session{ID: "s1", KeyID: "k1", ExpiresAt: now.Add(time.Hour)}
	require.NoError(t, h.s.CreateSession(h.ctx, ses))
	require.ErrorIs(t, h.s.CreateSession(h.ctx, ses), store.ErrConflict)
	require.ErrorIs(t, h.s.CreateSession(h.ctx, store.Session{ID: "s9", KeyID: "nope", ExpiresAt: now.Add(time.Hour)}), store.ErrNotFound,
		"a session stands for a key that exists")
	got, err := h.s.GetSession(h.ctx, "s1")
	require.NoError(t, err)
	require.Equal(t, "k1", got.KeyID)
	require.Equal(t, "ops", got.Key.Name, "with the key it stands for")
	require.Equal(t, []string{"tasks:read"}, got.Key.Permissions)
	require.True(t, got.CreatedAt.Equal(now), "created at the store's time")
	require.True(t, got.ExpiresAt.Equal(ses.ExpiresAt))
	_, err = h.s.GetSession(h.ctx, "nope")
	require.ErrorIs(t, err, store.ErrNotFound)

	t.Run("expiry", func(t *testing.T) {
		require.NoError(t, h.s.CreateSession(h.ctx, store.Session{ID: "short", KeyID: "k2", ExpiresAt: h.clock.Now().Add(time.Minute)}))
		h.clock.Advance(time.Minute)
		_, err := h.s.GetSession(h.ctx, "short")
		require.ErrorIs(t, err, store.ErrNotFound, "an expired session signs nobody in")
		// The next sign-in deletes it: its id may be reused.
		require.NoError(t, h.s.CreateSession(h.ctx, store.Session{ID: "short", KeyID: "k2", ExpiresAt: h.clock.Now().Add(time.Minute)}))
	})
	t.Run("sign-out", func(t *testing.T) {
		require.NoError(t, h.s.CreateSession(h.ctx, store.Session{ID: "out", KeyID: "k2", ExpiresAt: h.clock.Now().Add(time.Hour)}))
		require.NoError(t, h.s.DeleteSession(h.ctx, "out"))
		require.NoError(t, h.s.DeleteSession(h.ctx, "out"), "deleting twice is a no-op")
		_, err := h.s.GetSession(h.ctx, "out")
		require.ErrorIs(t, err, store.ErrNotFound)
	})
	t.Run("revocation", func(t *testing.T) {
		require.NoError(t, h.s.CreateSession(h.ctx, store.Session{ID: "k2-a", KeyID: "k2", ExpiresAt: h.clock.Now().Add(time.Hour)}))
		require.NoError(t, h.s.RevokeAPIKey(h.ctx, "k2"))
		_, err := h.s.GetSession(h.ctx, "k2-a")
		require.ErrorIs(t, err, store.ErrNotFound, "revoking a key ends its sessions")
		_, err = h.s.GetSession(h.ctx, "s1")
		require.NoError(t, err, "and no other key's")
		require.ErrorIs(t, h.s.CreateSession(h.ctx, store.Session{ID: "k2-b", KeyID: "k2", ExpiresAt: h.clock.Now().Add(time.Hour)}), store.ErrNotFound,
			"a revoked key starts no session")
	})
}
