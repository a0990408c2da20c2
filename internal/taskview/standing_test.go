package taskview_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/internal/taskview"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/wire"
)

// TestStanding: of a task's active steps, a running one tells most, then
// a waiting one, then a ready one; its text says how it stands, its times
// of day in the zone given, with the date unless it is today's.
func TestStanding(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	soon, later := now.Add(time.Hour), now.AddDate(0, 0, 3)
	ready := wire.Step{Name: "ship", State: state.StepReady}
	running := wire.Step{Name: "charge", State: state.StepRunning, Attempts: 4, MaxAttempts: 20}
	deferred := wire.Step{Name: "poll", State: state.StepRunning, Sub: "deferred", Attempts: 1, MaxAttempts: 3}
	retry := wire.Step{Name: "notify", State: state.StepWaiting, Attempts: 2, MaxAttempts: 3, RunAt: &soon}
	signal := wire.Step{Name: "approval", State: state.StepWaiting, Kind: store.KindSignal, Signal: "approve", RunAt: &later}
	forever := wire.Step{Name: "approval", State: state.StepWaiting, Kind: store.KindSignal, Signal: "approve"}
	timer := wire.Step{Name: "cool-off", State: state.StepWaiting, RunAt: &soon}
	paris, err := time.LoadLocation("Europe/Paris")
	require.NoError(t, err)
	for _, tt := range []struct {
		name   string
		active []wire.Step
		loc    *time.Location
		step   string
		label  string
		text   string
	}{
		{"ready alone", []wire.Step{ready}, time.UTC, "ship", "ready", "ship ready"},
		{"running first", []wire.Step{ready, retry, running}, time.UTC, "charge", "running", "charge running 4/20 +2 more"},
		{"deferred", []wire.Step{deferred}, time.UTC, "poll", "running", "poll deferred 1/3"},
		{"a retry's backoff", []wire.Step{ready, retry}, time.UTC, "notify", "retry", "notify retries at 04:04 after 2/3 +1 more"},
		{"in another zone", []wire.Step{retry}, paris, "notify", "retry", "notify retries at 05:04 after 2/3"},
		{"a signal wait, days away", []wire.Step{signal}, time.UTC, "approval", "signal", "approval waits for signal approve until Jan 5 03:04"},
		{"a signal wait with no deadline", []wire.Step{forever}, time.UTC, "approval", "signal", "approval waits for signal approve"},
		{"a timer", []wire.Step{timer}, time.UTC, "cool-off", "waiting", "cool-off waits until 04:04"},
		{"a function's call", []wire.Step{{Name: "function", State: state.StepWaiting, Kind: store.KindFunction}, signal}, time.UTC,
			"approval", "signal", "approval waits for signal approve until Jan 5 03:04 +1 more"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := taskview.StandingOf(tt.active)
			require.True(t, ok)
			require.Equal(t, tt.step, got.Step.Name)
			require.Equal(t, tt.label, got.Label)
			require.Equal(t, tt.text, got.Text(now, tt.loc))
		})
	}
	_, ok := taskview.StandingOf(nil)
	require.False(t, ok, "no active step, no standing")
}
