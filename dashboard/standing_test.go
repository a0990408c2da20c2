package dashboard

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

func TestStandingOf(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ready := store.Step{Name: "r", State: state.StepReady}
	running := store.Step{Name: "x", State: state.StepRunning, Attempts: 4, MaxAttempts: 20}
	retry := store.Step{Name: "y", State: state.StepWaiting, Attempts: 2, MaxAttempts: 3, RunAt: &at}
	signal := store.Step{Name: "s", State: state.StepWaiting, Kind: store.KindSignal, Signal: "approved", RunAt: &at}
	timer := store.Step{Name: "t", State: state.StepWaiting, RunAt: &at}
	for _, tt := range []struct {
		name   string
		active []store.Step
		step   string
		label  string
		more   int
	}{
		{"ready alone", []store.Step{ready}, "r", "ready", 0},
		{"running first", []store.Step{ready, retry, running}, "x", "running", 2},
		{"a retry's backoff", []store.Step{ready, retry}, "y", "retry", 1},
		{"a signal wait", []store.Step{signal}, "s", "signal", 0},
		{"a timer", []store.Step{timer}, "t", "waiting", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := standingOf(tt.active)
			require.Equal(t, tt.step, got.Step.Name)
			require.Equal(t, tt.label, got.Label)
			require.Equal(t, tt.more, got.More)
		})
	}
}
