package weft_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/workflow"
)

// settablePressure is a weft.PressureReader whose values the test sets; it
// counts its reads so the test knows the claim loop looked again.
type settablePressure struct {
	mu    sync.Mutex
	cpu   float64
	reads int
}

func (p *settablePressure) ReadPressure(string) (float64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reads++
	return p.cpu, nil
}

func (p *settablePressure) set(v float64) (reads int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cpu = v
	return p.reads
}

func (p *settablePressure) readCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reads
}

// TestLoadGate: while the pressure is above the threshold the engine
// claims nothing; once it falls to the threshold the step is claimed and
// runs.
func TestLoadGate(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		p := &settablePressure{cpu: 95}
		e := newEngine(t, open(t), weft.Config{MaxPressure: map[string]float64{"cpu": 80}, PressureReader: p})
		e.Handle("work", func(context.Context, *weft.Attempt) (any, error) { return "done", nil })
		register(t, e, workflow.New("ops", "gated", "1").Step("work", "work"))
		id := submit(t, e, weft.Submission{Workflow: "ops/gated"}).Task.ID
		start(t, e)

		// The claim loop read a pressure above the threshold, then read it
		// again (a second later): the step was never claimed meanwhile.
		base := p.readCount()
		eventually(t, "the gate to read the pressure twice", func() bool { return p.readCount() >= base+2 })
		g := e.LoadGate()
		require.True(t, g.Enabled)
		require.True(t, g.Closed)
		require.InDelta(t, 95, g.Pressure["cpu"], 1e-9)
		task, err := e.Get(t.Context(), id)
		require.NoError(t, err)
		require.Equal(t, state.StepReady, stepByName(t, task, "work").State)
		require.Equal(t, 0, stepByName(t, task, "work").Attempts)

		p.set(80) // at the threshold: open
		task = wait(t, e, id)
		require.Equal(t, state.TaskCompleted, task.State)
		require.False(t, e.LoadGate().Closed)
	})
}

// TestLoadGateConfig: bad thresholds and a host without PSI are refused
// when the engine is made.
func TestLoadGateConfig(t *testing.T) {
	t.Parallel()
	s := backends()["sqlite"](t)
	for _, tc := range []struct {
		max map[string]float64
		err string
	}{
		{map[string]float64{"gpu": 10}, `unknown resource "gpu"`},
		{map[string]float64{"cpu": 120}, "from 0 to 100"},
	} {
		_, err := weft.New(s, weft.Config{MaxPressure: tc.max, PressureReader: &settablePressure{}})
		require.ErrorContains(t, err, tc.err)
	}
	_, err := weft.New(s, weft.Config{MaxPressure: map[string]float64{"io": 50}, PressureReader: weft.ProcPressure{Dir: t.TempDir()}})
	require.ErrorContains(t, err, "Linux 4.20+")
}
