package weft_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/internal/pgtesting"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/store/postgres"
	"github.com/weftrun/weft/store/sqlite"
	"github.com/weftrun/weft/workflow"
)

// The crash test of durable functions runs the function in a process of
// its own (this test binary, re-executed with WEFT_FUNC_CRASH set), which
// SIGKILLs itself at one point: at the start of the function's Nth run
// (each run is a boundary between calls) or inside a step's code. A
// second process then resumes the task. Each step's code appends its
// name and the process to a ledger.

func TestMain(m *testing.M) {
	if os.Getenv("WEFT_FUNC_CRASH") != "" {
		os.Exit(crashWorker())
	}
	os.Exit(m.Run())
}

// crashFunction is the function under test: a step, a sleep, a signal, a
// child task, two steps in parallel. hook runs at the start of each run
// of the function and inside each step's code.
func crashFunction(hook func(point string)) func(weft.FuncContext, struct{ N int }) (int, error) {
	return func(ctx weft.FuncContext, in struct{ N int }) (int, error) {
		hook("run")
		step := func(name string, v int) (int, error) {
			return weft.Step(ctx, name, func(context.Context) (int, error) { hook("step " + name); return v, nil })
		}
		a, err := step("a", in.N+1)
		if err != nil {
			return 0, err
		}
		if err := ctx.Sleep(100 * time.Millisecond); err != nil {
			return 0, err
		}
		if _, err := ctx.WaitSignal("go", time.Minute); err != nil {
			return 0, err
		}
		child, err := weft.Child[map[string]int](ctx, "crash/double", map[string]int{"n": a})
		if err != nil {
			return 0, err
		}
		b := weft.Go(ctx, "b", func(context.Context) (int, error) { hook("step b"); return child["double"], nil })
		c := weft.Go(ctx, "c", func(context.Context) (int, error) { hook("step c"); return 1, nil })
		bv, err := b.Get()
		if err != nil {
			return 0, err
		}
		cv, err := c.Get()
		if err != nil {
			return 0, err
		}
		return step("d", bv+cv)
	}
}

// crashWorker is the process: it runs an engine with the function until
// the task ends, or kills itself at WEFT_FUNC_CRASH_AT.
func crashWorker() int {
	ctx := context.Background()
	var s store.Store
	var err error
	if schema := os.Getenv("WEFT_FUNC_CRASH_SCHEMA"); schema != "" {
		s, err = postgres.Open(ctx, os.Getenv("WEFT_TEST_POSTGRES_URL"), postgres.Options{Schema: schema})
	} else {
		s, err = sqlite.Open(ctx, os.Getenv("WEFT_FUNC_CRASH_DB"), sqlite.Options{})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 2
	}
	defer s.Close()
	e, err := weft.New(s, testConfig(weft.Config{}))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ledger, err := os.OpenFile(os.Getenv("WEFT_FUNC_CRASH_LEDGER"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	at, runs := os.Getenv("WEFT_FUNC_CRASH_AT"), 0
	var mu sync.Mutex
	hook := func(point string) {
		mu.Lock()
		defer mu.Unlock()
		if point == "run" {
			runs++
			point = "run " + strconv.Itoa(runs)
		} else {
			fmt.Fprintf(ledger, "%s %d\n", point, os.Getpid())
		}
		if point == at {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}
	e.Handle("double", func(ctx context.Context, a *weft.Attempt) (any, error) {
		var in struct{ N int }
		return in.N * 2, a.Bind(&in)
	})
	if err := e.Register(ctx, workflow.New("crash", "double", "1").Step("double", "double")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if err := weft.RegisterFunc(ctx, e, "crash/fn", crashFunction(hook)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if err := e.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer e.Stop(ctx)
	id, _ := strconv.ParseInt(os.Getenv("WEFT_FUNC_CRASH_TASK"), 10, 64)
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	task, err := e.Wait(waitCtx, id)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if task.State != state.TaskCompleted {
		fmt.Fprintf(os.Stderr, "task %d %s: %+v\n", id, task.State, task.Steps)
		return 1
	}
	return 0
}

// TestFunctionCrashAtEveryBoundary: killed at each boundary between calls
// and inside each step, the function's task completes on the next process
// with the right result, and no step whose end was recorded before the
// kill runs again.
func TestFunctionCrashAtEveryBoundary(t *testing.T) {
	t.Parallel()
	// "run N": the Nth time the function's code starts in the process:
	// the function step's runs, each a boundary between calls, seven in
	// all (a step's code runs without a run of the function where the
	// function made it).
	points := []string{"step a", "step b", "step c", "step d"}
	for n := 1; n <= 7; n++ {
		points = append(points, fmt.Sprintf("run %d", n))
	}
	exe, err := os.Executable()
	require.NoError(t, err)
	eachBackend(t, func(t *testing.T, open storeFactory) {
		for _, point := range points {
			t.Run(strings.ReplaceAll(point, " ", "_"), func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				dir := t.TempDir()
				env := append(os.Environ(), "WEFT_FUNC_CRASH=1", "WEFT_FUNC_CRASH_LEDGER="+filepath.Join(dir, "ledger"))
				var s store.Store
				if _, pg := open(t).(postgres.Store); pg {
					schema := pgtesting.SchemaName("crash")
					ps, err := postgres.Open(ctx, pgtesting.URL(t), postgres.Options{Schema: schema})
					require.NoError(t, err)
					t.Cleanup(func() {
						_, _ = ps.DB().ExecContext(ctx, `DROP SCHEMA `+schema+` CASCADE`)
						ps.Close()
					})
					s, env = ps, append(env, "WEFT_FUNC_CRASH_SCHEMA="+schema)
				} else {
					path := filepath.Join(dir, "weft.db")
					ss, err := sqlite.Open(ctx, path, sqlite.Options{})
					require.NoError(t, err)
					t.Cleanup(func() { ss.Close() })
					s, env = ss, append(env, "WEFT_FUNC_CRASH_DB="+path)
				}
				// The parent submits and signals; it registers the
				// function (without running it) to do so.
				e := newEngine(t, s, weft.Config{})
				require.NoError(t, weft.RegisterFunc(ctx, e, "crash/fn", crashFunction(func(string) {})))
				id := submit(t, e, weft.Submission{Workflow: "crash/fn", Input: map[string]int{"n": 4}}).Task.ID
				_, err := e.Signal(ctx, id, "go", nil)
				require.NoError(t, err)
				env = append(env, "WEFT_FUNC_CRASH_TASK="+strconv.FormatInt(id, 10))

				first := exec.Command(exe, "-test.run=^$")
				first.Env = append(env, "WEFT_FUNC_CRASH_AT="+point)
				out, err := first.CombinedOutput()
				var exit *exec.ExitError
				require.ErrorAs(t, err, &exit, "the first process was to be killed at %q:\n%s", point, out)
				require.Equal(t, "signal: killed", exit.Error(), "%s", out)
				task, err := e.Get(ctx, id)
				require.NoError(t, err)
				recorded := map[string]bool{}
				for _, st := range task.Steps {
					if st.State == state.StepCompleted {
						recorded[st.Name] = true
					}
				}

				second := exec.Command(exe, "-test.run=^$")
				second.Env = env
				out, err = second.CombinedOutput()
				require.NoError(t, err, "the second process:\n%s", out)
				task, err = e.Get(ctx, id)
				require.NoError(t, err)
				require.Equal(t, state.TaskCompleted, task.State)
				require.JSONEq(t, `11`, string(task.Steps[0].Result)) // (4+1)*2 + 1 = 11, passed through d

				ledger, err := os.ReadFile(filepath.Join(dir, "ledger"))
				require.NoError(t, err)
				pid := strconv.Itoa(second.Process.Pid)
				for _, line := range strings.Split(strings.TrimSpace(string(ledger)), "\n") {
					f := strings.Fields(line) // "step NAME PID"
					require.Len(t, f, 3, line)
					require.False(t, f[2] == pid && recorded[f[1]], "step %s, recorded before the kill at %q, ran again:\n%s", f[1], point, ledger)
				}
			})
		}
	})
}
