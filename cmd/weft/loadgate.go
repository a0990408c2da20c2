package main

import (
	"math"
	"strconv"
	"strings"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/internal/config"
)

// parseMaxPressure reads the items of --max-pressure ("cpu=80", "io=50"):
// the thresholds of the engine's load gate. Whether the host has PSI is
// checked when the engine is made. c (which may be nil) shows a refused
// item (config.Layers.Show).
func parseMaxPressure(items []string, c *config.Layers) (map[string]float64, error) {
	if len(items) == 0 {
		return nil, nil
	}
	out := make(map[string]float64, len(items))
	for _, item := range items {
		name, val, ok := strings.Cut(strings.TrimSpace(item), "=")
		name = strings.TrimSpace(name)
		if !ok || name == "" {
			return nil, usageErrorf("--max-pressure: %q is not RESOURCE=PERCENT (e.g. cpu=80,io=50)", c.Show("max-pressure", item))
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
			return nil, usageErrorf("--max-pressure: %s: the threshold must be a percentage from 0 to 100", c.Show("max-pressure", item))
		}
		out[name] = v
	}
	return out, nil
}
