package weft_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/workflow"
)

// TestDedicatedPools: an engine given Namespaces claims only those
// namespaces' steps, however long another namespace's step has been ready,
// and an engine of the other pool runs that one.
func TestDedicatedPools(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		ctx := context.Background()
		s := open(t)
		var mu sync.Mutex
		ranOn := map[string]string{} // namespace -> engine
		handler := func(id string) weft.Handler {
			return func(ctx context.Context, a *weft.Attempt) (any, error) {
				mu.Lock()
				defer mu.Unlock()
				ns, _, _ := strings.Cut(a.Workflow, "/")
				ranOn[ns] = id
				return nil, nil
			}
		}
		shop := newEngine(t, s, weft.Config{ID: "pool-shop", Namespaces: []string{"shop"}, Concurrency: 4})
		shop.Handle("go.work", handler("pool-shop"))
		for _, ns := range []string{"shop", "billing"} {
			register(t, shop, workflow.New(ns, "job", "1").Step("work", "go.work"))
		}
		// billing's task is ready first: a pool that ignored its namespaces
		// would claim it in the same round as shop's.
		billing := submit(t, shop, weft.Submission{Workflow: "billing/job"})
		shopTask := submit(t, shop, weft.Submission{Workflow: "shop/job"})
		start(t, shop)
		require.Equal(t, state.TaskCompleted, wait(t, shop, shopTask.Task.ID).State)
		got, err := shop.Get(ctx, billing.Task.ID)
		require.NoError(t, err)
		require.Equal(t, state.TaskPending, got.State, "the shop pool left billing's step alone")
		require.Zero(t, got.Steps[0].Attempts)

		other := newEngine(t, s, weft.Config{ID: "pool-billing", Namespaces: []string{"billing"}})
		other.Handle("go.work", handler("pool-billing"))
		start(t, other)
		require.Equal(t, state.TaskCompleted, wait(t, other, billing.Task.ID).State)
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, map[string]string{"shop": "pool-shop", "billing": "pool-billing"}, ranOn)
	})
}

func TestDedicatedPoolsRefuseBadNamespaces(t *testing.T) {
	t.Parallel()
	for _, ns := range [][]string{{""}, {"bad ns"}, {"shop", "shop"}} {
		_, err := weft.New(backends()["sqlite"](t), weft.Config{Namespaces: ns})
		require.ErrorContains(t, err, "Namespaces[", "%q", ns)
	}
}

// TestRunTaskOutsideThePool: RunTask of a task in a namespace the engine
// does not serve is refused at once, rather than waiting for a claim that
// never comes.
func TestRunTaskOutsideThePool(t *testing.T) {
	t.Parallel()
	e := newEngine(t, backends()["sqlite"](t), weft.Config{Namespaces: []string{"shop"}})
	e.Handle("go.work", func(context.Context, *weft.Attempt) (any, error) { return nil, nil })
	register(t, e, workflow.New("billing", "job", "1").Step("work", "go.work"))
	sub := submit(t, e, weft.Submission{Workflow: "billing/job"})
	_, err := e.RunTask(context.Background(), sub.Task.ID)
	require.ErrorIs(t, err, weft.ErrInvalid)
	require.ErrorContains(t, err, `namespace "billing" is not among the engine's Namespaces ["shop"]`)
}
