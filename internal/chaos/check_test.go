package chaos

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/state"
)

func done(names ...string) TaskObs {
	t := TaskObs{State: state.TaskCompleted, Completions: map[string]int{}, Claims: map[string]int{}, RunEnds: map[string]int{}, Starts: 1}
	for _, n := range names {
		t.Steps = append(t.Steps, StepObs{Name: n, State: state.StepCompleted, Ran: n != "approve"})
		t.Completions[n] = 1
		if n != "approve" {
			t.Claims[n], t.RunEnds[n] = 1, 1
		}
	}
	return t
}

// TestCheckFlagsEachProblem fabricates a run in which every kind of problem
// happens once, next to healthy tasks, so that the checker cannot pass a
// broken run silently.
func TestCheckFlagsEachProblem(t *testing.T) {
	ledgerText := strings.Join([]string{
		"1 a 1 100", "1 a 2 100", "1 d 1 100", // 1: a retried, fine
		"2 a 1 100", "2 d 1 100", // 2: completed twice in the audit
		"4 a 1 100", "4 d 1 100", // 4: stuck
		"5 a 1 100", "5 a 1 200", "5 d 1 200", // 5: ran twice after a crash, recorded once: fine
		"6 a 1 100",              // 6: d never ran, yet the database says completed
		"8 a 1 100", "8 d 1 100", // 8: a's claim missing from the audit
		"9 a 1 100", "9 d 1 100", // 9: started twice
		"garbage",
	}, "\n") + "\n"
	ledger, bad, err := ParseLedger(strings.NewReader(ledgerText))
	require.NoError(t, err)
	require.Equal(t, 1, bad)
	require.Equal(t, 2, ledger["5 a"])

	obs := map[int64]TaskObs{
		1: done("a", "approve", "d"),
		2: done("a", "approve", "d"),
		// 3 is missing: lost.
		4: {State: state.TaskRunning, Completions: map[string]int{"a": 1},
			Steps: []StepObs{{Name: "a", State: state.StepCompleted, Ran: true}, {Name: "d", State: state.StepRunning, Ran: true}}},
		5: done("a", "approve", "d"),
		6: done("a", "approve", "d"),
		7: {State: state.TaskFailed, Completions: map[string]int{}},
		8: done("a", "approve", "d"),
		9: done("a", "approve", "d"),
	}
	obs[2].Completions["d"] = 2
	obs[8].Claims["a"] = 0
	twice := obs[9]
	twice.Starts = 2
	obs[9] = twice

	healthy := Check([]int64{1, 5}, obs, ledger)
	require.True(t, healthy.OK(), "%v", healthy.Details)
	require.Equal(t, 2, healthy.Reran, "1 a (a retry) and 5 a (a crash)")

	r := Check([]int64{1, 2, 3, 4, 5, 6, 7, 8, 9}, obs, ledger)
	require.False(t, r.OK())
	require.Equal(t, 9, r.Tasks)
	require.Equal(t, 2, r.Unaudited, "%v", r.Details)
	require.Equal(t, 3, r.Lost, "missing (3), never ran (6), failed (7): %v", r.Details)
	require.Equal(t, 1, r.Stuck, "%v", r.Details)
	require.Equal(t, 1, r.Duplicated, "%v", r.Details)
	joined := strings.Join(r.Details, "\n")
	for _, want := range []string{"task 3: lost: not in the database", "task 4: stuck in running",
		"task 2: duplicated: d completed 2 times", "task 6: lost: completed but step d never ran", "task 7: lost: ended failed",
		"task 8: unaudited: step a claimed 0 times, its runs ended 1 times", "task 9: unaudited: started 2 times"} {
		require.Contains(t, joined, want)
	}
}
