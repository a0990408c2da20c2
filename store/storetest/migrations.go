package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// OldKeys are API keys as a schema before namespace scopes held them (id,
// name, permissions), for a store's migration test to insert before it
// opens the store; KeyScopesMigrated checks what the migration made of
// them.
var OldKeys = [][3]string{{"a", "ci", "tasks:create,tasks:read"}, {"b", "ops", "admin:*"}, {"c", "none", ""}}

// KeyScopesMigrated checks, on store s opened over OldKeys, that keys made
// before namespace scopes hold in every namespace, as they did, and say
// so; and that a key made after keeps its grants' namespaces.
func KeyScopesMigrated(t *testing.T, s store.Store) {
	t.Helper()
	ctx := context.Background()
	keys, err := s.ListAPIKeys(ctx)
	require.NoError(t, err)
	require.Len(t, keys, 3)
	require.Equal(t, []string{"tasks:create@*", "tasks:read@*"}, keys[0].Permissions)
	require.Equal(t, []string{"admin:*@*"}, keys[1].Permissions)
	require.Empty(t, keys[2].Permissions)

	require.NoError(t, s.CreateAPIKey(ctx, store.APIKey{ID: "d", Name: "shop", Hash: []byte{1},
		Permissions: []string{"tasks:read@shop,billing", "workers:connect@shop"}}))
	k, err := s.GetAPIKey(ctx, "d")
	require.NoError(t, err)
	require.Equal(t, []string{"tasks:read@shop,billing", "workers:connect@shop"}, k.Permissions, "a grant's namespaces survive the store")
}

// OldSignalTask writes, into a schema from before signal steps had a
// handler, a task whose step "a" is ready and whose signal step "wait"
// waits for it; SignalHandlerMigrated checks what the migration made of
// it. The statements bind nothing, so that every store runs them as they
// are.
var OldSignalTask = []string{
	`INSERT INTO tasks (id, namespace, workflow, version, state, input, priority, run_at, created_at, remaining)
		VALUES (1, 'old', 'wf', '1', 'pending', '{}', 0, 1700000000000000, 1700000000000000, 2)`,
	`INSERT INTO steps (task_id, idx, name, handler, namespace, workflow, state, priority, max_attempts, deps, children, kind, signal)
		VALUES (1, 0, 'a', 'h', 'old', 'wf', 'ready', 0, 1, '', '1', '', ''), (1, 1, 'wait', '', 'old', 'wf', 'pending', 0, 1, '0', '', 'signal', 'go')`,
}

// SignalHandlerMigrated checks, on store s opened over OldSignalTask, that
// the signal step got the engine's signal handler, so that an engine
// claims it and begins its wait once step "a" ends.
func SignalHandlerMigrated(t *testing.T, s store.Store) {
	t.Helper()
	ctx := context.Background()
	claim := func() []store.ClaimedStep {
		got, err := s.ClaimSteps(ctx, store.ClaimParams{EngineID: "e1", Limit: 10, Now: time.Now()})
		require.NoError(t, err)
		require.Len(t, got, 1)
		return got
	}
	a := claim()[0]
	require.Equal(t, "a", a.Name)
	_, err := s.CompleteSteps(ctx, []store.Outcome{{Fence: a.Fence, EngineID: "e1", State: state.StepCompleted}})
	require.NoError(t, err)
	wait := claim()[0]
	require.Equal(t, "wait", wait.Name)
	require.Equal(t, store.SignalHandler, wait.Handler)
	res, err := s.CompleteSteps(ctx, []store.Outcome{waitOutcome(wait)})
	require.NoError(t, err)
	require.NoError(t, res[0])
	task, err := s.GetTask(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, state.TaskRunning, task.State)
	require.Equal(t, state.StepWaiting, task.Steps[1].State)
}
