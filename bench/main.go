// Command bench measures weft against River on the same machine, the same
// database server and the same settings, in one invocation.
//
//	cd bench && go run . -scenario single -backend sqlite
//	cd bench && go run . -scenario all -backend postgres [-db URL]
//	cd bench && go run . -charts
//
// Each scenario runs -runs times, weft then River, and reports the median.
// The last line printed is machine-readable:
//
//	RESULT scenario=NAME backend=B weft=X river=Y ratio=X/Y unit=U
//
// See docs/BENCHMARKS.md for the method and the figures.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"
)

// Settings shared by both systems in every scenario.
const (
	workerConcurrency = 100 // handler slots (weft) and MaxWorkers (River)
	pgMaxConns        = 20  // connection pool of each system on PostgreSQL
	submitBatch       = 1000
)

type options struct {
	scenario   string
	backend    string
	db         string
	n          int
	runs       int
	systems    string
	idle       time.Duration
	results    string
	charts     bool
	imgDir     string
	cpuprofile string
	memprofile string
	pgStats    bool
	policies   string
	engines    string
	conns      int
	work       string
	// sizes and kinds are -engines and -work, read (run).
	sizes []int
	kinds []string

	riverCooldown time.Duration
	clusterEngine string
}

func main() {
	var o options
	flag.StringVar(&o.scenario, "scenario", "", "scenario to run: "+strings.Join(scenarioNames(), ", ")+" or all")
	flag.StringVar(&o.backend, "backend", "sqlite", "backend: sqlite or postgres")
	flag.StringVar(&o.db, "db", "", "PostgreSQL URL of a server to use (the bench creates and drops a database per run there); default: start a throwaway cluster with ../scripts/pgtest")
	flag.IntVar(&o.n, "n", 0, "size of the scenario (tasks, runs, or the largest queue depth); 0: the scenario's default")
	flag.IntVar(&o.runs, "runs", 3, "runs of each system per scenario, alternating weft and River; the median is reported")
	flag.StringVar(&o.policies, "policies", "", "policies scenario: the variants to run, comma-separated (none, pause, limits, rates, weights, breaker, all); default: all of them")
	flag.StringVar(&o.engines, "engines", "1,2,4,8", "cluster scenario: the engine counts to run, comma-separated")
	flag.IntVar(&o.conns, "conns", 8, "cluster scenario: each engine's connections (eight engines of 8 stay within a default max_connections of 100)")
	flag.StringVar(&o.work, "work", "single,fanout5", "cluster scenario: what weft's engines run, comma-separated (single, fanout5); River's run single")
	flag.StringVar(&o.systems, "systems", "weft,river", "systems to run, comma-separated (weft, river); use one to profile it alone")
	flag.DurationVar(&o.idle, "idle", 30*time.Second, "how long the idle scenario observes each engine")
	flag.StringVar(&o.results, "results", "results/results.jsonl", "JSON-lines file the results are appended to")
	flag.BoolVar(&o.charts, "charts", false, "draw PNG charts from the results file into -img and exit")
	flag.StringVar(&o.imgDir, "img", "../docs/img", "directory the charts are written to")
	flag.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of the whole invocation to this file")
	flag.StringVar(&o.memprofile, "memprofile", "", "write an allocation profile to this file at the end")
	flag.BoolVar(&o.pgStats, "pgstat", true, "on a throwaway cluster, load pg_stat_statements (one restart) to count statements")
	flag.DurationVar(&o.riverCooldown, "river-fetch-cooldown", time.Millisecond, "River's FetchCooldown: its minimum, 1ms, by default (its own default, 100ms, caps a queue at MaxWorkers per 100ms)")
	flag.StringVar(&o.clusterEngine, "cluster-engine", "", "run one engine process of the cluster scenario on this database URL (the scenario starts these itself)")
	flag.Parse()

	if o.clusterEngine != "" {
		if err := clusterEngine(o.clusterEngine, o); err != nil {
			fmt.Fprintln(os.Stderr, "bench: cluster engine:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	if o.charts {
		return drawCharts(o.results, o.imgDir)
	}
	scenarios, err := selectScenarios(o.scenario)
	if err != nil {
		return err
	}
	if o.backend != "sqlite" && o.backend != "postgres" {
		return fmt.Errorf("-backend %q: want sqlite or postgres", o.backend)
	}
	if o.db != "" && o.backend != "postgres" {
		return errors.New("-db names a PostgreSQL server: use it with -backend postgres")
	}
	if o.runs < 1 {
		return fmt.Errorf("-runs %d: want at least 1", o.runs)
	}
	if o.n < 0 {
		return fmt.Errorf("-n %d: want a positive size", o.n)
	}
	if o.idle < time.Second {
		return fmt.Errorf("-idle %s: want at least 1s", o.idle)
	}
	systems, err := parseSystems(o.systems)
	if err != nil {
		return err
	}
	if o.sizes, err = parseEngines(o.engines); err != nil {
		return err
	}
	if o.kinds, err = parseClusterWork(o.work); err != nil {
		return err
	}
	if o.conns < 1 || o.conns > 64 {
		return fmt.Errorf("-conns %d: want 1 to 64", o.conns)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if o.cpuprofile != "" {
		f, err := os.Create(o.cpuprofile)
		if err != nil {
			return fmt.Errorf("-cpuprofile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("start CPU profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}

	env, err := newEnv(ctx, o)
	if err != nil {
		return err
	}
	defer env.close()

	fmt.Printf("weft bench: backend=%s systems=%s runs=%d date=%s\n", o.backend, strings.Join(systems, ","), o.runs, time.Now().UTC().Format(time.RFC3339))
	fmt.Printf("machine: %s\n", env.machine)
	fmt.Printf("settings: %s\n\n", strings.Join(env.settings(), "; "))

	for _, sc := range scenarios {
		res, err := runScenario(ctx, env, sc, systems, o)
		if err != nil {
			return fmt.Errorf("scenario %s: %w", sc.name, err)
		}
		res.print(os.Stdout)
		if err := appendResult(o.results, res); err != nil {
			return err
		}
	}

	if o.memprofile != "" {
		f, err := os.Create(o.memprofile)
		if err != nil {
			return fmt.Errorf("-memprofile: %w", err)
		}
		defer f.Close()
		runtime.GC()
		if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
			return fmt.Errorf("write allocation profile: %w", err)
		}
	}
	return nil
}

func parseSystems(s string) ([]string, error) {
	var out []string
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		switch name {
		case "weft", "river":
			out = append(out, name)
		default:
			return nil, fmt.Errorf("-systems: unknown system %q (want weft, river)", name)
		}
	}
	if len(out) == 0 || out[0] != "weft" && len(out) > 1 {
		return nil, fmt.Errorf("-systems %q: list weft first", s)
	}
	return out, nil
}
