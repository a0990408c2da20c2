package postgres_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/internal/pgtesting"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/store/postgres"
)

// TestClaimAfterThePoliciesMoved: a claim sends its first round's query,
// built from the policies it last read, with its first statement; when
// that statement finds the policies moved (here a limit elsewhere, which
// leaves the query as it was), the claim reads them again and claims what
// they allow, from a query of its own. Each case's change is made by
// another handle between two claims of the first.
func TestClaimAfterThePoliciesMoved(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		change store.PolicyChange
		want   int
	}{
		{"a limit elsewhere", store.PolicyChange{Target: "other", Concurrency: ptr(5), Actor: "test"}, 3},
		{"a pause of the namespace", store.PolicyChange{Target: "ns", Paused: ptr(true), Actor: "test"}, 0},
		{"a limit of the namespace", store.PolicyChange{Target: "ns", Concurrency: ptr(1), Actor: "test"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			hs := handles(t, 2)
			got, err := hs[0].ClaimSteps(ctx, store.ClaimParams{EngineID: "e", Limit: 5})
			require.NoError(t, err)
			require.Empty(t, got, "nothing to claim yet; the policies are read")
			tasks := make([]store.TaskInsert, 3)
			for i := range tasks {
				tasks[i] = store.TaskInsert{Namespace: "ns", Workflow: "wf", Version: "1", Steps: []store.StepInsert{{Name: "s", Handler: "h", MaxAttempts: 1}}}
			}
			_, err = hs[0].InsertTasks(ctx, tasks)
			require.NoError(t, err)
			_, err = hs[1].SetPolicy(ctx, tc.change)
			require.NoError(t, err)
			got, err = hs[0].ClaimSteps(ctx, store.ClaimParams{EngineID: "e", Limit: 5})
			require.NoError(t, err)
			require.Len(t, got, tc.want)
		})
	}
}

// TestClaimInOneStatement: a claim under no policies selects its steps and
// claims them in one statement, sent with its first; a step under a key of
// a limit (which the claim counts before it claims) shuts that statement's
// gate, and the claim's rounds select and claim as before.
func TestClaimInOneStatement(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		step store.StepInsert
		want int
		// claims: the statements that mark steps running, of a first
		// claim and of a second one; commits: whether the first such
		// statement of each went with the transaction's COMMIT.
		claims, claims2   int
		commits, commits2 bool
	}{
		{"plain steps", store.StepInsert{Name: "s", Handler: "h", MaxAttempts: 1}, 3, 1, 1, true, true},
		// The claim sent with its COMMIT finds its gate shut and runs
		// again (its gate, then its rounds); the next claim keeps its
		// transaction open for the rounds, or, under the limit it met,
		// claims none ahead at all.
		{"under a key of a limit", store.StepInsert{Name: "s", Handler: "h", MaxAttempts: 1, LimitKey: "k", Limit: 1}, 1, 3, 0, true, false},
		{"under a key of a rate", store.StepInsert{Name: "s", Handler: "h", MaxAttempts: 1, RateKey: "r", Rate: store.Rate{Limit: 2, Per: time.Hour}}, 2, 3, 1, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s, tr, schema := traced(t, "oneclaim")
			// The first claim reads the policies; the next ones build on
			// them.
			got, err := s.ClaimSteps(ctx, store.ClaimParams{EngineID: "e", Limit: 5})
			require.NoError(t, err)
			require.Empty(t, got)
			tasks := make([]store.TaskInsert, 3)
			for i := range tasks {
				tasks[i] = store.TaskInsert{Namespace: "ns", Workflow: "wf", Version: "1", Steps: []store.StepInsert{tc.step}}
			}
			_, err = s.InsertTasks(ctx, tasks)
			require.NoError(t, err)
			tr.reset()
			got, err = s.ClaimSteps(ctx, store.ClaimParams{EngineID: "e", Limit: 5})
			require.NoError(t, err)
			require.Len(t, got, tc.want)
			for _, c := range got {
				require.Equal(t, state.StepRunning, c.State)
				require.Equal(t, "wf", c.Workflow, "the task's part of what the handler sees")
			}
			tr.check(t, tc.claims, tc.commits)
			// The audit trail shows each claim once, from the step's row
			// until an audit row records it.
			var n int
			require.NoError(t, s.DB().QueryRowContext(ctx, `SELECT count(*) FROM `+schema+`.audit WHERE to_state = 'running'`).Scan(&n))
			require.Zero(t, n, "the claim writes no audit row")
			for _, c := range got {
				trail, err := s.Audit(ctx, c.TaskID)
				require.NoError(t, err)
				claims := 0
				for _, e := range trail {
					if e.Step != "" && e.To == string(state.StepRunning) {
						claims++
						require.Equal(t, c.Attempts, e.Attempt)
						require.Equal(t, "e", e.EngineID)
					}
				}
				require.Equal(t, 1, claims, "task %d", c.TaskID)
			}

			_, err = s.InsertTasks(ctx, tasks)
			require.NoError(t, err)
			tr.reset()
			_, err = s.ClaimSteps(ctx, store.ClaimParams{EngineID: "e", Limit: 5})
			require.NoError(t, err)
			tr.check(t, tc.claims2, tc.commits2)
		})
	}
}

// TestClaimEndsWithItsStatement: a claim whose rounds check its
// candidates themselves (a namespace's rate and a step's, here far from
// binding, whose tokens the handle holds reserved) and leave nothing to do
// after its claim statement sends its COMMIT with that statement: two
// round trips, not three.
func TestClaimEndsWithItsStatement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, tr, _ := traced(t, "claimend")
	_, err := s.SetPolicy(ctx, store.PolicyChange{Target: "ns", Rate: &store.Rate{Limit: 100000, Per: time.Second}, Actor: "test"})
	require.NoError(t, err)
	insert := func(n int) {
		tasks := make([]store.TaskInsert, n)
		for i := range tasks {
			tasks[i] = store.TaskInsert{Namespace: "ns", Workflow: "wf", Version: "1", Steps: []store.StepInsert{{Name: "s", Handler: "h", MaxAttempts: 1,
				RateKey: "r", Rate: store.Rate{Limit: 100000, Per: time.Second}}}}
		}
		_, err := s.InsertTasks(ctx, tasks)
		require.NoError(t, err)
	}
	for range 3 { // the policies read, the bucket's tokens reserved
		insert(2)
		got, err := s.ClaimSteps(ctx, store.ClaimParams{EngineID: "e", Limit: 5})
		require.NoError(t, err)
		require.Len(t, got, 2)
	}
	insert(3)
	tr.reset()
	got, err := s.ClaimSteps(ctx, store.ClaimParams{EngineID: "e", Limit: 5})
	require.NoError(t, err)
	require.Len(t, got, 3)
	tr.mu.Lock()
	defer tr.mu.Unlock()
	last := -1
	for i, q := range tr.sent {
		if strings.Contains(q, "UPDATE steps SET state = 'running'") {
			last = i
		}
	}
	require.GreaterOrEqual(t, last, 0, "%q", tr.sent)
	require.Less(t, last+1, len(tr.sent), "%q", tr.sent)
	require.Equal(t, "COMMIT", tr.sent[last+1], "%q", tr.sent)
	require.Equal(t, tr.trips[last], tr.trips[last+1], "the COMMIT goes with the claim statement: %q", tr.sent)
	require.Equal(t, last+2, len(tr.sent), "nothing after it: %q", tr.sent)
	// The round trips of the claim's transaction: a notification of the
	// inserts, sent once its window ends, may go beside it.
	trips := map[int]bool{}
	for i, q := range tr.sent {
		if !strings.Contains(q, "pg_notify") {
			trips[tr.trips[i]] = true
		}
	}
	require.Len(t, trips, 2, "two round trips: %q %v", tr.sent, tr.trips)
}

// TestClaimUnderABacklogGoesAlone shows that under a backlog (the last
// claim took all it asked for) a claim is its transaction's only
// statement, sent with its BEGIN and COMMIT in one round trip, and that
// once the backlog has gone a claim reads the engine's state first again.
func TestClaimUnderABacklogGoesAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, tr, _ := traced(t, "alone")
	for range 5 {
		submitNow(t, s)
	}
	claim := func(want int) (sent []string, trips int) {
		t.Helper()
		tr.reset()
		got, err := s.ClaimSteps(ctx, store.ClaimParams{EngineID: "e", Limit: 2})
		require.NoError(t, err)
		require.Len(t, got, want)
		tr.mu.Lock()
		defer tr.mu.Unlock()
		seen := map[int]bool{}
		for i, q := range tr.sent {
			if !strings.Contains(q, "pg_notify") {
				sent = append(sent, q)
				seen[tr.trips[i]] = true
			}
		}
		return sent, len(seen)
	}
	claim(2) // the policies read, a backlog
	sent, trips := claim(2)
	require.Equal(t, 1, trips, "one round trip: %q", sent)
	require.Len(t, sent, 3, "%q", sent)
	require.Equal(t, "BEGIN", sent[0])
	require.Contains(t, sent[1], "UPDATE steps SET state = 'running'")
	require.Equal(t, "COMMIT", sent[2])
	// The last step: the claim, alone, takes it. The next claims nothing
	// and reads the engine's state first.
	claim(1)
	sent, _ = claim(0)
	require.Contains(t, sent[1], "FROM engines WHERE id", "%q", sent)
	// Neither claims nor outcomes set the planner: their connections'
	// sessions carry its settings.
	tr.reset()
	got, err := s.ClaimSteps(ctx, store.ClaimParams{EngineID: "e", Limit: 5})
	require.NoError(t, err)
	require.Empty(t, got)
	submitNow(t, s)
	got, err = s.ClaimSteps(ctx, store.ClaimParams{EngineID: "e", Limit: 5})
	require.NoError(t, err)
	require.Len(t, got, 1)
	_, err = s.CompleteSteps(ctx, []store.Outcome{{Fence: got[0].Fence, EngineID: "e", State: state.StepCompleted}})
	require.NoError(t, err)
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, q := range tr.sent {
		require.NotContains(t, q, "set_config", "%q", tr.sent)
	}
}

// traced opens a store on a new schema (named from prefix) whose
// statements tr records.
func traced(t *testing.T, prefix string) (s postgres.Store, tr *statements, schema string) {
	t.Helper()
	tr = &statements{}
	schema = pgtesting.SchemaName(prefix)
	s, err := postgres.OpenTraced(context.Background(), pgtesting.URL(t), postgres.Options{Schema: schema, MaxConns: 3}, tr)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = s.DB().ExecContext(context.Background(), `DROP SCHEMA `+schema+` CASCADE`)
		s.Close()
	})
	return s, tr, schema
}

// statements records the statements a store sends, each with the round
// trip (a batch, or a statement alone) it went in.
type statements struct {
	mu    sync.Mutex
	sent  []string
	trips []int
	pids  []uint32 // the server process of each statement
	trip  int
	// at is each connection's round trip under way: a statement on another
	// connection (a notification sent when its window ends) may come
	// between the queries of a batch.
	at map[*pgx.Conn]int
}

// add records q, sent on c in a round trip of its own or, batch, in the
// batch under way on c.
func (s *statements) add(c *pgx.Conn, q string, batch bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !batch {
		s.newTrip(c)
	}
	s.sent = append(s.sent, q)
	s.trips = append(s.trips, s.at[c])
	s.pids = append(s.pids, c.PgConn().PID())
}

// processes returns the server processes of the statements sent that
// contain part.
func (s *statements) processes(part string) map[uint32]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[uint32]bool{}
	for i, q := range s.sent {
		if strings.Contains(q, part) {
			out[s.pids[i]] = true
		}
	}
	return out
}

// newTrip starts a round trip on c; the caller holds mu.
func (s *statements) newTrip(c *pgx.Conn) {
	if s.at == nil {
		s.at = map[*pgx.Conn]int{}
	}
	s.trip++
	s.at[c] = s.trip
}

func (s *statements) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent, s.trips, s.pids = nil, nil, nil
}

// check checks the statements sent since the last reset: claims
// statements marked steps running, the first of them selecting its own
// steps, and it went in the round trip of the transaction's COMMIT or not
// (commits).
func (s *statements) check(t *testing.T, claims int, commits bool) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	first, n := -1, 0
	for i, q := range s.sent {
		if strings.Contains(q, "UPDATE steps SET state = 'running'") {
			if first < 0 {
				first = i
			}
			n++
		}
	}
	require.Equal(t, claims, n, "%q", s.sent)
	if n == 0 {
		return
	}
	require.Contains(t, s.sent[first], "WITH c AS (SELECT id", "the first claim statement selects its own steps")
	withCommit := first+1 < len(s.sent) && s.sent[first+1] == "COMMIT" && s.trips[first+1] == s.trips[first]
	require.Equal(t, commits, withCommit, "the claim statement went with the COMMIT: %q", s.sent)
}

func (s *statements) TraceQueryStart(ctx context.Context, c *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	s.add(c, d.SQL, false)
	return ctx
}

func (s *statements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (s *statements) TraceBatchStart(ctx context.Context, c *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.newTrip(c)
	return ctx
}

func (s *statements) TraceBatchQuery(_ context.Context, c *pgx.Conn, d pgx.TraceBatchQueryData) {
	s.add(c, d.SQL, true)
}

func (s *statements) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}
