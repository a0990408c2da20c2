package store_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/store"
)

// TestValidateInsertSignalHandler: the engine's signal handler belongs to
// signal steps alone, and a signal step takes it or none.
func TestValidateInsertSignalHandler(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		step store.StepInsert
		want string // "" when valid
	}{
		{"signal step, no handler", store.StepInsert{Name: "w", Kind: store.KindSignal, Signal: "go"}, ""},
		{"signal step, the signal handler", store.StepInsert{Name: "w", Kind: store.KindSignal, Handler: store.SignalHandler, Signal: "go"}, ""},
		{"signal step, another handler", store.StepInsert{Name: "w", Kind: store.KindSignal, Handler: "h", Signal: "go"},
			`signal step "w" has handler "h": it takes "weft.signal" or none`},
		{"plain step, the signal handler", store.StepInsert{Name: "s", Handler: store.SignalHandler},
			`step "s": handler "weft.signal" is the engine's, for signal steps alone`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := store.ValidateInsert(store.TaskInsert{Namespace: "ns", Workflow: "wf", Version: "1", Steps: []store.StepInsert{tt.step}})
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, store.ErrInvalidInsert)
			require.ErrorContains(t, err, tt.want)
		})
	}
}
