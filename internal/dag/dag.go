// Package dag checks the dependency graph of a workflow and decides, from
// the outcomes of a step's dependencies and its trigger rule, whether the
// step runs, is skipped or keeps waiting.
//
// The package is pure: it does no I/O and keeps no state.
package dag

import (
	"fmt"
	"slices"
	"strings"
)

// Node is one step of a workflow for graph checks.
type Node struct {
	// Name is the step's name, unique within the workflow.
	Name string
	// Deps names the steps this one depends on.
	Deps []string
	// Line is the step's line in its source template, 0 if unknown.
	Line int
}

// Error is one problem found in a graph.
type Error struct {
	// Node is the name of the step the problem is reported on.
	Node string
	// Line is that step's source line, 0 if unknown.
	Line int
	// Msg describes the problem.
	Msg string
	// Duplicate marks a step name defined more than once: the problem is
	// the step's name, not its dependencies.
	Duplicate bool
}

// Validate returns every problem in the graph:
//
//   - a step name defined more than once, reported on each later
//     definition ("duplicate step name; first defined on line N", without
//     the line when the first definition's line is 0);
//   - a dependency on an unknown step (`depends on unknown step "x"`);
//   - a step depending on itself ("depends on itself");
//   - a dependency listed more than once (`dependency "x" is listed more
//     than once`), reported once per extra listing;
//   - cycles, one Error per cycle found ("cycle: a -> b -> c -> a", each
//     arrow pointing from a step to one of its dependencies), each reported
//     on the node of the cycle defined first and starting there.
//
// Cycles are found by a depth-first search in definition order: each back
// edge closes one cycle, so every cycle is reported once, and two cycles
// sharing steps are both reported, though not every simple cycle of a
// strongly connected tangle necessarily is. When a name is defined more than
// once, its dependencies are the union of those of all its definitions.
//
// Nodes with an empty name are ignored (the caller reports them). Errors are
// ordered by the definition index of the node they are reported on, then by
// kind (duplicate, dependency problems in listing order, cycles), so the
// output is deterministic. Validate returns nil when the graph is sound.
func Validate(nodes []Node) []Error {
	type keyed struct {
		idx int
		err Error
	}
	var out []keyed
	add := func(idx int, msg string) {
		n := nodes[idx]
		out = append(out, keyed{idx, Error{Node: n.Name, Line: n.Line, Msg: msg}})
	}

	first := make(map[string]int, len(nodes)) // name -> index of first definition
	for i, n := range nodes {
		if n.Name == "" {
			continue
		}
		f, dup := first[n.Name]
		if !dup {
			first[n.Name] = i
			continue
		}
		if l := nodes[f].Line; l > 0 {
			add(i, fmt.Sprintf("duplicate step name; first defined on line %d", l))
		} else {
			add(i, "duplicate step name")
		}
		out[len(out)-1].err.Duplicate = true
	}

	// adj holds, per first-definition index, the first-definition indexes
	// of its known dependencies other than itself, in listing order.
	adj := make(map[int][]int, len(first))
	for i, n := range nodes {
		if n.Name == "" {
			continue
		}
		seen := make(map[string]bool, len(n.Deps))
		from := first[n.Name]
		for _, d := range n.Deps {
			switch {
			case seen[d]:
				add(i, fmt.Sprintf("dependency %q is listed more than once", d))
				continue
			case d == n.Name:
				add(i, "depends on itself")
			default:
				to, ok := first[d]
				if !ok {
					add(i, fmt.Sprintf("depends on unknown step %q", d))
				} else if !slices.Contains(adj[from], to) {
					adj[from] = append(adj[from], to)
				}
			}
			seen[d] = true
		}
	}

	for _, cyc := range cycles(len(nodes), adj) {
		names := make([]string, 0, len(cyc)+1)
		for _, i := range cyc {
			names = append(names, nodes[i].Name)
		}
		names = append(names, nodes[cyc[0]].Name)
		add(cyc[0], "cycle: "+strings.Join(names, " -> "))
	}

	// Stable, so errors of one node keep the order in which they were found:
	// duplicates, then dependency problems, then cycles.
	slices.SortStableFunc(out, func(a, b keyed) int { return a.idx - b.idx })
	if len(out) == 0 {
		return nil
	}
	errs := make([]Error, len(out))
	for i, k := range out {
		errs[i] = k.err
	}
	return errs
}

// cycles runs a depth-first search over the n node indexes, roots and edges
// taken in definition and listing order, and returns one cycle per back
// edge, rotated to start at its lowest index. Indexes absent from adj's keys
// and values (empty names, later duplicates) are never visited as part of
// a cycle because they have no edges.
func cycles(n int, adj map[int][]int) [][]int {
	const (
		unvisited = iota
		onStack
		finished
	)
	color := make([]int, n)
	var stack []int
	var found [][]int
	var visit func(u int)
	visit = func(u int) {
		color[u] = onStack
		stack = append(stack, u)
		for _, v := range adj[u] {
			switch color[v] {
			case unvisited:
				visit(v)
			case onStack:
				at := slices.Index(stack, v)
				cyc := slices.Clone(stack[at:])
				low := slices.Index(cyc, slices.Min(cyc))
				found = append(found, append(cyc[low:], cyc[:low]...))
			}
		}
		stack = stack[:len(stack)-1]
		color[u] = finished
	}
	for u := range n {
		if color[u] == unvisited {
			visit(u)
		}
	}
	return found
}

// Edges returns, for each node index, the indexes of its dependencies and of
// its children (the nodes that depend on it), both sorted ascending and free
// of repeats; a node without any has a nil slice. It assumes Validate
// passed: unknown dependencies and self-dependencies are left out, and a
// name defined twice resolves to its first definition.
func Edges(nodes []Node) (deps, children [][]int) {
	index := make(map[string]int, len(nodes))
	for i, n := range nodes {
		if _, dup := index[n.Name]; n.Name != "" && !dup {
			index[n.Name] = i
		}
	}
	deps = make([][]int, len(nodes))
	children = make([][]int, len(nodes))
	for i, n := range nodes {
		if n.Name == "" {
			continue
		}
		for _, d := range n.Deps {
			j, ok := index[d]
			if !ok || j == i || slices.Contains(deps[i], j) {
				continue
			}
			deps[i] = append(deps[i], j)
			children[j] = append(children[j], i)
		}
		slices.Sort(deps[i])
	}
	// children[j] is filled in increasing i, so it is already sorted.
	return deps, children
}

// Rule is a trigger rule deciding when a step with dependencies runs.
type Rule string

// Trigger rules, with Airflow's semantics; see Decide.
const (
	// AllSuccess runs when every dependency succeeded (the default).
	AllSuccess Rule = "all_success"
	// AllDone runs when every dependency is done, whatever the outcome.
	AllDone Rule = "all_done"
	// OneSuccess runs as soon as one dependency succeeded.
	OneSuccess Rule = "one_success"
	// OneFailed runs as soon as one dependency failed.
	OneFailed Rule = "one_failed"
	// AllFailed runs when every dependency failed.
	AllFailed Rule = "all_failed"
	// NoneFailed runs when every dependency is done and none failed.
	NoneFailed Rule = "none_failed"
	// NoneFailedMinOneSuccess runs when every dependency is done, none
	// failed and at least one succeeded.
	NoneFailedMinOneSuccess Rule = "none_failed_min_one_success"
	// Always runs when every dependency is done, whatever the outcome.
	Always Rule = "always"
)

// Counts are the outcomes of a step's dependencies so far. Succeeded
// includes steps resolved manually; Failed includes expired and cancelled
// ones. Done is Succeeded+Failed+Skipped; the rest are still pending.
type Counts struct {
	Total, Succeeded, Failed, Skipped int
}

// Decision is what to do with a pending step.
type Decision int

// Decisions.
const (
	// Wait leaves the step pending until more dependencies are done.
	Wait Decision = iota
	// Run makes the step ready.
	Run
	// Skip skips the step.
	Skip
)

// String returns "wait", "run" or "skip".
func (d Decision) String() string {
	switch d {
	case Wait:
		return "wait"
	case Run:
		return "run"
	case Skip:
		return "skip"
	}
	return fmt.Sprintf("Decision(%d)", int(d))
}

// Decide applies the rule ("" means AllSuccess) to the counts, with Airflow's
// semantics:
//
//	all_success                  run when all succeeded; skip as soon as one failed or was skipped
//	all_done                     run when all are done
//	one_success                  run as soon as one succeeded; skip when all are done and none succeeded
//	one_failed                   run as soon as one failed; skip when all are done and none failed
//	all_failed                   run when all failed; skip as soon as one succeeded or was skipped
//	none_failed                  run when all are done and none failed; skip as soon as one failed
//	none_failed_min_one_success  run when all are done, none failed and one succeeded;
//	                             skip as soon as one failed, or when all are done and none succeeded
//	always                       run when all are done
//
// Otherwise the step waits. A step with no dependencies (Total 0) runs under
// every rule. Once Decide returns Run or Skip, no later counts (more
// dependencies done) change the decision. A rule that is not ValidRule is
// treated as AllSuccess; callers validate rules up front.
func Decide(r Rule, c Counts) Decision {
	if c.Total <= 0 {
		return Run
	}
	allDone := c.Succeeded+c.Failed+c.Skipped >= c.Total
	switch r {
	case AllDone, Always:
		if allDone {
			return Run
		}
	case OneSuccess:
		if c.Succeeded > 0 {
			return Run
		}
		if allDone {
			return Skip
		}
	case OneFailed:
		if c.Failed > 0 {
			return Run
		}
		if allDone {
			return Skip
		}
	case AllFailed:
		if c.Succeeded > 0 || c.Skipped > 0 {
			return Skip
		}
		if allDone {
			return Run
		}
	case NoneFailed:
		if c.Failed > 0 {
			return Skip
		}
		if allDone {
			return Run
		}
	case NoneFailedMinOneSuccess:
		if c.Failed > 0 {
			return Skip
		}
		if allDone {
			if c.Succeeded > 0 {
				return Run
			}
			return Skip
		}
	default: // AllSuccess, "" and unknown rules
		if c.Failed > 0 || c.Skipped > 0 {
			return Skip
		}
		if allDone {
			return Run
		}
	}
	return Wait
}

// ValidRule reports whether r is "" or one of the rules above.
func ValidRule(r Rule) bool {
	switch r {
	case "", AllSuccess, AllDone, OneSuccess, OneFailed, AllFailed, NoneFailed, NoneFailedMinOneSuccess, Always:
		return true
	}
	return false
}
