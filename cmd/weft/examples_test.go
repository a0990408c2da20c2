package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/wire"
)

// exampleRun is what running one example produced.
type exampleRun struct {
	db   string
	r    result     // `weft run ... --json`
	task *wire.Task // the task it printed
}

// exampleSignal is a signal a test sends while `weft run` waits.
type exampleSignal struct {
	name, payload string
	// after is the step that must be waiting (for this signal or another)
	// before it is sent.
	after string
	// kept: no step waits for it yet, so weft keeps it for later.
	kept bool
}

// exampleCase runs one file of examples/ with `weft run` and checks it.
type exampleCase struct {
	// args follow "run FILE --db DB --json"; setup, if set, returns more.
	args  []string
	setup func(t *testing.T) []string
	// before, if set, runs on the fresh database before weft run.
	before func(t *testing.T, db string)
	code   int // expected exit status of weft run
	// signals are sent, in order, while weft run waits.
	signals []exampleSignal
	check   func(t *testing.T, x *exampleRun)
}

// exampleTimeout bounds each wait for an example's asynchronous work.
const exampleTimeout = 20 * time.Second

// TestExamples validates every workflow in examples/ and runs each to its
// end on a fresh database, checking what it is there to show. It runs the
// commands from the repository root, as examples/README.md does, because
// the examples name their scripts and data by paths relative to it.
func TestExamples(t *testing.T) {
	t.Chdir(filepath.Join("..", ".."))
	files, err := filepath.Glob(filepath.Join("examples", "*.yaml"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(files), 12)

	cases := exampleCases()
	for _, f := range files {
		_, ok := cases[filepath.Base(f)]
		require.True(t, ok, "%s has no case in TestExamples: add one that runs it and checks its result", f)
	}
	for name := range cases {
		require.FileExists(t, filepath.Join("examples", name), "TestExamples has a case for a file that does not exist")
	}

	r := weftCLI(t, append([]string{"validate"}, files...)...)
	requireCode(t, exitOK, r)
	for _, f := range files {
		require.Contains(t, r.stdout, f+": ok (")
	}

	for _, f := range files {
		tc := cases[filepath.Base(f)]
		t.Run(filepath.Base(f), func(t *testing.T) {
			t.Parallel()
			x := runExample(t, f, tc)
			tc.check(t, x)
		})
	}
}

// runExample runs an example with `weft run --json` on a fresh database,
// sending its signals while the run waits, and decodes the final task.
func runExample(t *testing.T, file string, tc exampleCase) *exampleRun {
	t.Helper()
	db := filepath.Join(t.TempDir(), "weft.db")
	args := append([]string{"run", file, "--db", db, "--json"}, tc.args...)
	if tc.setup != nil {
		args = append(args, tc.setup(t)...)
	}
	if tc.before != nil {
		tc.before(t, db)
	}
	ctx, cancel := context.WithTimeout(t.Context(), exampleTimeout)
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, args, strings.NewReader(""), &stdout, &stderr) }()

	// The database is fresh, so the run's task is task 1. Wait for the run
	// to say that the step waits rather than polling the database: a second
	// engine opening a fresh SQLite file while the run's engine migrates it
	// can fail ("migration 003_dynamic.sql: duplicate column name").
	for _, sig := range tc.signals {
		waiting := "step " + sig.after + " waiting for signal"
		require.Eventually(t, func() bool { return strings.Contains(stderr.String(), waiting) },
			exampleTimeout, 10*time.Millisecond, "signal %s: step %s never waited; weft run printed:\n%s\n%s",
			sig.name, sig.after, &stdout, &stderr)
		r := weftCLI(t, "signal", "1", sig.name, "--payload", sig.payload, "--db", db)
		requireCode(t, exitOK, r)
		if sig.kept {
			require.Equal(t, "signal "+sig.name+" kept for task 1: no step waits for it yet\n", r.stdout)
		} else {
			require.Equal(t, "signal "+sig.name+" delivered to task 1\n", r.stdout)
		}
	}

	var r result
	select {
	case code := <-done:
		r = result{code: code, stdout: stdout.String(), stderr: stderr.String()}
	case <-time.After(exampleTimeout + 5*time.Second):
		t.Fatalf("weft run %s did not return:\n%s", file, &stderr)
	}
	requireCode(t, tc.code, r)
	return &exampleRun{db: db, r: r, task: decodeTask(t, r.stdout)}
}

// stepStates returns the state of each named step.
func stepStates(t *testing.T, task *wire.Task, names ...string) map[string]state.Step {
	t.Helper()
	m := map[string]state.Step{}
	for _, n := range names {
		m[n] = stepByName(t, task, n).State
	}
	return m
}

// resultField decodes one field of a step's result.
func resultField(t *testing.T, task *wire.Task, step, field string) any {
	t.Helper()
	var m map[string]any
	res := stepByName(t, task, step).Result
	require.NoError(t, json.Unmarshal(res, &m), "result of %s: %s", step, res)
	require.Contains(t, m, field, "result of %s: %s", step, res)
	return m[field]
}

// warehouseAPI is a test stand-in for the warehouse API of
// inventory-sync.yaml, like examples/scripts/inventory-api.py: it answers
// the first reservation with 503 and records the reservation bodies.
type warehouseAPI struct {
	mu     sync.Mutex
	bodies []string
}

func (w *warehouseAPI) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	rw.Header().Set("Content-Type", "application/json")
	switch {
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/stock/"):
		sku := strings.TrimPrefix(r.URL.Path, "/stock/")
		_ = json.NewEncoder(rw).Encode(map[string]any{"sku": sku, "available": 12, "warehouse": "test-1"})
	case r.Method == http.MethodPost && r.URL.Path == "/reservations":
		b, _ := io.ReadAll(r.Body)
		w.mu.Lock()
		w.bodies = append(w.bodies, string(b))
		n := len(w.bodies)
		w.mu.Unlock()
		if n == 1 {
			rw.WriteHeader(http.StatusServiceUnavailable)
			_, _ = rw.Write([]byte(`{"error": "busy"}`))
			return
		}
		var req struct{ Order string }
		_ = json.Unmarshal(b, &req)
		rw.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(rw).Encode(map[string]any{"reservation": "res-" + req.Order})
	default:
		http.NotFound(rw, r)
	}
}

func (w *warehouseAPI) reservations() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.bodies)
}

// exampleCases maps each file in examples/ to how it is run and checked.
func exampleCases() map[string]exampleCase {
	api := &warehouseAPI{}
	return map[string]exampleCase{
		"hello.yaml": {
			args: []string{"--input", `{"name": "Ada"}`},
			check: func(t *testing.T, x *exampleRun) {
				require.JSONEq(t, `{"message": "HELLO, ADA! (10 characters)"}`, string(stepByName(t, x.task, "report").Result))
			},
		},

		"shipping-label.yaml": {
			args: []string{"--input", `{"order": 7, "weight_kg": 2.5}`},
			check: func(t *testing.T, x *exampleRun) {
				require.Equal(t, "parcel", resultField(t, x.task, "carrier", "carrier"))
				require.Equal(t, "TRK-7-2.5kg", resultField(t, x.task, "label", "tracking"))
			},
		},

		"order-fulfilment.yaml": {
			args: []string{"--input", `{"order": 7, "items": 3}`},
			before: func(t *testing.T, db string) {
				requireCode(t, exitOK, weftCLI(t, "register", filepath.Join("examples", "shipping-label.yaml"), "--db", db))
			},
			check: func(t *testing.T, x *exampleRun) {
				require.JSONEq(t, `{"label": {"tracking": "TRK-7-1.5kg"}}`, string(stepByName(t, x.task, "ship").Result))
				require.Equal(t, "shipped with TRK-7-1.5kg", resultField(t, x.task, "confirm", "message"))
				require.Len(t, x.task.Children, 1)
				r := weftCLI(t, "task", strconv.FormatInt(x.task.Children[0], 10), "--db", x.db)
				requireCode(t, exitOK, r)
				require.Contains(t, r.stdout, "Parent:    task 1, step ship")
				r = weftCLI(t, "task", "1", "--db", x.db)
				requireCode(t, exitOK, r)
				require.Contains(t, r.stdout, "Children:  2")
			},
		},

		"nightly-report.yaml": {
			args: []string{"--input", `{"scope": "eu"}`},
			check: func(t *testing.T, x *exampleRun) {
				require.Equal(t, "orders-eu", resultField(t, x.task, "build", "report"))
				// Running it registered its schedules.
				r := weftCLI(t, "schedules", "--db", x.db)
				requireCode(t, exitOK, r)
				require.Contains(t, r.stdout, "examples/nightly-report/nightly")
				require.Contains(t, r.stdout, "America/New_York")
				require.Contains(t, r.stdout, "examples/nightly-report/hourly-eu")
			},
		},

		"csv-import.yaml": {
			args: []string{"--input", `{"file": "examples/data/orders.csv", "size": 25}`},
			check: func(t *testing.T, x *exampleRun) {
				// 100 rows in batches of 25: four items, each checkpointed
				// up to its last row and at full progress.
				require.Len(t, x.task.Steps, 2+4)
				require.EqualValues(t, 4, resultField(t, x.task, "total", "batches"))
				last := stepByName(t, x.task, "split[3]")
				var cp struct{ Row int }
				require.NoError(t, json.Unmarshal(last.Checkpoint, &cp))
				require.Equal(t, 100, cp.Row)
				require.NotNil(t, last.Progress)
				require.InDelta(t, 1.0, *last.Progress, 1e-9)
			},
		},

		"order-approval.yaml": {
			args:    []string{"--input", `{"order": 8, "amount": 5000}`},
			signals: []exampleSignal{{name: "approval", payload: `{"approved": true, "by": "ada"}`, after: "manual_review"}},
			check: func(t *testing.T, x *exampleRun) {
				require.Equal(t, map[string]state.Step{
					"auto_approve": state.StepSkipped, "manual_review": state.StepCompleted,
					"fulfil": state.StepCompleted, "reject": state.StepSkipped,
				}, stepStates(t, x.task, "auto_approve", "manual_review", "fulfil", "reject"))
			},
		},

		"billing-charge.yaml": {
			args: []string{"--input", `{"customer": "acme-gmbh", "amount_cents": 4200, "card": "visa-4242"}`},
			check: func(t *testing.T, x *exampleRun) {
				charge := stepByName(t, x.task, "charge_card")
				require.Equal(t, 2, charge.Attempts, "the first attempt failed and was retried")
				require.JSONEq(t, `{"charge_id": "ch_1_2", "amount_cents": 5040, "attempt": 2}`, string(charge.Result))
				require.Contains(t, x.r.stderr, "step charge_card waiting (retry at")
				require.Equal(t, "ch_1_2", resultField(t, x.task, "send_receipt", "charge_id"))
			},
		},

		"report-timeout.yaml": {
			args: []string{"--input", `{"month": "2024-05"}`},
			check: func(t *testing.T, x *exampleRun) {
				query := stepByName(t, x.task, "query_sales")
				require.Equal(t, 2, query.Attempts, "the first attempt timed out")
				require.Contains(t, x.r.stderr, "step timed out after 2s")
				require.Equal(t, "sales-2024-05.pdf", resultField(t, x.task, "render_pdf", "report"))
			},
		},

		"shipping-quote.yaml": {
			args: []string{"--input", `{"order": 31, "weight_kg": 7.5, "country": "DE"}`},
			check: func(t *testing.T, x *exampleRun) {
				require.Equal(t, map[string]state.Step{
					"quote_postal": state.StepSkipped, "quote_freight": state.StepCompleted, "quote_express": state.StepSkipped,
					"choose_carrier": state.StepCompleted, "print_label": state.StepCompleted, "compare_quotes": state.StepSkipped,
					"notify_customer": state.StepCompleted, "audit_log": state.StepCompleted,
				}, stepStates(t, x.task, "quote_postal", "quote_freight", "quote_express", "choose_carrier",
					"print_label", "compare_quotes", "notify_customer", "audit_log"))
				require.Equal(t, "freight", resultField(t, x.task, "choose_carrier", "carrier"))
			},
		},

		"etl-failure-drill.yaml": {
			args: []string{"--input", `{"date": "2024-06-01", "stuck_transform": true, "bad_schema": true}`},
			code: exitFailed,
			check: func(t *testing.T, x *exampleRun) {
				require.Equal(t, state.TaskFailed, x.task.State)
				require.Equal(t, map[string]state.Step{
					"extract_orders": state.StepCompleted, "transform_orders": state.StepFailed, "validate_schema": state.StepFailed,
					"load_warehouse": state.StepSkipped, "mark_partition": state.StepSkipped,
					"rollback_staging": state.StepCompleted, "page_oncall": state.StepCompleted, "cleanup_tmp": state.StepCompleted,
				}, stepStates(t, x.task, "extract_orders", "transform_orders", "validate_schema", "load_warehouse",
					"mark_partition", "rollback_staging", "page_oncall", "cleanup_tmp"))
				require.Contains(t, stepByName(t, x.task, "transform_orders").Error, "step timed out after 1s")
				require.Equal(t, 1, stepByName(t, x.task, "validate_schema").Attempts, "a permanent exit code is not retried")
			},
		},

		"deploy-gate.yaml": {
			args: []string{"--input", `{"service": "checkout-api", "version": "2.14.0"}`},
			signals: []exampleSignal{
				// Sent while release_approval waits, so canary_health has
				// not begun to wait: kept until it does.
				{name: "canary_ok", payload: `{"error_rate": 0.002}`, after: "release_approval", kept: true},
				{name: "go_live", payload: `{"approved_by": "ops-lead"}`, after: "release_approval"},
			},
			check: func(t *testing.T, x *exampleRun) {
				require.JSONEq(t, `{"signal": "go_live", "payload": {"approved_by": "ops-lead"}}`,
					string(stepByName(t, x.task, "release_approval").Result))
				require.JSONEq(t, `{"signal": "canary_ok", "payload": {"error_rate": 0.002}}`,
					string(stepByName(t, x.task, "canary_health").Result))
				require.JSONEq(t, `{"promoted": true, "approved_by": "ops-lead"}`, string(stepByName(t, x.task, "promote").Result))
			},
		},

		"incident-alerts.yaml": {
			args: []string{"--concurrency", "1", "--input", `{"incident": "INC-2291", "service": "payments"}`},
			check: func(t *testing.T, x *exampleRun) {
				// One slot: they started one after another, highest
				// priority first, not in the order they are written.
				order := []string{"page_oncall", "post_status_page", "notify_slack", "email_digest"}
				for i := 1; i < len(order); i++ {
					before, after := stepByName(t, x.task, order[i-1]), stepByName(t, x.task, order[i])
					require.NotNil(t, before.StartedAt)
					require.NotNil(t, after.StartedAt)
					require.True(t, before.StartedAt.Before(*after.StartedAt), "%s (priority %d) started at %s, after %s (priority %d) at %s",
						before.Name, before.Priority, before.StartedAt, after.Name, after.Priority, after.StartedAt)
				}
			},
		},

		"flash-sale.yaml": {
			args: []string{"--concurrency", "1", "--input", `{"sale": "summer-shoes"}`},
			code: exitFailed,
			check: func(t *testing.T, x *exampleRun) {
				require.Equal(t, state.TaskFailed, x.task.State)
				push := stepByName(t, x.task, "send_push")
				require.Equal(t, state.StepExpired, push.State)
				require.Zero(t, push.Attempts, "it never started")
				require.Equal(t, state.StepCompleted, stepByName(t, x.task, "reserve_stock").State)
				require.Equal(t, false, resultField(t, x.task, "close_report", "push_sent"))
				require.Contains(t, x.task.Error, `step "send_push" expired`)
			},
		},

		"invoice-once.yaml": {
			args: []string{"--input", `{"customer": "acme-gmbh", "period": "2024-05"}`},
			check: func(t *testing.T, x *exampleRun) {
				require.Equal(t, "INV-2024-05-acme-gmbh", resultField(t, x.task, "issue_invoice", "invoice"))
				// The same input, keys in another order: the same task,
				// not run again.
				file := filepath.Join("examples", "invoice-once.yaml")
				r := weftCLI(t, "run", file, "--db", x.db, "--json", "--input", `{"period": "2024-05", "customer": "acme-gmbh"}`)
				requireCode(t, exitOK, r)
				require.Contains(t, r.stderr, "task 1 already exists with this idempotency key (completed)")
				again := decodeTask(t, r.stdout)
				require.EqualValues(t, 1, again.ID)
				require.Equal(t, 1, stepByName(t, again, "issue_invoice").Attempts)
				// Another period is another task.
				r = weftCLI(t, "run", file, "--db", x.db, "--json", "--input", `{"customer": "acme-gmbh", "period": "2024-06"}`)
				requireCode(t, exitOK, r)
				require.EqualValues(t, 2, decodeTask(t, r.stdout).ID)
			},
		},

		"inventory-sync.yaml": {
			setup: func(t *testing.T) []string {
				srv := httptest.NewServer(api)
				t.Cleanup(srv.Close)
				return []string{"--input", `{"api": "` + srv.URL + `", "sku": "SHOE-42-BLK", "quantity": 2, "order": "SO-1001"}`}
			},
			check: func(t *testing.T, x *exampleRun) {
				require.Equal(t, 12.0, resultField(t, x.task, "fetch_stock", "available"))
				reserve := stepByName(t, x.task, "reserve")
				require.Equal(t, 2, reserve.Attempts, "the 503 was retried")
				require.JSONEq(t, `{"reservation": "res-SO-1001"}`, string(reserve.Result))
				require.Equal(t, state.StepSkipped, stepByName(t, x.task, "backorder").State)
				require.Equal(t, "res-SO-1001", resultField(t, x.task, "confirm_order", "reservation"))
				bodies := api.reservations()
				require.Len(t, bodies, 2)
				require.JSONEq(t, `{"sku": "SHOE-42-BLK", "quantity": 2, "order": "SO-1001"}`, bodies[1])
			},
		},

		"ledger-backfill.yaml": {
			args: []string{"--input", `{"account": "ACC-7", "from_day": 1, "to_day": 10, "fail_after_day": 4}`},
			check: func(t *testing.T, x *exampleRun) {
				backfill := stepByName(t, x.task, "backfill")
				require.Equal(t, 2, backfill.Attempts)
				require.JSONEq(t, `{"days": 10, "balance": 5500, "resumed_from_day": 5, "attempt": 2}`, string(backfill.Result),
					"the retry resumed after the checkpoint of day 4")
				require.JSONEq(t, `{"day": 10, "balance": 5500}`, string(backfill.Checkpoint))
				require.NotNil(t, backfill.Progress)
				require.InDelta(t, 1.0, *backfill.Progress, 1e-9)
				require.Equal(t, "day 10 of 1-10", backfill.ProgressMessage)
				require.JSONEq(t, `{"account": "ACC-7", "closing_balance": 5500}`, string(stepByName(t, x.task, "publish_balance").Result))
			},
		},

		"ticket-routing.yaml": {
			args: []string{"--input", `{"ticket": 5121, "subject": "API returns 500 on checkout", "plan": "enterprise"}`},
			check: func(t *testing.T, x *exampleRun) {
				require.Equal(t, map[string]state.Step{
					"billing_queue": state.StepSkipped, "sales_queue": state.StepSkipped, "tech_triage": state.StepCompleted,
					"tech_queue": state.StepSkipped, "page_engineer": state.StepCompleted, "acknowledge": state.StepCompleted,
				}, stepStates(t, x.task, "billing_queue", "sales_queue", "tech_triage", "tech_queue", "page_engineer", "acknowledge"))
				require.Equal(t, "oncall", resultField(t, x.task, "acknowledge", "queue"))
			},
		},

		"regional-reports.yaml": {
			args: []string{"--input", `{"file": "examples/data/sales.csv", "month": "2024-05"}`},
			check: func(t *testing.T, x *exampleRun) {
				data, err := os.ReadFile(filepath.Join("examples", "data", "sales.csv"))
				require.NoError(t, err)
				// The revenue of each region in May, computed here from the file.
				revenue := map[string]int{}
				total := 0
				for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n")[1:] {
					fields := strings.Split(line, ",")
					require.Len(t, fields, 4)
					cents, err := strconv.Atoi(fields[3])
					require.NoError(t, err)
					if fields[1] == "2024-05" {
						revenue[fields[2]] += cents
						total += cents
					}
				}
				regions := slices.Sorted(maps.Keys(revenue))
				require.Len(t, x.task.Steps, 2+len(regions), "one item per region")
				for i, region := range regions {
					item := stepByName(t, x.task, fmt.Sprintf("list_regions[%d]", i))
					require.Equal(t, 5, item.Priority, "the template's priority")
					require.Equal(t, region, resultField(t, x.task, item.Name, "region"))
					require.EqualValues(t, revenue[region], resultField(t, x.task, item.Name, "revenue_cents"))
				}
				require.JSONEq(t, fmt.Sprintf(`{"regions": %d, "revenue_cents": %d}`, len(regions), total),
					string(stepByName(t, x.task, "publish").Result))
			},
		},
	}
}
