package weft_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/store/postgres"
	"github.com/weftrun/weft/workflow"
)

// reapDuringClaim is a store on which, once armed, the first claim that
// takes steps commits just after a reap declared its holder dead: the
// state a reap that commits while PostgreSQL runs a claim's statement
// leaves behind (the reap saw none of the claim's rows, the claim saw its
// engine live). It is written as that reap writes it, after the claim.
// Only ClaimSteps claims: the wrapper hides the stores' optional ways of
// claiming within another write.
type reapDuringClaim struct {
	store.Store
	db     *sql.DB
	dollar bool // PostgreSQL's placeholders
	armed  atomic.Bool
	victim atomic.Pointer[string] // the holder declared dead
}

func newReapDuringClaim(s store.Store) *reapDuringClaim {
	_, pg := s.(postgres.Store)
	return &reapDuringClaim{Store: s, db: s.(interface{ DB() *sql.DB }).DB(), dollar: pg}
}

func (r *reapDuringClaim) ClaimSteps(ctx context.Context, p store.ClaimParams) ([]store.ClaimedStep, error) {
	got, err := r.Store.ClaimSteps(ctx, p)
	if err != nil || len(got) == 0 || !r.armed.CompareAndSwap(true, false) {
		return got, err
	}
	for _, q := range []string{`UPDATE engines SET state = 'dead' WHERE id = ?`, `DELETE FROM leaders WHERE engine_id = ?`} {
		if r.dollar {
			q = strings.Replace(q, "?", "$1", 1)
		}
		if _, err := r.db.ExecContext(ctx, q, p.EngineID); err != nil {
			return nil, fmt.Errorf("declare %s dead: %w", p.EngineID, err)
		}
	}
	r.victim.Store(&p.EngineID)
	return got, nil
}

// TestStepsClaimedAsTheirHolderIsDeclaredDead: a step claimed under an
// identity that a reap declared dead before the claim committed is held
// by no one: its holder, local engine or remote worker, learns it is dead
// at its next heartbeat, drops what it runs and registers anew, and no
// heartbeat renews the dead identity again. The rule every running step
// keeps: it is held by a live engine or worker, or the reaper takes it
// back within a lease and a grace (checkHeldOrReclaimed). Before the
// reaper looked at the dead identities' steps, such a step stayed running
// forever, and the task with it: TestBatchFanOut stalled so on PostgreSQL
// under load, its 1 s lease lapsing and its engine reaping itself.
func TestStepsClaimedAsTheirHolderIsDeclaredDead(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// run drives the task's step to its end on e: its first attempt
		// is claimed under an identity declared dead, and dropped.
		// It returns early once ctx ends (the check failed).
		run func(ctx context.Context, t *testing.T, e *weft.Engine, s *reapDuringClaim)
	}{
		// The engine's own handler (below), which the engine cancels,
		// lease lost, once it hears that it is dead.
		{"local", nil},
		{"remote", func(ctx context.Context, t *testing.T, e *weft.Engine, s *reapDuringClaim) {
			first := newRemoteWorker(t, e)
			held := first.one("work")
			require.Equal(t, first.id, *s.victim.Load(), "the worker's claim was the one cut")
			// The worker hears it is dead and drops the step, as the
			// wire workers do, then registers again.
			_, err := first.w.Heartbeat(ctx, first.id, "test-owner", []weft.Fence{held.Fence})
			require.ErrorIs(t, err, store.ErrEngineLost)
			second := newRemoteWorker(t, e)
			for ctx.Err() == nil {
				if steps := second.claim(1, "work"); len(steps) == 1 {
					require.Equal(t, held.ID, steps[0].ID)
					second.complete(steps[0], `"done"`)
					return
				}
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			eachBackend(t, func(t *testing.T, open storeFactory) {
				s := newReapDuringClaim(open(t))
				e := newEngine(t, s, weft.Config{}) // lease 1s, heartbeat 100ms
				var attempts atomic.Int32
				if tt.run == nil {
					e.Handle("work", func(ctx context.Context, a *weft.Attempt) (any, error) {
						attempts.Add(1)
						if a.Number == 1 {
							<-ctx.Done() // until the engine drops it
							return nil, context.Cause(ctx)
						}
						return "done", nil
					})
				}
				register(t, e, workflow.New("test", "lapse", "1").Step("work", "work"))
				start(t, e)
				s.armed.Store(true)
				id := submit(t, e, weft.Submission{Workflow: "test/lapse"}).Task.ID
				lease := e.Workers().LeaseTTL()
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				checked := make(chan error, 1)
				go func() {
					err := checkHeldOrReclaimed(ctx, s, id, lease+5*time.Second, time.Minute)
					cancel()
					checked <- err
				}()
				if tt.run != nil {
					tt.run(ctx, t, e, s)
				}
				require.NoError(t, <-checked)
				require.NotNil(t, s.victim.Load(), "no claim was cut: the test proved nothing")
				task, err := e.Get(context.Background(), id)
				require.NoError(t, err)
				require.Equal(t, state.TaskCompleted, task.State, task.Error)
				step := task.Steps[0]
				require.Equal(t, 2, step.Attempts, "the first attempt, held by no one, was reclaimed and counted")
				if tt.run == nil {
					require.Equal(t, int32(2), attempts.Load())
				}
			})
		})
	}
}

// checkHeldOrReclaimed watches task id until it ends, up to within, and
// returns an error if one of its steps stays running under an engine or
// worker that is not live (declared dead or stopped) for longer than bound:
// a step in state running is held by a live holder, or the reaper takes it
// back within a lease and a grace. The error lists the steps and engines.
func checkHeldOrReclaimed(ctx context.Context, s store.Store, id int64, bound, within time.Duration) error {
	orphaned := map[store.Fence]time.Time{} // since when, by attempt
	end := time.Now().Add(within)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		task, err := s.GetTask(ctx, id)
		if err != nil {
			return fmt.Errorf("get task %d: %w", id, err)
		}
		if task.State.Terminal() {
			return nil
		}
		engines, err := s.ListEngines(ctx)
		if err != nil {
			return fmt.Errorf("list engines: %w", err)
		}
		live := map[string]bool{}
		for _, en := range engines {
			live[en.ID] = true
		}
		now := time.Now()
		for _, st := range task.Steps {
			if st.State != state.StepRunning || live[st.EngineID] {
				continue
			}
			f := store.Fence{StepID: st.ID, Attempt: st.Attempts}
			since, ok := orphaned[f]
			if !ok {
				orphaned[f] = now
			} else if now.Sub(since) > bound {
				return fmt.Errorf("step %s (id %d) attempt %d is running under %s, which is not live, and was not reclaimed within %s; live: %v; steps: %s",
					st.Name, st.ID, st.Attempts, st.EngineID, bound, engines, stepHolders(task))
			}
		}
		if now.After(end) {
			return errors.New("task did not end in time: " + stepHolders(task))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// stepHolders describes a task's steps: state, attempt and holder.
func stepHolders(task *store.Task) string {
	var b strings.Builder
	fmt.Fprintf(&b, "task %d %s:", task.ID, task.State)
	for _, st := range task.Steps {
		fmt.Fprintf(&b, " %s=%s(attempt %d, engine %q, error %q)", st.Name, st.State, st.Attempts, st.EngineID, st.Error)
	}
	return b.String()
}
