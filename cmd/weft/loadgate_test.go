package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMaxPressureSettings: the load gate's thresholds come from the flag,
// weft.yaml (engine.max_pressure) or WEFT_MAX_PRESSURE, are shown by weft
// config, and a bad one from any of them stops the command at start.
func TestMaxPressureSettings(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "weft.db")
	good := writeFile(t, dir, "good.yaml", "engine:\n  max_pressure:\n    cpu: 80\n    io: 50\n")
	bad := writeFile(t, dir, "bad.yaml", "engine:\n  max_pressure: { cpu: 500 }\n")

	var stdout, stderr syncBuffer
	env := map[string]string{"WEFT_CONFIG": good}
	code := newApp(strings.NewReader(""), &stdout, &stderr, func(k string) string { return env[k] }).execute(t.Context(), []string{"config"})
	require.Equal(t, 0, code, stderr.String())
	value, source := configLine(t, stdout.String(), "engine.max_pressure")
	require.Equal(t, "cpu=80,io=50", value)
	require.Equal(t, good+":2", source)

	r := weftCLI(t, "--config", bad, "worker", "--db", db)
	requireCode(t, 2, r)
	require.Contains(t, r.stderr, "--max-pressure: cpu=500: the threshold must be a percentage from 0 to 100")

	var out, errOut syncBuffer
	fromEnv := map[string]string{"WEFT_MAX_PRESSURE": "memory=lots"}
	code = newApp(strings.NewReader(""), &out, &errOut, func(k string) string { return fromEnv[k] }).
		execute(t.Context(), []string{"worker", "--db", db})
	require.Equal(t, 2, code)
	require.Contains(t, errOut.String(), "--max-pressure: memory=lots: the threshold must be")
}
