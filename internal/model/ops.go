// Package model is a model-based test of weft: from a seed it drives a real
// cluster (`weft worker` engines, a `weft serve` and a remote worker
// speaking the wire protocol) through a random sequence of operator actions,
// submissions and lifecycle events, and checks invariants against a small
// reference model as it goes. A failing sequence replays from its seed and
// shrinks to a minimal one. It is a tool (scripts/model), not part of
// weft's API. See docs/reliability.md.
package model

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
)

// Op is one operation of a sequence. Arg picks the operation's target at
// run time (a task, a step, an engine, a namespace: the Arg-th, modulo how
// many there are), so that a sequence stays meaningful when ops are removed
// from it.
type Op struct {
	Kind string
	Arg  uint32
}

func (o Op) String() string { return o.Kind + " " + strconv.FormatUint(uint64(o.Arg), 10) }

// Operation kinds, with their weights in generated sequences: most are one
// REST or CLI call; process restarts and lease expiries are rare.
const (
	OpSubmitPlain     = "submit-plain"     // one exec step
	OpSubmitDAG       = "submit-dag"       // a, then b and c (c fails once), then d
	OpSubmitFlaky     = "submit-flaky"     // one exec step that fails for good
	OpSubmitSignal    = "submit-signal"    // an exec step, then a signal wait (long timeout)
	OpSubmitSignalTO  = "submit-signal-to" // a signal wait that times out after 300ms
	OpSubmitChild     = "submit-child"     // a sub-workflow step (child: plain)
	OpSubmitBatch     = "submit-batch"     // a batch step of three items
	OpSubmitKeyed     = "submit-keyed"     // plain, with one of a few idempotency keys
	OpSubmitSupersede = "submit-supersede" // keyed, on_conflict: supersede
	OpSubmitRemote    = "submit-remote"    // a remote.work step (remote worker), then exec
	OpSubmitLong      = "submit-long"      // one exec step longer than the lease
	OpSubmitFunction  = "submit-function"  // a durable function on the remote worker: a step, a sleep, a signal wait, a step
	OpCancel          = "cancel"           // REST or CLI cancel of a task
	OpRetryTask       = "retry-task"       // retry a failed or cancelled task
	OpRetryStep       = "retry-step"       // retry a failed step
	OpResolveStep     = "resolve-step"     // resolve a failed step
	OpSignal          = "signal"           // signal a task that waits for one
	OpPause           = "pause"            // pause a namespace
	OpResume          = "resume"           // resume a namespace
	OpPauseUnknown    = "pause-unknown"    // pause a namespace that does not exist: must be refused
	OpLimit           = "limit"            // set a namespace's concurrency limit
	OpUnlimit         = "unlimit"          // lift it
	OpDelete          = "delete"           // delete a finished task
	OpPrune           = "prune"            // prune finished tasks
	OpSchedule        = "schedule"         // pause or resume the ticking schedule
	OpStopEngine      = "stop-engine"      // SIGTERM a `weft worker` (long steps in flight), restart it once it exits
	OpKillEngine      = "kill-engine"      // SIGKILL a `weft worker`, restart it
	OpLeaseExpiry     = "lease-expiry"     // the remote worker abandons its steps and goes silent past its lease
	OpWait            = "wait"             // let time pass ((Arg%5+1)×40ms)
)

var weights = []struct {
	kind string
	w    int
}{
	{OpSubmitPlain, 60}, {OpSubmitDAG, 40}, {OpSubmitFlaky, 25}, {OpSubmitSignal, 30},
	{OpSubmitSignalTO, 15}, {OpSubmitChild, 20}, {OpSubmitBatch, 20}, {OpSubmitKeyed, 20},
	{OpSubmitSupersede, 20}, {OpSubmitRemote, 25}, {OpSubmitLong, 10}, {OpSubmitFunction, 20},
	{OpCancel, 30}, {OpRetryTask, 30}, {OpRetryStep, 25}, {OpResolveStep, 15}, {OpSignal, 45},
	{OpPause, 10}, {OpResume, 14}, {OpPauseUnknown, 4}, {OpLimit, 8}, {OpUnlimit, 10},
	{OpDelete, 15}, {OpPrune, 5}, {OpSchedule, 4},
	{OpStopEngine, 4}, {OpKillEngine, 2}, {OpLeaseExpiry, 2}, {OpWait, 25},
}

// Kinds lists every operation kind.
func Kinds() []string {
	out := make([]string, len(weights))
	for i, w := range weights {
		out[i] = w.kind
	}
	return out
}

// Generate returns the sequence of n operations of a seed: a pure function
// of (seed, n), and Generate(seed, n) is a prefix of Generate(seed, n+k).
func Generate(seed uint64, n int) []Op {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	total := 0
	for _, w := range weights {
		total += w.w
	}
	ops := make([]Op, n)
	for i := range ops {
		x := rng.IntN(total)
		for _, w := range weights {
			if x < w.w {
				ops[i].Kind = w.kind
				break
			}
			x -= w.w
		}
		ops[i].Arg = rng.Uint32()
	}
	return ops
}

// FormatOps writes one op a line ("KIND ARG"), the format ParseOps reads.
func FormatOps(w io.Writer, ops []Op) error {
	bw := bufio.NewWriter(w)
	for _, o := range ops {
		if _, err := fmt.Fprintln(bw, o); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// ParseOps reads a sequence written by FormatOps. Blank lines and lines
// starting with # are skipped; a line may carry a leading index ("12: ").
func ParseOps(r io.Reader) ([]Op, error) {
	known := map[string]bool{}
	for _, k := range Kinds() {
		known[k] = true
	}
	var ops []Op
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		if i := strings.Index(s, ":"); i >= 0 {
			s = strings.TrimSpace(s[i+1:])
		}
		f := strings.Fields(s)
		if len(f) != 2 {
			return nil, fmt.Errorf("line %d: want \"KIND ARG\", got %q", line, sc.Text())
		}
		if !known[f[0]] {
			return nil, fmt.Errorf("line %d: unknown operation %q (known: %s)", line, f[0], strings.Join(Kinds(), ", "))
		}
		arg, err := strconv.ParseUint(f[1], 10, 32)
		if err != nil {
			return nil, fmt.Errorf("line %d: argument %q: %w", line, f[1], err)
		}
		ops = append(ops, Op{Kind: f[0], Arg: uint32(arg)})
	}
	return ops, sc.Err()
}
