package dashboard_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/workflow"
)

// TestSignalStepPanel: a step that waits for a signal shows what it waits
// for and its deadline, not a handler's attempts.
func TestSignalStepPanel(t *testing.T) {
	t.Parallel()
	en := newEnv(t, stores["sqlite"](t), server.Options{DisableAuth: true})
	require.NoError(t, en.e.Register(context.Background(), workflow.New("ops", "deadline", "1").
		Step("approved", "", workflow.AwaitSignal("approved", time.Hour))))
	timed := en.submit("ops/deadline", map[string]any{}, "")
	en.waitStep(timed, "approved", state.StepWaiting)
	task, err := en.e.Get(context.Background(), timed)
	require.NoError(t, err)
	require.NotNil(t, task.Steps[0].RunAt)
	at := task.Steps[0].RunAt.UTC()
	deadline := `<time datetime="` + at.Format(time.RFC3339) + `"><span class="date">` + at.Format(time.DateOnly) + `</span> ` + at.Format(time.TimeOnly) + `</time>`

	panel := func(id int64) (string, string) {
		t.Helper()
		status, body := get(t, client(), fmt.Sprintf("%s/tasks/%d", en.url, id))
		require.Equal(t, http.StatusOK, status)
		i := strings.Index(body, `<h3>approved `)
		require.Positive(t, i)
		return body, body[i : i+strings.Index(body[i:], "</article>")]
	}
	body, p := panel(en.awaiting)
	// Its node says what it waits for, and the timeline draws its wait.
	contains(t, body, "waiting for approved", "approved wait for its signal: waiting", "<td class=\"num\">wait</td>")
	contains(t, p, "<dt>waits for</dt><dd>the signal <b>approved</b></dd>", "<dt>deadline</dt><dd>none: it waits until the signal comes</dd>")
	require.NotContains(t, p, "attempts")
	require.NotContains(t, p, "run at")
	_, p = panel(timed)
	contains(t, p, "<dt>waits for</dt><dd>the signal <b>approved</b></dd>", "<dt>deadline</dt><dd>"+deadline+"</dd>")
	require.NotContains(t, p, "attempts")
}

var errItem = errors.New("item rejected")

// submitBatch runs a task whose step split fans out n items through a
// batch (template enrich), which sum gathers, and waits for it to end.
// Items whose number is in fail fail for good (then sum is skipped and
// the task fails).
func submitBatch(t testing.TB, en *env, n int, fail ...int) int64 {
	t.Helper()
	ctx := context.Background()
	name := fmt.Sprintf("batch-%d", n)
	en.e.Handle("big.split", func(ctx context.Context, a *weft.Attempt) (any, error) {
		var in struct{ N int }
		if err := a.Bind(&in); err != nil {
			return nil, err
		}
		items := make([]map[string]int, in.N)
		for i := range items {
			items[i] = map[string]int{"n": i}
		}
		return map[string]any{"batches": items}, nil
	})
	en.e.Handle("big.enrich", func(ctx context.Context, a *weft.Attempt) (any, error) {
		var in struct{ N int }
		if err := json.Unmarshal(a.Batch, &in); err != nil {
			return nil, weft.Permanent(err)
		}
		var fail struct{ Fail []int }
		if err := a.Bind(&fail); err != nil {
			return nil, err
		}
		for _, f := range fail.Fail {
			if f == in.N {
				return nil, weft.Permanent(errItem)
			}
		}
		return map[string]int{"n": in.N}, nil
	})
	wf := workflow.New("big", name, "1").Template("enrich", "big.enrich").
		Step("load", "shop.ok").
		Step("split", "big.split", workflow.AsBatch("enrich"), workflow.DependsOn("load")).
		Step("sum", "shop.ok", workflow.DependsOn("split"))
	require.NoError(t, en.e.Register(ctx, wf))
	id := en.submit("big/"+name, map[string]any{"n": n, "fail": fail}, "")
	deadline := time.Now().Add(10 * time.Minute)
	for {
		task, err := en.e.Get(ctx, id)
		require.NoError(t, err)
		if task.State.Terminal() {
			want := state.TaskCompleted
			if len(fail) > 0 {
				want = state.TaskFailed
			}
			require.Equal(t, want, task.State, "task %d", id)
			require.Len(t, task.Steps, n+3)
			return id
		}
		require.False(t, time.Now().After(deadline), "the batch of %d did not finish", n)
		time.Sleep(50 * time.Millisecond)
	}
}

// TestBigTaskPage: a task of 1,000 steps (a batch of 997 items, three of
// which fail) is a page of bounded size: its graph groups the items, its
// step list shows the first steps and the failed ones, and filters and
// pages through the others.
func TestBigTaskPage(t *testing.T) {
	t.Parallel()
	en := newEnv(t, stores["sqlite"](t), server.Options{DisableAuth: true})
	id := submitBatch(t, en, 997, 120, 480, 811)
	c := client()
	page := func(query string) string {
		t.Helper()
		status, body := get(t, c, fmt.Sprintf("%s/tasks/%d%s", en.url, id, query))
		require.Equal(t, http.StatusOK, status, "%s: %s", query, body)
		return body
	}
	articles := regexp.MustCompile(`<article class="step" id="step-\d+">\s*<header class="row between"><h3>([^ ]+) <span class="state st-(\w+)">`)
	listed := func(body string) (names []string, states map[string]int) {
		states = map[string]int{}
		for _, m := range articles.FindAllStringSubmatch(body, -1) {
			names = append(names, m[1])
			states[m[2]]++
		}
		return names, states
	}

	body := page("")
	require.Less(t, len(body), 500_000, "the page of a 1,000-step task is bounded")
	contains(t, body, `data-step="split[*]"`, "enrich ×997", "994 completed, 3 failed", `class="node st-failed group"`,
		`draw enrich ×997 one by one`, "The first 20 of 1,000 steps, and 3 more failed, expired or running.", "Every step, 50 a page")
	require.Equal(t, 4, strings.Count(body, `<g class="node`), "load, split, the items and sum")
	names, states := listed(body)
	require.Len(t, names, 23)
	require.Equal(t, []string{"load", "split", "sum", "split[0]"}, names[:4])
	require.Equal(t, []string{"split[120]", "split[480]", "split[811]"}, names[20:])
	require.Equal(t, 3, states["failed"])
	// The batch step's result, 997 items, is shown in part.
	contains(t, body, "The first 16 KB of 27 KB; the whole: <a href=\"/v1/steps/")
	frag := page("?fragment=1")
	require.Less(t, len(frag), len(body))
	require.NotContains(t, frag, "<html")

	// Filters, by state and by name.
	names, states = listed(page("?state=failed"))
	require.Equal(t, []string{"split[120]", "split[480]", "split[811]"}, names)
	require.Equal(t, map[string]int{"failed": 3}, states)
	body = page("?step=split%5B12")
	names, _ = listed(body)
	require.Equal(t, []string{"split[12]", "split[120]", "split[121]", "split[122]", "split[123]", "split[124]", "split[125]",
		"split[126]", "split[127]", "split[128]", "split[129]"}, names)
	contains(t, body, "11 of 1,000 steps match.", `id="s-clear"`)
	names, _ = listed(page("?state=completed&step=split%5B12"))
	require.Len(t, names, 10)

	// Pages of 50.
	body = page("?page=2")
	names, _ = listed(body)
	require.Len(t, names, 50)
	require.Equal(t, "split[47]", names[0])
	contains(t, body, "page 2 of 20", `id="s-prev"`, `id="s-next"`)
	body = page("?page=99")
	names, _ = listed(body)
	require.Len(t, names, 50, "past the end: the last page")
	require.Equal(t, "split[996]", names[49])
	contains(t, body, "page 20 of 20")
	require.NotContains(t, body, `id="s-next"`)
	for _, bad := range []string{"?page=0", "?page=x", "?state=bogus"} {
		status, _ := get(t, c, fmt.Sprintf("%s/tasks/%d%s", en.url, id, bad))
		require.Equal(t, http.StatusBadRequest, status, bad)
	}

	// The expanded batch draws its first 200 items one by one.
	body = page("?expand=split%5B%2A%5D")
	require.Less(t, len(body), 500_000)
	require.Equal(t, 4+200, strings.Count(body, `<g class="node`))
	contains(t, body, `data-step="split[199]"`, "enrich +797 more", "group split[*] again")
	require.NotContains(t, body, `data-step="split[200]"`)
	// A drawn item not on the list links to the list filtered by its name.
	contains(t, body, fmt.Sprintf(`href="/tasks/%d?expand=split%%5B%%2A%%5D&amp;step=split%%5B150%%5D#step-`, id))
}

// TestSignalFormOnlyWhereSignalsWait: a task's page offers to send a
// signal only while the task is unfinished and has a step that waits for
// one, whether or not that step waits yet.
func TestSignalFormOnlyWhereSignalsWait(t *testing.T) {
	t.Parallel()
	en := newEnv(t, stores["sqlite"](t), server.Options{DisableAuth: true})
	require.NoError(t, en.e.Register(context.Background(), workflow.New("ops", "later", "1").
		Step("prepare", "shop.block").
		Step("approved", "", workflow.DependsOn("prepare"), workflow.AwaitSignal("approved", 0))))
	later := en.submit("ops/later", map[string]any{}, "")
	en.waitStep(later, "prepare", state.StepRunning)
	for _, c := range []struct {
		name string
		id   int64
		form bool
	}{
		{"waiting for a signal", en.awaiting, true},
		{"its signal step not reached yet", later, true},
		{"no signal step", en.running, false},
		{"finished", en.completed, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			status, body := get(t, client(), fmt.Sprintf("%s/tasks/%d", en.url, c.id))
			require.Equal(t, http.StatusOK, status)
			require.Equal(t, c.form, strings.Contains(body, `id="signal-form"`), "the signal form")
			require.Equal(t, c.form, strings.Contains(body, "Send a signal"), "the signal panel")
		})
	}
}
