package taskview

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/wire"
)

// t0 is the creation time of the snapshots' task.
var t0 = time.Date(2025, 3, 1, 12, 0, 1, 0, time.UTC)

func at(ms int) *time.Time {
	t := t0.Add(time.Duration(ms) * time.Millisecond)
	return &t
}

// snapshot builds a task of the steps a -> b -> c in the given states.
func snapshot(taskState state.Task, steps ...wire.Step) *wire.Task {
	t := &wire.Task{ID: 7, Namespace: "shop", Workflow: "checkout", Version: "1.0.0", State: taskState, CreatedAt: t0}
	names := []string{"a", "b", "c"}
	for i, s := range steps {
		s.Name = names[i]
		s.MaxAttempts = 3
		if i > 0 {
			s.DependsOn = []string{names[i-1]}
		}
		t.Steps = append(t.Steps, s)
	}
	return t
}

var ansi = regexp.MustCompile(`\x1b\[[0-9;]*[A-Za-z]`)

func TestProgressPlain(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	now := t0
	p := New(&out, Options{Now: func() time.Time { return now }, Loc: time.UTC})

	snaps := []struct {
		now  int
		task *wire.Task
	}{
		{0, snapshot(state.TaskPending, wire.Step{State: state.StepReady}, wire.Step{State: state.StepPending}, wire.Step{State: state.StepPending})},
		{100, snapshot(state.TaskRunning,
			wire.Step{State: state.StepRunning, Attempts: 1, StartedAt: at(50)},
			wire.Step{State: state.StepPending}, wire.Step{State: state.StepPending})},
		// a finished and b ran and failed between two snapshots.
		{300, snapshot(state.TaskRunning,
			wire.Step{State: state.StepCompleted, Attempts: 1, StartedAt: at(50), FinishedAt: at(150)},
			wire.Step{State: state.StepWaiting, Attempts: 1, StartedAt: at(160), RunAt: at(1160), Error: "exit status 1:\nboom"},
			wire.Step{State: state.StepPending})},
		// Nothing changed: nothing printed.
		{400, snapshot(state.TaskRunning,
			wire.Step{State: state.StepCompleted, Attempts: 1, StartedAt: at(50), FinishedAt: at(150)},
			wire.Step{State: state.StepWaiting, Attempts: 1, StartedAt: at(160), RunAt: at(1160), Error: "exit status 1:\nboom"},
			wire.Step{State: state.StepPending})},
		{2000, snapshot(state.TaskFailed,
			wire.Step{State: state.StepCompleted, Attempts: 1, StartedAt: at(50), FinishedAt: at(150)},
			wire.Step{State: state.StepFailed, Attempts: 2, StartedAt: at(1200), FinishedAt: at(1300), Error: "exit status 1: boom"},
			wire.Step{State: state.StepSkipped, FinishedAt: at(1300)})},
	}
	for _, s := range snaps {
		now = t0.Add(time.Duration(s.now) * time.Millisecond)
		require.NoError(t, p.Update(s.task))
	}
	last := snaps[len(snaps)-1].task
	last.FinishedAt = at(1300)
	last.Error = `step "b" failed: exit status 1: boom`
	require.NoError(t, p.Finish(last))

	want := `12:00:01.000 task 7 shop/checkout@1.0.0 submitted (3 steps)
12:00:01.050 step a running (attempt 1)
12:00:01.150 step a completed in 100ms
12:00:01.160 step b running (attempt 1)
12:00:01.300 step b waiting (retry at 12:00:02.160): exit status 1: boom
12:00:02.200 step b running (attempt 2)
12:00:02.300 step b failed: exit status 1: boom
12:00:02.300 step c skipped
12:00:03.000 task 7 failed in 1.3s (1/3 steps completed, 1 failed, 1 skipped): step "b" failed: exit status 1: boom
`
	require.Equal(t, want, out.String())
}

func TestProgressPlainSummary(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		task *wire.Task
		want string
	}{
		{
			name: "completed",
			task: func() *wire.Task {
				tk := snapshot(state.TaskCompleted,
					wire.Step{State: state.StepCompleted, Attempts: 1, StartedAt: at(0), FinishedAt: at(10)},
					wire.Step{State: state.StepCompleted, Attempts: 1, StartedAt: at(10), FinishedAt: at(20)},
					wire.Step{State: state.StepResolved, FinishedAt: at(30)})
				tk.FinishedAt = at(1234)
				return tk
			}(),
			want: "task 7 completed in 1.2s (3/3 steps completed)",
		},
		{
			name: "cancelled",
			task: func() *wire.Task {
				tk := snapshot(state.TaskCancelled,
					wire.Step{State: state.StepCompleted, Attempts: 1, StartedAt: at(0), FinishedAt: at(10)},
					wire.Step{State: state.StepCancelled},
					wire.Step{State: state.StepCancelled})
				tk.FinishedAt = at(90_000)
				return tk
			}(),
			want: "task 7 cancelled in 1m30s (1/3 steps completed, 2 cancelled)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, Summary(tt.task, t0.Add(time.Hour)))
		})
	}
}

func TestProgressLive(t *testing.T) {
	t.Parallel()
	running := snapshot(state.TaskRunning,
		wire.Step{State: state.StepCompleted, Attempts: 1, StartedAt: at(0), FinishedAt: at(120)},
		wire.Step{State: state.StepRunning, Attempts: 1, StartedAt: at(120)},
		wire.Step{State: state.StepPending})
	failed := snapshot(state.TaskFailed,
		wire.Step{State: state.StepCompleted, Attempts: 1, StartedAt: at(0), FinishedAt: at(120)},
		wire.Step{State: state.StepFailed, Attempts: 3, StartedAt: at(120), FinishedAt: at(900), Error: "exit status 2:\nno such order"},
		wire.Step{State: state.StepSkipped, FinishedAt: at(900)})
	failed.FinishedAt = at(900)
	failed.Error = `step "b" failed: exit status 2: no such order`

	tests := []struct {
		name  string
		color bool
	}{
		{"plain colours", false},
		{"colours", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			p := New(&out, Options{Live: true, Color: tt.color, Width: 100,
				Now: func() time.Time { return t0.Add(500 * time.Millisecond) }, Loc: time.UTC})

			require.NoError(t, p.Update(running))
			first := out.String()
			require.NotContains(t, first, "\x1b[5A", "the first frame moves nothing up")
			text := ansi.ReplaceAllString(first, "")
			require.Equal(t, strings.Join([]string{
				"▶ task 7  shop/checkout@1.0.0  running  500ms",
				"[████████░░░░░░░░░░░░░░░░] 1/3 steps",
				"  ✓ a  completed  1/3    120ms",
				"  ⠋ b  running    1/3    380ms",
				"  · c  pending           after b",
			}, "\n")+"\n", strings.ReplaceAll(text, "\r", ""))
			require.Equal(t, tt.color, strings.Contains(first, ansiGreen+"✓"+ansiReset))

			out.Reset()
			require.NoError(t, p.Finish(failed))
			second := out.String()
			require.True(t, strings.HasPrefix(second, "\x1b[5A"), "the next frame redraws over the first: %q", second)
			text = strings.ReplaceAll(ansi.ReplaceAllString(second, ""), "\r", "")
			require.Contains(t, text, "✗ task 7  shop/checkout@1.0.0  failed  900ms")
			require.Contains(t, text, "3/3 steps")
			require.Contains(t, text, "  ✗ b  failed     3/3    exit status 2: no such order\n")
			require.Contains(t, text, "  - c  skipped")
			require.True(t, strings.HasSuffix(text, "✗ task 7 failed in 900ms (1/3 steps completed, 1 failed, 1 skipped): step \"b\" failed: exit status 2: no such order\n"), text)
			require.Equal(t, tt.color, strings.Contains(second, ansiRed))
		})
	}
}

func TestProgressLiveFitsTerminal(t *testing.T) {
	t.Parallel()
	task := &wire.Task{ID: 1, Namespace: "ns", Workflow: "wide", Version: "1", State: state.TaskRunning, CreatedAt: t0}
	for i := range 12 {
		s := wire.Step{Name: "step-with-a-long-name-" + string(rune('a'+i)), State: state.StepPending, MaxAttempts: 3}
		if i == 11 {
			s.State, s.Attempts, s.Error = state.StepFailed, 1, strings.Repeat("very long error ", 20)
		}
		task.Steps = append(task.Steps, s)
	}
	var out bytes.Buffer
	p := New(&out, Options{Live: true, Color: true, Width: 40, Height: 8, Now: func() time.Time { return t0 }})
	require.NoError(t, p.Update(task))
	lines := strings.Split(strings.TrimSuffix(out.String(), "\x1b[J"), "\n")
	lines = lines[:len(lines)-1]
	require.Len(t, lines, 2+4+1, "header, bar, the steps that fit and a line for the others")
	for _, l := range lines {
		visible := strings.ReplaceAll(ansi.ReplaceAllString(l, ""), "\r", "")
		require.LessOrEqual(t, utf8.RuneCountInString(visible), 39, "line %q wraps", visible)
	}
	text := ansi.ReplaceAllString(out.String(), "")
	require.Contains(t, text, "step-with-a-long-name-l", "the failed step is shown first")
	require.Contains(t, text, "… 8 more steps")
}

func TestProgressTaskJSONRoundTrip(t *testing.T) {
	t.Parallel()
	// The renderer reads the same fields `weft run --json` prints.
	b, err := json.Marshal(snapshot(state.TaskRunning, wire.Step{State: state.StepRunning, Attempts: 1, StartedAt: at(0)}))
	require.NoError(t, err)
	var back wire.Task
	require.NoError(t, json.Unmarshal(b, &back))
	var out bytes.Buffer
	p := New(&out, Options{Now: func() time.Time { return t0 }, Loc: time.UTC})
	require.NoError(t, p.Update(&back))
	require.Contains(t, out.String(), "12:00:01.000 step a running (attempt 1)\n")
}

func TestAbbrev(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"two\nlines  here", 20, "two lines here"},
		{"abcdefghij", 5, "abcd…"},
		{"ééééé", 3, "éé…"},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, Abbrev(tt.in, tt.n), tt.in)
	}
}
