// Command model runs weft's model-based test (see scripts/model and
// docs/reliability.md): from a seed, a sequence of operator actions,
// submissions, graceful stops, kills and lease expiries on a real cluster,
// with invariants checked as it goes. It prints one final line
//
//	model: ops=N tasks=N violations=N
//
// and exits 1 on any violation (after shrinking the sequence to a minimal
// one that still breaks the same invariant), 2 when the run itself could
// not proceed.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/weftrun/weft/internal/model"
	"github.com/weftrun/weft/internal/weftproc"
)

func main() {
	var cfg model.Config
	flag.StringVar(&cfg.Store, "store", "sqlite", "sqlite or postgres")
	flag.StringVar(&cfg.DB, "db", os.Getenv("WEFT_TEST_POSTGRES_URL"), "postgres: URL of a server (the run makes a schema of its own and drops it); default $WEFT_TEST_POSTGRES_URL")
	seed := flag.Uint64("seed", 0, "seed of the sequence (default: the time)")
	n := flag.Int("ops", 200, "operations to run")
	replay := flag.String("replay", "", "run the sequence in FILE (\"KIND ARG\" a line, as printed) instead of the seed's")
	printOps := flag.Bool("print-ops", false, "print the seed's sequence and exit")
	shrink := flag.Bool("shrink", true, "on a violation, shrink the sequence to a minimal one that still breaks the same invariant")
	budget := flag.Duration("shrink-budget", 15*time.Minute, "how long shrinking may take")
	out := flag.String("out", "", "write the failing (and the shrunk) sequence to FILE and FILE.shrunk (default: a file in the temporary directory)")
	flag.IntVar(&cfg.Workers, "workers", 2, "`weft worker` engines beside weft serve's")
	flag.BoolVar(&cfg.KeepDir, "keep", false, "keep the run's directory (database, ledger, templates) and PostgreSQL schema for inspection")
	flag.DurationVar(&cfg.Lease, "lease", 2*time.Second, "the engines' lease (when weft has --lease-ttl; otherwise its default)")
	flag.DurationVar(&cfg.Bound, "bound", 0, "how long a task may wait for no reason the model names, or a served ready step go unclaimed (default 2×lease+10s)")
	skip := flag.String("skip", "", "development only: comma-separated invariants not to check (the default checks all: "+strings.Join(model.Invariants, ", ")+")")
	quiet := flag.Bool("quiet", false, "print only violations and the final line")
	weft := flag.String("weft", "", "a weft binary to test (default: build ./cmd/weft)")
	target := flag.String("target", "", "shrink for the first violation of this invariant (default: the first violation's)")
	flag.Parse()
	if *seed == 0 {
		*seed = uint64(time.Now().UnixNano())
	}
	if *skip != "" {
		cfg.Skip = map[string]bool{}
		for _, s := range strings.Split(*skip, ",") {
			cfg.Skip[strings.TrimSpace(s)] = true
		}
	}
	var ops []model.Op
	source := fmt.Sprintf("seed=%d", *seed)
	if *replay != "" {
		f, err := os.Open(*replay)
		if err != nil {
			fail(err)
		}
		ops, err = model.ParseOps(f)
		f.Close()
		if err != nil {
			fail(fmt.Errorf("%s: %w", *replay, err))
		}
		source = "replay=" + *replay
	} else {
		ops = model.Generate(*seed, *n)
	}
	if *printOps {
		_ = model.FormatOps(os.Stdout, ops)
		return
	}
	root, err := os.Getwd()
	if err != nil {
		fail(err)
	}
	cfg.Root = root
	if !*quiet {
		cfg.Log = os.Stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	bindir, err := os.MkdirTemp("", "weft-model-bin-")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(bindir)
	if cfg.Bin = *weft; cfg.Bin == "" {
		if cfg.Bin, err = weftproc.Build(ctx, root, bindir); err != nil {
			fail(err)
		}
	}
	if *replay == "" {
		fmt.Fprintf(os.Stderr, "model: store=%s %s ops=%d (the sequence: --seed %d --ops %d --print-ops)\n", cfg.Store, source, len(ops), *seed, *n)
	} else {
		fmt.Fprintf(os.Stderr, "model: store=%s %s ops=%d\n", cfg.Store, source, len(ops))
	}
	res, err := model.Run(ctx, cfg, ops)
	if err != nil {
		fail(err)
	}
	secs := res.Elapsed.Seconds()
	fmt.Fprintf(os.Stderr, "model: %d ops in %s (%.1f ops/s)\n", res.Ops, res.Elapsed.Round(time.Second), float64(res.Ops)/secs)
	if !*quiet {
		for _, k := range model.Kinds() {
			if d := res.ByKind[k]; d > 0 {
				fmt.Fprintf(os.Stderr, "model:   %-18s %s\n", k, d.Round(time.Millisecond))
			}
		}
		fmt.Fprintf(os.Stderr, "model:   %-18s %s\n", "(state checks)", res.Checks.Round(time.Millisecond))
	}
	for _, v := range res.Violations {
		fmt.Fprintf(os.Stderr, "model: violation %s store=%s %s\n", source, cfg.Store, v)
	}
	if len(res.Violations) > 0 {
		first := res.Violations[0]
		for _, v := range res.Violations {
			if v.Invariant == *target {
				first = v
				break
			}
		}
		upto := min(first.Op+1, len(ops))
		prefix := ops[:upto]
		path := *out
		if path == "" {
			path = filepath.Join(os.TempDir(), fmt.Sprintf("weft-model-%s-%d.ops", cfg.Store, *seed))
		}
		if err := writeOps(path, prefix, fmt.Sprintf("%s store=%s: ops 0..%d, first violation %s", source, cfg.Store, upto-1, first)); err == nil {
			fmt.Fprintf(os.Stderr, "model: the sequence up to the first violation is in %s (replay: scripts/model --store %s --replay %s)\n", path, cfg.Store, path)
		}
		if *shrink {
			shrunk := shrinkRun(ctx, cfg, prefix, first.Invariant, *budget)
			sp := path + ".shrunk"
			if err := writeOps(sp, shrunk, fmt.Sprintf("%s store=%s: shrunk, breaks %s", source, cfg.Store, first.Invariant)); err == nil {
				fmt.Fprintf(os.Stderr, "model: shrunk to %d ops (invariant %s), in %s:\n", len(shrunk), first.Invariant, sp)
			}
			for i, o := range shrunk {
				fmt.Fprintf(os.Stderr, "model:   %d: %s\n", i, o)
			}
		}
	}
	fmt.Printf("model: ops=%d tasks=%d violations=%d\n", res.Ops, res.Tasks, len(res.Violations))
	if len(res.Violations) > 0 {
		os.Exit(1)
	}
}

// shrinkRun shrinks ops to a minimal sequence whose run still breaks inv.
func shrinkRun(ctx context.Context, cfg model.Config, ops []model.Op, inv string, budget time.Duration) []model.Op {
	cfg.Log = nil
	cfg.StopOn = inv
	trial := 0
	fails := func(ctx context.Context, cand []model.Op) (bool, error) {
		trial++
		res, err := model.Run(ctx, cfg, cand)
		if err != nil {
			return false, nil // could not run: not a reproduction
		}
		for _, v := range res.Violations {
			if v.Invariant == inv {
				fmt.Fprintf(os.Stderr, "model: shrink trial %d: %d ops: still breaks %s\n", trial, len(cand), inv)
				return true, nil
			}
		}
		fmt.Fprintf(os.Stderr, "model: shrink trial %d: %d ops: passes\n", trial, len(cand))
		return false, nil
	}
	shrunk, err := model.Shrink(ctx, ops, budget, fails)
	if err != nil {
		fmt.Fprintf(os.Stderr, "model: shrinking stopped: %v\n", err)
	}
	return shrunk
}

func writeOps(path string, ops []model.Op, header string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "# %s\n", header)
	if err := model.FormatOps(f, ops); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "model:", err)
	os.Exit(2)
}
