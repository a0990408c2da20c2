package metrics

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/store/sqlite"
)

type fixedPressure map[string]float64

func (p fixedPressure) ReadPressure(r string) (float64, error) { return p[r], nil }

// TestLoadGateMetrics: an engine with a load gate reports its state, the
// pressures read and the thresholds; one without reports none of them.
func TestLoadGateMetrics(t *testing.T) {
	t.Parallel()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "weft.db"), sqlite.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	plain, err := weft.New(s, weft.Config{Logger: log})
	require.NoError(t, err)
	m := New(plain, log)
	t.Cleanup(m.Close)
	require.Empty(t, gaugesOf(t, m, "weft_load_"))

	gated, err := weft.New(s, weft.Config{Logger: log, MaxPressure: map[string]float64{"cpu": 80, "io": 50},
		PressureReader: fixedPressure{"cpu": 12.5, "io": 60}})
	require.NoError(t, err)
	require.NoError(t, gated.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, gated.Stop(context.Background())) })
	mg := New(gated, log)
	t.Cleanup(mg.Close)
	deadline := time.Now().Add(20 * time.Second)
	for !gated.LoadGate().Closed {
		require.True(t, time.Now().Before(deadline), "the gate never closed")
		time.Sleep(5 * time.Millisecond) // polling a condition
	}
	require.Equal(t, map[string]float64{
		"weft_load_gate_closed":                              1,
		`weft_load_pressure_ratio{resource="cpu"}`:           0.125,
		`weft_load_pressure_ratio{resource="io"}`:            0.6,
		`weft_load_pressure_threshold_ratio{resource="cpu"}`: 0.8,
		`weft_load_pressure_threshold_ratio{resource="io"}`:  0.5,
	}, gaugesOf(t, mg, "weft_load_"))
}

// gaugesOf returns the gauges whose names start with prefix, by name and
// labels.
func gaugesOf(t *testing.T, m *Metrics, prefix string) map[string]float64 {
	t.Helper()
	families, err := m.Registry.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), prefix) {
			continue
		}
		for _, mt := range f.GetMetric() {
			name := f.GetName()
			for _, l := range mt.GetLabel() {
				name += "{" + l.GetName() + "=\"" + l.GetValue() + "\"}"
			}
			out[name] = mt.GetGauge().GetValue()
		}
	}
	return out
}

// TestPreemptedCounter: each preemption the engine publishes is counted by
// namespace, workflow and step (an item under its batch step's name).
func TestPreemptedCounter(t *testing.T) {
	t.Parallel()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "weft.db"), sqlite.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	e, err := weft.New(s, weft.Config{Logger: log})
	require.NoError(t, err)
	m := New(e, log)
	t.Cleanup(m.Close)
	for _, step := range []string{"crunch", "fan[3]", "fan[4]"} {
		m.observe(weft.Event{Kind: weft.EventPreempted, Namespace: "ops", Workflow: "report", Step: step})
	}
	families, err := m.Registry.Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "weft_steps_preempted_total" {
			continue
		}
		for _, mt := range f.GetMetric() {
			labels := ""
			for _, l := range mt.GetLabel() {
				labels += l.GetName() + "=" + l.GetValue() + " "
			}
			got[labels] = mt.GetCounter().GetValue()
		}
	}
	require.Equal(t, map[string]float64{
		"namespace=ops step=crunch workflow=report ": 1,
		"namespace=ops step=fan workflow=report ":    2,
	}, got)
}
