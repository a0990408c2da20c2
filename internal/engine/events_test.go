package engine

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/internal/event"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// TestOutcomeName: every outcome settle makes has the name the metrics and
// the attempt's span report; a step that waits without failing (a snooze,
// calls, a signal wait's or a child's start) is never a retry.
func TestOutcomeName(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		o    store.Outcome
		want string
	}{
		{"completed", store.Outcome{State: state.StepCompleted}, event.OutcomeCompleted},
		{"failed for good", store.Outcome{State: state.StepFailed}, event.OutcomeFailed},
		{"skipped by its condition", store.Outcome{State: state.StepSkipped}, event.OutcomeSkipped},
		{"preempted", store.Outcome{State: state.StepReady, Snooze: true}, event.OutcomePreempted},
		{"a retry", store.Outcome{State: state.StepWaiting}, event.OutcomeRetry},
		{"a snooze", store.Outcome{State: state.StepWaiting, Snooze: true}, event.OutcomeSnoozed},
		{"a function's calls", store.Outcome{State: state.StepWaiting, Snooze: true, Calls: []store.StepInsert{{Name: "c"}}}, event.OutcomeSnoozed},
		{"a signal wait's start", store.Outcome{State: state.StepWaiting, BeginWait: true}, event.OutcomeSnoozed},
		{"a child task's start", store.Outcome{State: state.StepWaiting, Child: &store.ChildStart{}}, event.OutcomeSnoozed},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, outcomeName(tt.o))
		})
	}
}
