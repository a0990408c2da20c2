package main

import (
	"errors"
	"strconv"
	"time"

	"github.com/weftrun/weft/internal/ident"

	"github.com/spf13/pflag"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/internal/config"
	"github.com/weftrun/weft/workflow"
)

// engineFlags are the flags of the commands that run an engine.
type engineFlags struct {
	concurrency int
	namespaces  []string
	caps        []string
	drain       time.Duration
	maxPressure []string
	leaseTTL    time.Duration
	heartbeat   time.Duration
	staleAfter  time.Duration
}

// add declares the flags; drainHelp says when --drain applies.
func (f *engineFlags) add(fs *pflag.FlagSet, drainHelp string) {
	fs.IntVar(&f.concurrency, "concurrency", weft.DefaultConcurrency, "steps run at once")
	fs.StringSliceVar(&f.namespaces, "namespaces", nil, "run only the steps of tasks in these namespaces, as NS,... (a dedicated pool); default: every namespace")
	// --cap NS=N was a per-process copy of a namespace limit; limits are
	// held in the database now (weft limit). The flag stays, hidden, to
	// say so.
	fs.StringArrayVar(&f.caps, "cap", nil, "removed: use 'weft limit NAMESPACE --concurrency N'")
	_ = fs.MarkHidden("cap")
	fs.DurationVar(&f.drain, "drain", weft.DefaultShutdownTimeout, drainHelp)
	fs.StringSliceVar(&f.maxPressure, "max-pressure", nil,
		"load gate: claim nothing while the host's pressure is above a threshold, as RESOURCE=PERCENT,... with resources cpu, io, memory (Linux PSI, 4.20+)")
	fs.DurationVar(&f.leaseTTL, "lease-ttl", weft.DefaultLeaseTTL,
		"how long after its last heartbeat this engine is presumed dead and its steps are run elsewhere (at least twice --heartbeat-interval)")
	fs.DurationVar(&f.heartbeat, "heartbeat-interval", weft.DefaultHeartbeatInterval,
		"how often this engine renews the leases of its running steps (and remote workers theirs)")
	fs.DurationVar(&f.staleAfter, "stale-after", weft.DefaultStaleAfter,
		"how long a ready step may wait while no live engine or worker serves its handler before its task needs attention")
}

// config validates the flags and returns the engine configuration; c
// (which may be nil) names where a refused value came from, and shows it
// (config.Layers.Show).
func (f *engineFlags) config(c *config.Layers) (weft.Config, error) {
	if f.concurrency < 1 || f.concurrency > weft.MaxConcurrency {
		return weft.Config{}, usageErrorf("%s must be from 1 to %d, got %s", c.Describe("concurrency"), weft.MaxConcurrency, c.Show("concurrency", strconv.Itoa(f.concurrency)))
	}
	if f.drain < 0 {
		return weft.Config{}, usageErrorf("%s must not be negative", c.Describe("drain"))
	}
	if len(f.caps) > 0 {
		return weft.Config{}, usageErrorf("--cap was removed: %s", removedSettings["engine.caps"])
	}
	if c != nil && c.Env("WEFT_CAPS") != "" {
		return weft.Config{}, usageErrorf("WEFT_CAPS was removed: %s", removedSettings["engine.caps"])
	}
	if f.staleAfter <= 0 {
		return weft.Config{}, usageErrorf("%s must be more than 0, got %s", c.Describe("stale-after"), c.Show("stale-after", f.staleAfter.String()))
	}
	if f.leaseTTL <= 0 {
		return weft.Config{}, usageErrorf("%s must be more than 0, got %s", c.Describe("lease-ttl"), c.Show("lease-ttl", f.leaseTTL.String()))
	}
	if f.heartbeat <= 0 {
		return weft.Config{}, usageErrorf("%s must be more than 0, got %s", c.Describe("heartbeat-interval"), c.Show("heartbeat-interval", f.heartbeat.String()))
	}
	if f.leaseTTL < 2*f.heartbeat {
		return weft.Config{}, usageErrorf("%s (%s) must be at least twice %s (%s): a lease must outlast a missed heartbeat",
			c.Describe("lease-ttl"), c.Show("lease-ttl", f.leaseTTL.String()), c.Describe("heartbeat-interval"), c.Show("heartbeat-interval", f.heartbeat.String()))
	}
	if err := workflow.CheckNames(f.namespaces); err != nil {
		var ne *workflow.NameError
		errors.As(err, &ne)
		what := "is not a namespace (" + ident.Rule + ")"
		if ne.Twice {
			what = "is listed twice"
		}
		return weft.Config{}, usageErrorf("%s: %q %s", c.Describe("namespaces"), c.Show("namespaces", ne.Name), what)
	}
	maxPressure, err := parseMaxPressure(f.maxPressure, c)
	if err != nil {
		return weft.Config{}, err
	}
	return weft.Config{Concurrency: f.concurrency, Namespaces: f.namespaces, MaxPressure: maxPressure,
		LeaseTTL: f.leaseTTL, HeartbeatInterval: f.heartbeat, StaleAfter: f.staleAfter}, nil
}
