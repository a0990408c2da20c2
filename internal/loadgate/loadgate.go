// Package loadgate holds an engine's claims back while the host is under
// pressure: an engine configured with MaxPressure claims nothing while the
// host's pressure of a resource (Linux pressure stall information, "some
// avg10" of /proc/pressure/<resource>) is above its threshold. Running steps
// go on; the claim loop reads the pressures at most once per pressureEvery
// and checks the last reading in memory in between. An engine without
// MaxPressure has no gate (a nil *Gate) and pays nothing.
package loadgate

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Pressure resources a load gate may watch.
const (
	CPU    = "cpu"
	IO     = "io"
	Memory = "memory"
)

// pressureEvery is how often the claim loop reads the pressures again.
const pressureEvery = time.Second

// Reader reads the pressure of a resource ("cpu", "io" or
// "memory"): the share of the last ten seconds, in percent (0-100), in
// which some task waited for it (PSI "some avg10").
type Reader interface {
	ReadPressure(resource string) (float64, error)
}

// ProcPressure reads pressures from the files of Linux pressure stall
// information under Dir (default /proc/pressure; Linux 4.20+ with PSI
// enabled).
type ProcPressure struct {
	Dir string
}

// ReadPressure reads Dir/<resource> and returns its "some avg10".
func (p ProcPressure) ReadPressure(resource string) (float64, error) {
	dir := p.Dir
	if dir == "" {
		dir = "/proc/pressure"
	}
	b, err := os.ReadFile(filepath.Join(dir, resource))
	if err != nil {
		return 0, err
	}
	return ParsePressure(b)
}

// ParsePressure returns the "some avg10" value of a PSI file, such as
//
//	some avg10=1.53 avg60=0.87 avg300=0.30 total=3000123
//	full avg10=0.00 avg60=0.00 avg300=0.00 total=0
func ParsePressure(b []byte) (float64, error) {
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		fields := bytes.Fields(line)
		if len(fields) == 0 || string(fields[0]) != "some" {
			continue
		}
		for _, f := range fields[1:] {
			v, ok := bytes.CutPrefix(f, []byte("avg10="))
			if !ok {
				continue
			}
			x, err := strconv.ParseFloat(string(v), 64)
			if err != nil || math.IsNaN(x) || x < 0 || x > 100 {
				return 0, fmt.Errorf("pressure: bad avg10 value %q", clip(v))
			}
			return x, nil
		}
		return 0, fmt.Errorf("pressure: no avg10 in line %q", clip(line))
	}
	return 0, errors.New(`pressure: no "some" line`)
}

// Validate checks the thresholds of a load gate: known resources,
// each from 0 to 100 percent.
func Validate(max map[string]float64) error {
	for _, r := range slices.Sorted(maps.Keys(max)) {
		v := max[r]
		switch r {
		case CPU, IO, Memory:
		default:
			return fmt.Errorf("MaxPressure: unknown resource %q (want cpu, io or memory)", r)
		}
		if math.IsNaN(v) || v < 0 || v > 100 {
			return fmt.Errorf("MaxPressure: %s must be a percentage from 0 to 100, got %v", r, v)
		}
	}
	return nil
}

// State is the state of an engine's load gate.
type State struct {
	// Enabled is set when the engine has thresholds (MaxPressure).
	Enabled bool
	// Closed is set while a pressure is above its threshold: the engine
	// claims nothing.
	Closed bool
	// Pressure is the last pressure read of each watched resource.
	Pressure map[string]float64
	// Max is the threshold of each watched resource.
	Max map[string]float64
	// ReadAt is when the pressures were last read.
	ReadAt time.Time
}

// Gate is the engine's gate; nil when no threshold is set.
type Gate struct {
	log       *slog.Logger
	reader    Reader
	max       map[string]float64
	resources []string
	every     time.Duration

	mu       sync.Mutex
	closed   bool
	pressure map[string]float64
	readAt   time.Time
	failing  bool // the last reading failed: a failure is reported once
}

// New returns the gate for the thresholds max, read with reader (nil:
// ProcPressure) and logging its changes to log; nil when max sets no
// threshold. It reads every pressure once: a host without PSI is refused
// at start.
func New(max map[string]float64, reader Reader, log *slog.Logger) (*Gate, error) {
	if len(max) == 0 {
		return nil, nil
	}
	if err := Validate(max); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	g := &Gate{log: log, reader: reader, max: max, resources: slices.Sorted(maps.Keys(max)),
		every: pressureEvery, pressure: map[string]float64{}}
	if g.reader == nil {
		g.reader = ProcPressure{}
	}
	for _, r := range g.resources {
		v, err := g.reader.ReadPressure(r)
		if err != nil {
			return nil, fmt.Errorf("MaxPressure needs Linux pressure stall information (/proc/pressure/%s; Linux 4.20+ with PSI enabled): %w", r, err)
		}
		g.pressure[r] = v
	}
	return g, nil
}

// transition is a change of the gate, to log.
type transition struct {
	closed    bool
	resource  string
	value     float64
	threshold float64
}

// check returns whether the gate is closed at now, reading the pressures
// again when the last reading is older than every. A resource that cannot
// be read keeps its last value; readErr reports the first failure of a run
// of failed readings.
func (g *Gate) check(now time.Time) (closed bool, changed *transition, readErr error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.readAt.IsZero() && now.Sub(g.readAt) < g.every {
		return g.closed, nil, nil
	}
	g.readAt = now
	var over *transition
	for _, r := range g.resources {
		v, err := g.reader.ReadPressure(r)
		if err != nil {
			readErr = errors.Join(readErr, fmt.Errorf("read %s pressure: %w", r, err))
			v = g.pressure[r]
		}
		g.pressure[r] = v
		if v > g.max[r] && over == nil {
			over = &transition{closed: true, resource: r, value: v, threshold: g.max[r]}
		}
	}
	switch {
	case over != nil && !g.closed:
		changed = over
	case over == nil && g.closed:
		// Opens: report the resource that was highest against its threshold.
		changed = &transition{}
		best := math.Inf(-1)
		for _, r := range g.resources {
			if d := g.pressure[r] - g.max[r]; d > best {
				best, changed.resource, changed.value, changed.threshold = d, r, g.pressure[r], g.max[r]
			}
		}
	}
	g.closed = over != nil
	failing := readErr != nil
	if g.failing {
		readErr = nil // reported already
	}
	g.failing = failing
	return g.closed, changed, readErr
}

// Wait returns how long until the gate reads the pressures again.
func (g *Gate) Wait(now time.Time) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	return max(time.Millisecond, g.every-now.Sub(g.readAt))
}

// State returns the state of the gate; a nil gate is not Enabled.
func (g *Gate) State() State {
	if g == nil {
		return State{}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return State{Enabled: true, Closed: g.closed, Pressure: maps.Clone(g.pressure), Max: maps.Clone(g.max), ReadAt: g.readAt}
}

// Closed reports whether the gate holds claims back now, logging each
// change. It costs a nil check when no threshold is set.
func (g *Gate) Closed() bool {
	if g == nil {
		return false
	}
	closed, changed, err := g.check(time.Now())
	if err != nil {
		g.log.Warn("load gate: could not read the pressure", "error", err)
	}
	if changed != nil {
		if changed.closed {
			g.log.Warn("load gate closed: not claiming", "resource", changed.resource, "pressure", changed.value, "threshold", changed.threshold)
		} else {
			g.log.Info("load gate opened: claiming again", "resource", changed.resource, "pressure", changed.value, "threshold", changed.threshold)
		}
	}
	return closed
}

// clip bounds the bytes of a PSI file quoted in an error.
func clip(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "…"
	}
	return string(b)
}
