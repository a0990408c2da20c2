package main

import (
	"math"
	"strconv"
	"strings"

	"github.com/weftrun/weft"
)

// parseMaxPressure reads the items of --max-pressure ("cpu=80", "io=50"):
// the thresholds of the engine's load gate. Whether the host has PSI is
// checked when the engine is made.
func parseMaxPressure(items []string) (map[string]float64, error) {
	if len(items) == 0 {
		return nil, nil
	}
	out := make(map[string]float64, len(items))
	for _, item := range items {
		name, val, ok := strings.Cut(strings.TrimSpace(item), "=")
		name = strings.TrimSpace(name)
		if !ok || name == "" {
			return nil, usageErrorf("--max-pressure: %q is not RESOURCE=PERCENT (e.g. cpu=80,io=50)", item)
		}
		switch name {
		case weft.PressureCPU, weft.PressureIO, weft.PressureMemory:
		default:
			return nil, usageErrorf("--max-pressure: unknown resource %q (want cpu, io or memory)", name)
		}
		if _, dup := out[name]; dup {
			return nil, usageErrorf("--max-pressure: %s is given twice", name)
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil || math.IsNaN(v) || v < 0 || v > 100 {
			return nil, usageErrorf("--max-pressure: %s=%s: the threshold must be a percentage from 0 to 100", name, val)
		}
		out[name] = v
	}
	return out, nil
}
