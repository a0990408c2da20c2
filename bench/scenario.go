package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// sample is what one run of one system in one scenario measured.
type sample struct {
	value     float64              // the scenario's headline figure, in its unit
	metrics   map[string]float64   // further figures, by name
	latencies []float64            // dag7: every latency in ms, sorted
	depth     []depthPoint         // depth: claim cost by queue depth
	top       []statementStat      // PostgreSQL: statements by calls
	variants  map[string][]float64 // policies: each variant's runs, in order
}

type depthPoint struct {
	Depth   int     `json:"depth"`
	ClaimMS float64 `json:"claim_ms"`    // median time of one ClaimSteps
	InsertS float64 `json:"insert_s"`    // time to insert the backlog
	Claims  int     `json:"claims"`      // claims timed
	Batch   int     `json:"claim_batch"` // steps per claim
}

type runFunc func(ctx context.Context, e *env, n int, o options) (sample, error)

type scenario struct {
	name     string
	what     string // what is measured, with %d for n
	unit     string
	defaultN int
	once     bool // one run per system whatever -runs says (the scenario repeats inside)
	named    bool // runs only when named, not in all (cluster: PostgreSQL only, minutes long)
	weft     runFunc
	river    runFunc // nil: weft only
}

var scenarios = []scenario{
	{name: "single", what: "burn-down of %d pre-inserted one-step no-op tasks, start to last completion", unit: "tasks/s", defaultN: 10000, weft: weftSingle, river: riverSingle},
	{name: "submit", what: "bulk submission of %d one-step tasks, 1000 per call", unit: "tasks/s", defaultN: 20000, weft: weftSubmit, river: riverSubmit},
	{name: "dag7", what: "%d 7-step DAGs (fan-out 3, join, chain of 2, final) one at a time on an idle engine, submit to completed", unit: "ms", defaultN: 200, weft: weftDAG7},
	{name: "func5", what: "%d durable functions of five sequential steps one at a time on an idle engine, submit to completed (dag7's measure)", unit: "ms", defaultN: 200, weft: weftFunc5},
	{name: "chain7", what: "%d DAGs of seven steps in a chain one at a time on an idle engine, submit to completed: as many steps in sequence as func5's calls and its function's two runs", unit: "ms", defaultN: 200, weft: weftChain7},
	{name: "cluster", what: "engine processes (-engines: 1, 2, 4 and 8) on one PostgreSQL database: burn-down of %d one-step tasks, then (weft) a fifth as many fanout5 workflows submitted while they run; value: the best burn-down", unit: "tasks/s", defaultN: 100000, once: true, named: true, weft: weftCluster, river: riverCluster},
	{name: "fanout5", what: "%d five-step parallel workflows submitted 100 per call while the engine runs, start to last completion", unit: "workflows/s", defaultN: 2000, weft: weftFanout5},
	{name: "depth", what: "time per ClaimSteps of 100 with 1k up to %d steps queued", unit: "ms", defaultN: 100000, once: true, weft: weftDepth},
	{name: "policies", what: "burn-down of %d one-step tasks without policies and with each kind of policy configured but not binding, then all, alternating; value: with all", unit: "tasks/s", defaultN: 10000, once: true, weft: weftPolicies},
	{name: "idle", what: "CPU and statements of an idle engine (n unused)", unit: "cpu_s", defaultN: 0, once: true, weft: weftIdle, river: riverIdle},
}

func scenarioNames() []string {
	var out []string
	for _, s := range scenarios {
		out = append(out, s.name)
	}
	return out
}

func selectScenarios(name string) ([]scenario, error) {
	if name == "all" {
		var all []scenario
		for _, s := range scenarios {
			if !s.named {
				all = append(all, s)
			}
		}
		return all, nil
	}
	for _, s := range scenarios {
		if s.name == name {
			return []scenario{s}, nil
		}
	}
	return nil, fmt.Errorf("-scenario %q: want one of %s or all", name, strings.Join(scenarioNames(), ", "))
}

// result is one scenario's outcome, printed and appended to the results
// file as one JSON line.
type result struct {
	Time     string        `json:"time"`
	Scenario string        `json:"scenario"`
	Backend  string        `json:"backend"`
	What     string        `json:"what"`
	N        int           `json:"n"`
	Runs     int           `json:"runs"`
	Unit     string        `json:"unit"`
	Machine  string        `json:"machine"`
	Settings []string      `json:"settings"`
	StealPct float64       `json:"steal_pct"` // CPU steal during the scenario
	BusyPct  float64       `json:"busy_pct"`  // machine CPU busy during the scenario (all processes)
	Weft     *systemResult `json:"weft,omitempty"`
	River    *systemResult `json:"river,omitempty"`
	Ratio    float64       `json:"ratio,omitempty"` // weft / river
}

type systemResult struct {
	Value     float64            `json:"value"` // median of Runs
	Runs      []float64          `json:"runs"`
	Metrics   map[string]float64 `json:"metrics,omitempty"` // medians
	Latencies []float64          `json:"latencies_ms,omitempty"`
	Depth     []depthPoint       `json:"depth,omitempty"`
	Top       []statementStat    `json:"top_statements,omitempty"`
	// Variants: the policies scenario's runs of each variant, in order.
	Variants map[string][]float64 `json:"variants,omitempty"`
}

func runScenario(ctx context.Context, e *env, sc scenario, systems []string, o options) (*result, error) {
	n := o.n
	if n == 0 {
		n = sc.defaultN
	}
	runs := o.runs
	if sc.once {
		runs = 1
	}
	res := &result{
		Time: time.Now().UTC().Format(time.RFC3339), Scenario: sc.name, Backend: e.backend,
		What: fmt.Sprintf(sc.what, n), N: n, Runs: runs, Unit: sc.unit, Machine: e.machine, Settings: e.settings(),
	}
	if !strings.Contains(sc.what, "%d") {
		res.What = sc.what
	}
	samples := map[string][]sample{}
	before, _ := readCPUTimes()
	for run := 1; run <= runs; run++ {
		for _, sys := range systems {
			fn := sc.weft
			if sys == "river" {
				fn = sc.river
			}
			if fn == nil {
				continue
			}
			fmt.Fprintf(os.Stderr, "bench: %s %s run %d/%d\n", sc.name, sys, run, runs)
			s, err := fn(ctx, e, n, o)
			if err != nil {
				return nil, fmt.Errorf("%s run %d: %w", sys, run, err)
			}
			samples[sys] = append(samples[sys], s)
		}
	}
	after, _ := readCPUTimes()
	res.StealPct, res.BusyPct = busyShares(before, after)
	res.Weft = summarise(samples["weft"])
	res.River = summarise(samples["river"])
	if res.Weft != nil && res.River != nil && res.River.Value != 0 {
		res.Ratio = res.Weft.Value / res.River.Value
	}
	return res, nil
}

// summarise takes the median of every figure over the runs; the latency
// distribution, depth points and statements are those of the median run.
func summarise(ss []sample) *systemResult {
	if len(ss) == 0 {
		return nil
	}
	r := &systemResult{Metrics: map[string]float64{}}
	for _, s := range ss {
		r.Runs = append(r.Runs, s.value)
	}
	r.Value = median(r.Runs)
	// The median run; when the median is between two runs, the upper one.
	sorted := slices.Sorted(slices.Values(r.Runs))
	mid := ss[0]
	for _, s := range ss {
		if s.value == sorted[len(sorted)/2] {
			mid = s
		}
	}
	r.Latencies, r.Depth, r.Top, r.Variants = mid.latencies, mid.depth, mid.top, mid.variants
	names := map[string]bool{}
	for _, s := range ss {
		for k := range s.metrics {
			names[k] = true
		}
	}
	for k := range names {
		var vs []float64
		for _, s := range ss {
			if v, ok := s.metrics[k]; ok {
				vs = append(vs, v)
			}
		}
		r.Metrics[k] = median(vs)
	}
	return r
}

func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// percentile of sorted values, nearest rank.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func (r *result) print(w io.Writer) {
	fmt.Fprintf(w, "== %s on %s: %s\n", r.Scenario, r.Backend, r.What)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "\tweft\t"
	if r.River != nil {
		head += "river\tweft/river\t"
	}
	fmt.Fprintln(tw, head)
	row := func(name string, get func(*systemResult) (float64, bool)) {
		wv, wok := get(r.Weft)
		line := name + "\t" + fmtOpt(wv, wok) + "\t"
		if r.River != nil {
			rv, rok := get(r.River)
			ratio := ""
			if wok && rok && rv != 0 {
				ratio = fmtNum(wv / rv)
			}
			line += fmtOpt(rv, rok) + "\t" + ratio + "\t"
		}
		fmt.Fprintln(tw, line)
	}
	row(r.Unit+" (median)", func(s *systemResult) (float64, bool) {
		if s == nil {
			return 0, false
		}
		return s.Value, true
	})
	names := map[string]bool{}
	for _, s := range []*systemResult{r.Weft, r.River} {
		if s != nil {
			for k := range s.Metrics {
				names[k] = true
			}
		}
	}
	keys := make([]string, 0, len(names))
	for k := range names {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		row(k, func(s *systemResult) (float64, bool) {
			if s == nil {
				return 0, false
			}
			v, ok := s.Metrics[k]
			return v, ok
		})
	}
	if r.Runs > 1 {
		runsOf := func(s *systemResult) string {
			if s == nil {
				return ""
			}
			var p []string
			for _, v := range s.Runs {
				p = append(p, fmtNum(v))
			}
			return strings.Join(p, " ")
		}
		line := "runs\t" + runsOf(r.Weft) + "\t"
		if r.River != nil {
			line += runsOf(r.River) + "\t\t"
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
	for _, d := range r.Weft.depthOrNil() {
		fmt.Fprintf(w, "  depth %9d: %.3f ms per claim of %d (median of %d), backlog inserted in %.1fs\n", d.Depth, d.ClaimMS, d.Batch, d.Claims, d.InsertS)
	}
	for _, sys := range []struct {
		name string
		r    *systemResult
	}{{"weft", r.Weft}, {"river", r.River}} {
		if sys.r == nil || len(sys.r.Top) == 0 {
			continue
		}
		fmt.Fprintf(w, "  %s statements by calls (pg_stat_statements, median run):\n", sys.name)
		for _, s := range sys.r.Top {
			fmt.Fprintf(w, "    %8d calls %9.1f ms  %s\n", s.Calls, s.TotalMS, s.Query)
		}
	}
	fmt.Fprintf(w, "  machine during the scenario: %.0f%% CPU steal, %.0f%% busy (all processes)\n", r.StealPct, r.BusyPct)
	fmt.Fprintln(w, r.resultLine())
	fmt.Fprintln(w)
}

func (s *systemResult) depthOrNil() []depthPoint {
	if s == nil {
		return nil
	}
	return s.Depth
}

// resultLine is the machine-readable summary.
func (r *result) resultLine() string {
	var b strings.Builder
	fmt.Fprintf(&b, "RESULT scenario=%s backend=%s", r.Scenario, r.Backend)
	if r.Weft != nil {
		fmt.Fprintf(&b, " weft=%s", fmtNum(r.Weft.Value))
	}
	if r.River != nil {
		fmt.Fprintf(&b, " river=%s", fmtNum(r.River.Value))
		if r.Ratio != 0 {
			fmt.Fprintf(&b, " ratio=%.3f", r.Ratio)
		}
	}
	fmt.Fprintf(&b, " unit=%s", r.Unit)
	if r.Weft != nil {
		// What a unit of work cost in CPU, so that bench-compare can
		// tell a change that saves work from one that saves waiting.
		for _, k := range slices.Sorted(maps.Keys(r.Weft.Metrics)) {
			if unit, ok := strings.CutPrefix(k, "machine_cpu_us_per_"); ok {
				fmt.Fprintf(&b, " machine_cpu_us=%s process_cpu_us=%s cpu_unit=%s",
					fmtNum(r.Weft.Metrics[k]), fmtNum(r.Weft.Metrics["process_cpu_us_per_"+unit]), unit)
			}
		}
		switch r.Scenario {
		case "dag7", "func5", "chain7":
			for _, k := range []string{"p50", "p95", "p99"} {
				fmt.Fprintf(&b, " %s=%s", k, fmtNum(r.Weft.Metrics[k+"_ms"]))
			}
		case "depth":
			for _, d := range r.Weft.Depth {
				fmt.Fprintf(&b, " depth_%d=%s", d.Depth, fmtNum(d.ClaimMS))
			}
		case "idle":
			fmt.Fprintf(&b, " weft_qps=%s", fmtNum(r.Weft.Metrics["statements_per_s"]))
			if r.River != nil {
				fmt.Fprintf(&b, " river_qps=%s", fmtNum(r.River.Metrics["statements_per_s"]))
			}
		}
	}
	return b.String()
}

func fmtOpt(v float64, ok bool) string {
	if !ok {
		return "-"
	}
	return fmtNum(v)
}

// fmtNum prints three significant figures, no exponent.
func fmtNum(v float64) string {
	a := v
	if a < 0 {
		a = -a
	}
	switch {
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}

func appendResult(path string, r *result) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("results dir: %w", err)
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("results file: %w", err)
	}
	b, err := json.Marshal(r)
	if err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}
