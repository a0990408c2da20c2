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

// TestOverlapsTellsRerunsFromDuplicates: a step that runs again after a
// failure or after its worker died is no duplicate; two runs of a step at
// once are, whatever their attempts.
func TestOverlapsTellsRerunsFromDuplicates(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		ledger []string
		want   int
	}{
		{name: "one run", ledger: []string{"1 a 1 100", "1 a 1 100 end"}},
		{name: "retried after a failure", ledger: []string{"1 a 1 100", "1 a 1 100 end", "1 a 2 200", "1 a 2 200 end"}},
		{name: "rerun after its worker died", ledger: []string{"1 a 1 100", "gone 100", "1 a 2 200", "1 a 2 200 end"}},
		{name: "rerun after a drain that ended it", ledger: []string{"1 a 1 100", "1 b 1 100", "1 b 1 100 end", "gone 100", "1 a 2 200"}},
		{name: "taken over while it ran", ledger: []string{"1 a 1 100", "1 a 2 200", "1 a 1 100 end", "1 a 2 200 end"}, want: 1},
		{name: "taken over, the first killed later", ledger: []string{"1 a 1 100", "1 a 2 200", "1 a 2 200 end", "gone 100"}, want: 1},
		{name: "another step's run is no overlap", ledger: []string{"1 a 1 100", "1 b 1 200", "2 a 1 200", "1 a 1 100 end"}},
		{name: "the remote worker records no ends", ledger: []string{"1 r 1 remote", "1 r 2 remote"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			text := strings.Join(tt.ledger, "\n") + "\n"
			got, err := Overlaps(strings.NewReader(text))
			require.NoError(t, err)
			require.Equal(t, tt.want, got["1 a"], "%v", got)
			_, bad, err := ParseLedger(strings.NewReader(text))
			require.NoError(t, err)
			require.Zero(t, bad, "every line is well formed")

			obs := done("a", "b", "r")
			obs.Overlaps = got
			for _, name := range []string{"a", "b", "r"} {
				obs.Claims[name], obs.RunEnds[name] = 1, 1
			}
			ledger, _, err := ParseLedger(strings.NewReader(text))
			require.NoError(t, err)
			ledger["1 b"], ledger["1 r"] = 1, 1
			ledger["1 a"] = max(ledger["1 a"], 1)
			r := Check([]int64{1}, map[int64]TaskObs{1: obs}, ledger)
			require.Equal(t, min(tt.want, 1), r.Duplicated, "%v", r.Details)
		})
	}
}

// TestLedgerOf: the ledger of one step, with the processes gone between
// its first and last lines, for a report of runs that overlapped.
func TestLedgerOf(t *testing.T) {
	t.Parallel()
	text := []byte("gone 1\n5 long 1 10\n6 a 1 10\ngone 10\n5 long 2 11\n5 long 1 10 end\ngone 12\n5 long 2 11 end\ngone 11\n")
	require.Equal(t, "5 long 1 10; gone 10; 5 long 2 11; 5 long 1 10 end; gone 12; 5 long 2 11 end", ledgerOf(text, "5 long"))
	require.Equal(t, "(none)", ledgerOf(text, "7 long"))
	require.Equal(t, "6 a 1 10", ledgerOf(text, "6 a"))
}
