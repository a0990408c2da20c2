package dashboard_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/workflow"
)

// The browser tests drive a headless chromium: one browser for the test
// binary, a fresh browser context (its own cookies) per test. Without
// chromium they are skipped, except in CI (CI set), where they fail.

var (
	browserCtx  context.Context
	browserErr  error
	browserPath string
)

func TestMain(m *testing.M) {
	var stop func()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			browserPath = p
			break
		}
	}
	if browserPath != "" {
		opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browserPath), chromedp.NoSandbox, chromedp.DisableGPU,
			chromedp.WindowSize(1366, 900))
		alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
		ctx, cancelBrowser := chromedp.NewContext(alloc)
		// Start the browser now, once.
		browserErr = chromedp.Do(ctx)
		browserCtx = ctx
		stop = func() { cancelBrowser(); cancelAlloc() }
	}
	code := m.Run()
	if stop != nil {
		stop()
	}
	os.Exit(code)
}

// tab opens a page in a new browser context of the shared browser; the
// test's actions in it must end within a minute.
func tab(t *testing.T) context.Context {
	t.Helper()
	return tabWithin(t, 60*time.Second)
}

// tabWithin is tab with a deadline of the test's choosing, for a test that
// walks many pages.
func tabWithin(t *testing.T, limit time.Duration) context.Context {
	t.Helper()
	if browserPath == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("chromium is required in CI for the browser tests (scripts/test installs it)")
		}
		t.Skip("chromium is not installed: the browser tests are skipped (in CI they fail)")
	}
	require.NoError(t, browserErr, "start chromium")
	ctx, cancel := chromedp.NewContext(browserCtx, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	// Open the tab before setting a deadline: the deadline then bounds the
	// test's actions, not the tab's life.
	require.NoError(t, chromedp.Do(ctx))
	ctx, cancelTimeout := context.WithTimeout(ctx, limit)
	t.Cleanup(cancelTimeout)
	return ctx
}

// signInAs signs in through the form, as a person does.
func signInAs(t *testing.T, ctx context.Context, en *env, key, next string) {
	t.Helper()
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(en.url+next),
		chromedp.WaitVisible(chromedp.ID("key")),
		chromedp.SendKeys(chromedp.ID("key"), key),
		chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(chromedp.ID("content")),
	))
}

// eventually evaluates a JavaScript expression until it is true.
func eventually(t *testing.T, ctx context.Context, js, what string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](js))
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			html, _ := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS("main")))
			t.Fatalf("%s: not reached (last error %v); page: %s", what, err, clip(html, 3000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// acceptDialogs makes confirm() say yes and prompt() answer "" on the page.
var acceptDialogs chromedp.Action[chromedp.Void] = func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
	_, err := chromedp.Evaluate[bool](`window.confirm = () => true; window.prompt = () => ""; true`)(ctx, t)
	return chromedp.Void{}, err
}

func TestBrowserSignInFilterAndDAG(t *testing.T) {
	t.Parallel()
	ctx := tab(t)
	en := newEnv(t, stores["sqlite"](t), server.Options{})
	signInAs(t, ctx, en, en.admin, "/tasks")
	loc, err := chromedp.Run(ctx, chromedp.Location())
	require.NoError(t, err)
	require.True(t, strings.HasSuffix(loc, "/tasks"), "back at the page asked for: %s", loc)

	require.NoError(t, chromedp.Do(ctx,
		chromedp.SetValue(chromedp.ID("f-state"), "failed"),
		chromedp.Click(chromedp.ID("apply")),
	))
	eventually(t, ctx, `location.search.includes("state=failed")`, "filter applied")
	eventually(t, ctx, `(() => { const rows = [...document.querySelectorAll("#task-table tbody tr[data-id]")];
		return rows.length === 1 && rows[0].dataset.state === "failed" && rows[0].dataset.id === "`+fmt.Sprint(en.failed)+`"; })()`, "only the failed task listed")

	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(fmt.Sprintf(`a[href="/tasks/%d"]`, en.failed)))))
	eventually(t, ctx, `document.querySelectorAll("svg.dag g.node").length === 4`, "the DAG's four steps drawn")
	nodes, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]string](`Object.fromEntries([...document.querySelectorAll("svg.dag g.node")].map(g => [g.dataset.step, g.getAttribute("class")]))`))
	require.NoError(t, err)
	require.Equal(t, map[string]string{"validate": "node st-completed", "charge": "node st-failed", "reserve": "node st-completed", "ship": "node st-skipped"}, nodes)
	// The DAG is laid out by depth: validate, then charge and reserve, then ship.
	xs, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]float64](`Object.fromEntries([...document.querySelectorAll("svg.dag g.node")].map(g => [g.dataset.step, g.querySelector("rect").x.baseVal.value]))`))
	require.NoError(t, err)
	require.Less(t, xs["validate"], xs["charge"])
	require.Equal(t, xs["charge"], xs["reserve"])
	require.Less(t, xs["reserve"], xs["ship"])
}

func TestBrowserCancelAndRetry(t *testing.T) {
	t.Parallel()
	ctx := tab(t)
	en := newEnv(t, stores["sqlite"](t), server.Options{})
	signInAs(t, ctx, en, en.admin, fmt.Sprintf("/tasks/%d", en.running))
	require.NoError(t, chromedp.Do(ctx, acceptDialogs, chromedp.WaitVisible(chromedp.ID("cancel")), chromedp.Click(chromedp.ID("cancel"))))
	en.waitTask(en.running, func(t *weft.Task) bool { return t.State == state.TaskCancelled })
	eventually(t, ctx, `document.querySelector("h1 .state").textContent === "cancelled" && !document.getElementById("cancel")`, "the page shows the task cancelled")

	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(fmt.Sprintf("%s/tasks/%d", en.url, en.failed)), acceptDialogs,
		chromedp.WaitVisible(chromedp.ID("retry")), chromedp.Click(chromedp.ID("retry"))))
	// The retried checkout fails again (its input says so), after a retry
	// recorded in the audit trail by the signed-in key.
	deadline := time.Now().Add(15 * time.Second)
	for {
		audit, err := en.e.Audit(context.Background(), en.failed)
		require.NoError(t, err)
		retried := false
		for _, a := range audit {
			if a.Step == "" && a.From == string(state.TaskFailed) && a.EngineID == "api:admin" {
				retried = true
			}
		}
		if retried {
			break
		}
		require.False(t, time.Now().After(deadline), "no retry by api:admin in the audit: %+v", audit)
		time.Sleep(20 * time.Millisecond)
	}
	for _, a := range mustAudit(t, en, en.running) {
		if a.Step == "" && a.To == string(state.TaskCancelled) {
			require.Equal(t, "api:admin", a.EngineID)
		}
	}
}

func mustAudit(t *testing.T, en *env, id int64) []weft.AuditEntry {
	audit, err := en.e.Audit(context.Background(), id)
	require.NoError(t, err)
	return audit
}

func TestBrowserReadOnlyKeySeesNoActions(t *testing.T) {
	t.Parallel()
	ctx := tab(t)
	en := newEnv(t, stores["sqlite"](t), server.Options{})
	signInAs(t, ctx, en, en.reader, fmt.Sprintf("/tasks/%d", en.failed))
	for _, page := range []string{fmt.Sprintf("/tasks/%d", en.failed), fmt.Sprintf("/tasks/%d", en.awaiting), "/tasks"} {
		require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(en.url+page), chromedp.WaitVisible(chromedp.ID("content"))))
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("button[data-api], button[data-bulk], form.api-form").length`))
		require.NoError(t, err)
		require.Zero(t, n, "a read-only key sees no action on %s", page)
		badge, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(".badge.ro")))
		require.NoError(t, err)
		require.Equal(t, "read-only", badge)
	}
}

func TestBrowserSignalUpdatesDAGLive(t *testing.T) {
	t.Parallel()
	ctx := tab(t)
	en := newEnv(t, stores["sqlite"](t), server.Options{})
	signInAs(t, ctx, en, en.admin, fmt.Sprintf("/tasks/%d", en.awaiting))
	eventually(t, ctx, `!document.getElementById("live").hidden`, "the event stream is open")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS(`#signal-form input[name="payload"]`), `{"by": "browser"}`),
		chromedp.Click(chromedp.CSS(`#signal-form button[type="submit"]`)),
	))
	en.waitTask(en.awaiting, func(t *weft.Task) bool { return t.State == state.TaskCompleted })
	eventually(t, ctx, `document.querySelector('svg.dag g.node[data-step="apply"]').getAttribute("class") === "node st-completed"`, "the DAG recoloured live")
	task, err := en.e.Get(context.Background(), en.awaiting)
	require.NoError(t, err)
	for _, s := range task.Steps {
		if s.Name == "approved" {
			require.JSONEq(t, `{"signal": "approved", "payload": {"by": "browser"}}`, string(s.Result))
		}
	}
}

// TestBrowserLiveRefreshKeepsPlace: a live update of the page keeps the
// keyboard's focus where it was and the <details> a person opened, rather
// than sending the focus back to the top of the page.
func TestBrowserLiveRefreshKeepsPlace(t *testing.T) {
	t.Parallel()
	ctx := tab(t)
	en := newEnv(t, stores["sqlite"](t), server.Options{})
	task, err := en.e.Get(context.Background(), en.awaiting)
	require.NoError(t, err)
	var apply int64
	for _, s := range task.Steps {
		if s.Name == "apply" {
			apply = s.ID
		}
	}
	signInAs(t, ctx, en, en.admin, fmt.Sprintf("/tasks/%d", en.awaiting))
	eventually(t, ctx, `!document.getElementById("live").hidden`, "the event stream is open")
	link := fmt.Sprintf(`#dag-table a[href="#step-%d"]`, apply)
	_, err = chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById("dag-table").open = true;
		document.querySelector('`+link+`').focus(); document.activeElement.matches('`+link+`')`))
	require.NoError(t, err)
	_, err = en.e.Signal(context.Background(), en.awaiting, "approved", map[string]string{"by": "test"})
	require.NoError(t, err)
	en.waitTask(en.awaiting, func(t *weft.Task) bool { return t.State == state.TaskCompleted })
	eventually(t, ctx, `document.querySelector('svg.dag g.node[data-step="apply"]').getAttribute("class") === "node st-completed"`, "the page refreshed")
	kept, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]bool](`({open: document.getElementById("dag-table").open,
		focused: document.activeElement.matches('`+link+`')})`))
	require.NoError(t, err)
	require.Equal(t, map[string]bool{"open": true, "focused": true}, kept)
}

// TestScreenshots writes a screenshot of each page to $WEFT_SCREENSHOTS
// (docs/img), for the documentation; skipped without it.
func TestScreenshots(t *testing.T) {
	dir := os.Getenv("WEFT_SCREENSHOTS")
	if dir == "" {
		t.Skip("WEFT_SCREENSHOTS is not set")
	}
	ctx := tab(t)
	en := newEnv(t, stores["sqlite"](t), server.Options{})
	// Some history for the charts.
	var subs []weft.Submission
	for i := range 120 {
		subs = append(subs, weft.Submission{Workflow: "shop/checkout", Input: map[string]any{"order": fmt.Sprintf("B-%d", i), "fail": i%9 == 0}})
	}
	for i := range 40 {
		subs = append(subs, weft.Submission{Workflow: "ops/approval", Input: map[string]any{"n": i}})
	}
	_, err := en.e.SubmitMany(context.Background(), subs)
	require.NoError(t, err)
	en.waitTask(en.submit("shop/checkout", map[string]any{"order": "last"}, ""), func(t *weft.Task) bool { return t.State.Terminal() })
	bg := context.Background()
	_, err = en.e.Pause(bg, "ops", weft.Operator{Actor: "cli:alice", Reason: "deploying"})
	require.NoError(t, err)
	require.NoError(t, en.e.Register(bg, workflow.New("shop", "nightly", "1").Step("report", "shop.ok").
		Schedule("every-night", "30 2 * * *", workflow.InTimeZone("Europe/Paris"))))
	// Big tasks: a fan-out of 50 between two steps, a batch of 50 items of
	// which two fail, and a task of 1,000 steps: a batch of 955 items (three
	// fail) beside a fan-out of 40 checks, joined at the end.
	fan := workflow.New("media", "thumbnails", "1").Step("fetch", "shop.ok")
	for i := range 50 {
		fan.Step(fmt.Sprintf("resize-%02d", i+1), "shop.ok", workflow.DependsOn("fetch"))
	}
	fan.Step("publish", "shop.ok", workflow.DependsOn(func() []string {
		var deps []string
		for i := range 50 {
			deps = append(deps, fmt.Sprintf("resize-%02d", i+1))
		}
		return deps
	}()...))
	require.NoError(t, en.e.Register(bg, fan))
	fanout := en.submit("media/thumbnails", map[string]any{}, "")
	en.waitTask(fanout, func(t *weft.Task) bool { return t.State == state.TaskCompleted })
	batch := submitBatch(t, en, 50, 7, 31)
	nightly := workflow.New("etl", "nightly", "1").Template("enrich", "big.enrich").
		Step("ingest", "shop.ok").
		Step("split", "big.split", workflow.AsBatch("enrich"), workflow.DependsOn("ingest")).
		Step("merge", "shop.ok", workflow.DependsOn("split"))
	var checks []string
	for i := range 40 {
		checks = append(checks, fmt.Sprintf("check-%02d", i+1))
		nightly.Step(checks[i], "shop.ok", workflow.DependsOn("ingest"))
	}
	nightly.Step("report", "shop.ok", workflow.DependsOn(checks...)).
		Step("publish", "shop.ok", workflow.DependsOn("merge", "report"))
	require.NoError(t, en.e.Register(bg, nightly))
	big := en.submit("etl/nightly", map[string]any{"n": 955, "fail": []int{120, 480, 811}}, "")
	en.waitTask(big, func(t *weft.Task) bool { return t.State.Terminal() && len(t.Steps) == 1000 })

	signInAs(t, ctx, en, en.admin, "/")
	// The top of a big task's page: its graph, its timeline and the head
	// of its step list.
	for _, s := range []struct {
		name string
		id   int64
	}{{"fanout", fanout}, {"batch", batch}, {"1000-steps", big}} {
		require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(fmt.Sprintf("%s/tasks/%d", en.url, s.id)), chromedp.WaitVisible(chromedp.CSS("svg.dag"))))
		top, err := chromedp.Run(ctx, chromedp.Nodes(chromedp.CSS("header.top")))
		require.NoError(t, err)
		bottom, err := chromedp.Run(ctx, chromedp.Nodes(chromedp.ID("steps-shown")))
		require.NoError(t, err)
		png, err := chromedp.Run(ctx, chromedp.ScreenshotNodes(append(top, bottom...), 1))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "dashboard-task-"+s.name+".png"), png, 0o644))
	}
	shots := []struct{ name, path, wait string }{
		{"overview", "/", "svg.chart"},
		{"tasks", "/tasks", "#task-table"},
		{"task", fmt.Sprintf("/tasks/%d", en.failed), "svg.dag"},
		{"workflows", "/workflows", "#workflow-table"},
		{"workflow", "/workflows/shop/checkout", "svg.dag"},
		{"workers", "/workers", "main h1"},
		{"attention", "/attention", "main h1"},
		{"schedules", "/schedules", "main h1"},
		{"namespaces", "/namespaces", "main h1"},
	}
	for _, s := range shots {
		require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(en.url+s.path), chromedp.WaitVisible(chromedp.CSS(s.wait))))
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "dashboard-"+s.name+".png"), png, 0o644))
	}
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(en.url+"/signin")))
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "dashboard-signin.png"), png, 0o644))
}

// TestBrowserGraphZoomsAndPans: the graph of a task zooms with its buttons
// and with + and - while it has the focus, fits its box, and pans when
// dragged; a live update keeps the zoom.
func TestBrowserGraphZoomsAndPans(t *testing.T) {
	t.Parallel()
	ctx := tab(t)
	en := newEnv(t, stores["sqlite"](t), server.Options{})
	signInAs(t, ctx, en, en.admin, fmt.Sprintf("/tasks/%d", en.awaiting))
	width := func() float64 {
		w, err := chromedp.Run(ctx, chromedp.Evaluate[float64](`document.querySelector("#dag svg.dag").getBoundingClientRect().width`))
		require.NoError(t, err)
		return w
	}
	require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`.zoom [data-zoom="in"]`))))
	natural := width()
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`.zoom [data-zoom="in"]`))))
	require.InDelta(t, natural*1.25, width(), 1)
	in := chromedp.Click(chromedp.CSS(`.zoom [data-zoom="in"]`))
	require.NoError(t, chromedp.Do(ctx, in, in, in, in, in))
	zoomed := width()
	require.InDelta(t, natural*1.25*1.25*1.25*1.25*1.25*1.25, zoomed, 2)
	overflow, err := chromedp.Run(ctx, chromedp.Evaluate[float64](`(() => { const b = document.getElementById("dag"); return b.scrollWidth - b.clientWidth; })()`))
	require.NoError(t, err)
	require.Greater(t, overflow, 200.0, "zoomed in, the graph overflows its box")

	// Dragged, the box scrolls.
	_, err = chromedp.Run(ctx, chromedp.Evaluate[bool](`(() => {
		const box = document.getElementById("dag"), r = box.getBoundingClientRect();
		const at = (type, x) => document.dispatchEvent(new PointerEvent(type, {clientX: x, clientY: r.top + 20, button: 0, bubbles: true}));
		box.querySelector("svg").dispatchEvent(new PointerEvent("pointerdown", {clientX: r.left + 300, clientY: r.top + 20, button: 0, bubbles: true}));
		at("pointermove", r.left + 100); at("pointerup", r.left + 100);
		return true;
	})()`))
	require.NoError(t, err)
	left, err := chromedp.Run(ctx, chromedp.Evaluate[float64](`document.getElementById("dag").scrollLeft`))
	require.NoError(t, err)
	require.InDelta(t, 200, left, 2, "dragging 200 px left scrolls the graph 200 px")

	// The keyboard zooms the focused graph; Fit makes it fit its box.
	require.NoError(t, chromedp.Do(ctx, chromedp.Focus(chromedp.ID("dag")), chromedp.KeyEvent("-")))
	require.InDelta(t, zoomed/1.25, width(), 1)
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`.zoom [data-zoom="fit"]`))))
	box, err := chromedp.Run(ctx, chromedp.Evaluate[float64](`document.getElementById("dag").clientWidth`))
	require.NoError(t, err)
	require.LessOrEqual(t, width(), box)

	// A live update (the signal completes the wait) keeps the zoom.
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`.zoom [data-zoom="reset"]`)), chromedp.Click(chromedp.CSS(`.zoom [data-zoom="in"]`))))
	_, err = en.e.Signal(context.Background(), en.awaiting, "approved", nil)
	require.NoError(t, err)
	require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#dag .node.st-completed[data-step="approved"]`))))
	require.InDelta(t, natural*1.25, width(), 1, "the zoom outlives the refresh")
}
