package dag

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		nodes []Node
		want  []Error
	}{
		{
			name:  "empty graph",
			nodes: nil,
			want:  nil,
		},
		{
			name:  "single step",
			nodes: []Node{{Name: "a", Line: 1}},
			want:  nil,
		},
		{
			name: "diamond is sound",
			nodes: []Node{
				{Name: "a"},
				{Name: "b", Deps: []string{"a"}},
				{Name: "c", Deps: []string{"a"}},
				{Name: "d", Deps: []string{"b", "c"}},
			},
			want: nil,
		},
		{
			name: "dependency on a later step is fine",
			nodes: []Node{
				{Name: "b", Deps: []string{"a"}},
				{Name: "a"},
			},
			want: nil,
		},
		{
			name: "duplicate name with line",
			nodes: []Node{
				{Name: "a", Line: 3},
				{Name: "b", Line: 5},
				{Name: "a", Line: 7},
			},
			want: []Error{{Node: "a", Line: 7, Msg: "duplicate step name; first defined on line 3", Duplicate: true}},
		},
		{
			name: "duplicate name without line",
			nodes: []Node{
				{Name: "a"},
				{Name: "a", Line: 9},
			},
			want: []Error{{Node: "a", Line: 9, Msg: "duplicate step name", Duplicate: true}},
		},
		{
			name: "name defined three times",
			nodes: []Node{
				{Name: "a", Line: 1},
				{Name: "a", Line: 2},
				{Name: "a", Line: 3},
			},
			want: []Error{
				{Node: "a", Line: 2, Msg: "duplicate step name; first defined on line 1", Duplicate: true},
				{Node: "a", Line: 3, Msg: "duplicate step name; first defined on line 1", Duplicate: true},
			},
		},
		{
			name: "unknown dependency",
			nodes: []Node{
				{Name: "a", Line: 1},
				{Name: "b", Line: 2, Deps: []string{"a", "x", "y"}},
			},
			want: []Error{
				{Node: "b", Line: 2, Msg: `depends on unknown step "x"`},
				{Node: "b", Line: 2, Msg: `depends on unknown step "y"`},
			},
		},
		{
			name: "dependency on an empty-named step is unknown",
			nodes: []Node{
				{Name: ""},
				{Name: "b", Deps: []string{""}},
			},
			want: []Error{{Node: "b", Msg: `depends on unknown step ""`}},
		},
		{
			name: "self dependency",
			nodes: []Node{
				{Name: "a", Line: 4, Deps: []string{"a"}},
			},
			want: []Error{{Node: "a", Line: 4, Msg: "depends on itself"}},
		},
		{
			name: "dependency listed twice",
			nodes: []Node{
				{Name: "a"},
				{Name: "b", Line: 2, Deps: []string{"a", "a"}},
			},
			want: []Error{{Node: "b", Line: 2, Msg: `dependency "a" is listed more than once`}},
		},
		{
			name: "dependency listed three times",
			nodes: []Node{
				{Name: "a"},
				{Name: "b", Deps: []string{"a", "a", "a"}},
			},
			want: []Error{
				{Node: "b", Msg: `dependency "a" is listed more than once`},
				{Node: "b", Msg: `dependency "a" is listed more than once`},
			},
		},
		{
			name: "unknown dependency listed twice is reported as unknown once",
			nodes: []Node{
				{Name: "b", Deps: []string{"x", "x"}},
			},
			want: []Error{
				{Node: "b", Msg: `depends on unknown step "x"`},
				{Node: "b", Msg: `dependency "x" is listed more than once`},
			},
		},
		{
			name: "self dependency listed twice",
			nodes: []Node{
				{Name: "a", Deps: []string{"a", "a"}},
			},
			want: []Error{
				{Node: "a", Msg: "depends on itself"},
				{Node: "a", Msg: `dependency "a" is listed more than once`},
			},
		},
		{
			name: "two-step cycle",
			nodes: []Node{
				{Name: "a", Line: 1, Deps: []string{"b"}},
				{Name: "b", Line: 2, Deps: []string{"a"}},
			},
			want: []Error{{Node: "a", Line: 1, Msg: "cycle: a -> b -> a"}},
		},
		{
			name: "three-step cycle found from its middle is reported on its first node",
			nodes: []Node{
				{Name: "start", Deps: []string{"b"}},
				{Name: "a", Line: 2, Deps: []string{"c"}},
				{Name: "b", Line: 3, Deps: []string{"a"}},
				{Name: "c", Line: 4, Deps: []string{"b"}},
			},
			want: []Error{{Node: "a", Line: 2, Msg: "cycle: a -> c -> b -> a"}},
		},
		{
			name: "two cycles sharing a step",
			nodes: []Node{
				{Name: "a", Deps: []string{"b"}},
				{Name: "b", Deps: []string{"a", "c"}},
				{Name: "c", Deps: []string{"b"}},
			},
			want: []Error{
				{Node: "a", Msg: "cycle: a -> b -> a"},
				{Node: "b", Msg: "cycle: b -> c -> b"},
			},
		},
		{
			name: "two disjoint cycles",
			nodes: []Node{
				{Name: "x", Deps: []string{"y"}},
				{Name: "a", Deps: []string{"b"}},
				{Name: "y", Deps: []string{"x"}},
				{Name: "b", Deps: []string{"a"}},
				{Name: "ok", Deps: []string{"a", "x"}},
			},
			want: []Error{
				{Node: "x", Msg: "cycle: x -> y -> x"},
				{Node: "a", Msg: "cycle: a -> b -> a"},
			},
		},
		{
			name: "cycle through the dependencies of a duplicate definition",
			nodes: []Node{
				{Name: "a", Line: 1},
				{Name: "b", Line: 2, Deps: []string{"a"}},
				{Name: "a", Line: 3, Deps: []string{"b"}},
			},
			want: []Error{
				{Node: "a", Line: 1, Msg: "cycle: a -> b -> a"},
				{Node: "a", Line: 3, Msg: "duplicate step name; first defined on line 1", Duplicate: true},
			},
		},
		{
			name: "self dependency is not also reported as a cycle",
			nodes: []Node{
				{Name: "a", Deps: []string{"a", "b"}},
				{Name: "b"},
			},
			want: []Error{{Node: "a", Msg: "depends on itself"}},
		},
		{
			name: "empty names are ignored",
			nodes: []Node{
				{Name: "", Line: 1, Deps: []string{"nope", "", ""}},
				{Name: "", Line: 2},
				{Name: "a", Line: 3},
			},
			want: nil,
		},
		{
			name: "errors come in definition order of their node",
			nodes: []Node{
				{Name: "c", Line: 1, Deps: []string{"d"}},
				{Name: "b", Line: 2, Deps: []string{"zz", "b"}},
				{Name: "d", Line: 3, Deps: []string{"c", "c"}},
				{Name: "b", Line: 4},
			},
			want: []Error{
				{Node: "c", Line: 1, Msg: "cycle: c -> d -> c"},
				{Node: "b", Line: 2, Msg: `depends on unknown step "zz"`},
				{Node: "b", Line: 2, Msg: "depends on itself"},
				{Node: "d", Line: 3, Msg: `dependency "c" is listed more than once`},
				{Node: "b", Line: 4, Msg: "duplicate step name; first defined on line 2", Duplicate: true},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := Validate(tt.nodes)
			require.Equal(t, tt.want, got)
			require.Equal(t, got, Validate(tt.nodes), "output must be deterministic")
		})
	}
}

func TestEdges(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		nodes        []Node
		wantDeps     [][]int
		wantChildren [][]int
	}{
		{
			name:         "empty",
			nodes:        nil,
			wantDeps:     [][]int{},
			wantChildren: [][]int{},
		},
		{
			name: "diamond",
			nodes: []Node{
				{Name: "a"},
				{Name: "b", Deps: []string{"a"}},
				{Name: "c", Deps: []string{"a"}},
				{Name: "d", Deps: []string{"b", "c"}},
			},
			wantDeps:     [][]int{nil, {0}, {0}, {1, 2}},
			wantChildren: [][]int{{1, 2}, {3}, {3}, nil},
		},
		{
			name: "diamond defined bottom up with unsorted deps",
			nodes: []Node{
				{Name: "d", Deps: []string{"c", "b"}},
				{Name: "c", Deps: []string{"a"}},
				{Name: "b", Deps: []string{"a"}},
				{Name: "a"},
			},
			wantDeps:     [][]int{{1, 2}, {3}, {3}, nil},
			wantChildren: [][]int{nil, {0}, {0}, {1, 2}},
		},
		{
			name: "unknown, self and repeated dependencies are left out",
			nodes: []Node{
				{Name: "a", Deps: []string{"a", "x"}},
				{Name: "b", Deps: []string{"a", "a"}},
			},
			wantDeps:     [][]int{nil, {0}},
			wantChildren: [][]int{{1}, nil},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			deps, children := Edges(tt.nodes)
			require.Equal(t, tt.wantDeps, deps)
			require.Equal(t, tt.wantChildren, children)
		})
	}
}

var allRules = []Rule{AllSuccess, AllDone, OneSuccess, OneFailed, AllFailed, NoneFailed, NoneFailedMinOneSuccess, Always}

// TestDecideTruthTable checks every rule against count combinations of three
// dependencies. Columns: the decision for each rule, in the order of the
// struct fields.
func TestDecideTruthTable(t *testing.T) {
	t.Parallel()
	const (
		W = Wait
		R = Run
		S = Skip
	)
	type row struct {
		c Counts
		// allSuccess, allDone, oneSuccess, oneFailed, allFailed,
		// noneFailed, noneFailedMinOneSuccess, always
		want [8]Decision
	}
	c := func(total, ok, failed, skipped int) Counts {
		return Counts{Total: total, Succeeded: ok, Failed: failed, Skipped: skipped}
	}
	rows := []row{
		// No dependencies: every rule runs.
		{c(0, 0, 0, 0), [8]Decision{R, R, R, R, R, R, R, R}},

		// One dependency.
		{c(1, 0, 0, 0), [8]Decision{W, W, W, W, W, W, W, W}},
		{c(1, 1, 0, 0), [8]Decision{R, R, R, S, S, R, R, R}},
		{c(1, 0, 1, 0), [8]Decision{S, R, S, R, R, S, S, R}},
		{c(1, 0, 0, 1), [8]Decision{S, R, S, S, S, R, S, R}},

		// Three dependencies, none done.
		{c(3, 0, 0, 0), [8]Decision{W, W, W, W, W, W, W, W}},
		// Some done, some pending.
		{c(3, 1, 0, 0), [8]Decision{W, W, R, W, S, W, W, W}},
		{c(3, 2, 0, 0), [8]Decision{W, W, R, W, S, W, W, W}},
		{c(3, 0, 1, 0), [8]Decision{S, W, W, R, W, S, S, W}},
		{c(3, 0, 2, 0), [8]Decision{S, W, W, R, W, S, S, W}},
		{c(3, 0, 0, 1), [8]Decision{S, W, W, W, S, W, W, W}},
		{c(3, 0, 0, 2), [8]Decision{S, W, W, W, S, W, W, W}},
		{c(3, 1, 1, 0), [8]Decision{S, W, R, R, S, S, S, W}},
		{c(3, 1, 0, 1), [8]Decision{S, W, R, W, S, W, W, W}},
		{c(3, 0, 1, 1), [8]Decision{S, W, W, R, S, S, S, W}},
		// All done.
		{c(3, 3, 0, 0), [8]Decision{R, R, R, S, S, R, R, R}},
		{c(3, 0, 3, 0), [8]Decision{S, R, S, R, R, S, S, R}},
		{c(3, 0, 0, 3), [8]Decision{S, R, S, S, S, R, S, R}},
		{c(3, 2, 1, 0), [8]Decision{S, R, R, R, S, S, S, R}},
		{c(3, 1, 2, 0), [8]Decision{S, R, R, R, S, S, S, R}},
		{c(3, 2, 0, 1), [8]Decision{S, R, R, S, S, R, R, R}},
		{c(3, 1, 0, 2), [8]Decision{S, R, R, S, S, R, R, R}},
		{c(3, 0, 2, 1), [8]Decision{S, R, S, R, S, S, S, R}},
		{c(3, 0, 1, 2), [8]Decision{S, R, S, R, S, S, S, R}},
		{c(3, 1, 1, 1), [8]Decision{S, R, R, R, S, S, S, R}},
	}
	for _, r := range rows {
		for i, rule := range allRules {
			name := fmt.Sprintf("%s/total=%d,ok=%d,failed=%d,skipped=%d", rule, r.c.Total, r.c.Succeeded, r.c.Failed, r.c.Skipped)
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				require.Equal(t, r.want[i], Decide(rule, r.c))
			})
		}
	}
}

// forEachCounts calls f with every consistent Counts of up to maxTotal
// dependencies.
func forEachCounts(maxTotal int, f func(Counts)) {
	for total := 0; total <= maxTotal; total++ {
		for ok := 0; ok <= total; ok++ {
			for failed := 0; ok+failed <= total; failed++ {
				for skipped := 0; ok+failed+skipped <= total; skipped++ {
					f(Counts{Total: total, Succeeded: ok, Failed: failed, Skipped: skipped})
				}
			}
		}
	}
}

// later returns the counts reachable from c when one more pending
// dependency ends.
func later(c Counts) []Counts {
	if c.Succeeded+c.Failed+c.Skipped >= c.Total {
		return nil
	}
	ok, failed, skipped := c, c, c
	ok.Succeeded++
	failed.Failed++
	skipped.Skipped++
	return []Counts{ok, failed, skipped}
}

func TestDecideEmptyRuleIsAllSuccess(t *testing.T) {
	t.Parallel()
	forEachCounts(4, func(c Counts) {
		require.Equal(t, Decide(AllSuccess, c), Decide("", c), "counts %+v", c)
		require.Equal(t, Decide(AllSuccess, c), Decide("bogus", c), "counts %+v", c)
	})
}

func TestDecideProperties(t *testing.T) {
	t.Parallel()
	for _, rule := range allRules {
		t.Run(string(rule), func(t *testing.T) {
			t.Parallel()
			forEachCounts(4, func(c Counts) {
				d := Decide(rule, c)
				done := c.Succeeded+c.Failed+c.Skipped == c.Total
				if c.Total == 0 {
					require.Equal(t, Run, d, "no dependencies must run")
				}
				if done {
					require.NotEqual(t, Wait, d, "counts %+v: all done must decide", c)
				}
				if d == Wait {
					return
				}
				// A decision is final: no dependency ending later changes it,
				// so a step never runs when later counts would skip it, and
				// is never skipped when they would run it.
				var check func(Counts)
				check = func(c2 Counts) {
					for _, n := range later(c2) {
						require.Equal(t, d, Decide(rule, n), "rule %s: %+v decided %s but later %+v differs", rule, c, d, n)
						check(n)
					}
				}
				check(c)
			})
		})
	}
}

// TestDecideAllSuccessRunsOnlyOnFullSuccess checks that all_success runs a
// step only once every dependency succeeded, so no later outcome (a failure
// or a skip) could have turned the decision into Skip.
func TestDecideAllSuccessRunsOnlyOnFullSuccess(t *testing.T) {
	t.Parallel()
	forEachCounts(4, func(c Counts) {
		if Decide(AllSuccess, c) == Run {
			require.Equal(t, c.Total, c.Succeeded, "counts %+v", c)
		}
	})
}

func TestValidRule(t *testing.T) {
	t.Parallel()
	tests := []struct {
		rule Rule
		want bool
	}{
		{"", true},
		{AllSuccess, true},
		{AllDone, true},
		{OneSuccess, true},
		{OneFailed, true},
		{AllFailed, true},
		{NoneFailed, true},
		{NoneFailedMinOneSuccess, true},
		{Always, true},
		{"none_skipped", false},
		{"ALL_SUCCESS", false},
		{"all_success ", false},
		{"bogus", false},
	}
	for _, tt := range tests {
		t.Run(string(tt.rule), func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, ValidRule(tt.rule))
		})
	}
}

func TestDecisionString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		d    Decision
		want string
	}{
		{Wait, "wait"},
		{Run, "run"},
		{Skip, "skip"},
		{Decision(7), "Decision(7)"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, tt.d.String())
		})
	}
}
