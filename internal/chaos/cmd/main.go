// Command chaos runs weft's fault-injection suite (see scripts/chaos and
// docs/reliability.md). It prints one final line
//
//	chaos: cycles=N tasks=N lost=N stuck=N duplicated=N recovery_p50=… recovery_max=…
//
// and exits 1 on any lost, stuck or duplicated task, 2 when the run itself
// could not proceed.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/weftrun/weft/internal/chaos"
)

func main() {
	var cfg chaos.Config
	flag.StringVar(&cfg.Store, "store", "sqlite", "sqlite or postgres")
	flag.StringVar(&cfg.DB, "db", "", "postgres: URL of an existing server (a schema of its own is created and dropped); default: a throwaway cluster from scripts/pgtest")
	flag.StringVar(&cfg.PGDir, "pgdir", os.Getenv("WEFT_PGTEST_DIR"), "postgres with --db: the scripts/pgtest directory of that server, to restart it (default $WEFT_PGTEST_DIR; without it no restarts)")
	flag.IntVar(&cfg.Cycles, "cycles", 5, "faults to inject, one per cycle")
	seed := flag.Uint64("seed", 0, "seed choosing the faults and their timing (default: the time)")
	flag.IntVar(&cfg.Workers, "workers", 3, "worker processes")
	flag.IntVar(&cfg.TasksPerCycle, "tasks", 4, "tasks submitted per cycle")
	flag.DurationVar(&cfg.Deadline, "deadline", 2*time.Minute, "for every task to end after the last cycle")
	flag.BoolVar(&cfg.Serve, "serve", true, "also run `weft serve` with a remote worker (wire protocol) for a share of the work, and kill it as a fault")
	quiet := flag.Bool("quiet", false, "print only the final line (and problems, with the run's log if it fails)")
	flag.Parse()
	if *seed == 0 {
		*seed = uint64(time.Now().UnixNano())
	}
	cfg.Seed = *seed
	if cfg.Store == "postgres" && cfg.DB == "" {
		cfg.PGDir = "" // the run starts its own cluster
	}
	root, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(2)
	}
	cfg.Root = root
	// Quiet, the run's log is kept and printed only if the run fails: the
	// faults, the workers' stderr and the ledger of what went wrong.
	var kept keptLog
	cfg.Log = os.Stderr
	if *quiet {
		cfg.Log = &kept
	}
	printKept := func() {
		if *quiet {
			fmt.Fprintf(os.Stderr, "chaos: the run's log:\n%s", kept.bytes())
		}
	}
	fmt.Fprintf(os.Stderr, "chaos: store=%s seed=%d cycles=%d\n", cfg.Store, cfg.Seed, cfg.Cycles)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := chaos.Run(ctx, cfg)
	if err != nil {
		printKept()
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(2)
	}
	if !res.OK() {
		printKept() // before the findings: a log cut to its tail still shows them
	}
	if *quiet {
		for _, d := range res.Details {
			fmt.Fprintln(os.Stderr, "chaos:", d)
		}
	}
	for _, f := range []string{chaos.FaultKillWorker, chaos.FaultRollingRestart, chaos.FaultKillServe, chaos.FaultTerminatePG, chaos.FaultRestartPG, chaos.FaultFillDisk} {
		if d := res.ByFault[f]; len(d) > 0 {
			fmt.Fprintf(os.Stderr, "chaos: %s: %d, recovery p50=%s max=%s\n", f, len(d), pct(d, 50), pct(d, 100))
		}
	}
	fmt.Fprintf(os.Stderr, "chaos: %d steps ran more than once (retries and reruns after crashes: at-least-once)\n", res.Reran)
	fmt.Printf("chaos: cycles=%d tasks=%d lost=%d stuck=%d duplicated=%d unaudited=%d recovery_p50=%s recovery_max=%s\n",
		res.Cycles, res.Tasks, res.Lost, res.Stuck, res.Duplicated, res.Unaudited, pct(res.Recovery, 50), pct(res.Recovery, 100))
	if !res.OK() {
		os.Exit(1)
	}
}

// pct returns the p-th percentile (nearest rank) of ds, rounded to ms.
func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (p*len(s)+99)/100 - 1
	i = max(0, min(i, len(s)-1))
	return s[i].Round(time.Millisecond)
}

// keptLog keeps what the run logs, from any goroutine.
type keptLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (k *keptLog) Write(p []byte) (int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.buf.Write(p)
}

func (k *keptLog) bytes() []byte {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.buf.Bytes()
}
