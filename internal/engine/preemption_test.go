package engine

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/store"
)

// TestBetterVictim: the victim is the preemptible step of lowest priority,
// the latest claimed (highest id) among equals, whatever the order the
// steps are seen in, so that engines deciding apart pick the same one.
func TestBetterVictim(t *testing.T) {
	t.Parallel()
	step := func(id int64, priority int, preemptible bool) store.ClaimedStep {
		var c store.ClaimedStep
		c.ID, c.Priority, c.Preemptible = id, priority, preemptible
		return c
	}
	tests := []struct {
		name  string
		steps []store.ClaimedStep
		want  int64 // 0: none
	}{
		{"none preemptible", []store.ClaimedStep{step(1, -5, false), step(2, 0, false)}, 0},
		{"the lowest priority", []store.ClaimedStep{step(1, 3, true), step(2, -2, true), step(3, -9, false)}, 2},
		{"the latest among equals", []store.ClaimedStep{step(4, 0, true), step(7, 0, true), step(5, 0, true)}, 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for _, order := range [][]store.ClaimedStep{tt.steps, reversed(tt.steps)} {
				var v *store.ClaimedStep
				for i := range order {
					if betterVictim(&order[i], v) {
						v = &order[i]
					}
				}
				if tt.want == 0 {
					require.Nil(t, v)
					continue
				}
				require.NotNil(t, v)
				require.Equal(t, tt.want, v.ID)
			}
		})
	}
}

func reversed(s []store.ClaimedStep) []store.ClaimedStep {
	out := make([]store.ClaimedStep, len(s))
	for i, c := range s {
		out[len(s)-1-i] = c
	}
	return out
}
