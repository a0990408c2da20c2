package claim

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/internal/sqlstore/sqltx"
	"github.com/weftrun/weft/store"
)

// TestFairGive: how one claim's slots are handed out between namespaces,
// from their weights, running steps and passes.
func TestFairGive(t *testing.T) {
	t.Parallel()
	type ns struct {
		name            string
		weight, running int
		pass            float64
	}
	tests := []struct {
		name   string
		shares []ns
		want   int
		given  map[string]int
	}{
		{"idle, by weight", []ns{{"a", 3, 0, 0}, {"b", 1, 0, 0}}, 8, map[string]int{"a": 6, "b": 2}},
		{"running counts", []ns{{"a", 3, 6, 0}, {"b", 1, 0, 0}}, 2, map[string]int{"a": 0, "b": 2}},
		{"over its share gets nothing", []ns{{"a", 1, 10, 0}, {"b", 1, 0, 0}}, 4, map[string]int{"a": 0, "b": 4}},
		{"unweighted weigh 1", []ns{{"a", 2, 0, 0}, {"b", 1, 0, 0}, {"c", 1, 0, 0}}, 4, map[string]int{"a": 2, "b": 1, "c": 1}},
		{"one slot: the lower pass", []ns{{"a", 3, 0, 0.5}, {"b", 1, 0, 0}}, 1, map[string]int{"a": 0, "b": 1}},
		{"one slot: below its share before the pass", []ns{{"a", 3, 3, 0}, {"b", 1, 0, 5}}, 1, map[string]int{"a": 0, "b": 1}},
		{"one slot: both below, the lower pass", []ns{{"a", 3, 2, 0}, {"b", 1, 0, 5}}, 1, map[string]int{"a": 1, "b": 0}},
		{"equal passes: the first name", []ns{{"a", 1, 0, 0}, {"b", 1, 0, 0}}, 1, map[string]int{"a": 1, "b": 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := &fairPasses{pass: map[string]float64{}}
			var shares []fairShare
			for _, n := range tt.shares {
				f.pass[n.name] = n.pass
				shares = append(shares, fairShare{namespace: n.name, weight: n.weight, running: n.running})
			}
			f.give(shares, tt.want)
			got := map[string]int{}
			for _, sh := range shares {
				got[sh.namespace] = sh.given
			}
			require.Equal(t, tt.given, got)
			low := f.pass[shares[0].namespace]
			for _, sh := range shares {
				low = min(low, f.pass[sh.namespace])
			}
			require.Zero(t, low, "passes are kept relative to the lowest")
		})
	}
}

// TestFairGiveOverClaims: one slot at a time with nothing left running
// (each step ends before the next claim), the passes share the claims by
// weight.
func TestFairGiveOverClaims(t *testing.T) {
	t.Parallel()
	f := &fairPasses{}
	got := map[string]int{}
	for range 400 {
		shares := []fairShare{{namespace: "a", weight: 3}, {namespace: "b", weight: 1}, {namespace: "c", weight: 1}}
		f.give(shares, 1)
		for _, sh := range shares {
			got[sh.namespace] += sh.given
		}
	}
	require.Equal(t, map[string]int{"a": 240, "b": 80, "c": 80}, got)
}

// TestFairPartNamesTheIndex: a part of the fair shares names the predicate
// of steps_ready_namespace, which the ordinary claim query does not.
func TestFairPartNamesTheIndex(t *testing.T) {
	t.Parallel()
	pl := Planner{Dialect: unlocked{}}
	q, _ := pl.ClaimQuery(3, store.ClaimParams{Namespaces: []string{"shop"}}, nil, nil)
	require.NotContains(t, q, "namespace <> ''")
	require.Contains(t, FairPart(q), "WHERE state = 'ready' AND namespace <> ''")
}

// unlocked is the Dialect of a database whose claim locks no rows, as
// SQLite's: what ClaimQuery asks of it.
type unlocked struct{ sqltx.Dialect }

func (unlocked) ClaimLimit() string { return "LIMIT ?" }
func (unlocked) ClaimLock() string  { return "" }
