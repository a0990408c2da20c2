package dashboard_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/dashboard"
	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/workflow"
)

// axePath is axe-core, which scripts/test installs with npm ci in
// dashboard/a11y (package.json pins its version).
var axePath = filepath.Join("a11y", "node_modules", "axe-core", "axe.min.js")

// axeSource reads axe-core; without it the test is skipped, except in CI,
// where it fails.
func axeSource(t *testing.T) string {
	t.Helper()
	src, err := os.ReadFile(axePath)
	if errors.Is(err, os.ErrNotExist) {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is required in CI for the accessibility test: (cd dashboard/a11y && npm ci) (scripts/test runs it)", axePath)
		}
		t.Skipf("%s is missing: the accessibility test is skipped (in CI it fails); (cd dashboard/a11y && npm ci)", axePath)
	}
	require.NoError(t, err)
	return string(src)
}

// axeRun runs axe-core's rules of WCAG 2.0 and 2.1, levels A and AA, on
// the page.
const axeRun = `(async () => {
	const r = await axe.run(document, {runOnly: {type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]}});
	return r.violations.map(v => ({id: v.id, impact: v.impact || "", help: v.help, url: v.helpUrl,
		nodes: v.nodes.map(n => ({target: n.target.map(String).join(" "), summary: n.failureSummary || ""}))}));
})()`

type axeViolation struct {
	ID, Impact, Help, URL string
	Nodes                 []struct{ Target, Summary string }
}

// tabWalkStart marks every element that the Tab key reaches from now on,
// until it comes back to the first (window.__wrapped), and notes a live
// refresh of the page (which replaces what was marked).
const tabWalkStart = `(() => {
	window.__refreshed = false;
	window.__wrapped = false;
	window.__first = null;
	document.querySelectorAll("[data-tabbed]").forEach(e => delete e.dataset.tabbed);
	if (!window.__tabWalk) {
		window.__tabWalk = true;
		document.addEventListener("focusin", e => {
			if (!window.__first) window.__first = e.target;
			else if (e.target === window.__first) window.__wrapped = true;
			e.target.dataset.tabbed = "1";
		});
		document.getElementById("content")?.addEventListener("refreshed", () => { window.__refreshed = true; });
	}
	if (document.activeElement) document.activeElement.blur();
	return true;
})()`

// tabWalkMissed lists what a mouse can use on the page that the Tab key did
// not reach, and the graph's links to steps that the graph's table does
// not have (the Tab key skips the graph's own).
const tabWalkMissed = `(() => {
	if (window.__refreshed) return null;
	const missed = [];
	const usable = "a[href], button, summary, input:not([type=hidden]), select, textarea, [data-api], [data-bulk]";
	for (const el of document.querySelectorAll(usable)) {
		if (el.disabled || !el.checkVisibility({visibilityProperty: true}) || el.dataset.tabbed) continue;
		if (el.closest("svg.dag")) {
			const href = el.getAttribute("href");
			if (!document.querySelector('details.alt a[href="' + CSS.escape(href) + '"]')) missed.push("a graph's link with no twin in its table: " + href);
			continue;
		}
		missed.push(el.outerHTML.slice(0, 160));
	}
	return missed;
})()`

// pageCheck runs axe on the page as it is, then again with every <details>
// open (a step's resolve form, JSON behind a summary), and walks the page
// with the Tab key each time. It returns what it found, written for a
// person to act on, and how many problems (each element and rule once).
func pageCheck(t *testing.T, ctx context.Context) (string, int) {
	t.Helper()
	var report strings.Builder
	seen := map[string]bool{}
	for _, pass := range []struct{ name, prepare string }{
		{"as loaded", `true`},
		{"every <details> open", `document.querySelectorAll("details").forEach(d => { d.open = true; }); true`},
	} {
		_, err := chromedp.Run(ctx, chromedp.Evaluate[bool](pass.prepare))
		require.NoError(t, err)
		vs, err := chromedp.Run(ctx, chromedp.Evaluate[[]axeViolation](axeRun, chromedp.EvalAwaitPromise))
		require.NoError(t, err, "axe.run")
		for _, v := range vs {
			var fresh []int
			for i, n := range v.Nodes {
				if k := v.ID + " " + n.Target; !seen[k] {
					seen[k] = true
					fresh = append(fresh, i)
				}
			}
			if len(fresh) == 0 {
				continue
			}
			fmt.Fprintf(&report, "\n  %s (%s; %d element(s), %s) %s: %s\n", v.ID, v.Impact, len(fresh), pass.name, v.URL, v.Help)
			for _, i := range fresh[:min(len(fresh), 4)] {
				n := v.Nodes[i]
				fmt.Fprintf(&report, "      %s\n        %s\n", n.Target, strings.ReplaceAll(n.Summary, "\n", "\n        "))
			}
			if len(fresh) > 4 {
				fmt.Fprintf(&report, "      … and %d more\n", len(fresh)-4)
			}
		}
		var fresh []string
		for _, m := range tabWalk(t, ctx) {
			if k := "keyboard " + m; !seen[k] {
				seen[k] = true
				fresh = append(fresh, m)
			}
		}
		if len(fresh) > 0 {
			fmt.Fprintf(&report, "\n  keyboard (%d element(s), %s): the Tab key does not reach what the mouse can use:\n      %s\n", len(fresh), pass.name, strings.Join(fresh, "\n      "))
		}
	}
	return report.String(), len(seen)
}

// tabWalk presses Tab through the whole page, until the focus comes back to
// where it started, and returns what it missed; a live refresh during the
// walk makes it walk again.
func tabWalk(t *testing.T, ctx context.Context) []string {
	t.Helper()
	for range 3 {
		_, err := chromedp.Run(ctx, chromedp.Evaluate[bool](tabWalkStart))
		require.NoError(t, err)
		for presses := 0; ; presses += 20 {
			require.Less(t, presses, 5000, "the Tab key never came back to where it started")
			require.NoError(t, chromedp.Do(ctx, chromedp.KeyEvent(strings.Repeat(kb.Tab, 20))))
			wrapped, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.__wrapped`))
			require.NoError(t, err)
			if wrapped {
				break
			}
		}
		missed, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](tabWalkMissed))
		require.NoError(t, err)
		if missed != nil {
			return missed
		}
	}
	t.Fatal("the page refreshed during each of three walks with the Tab key")
	return nil
}

// TestAccessibility checks every page of the dashboard against WCAG 2.1
// AA with axe-core in chromium, and walks it with the Tab key, signed in
// with a key that may do everything (so every form and button is on the
// page): the overview with its charts drawn, the task list, a task in each
// state that matters (failed, running, waiting for a signal, a 50-leaf
// fan-out, a 50-item batch, each grouped and drawn one by one, a task of
// 1,000 steps, a filtered and a paged step list), the workflows, workers,
// attention, schedules and namespaces pages, the sign-in page and the
// error pages. Every page of the registry must be among them.
func TestAccessibility(t *testing.T) {
	t.Parallel()
	src := axeSource(t)
	ctx := tabWithin(t, 4*time.Minute)
	en := newEnv(t, stores["sqlite"](t), server.Options{})
	fx := a11yFixture(t, en)

	type check struct{ name, path, wait string }
	signedIn := []check{
		{"overview", "/", "svg.chart"},
		{"overview, 7 days", "/?window=7d", "svg.chart"},
		{"tasks", "/tasks", "#task-table"},
		{"tasks, failed", "/tasks?state=failed", "#task-table"},
		{"tasks, search", "/tasks?q=order-A-1", "#task-table"},
		{"task, completed", fmt.Sprintf("/tasks/%d", en.completed), "svg.dag"},
		{"task, failed", fmt.Sprintf("/tasks/%d", en.failed), "svg.dag"},
		{"task, running", fmt.Sprintf("/tasks/%d", en.running), "svg.dag"},
		{"task, waiting for a signal", fmt.Sprintf("/tasks/%d", en.awaiting), "#signal-form"},
		{"task, 50-leaf fan-out", fmt.Sprintf("/tasks/%d", fx.fanout), "svg.dag"},
		{"task, 50-item batch", fmt.Sprintf("/tasks/%d", fx.batch), "svg.dag"},
		{"task, 50-item batch drawn one by one", fmt.Sprintf("/tasks/%d?expand=split%%5B%%2A%%5D", fx.batch), "svg.dag"},
		{"task, 50-leaf fan-out, steps filtered", fmt.Sprintf("/tasks/%d?state=completed&step=leaf-1", fx.fanout), "#step-filter"},
		{"task, 50-leaf fan-out, second page of steps", fmt.Sprintf("/tasks/%d?page=2", fx.fanout), "#s-prev"},
		{"task, 1,000 steps, 3 failed", fmt.Sprintf("/tasks/%d", fx.big), "svg.dag"},
		{"workflows", "/workflows", "#workflow-table"},
		{"workflow", "/workflows/shop/checkout", "svg.dag"},
		{"workflow, 50-leaf fan-out", "/workflows/a11y/fanout", "svg.dag"},
		{"workflow, 50-leaf fan-out drawn one by one", "/workflows/a11y/fanout?expand=leaf-%2A", "svg.dag"},
		{"workers", "/workers", "main h1"},
		{"attention", "/attention", "main h1"},
		{"schedules", "/schedules", "main h1"},
		{"namespaces", "/namespaces", "main h1"},
		{"error, no such task", "/tasks/999999", "main h1"},
		{"error, no such page", "/no/such/page", "main h1"},
		{"error, bad filter", "/tasks?state=bogus", "main h1"},
	}

	// Every page of the registry is checked.
	mux := http.NewServeMux()
	for _, p := range dashboard.PagePatterns() {
		mux.Handle(p, http.NotFoundHandler())
	}
	covered := map[string]bool{}
	for _, c := range signedIn {
		_, pattern := mux.Handler(httptest.NewRequest(http.MethodGet, c.path, nil))
		covered[pattern] = true
	}
	for _, p := range dashboard.PagePatterns() {
		require.True(t, covered[p], "page %s is not among the pages checked: add one", p)
	}

	run := func(c check, before func() error) {
		t.Run(c.name, func(t *testing.T) {
			require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(en.url+c.path), chromedp.WaitVisible(chromedp.CSS(c.wait))))
			if before != nil {
				require.NoError(t, before())
			}
			_, err := chromedp.Run(ctx, chromedp.Evaluate[chromedp.Void](src))
			require.NoError(t, err, "inject axe-core")
			report, n := pageCheck(t, ctx)
			if n > 0 {
				t.Errorf("%s (%s): %d accessibility problem(s) (WCAG 2.1 AA):%s", c.name, c.path, n, report)
			}
		})
	}
	run(check{"sign-in", "/signin?next=/tasks", "#key"}, nil)
	run(check{"sign-in, refused", "/signin?next=/", "#key"}, func() error {
		return chromedp.Do(ctx, chromedp.SendKeys(chromedp.ID("key"), "weft_wrong"), chromedp.Click(chromedp.ID("signin")),
			chromedp.WaitVisible(chromedp.ID("signin-error")))
	})
	signInAs(t, ctx, en, en.admin, "/")
	for _, c := range signedIn {
		run(c, nil)
	}
}

type fixture struct {
	fanout, batch, big int64
}

// a11yFixture adds what the pages should show at their fullest: a 50-leaf
// fan-out, a 50-item batch, a task of 1,000 steps (a batch of 997 items,
// three of which fail), an open circuit breaker, a schedule, a
// paused namespace and one with limits.
func a11yFixture(t *testing.T, en *env) fixture {
	t.Helper()
	ctx := context.Background()
	en.e.Handle("a11y.split", func(ctx context.Context, a *weft.Attempt) (any, error) {
		items := make([]map[string]int, 50)
		for i := range items {
			items[i] = map[string]int{"n": i}
		}
		return map[string]any{"batches": items}, nil
	})
	fan := workflow.New("a11y", "fanout", "1").Step("start", "shop.ok")
	for i := range 50 {
		fan.Step(fmt.Sprintf("leaf-%02d", i+1), "shop.ok", workflow.DependsOn("start"))
	}
	batch := workflow.New("a11y", "batch", "1").Template("item", "shop.ok").
		Step("split", "a11y.split", workflow.AsBatch("item")).
		Step("gather", "shop.ok", workflow.DependsOn("split"))
	breaker := workflow.New("a11y", "breaker", "1").Step("charge", "shop.charge", workflow.WithCircuitBreaker(1, time.Hour))
	nightly := workflow.New("a11y", "nightly", "1").Step("report", "shop.ok").
		Schedule("every-night", "30 2 * * *", workflow.InTimeZone("Europe/Paris"))
	for _, wf := range []*workflow.Workflow{fan, batch, breaker, nightly} {
		require.NoError(t, en.e.Register(ctx, wf))
	}
	// Limits on the namespace before its work, so that its rate has a
	// bucket to show.
	op := weft.Operator{Actor: "cli:alice", Reason: "deploying"}
	limit, weight := 64, 3
	rate, err := weft.ParseRate("1000/s")
	require.NoError(t, err)
	_, err = en.e.SetLimits(ctx, "a11y", weft.Limits{Concurrency: &limit, Weight: &weight, Rate: &rate}, op)
	require.NoError(t, err)
	fx := fixture{fanout: en.submit("a11y/fanout", map[string]any{}, ""), batch: en.submit("a11y/batch", map[string]any{}, "")}
	tripped := en.submit("a11y/breaker", map[string]any{"fail": true}, "")
	for _, id := range []int64{fx.fanout, fx.batch} {
		en.waitTask(id, func(t *weft.Task) bool { return t.State == state.TaskCompleted })
	}
	en.waitTask(tripped, func(t *weft.Task) bool { return t.State == state.TaskFailed })
	fx.big = submitBatch(t, en, 997, 120, 480, 811)
	_, err = en.e.Pause(ctx, "ops", op)
	require.NoError(t, err)
	return fx
}
