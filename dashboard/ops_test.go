package dashboard_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/workflow"
)

// TestOperatorPages: the namespaces, schedules and attention pages show
// what is set and what needs a person; actions appear only with the
// permission to take them, and a pause taken from the page's form goes
// through the API and into the policy's history with the key's name.
func TestOperatorPages(t *testing.T) {
	t.Parallel()
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			en := newEnv(t, open(t), server.Options{})
			ctx := context.Background()
			for _, ns := range []string{"heavy", "mail"} {
				require.NoError(t, en.e.Register(ctx, workflow.New(ns, "send", "1").Step("send", "shop.ok")))
			}
			_, err := en.e.Pause(ctx, "ops", weft.Operator{Actor: "cli:alice", Reason: "deploy"})
			require.NoError(t, err)
			weight := 7
			_, err = en.e.SetLimits(ctx, "heavy", weft.Limits{Weight: &weight}, weft.Operator{Actor: "cli:bob"})
			require.NoError(t, err)
			_, err = en.e.SetLimits(ctx, "mail", weft.Limits{Rate: &weft.Rate{Limit: 50, Per: time.Second}}, weft.Operator{Actor: "cli:alice"})
			require.NoError(t, err)
			nightly := workflow.New("shop", "nightly", "1").Step("report", "shop.ok").
				Schedule("every-night", "30 2 * * *", workflow.InTimeZone("Europe/Paris"))
			require.NoError(t, en.e.Register(ctx, nightly))
			flaky := workflow.New("shop", "flaky", "1").Step("call", "shop.charge", workflow.WithCircuitBreaker(1, time.Hour))
			require.NoError(t, en.e.Register(ctx, flaky))
			tripped := en.submit("shop/flaky", map[string]any{"fail": true}, "")
			en.waitTask(tripped, func(t *weft.Task) bool { return t.State == state.TaskFailed })

			admin := client()
			require.Equal(t, http.StatusSeeOther, en.signIn(admin, en.admin).StatusCode)
			status, body := get(t, admin, en.url+"/namespaces")
			require.Equal(t, http.StatusOK, status, body)
			contains(t, body, `<code>ops</code>`, "paused", "cli:alice", "deploy", `data-body='{"target": "ops", "paused": false}'`, `id="policy-form"`,
				`<code>heavy</code>`, `<td class="num">7</td>`, `name="weight"`,
				`<tr class="rate"><td><code>mail</code></td><td>50/s</td><td class="num">50.0</td>`, `name="rate"`)
			// Every namespace is listed, with its workflows and its
			// unfinished steps: ops runs one step (slow's wait), waits on
			// one (approval's signal) with one pending after it, and is
			// paused.
			contains(t, body, `<tr class="namespace" data-namespace="heavy"><td><a href="/tasks?namespace=heavy">heavy</a></td><td class="num">1</td>`,
				`<tr class="namespace" data-namespace="mail">`,
				`<tr class="namespace" data-namespace="ops"><td><a href="/tasks?namespace=ops">ops</a></td><td class="num">2</td><td class="num">1</td><td class="num">0</td><td class="num">1</td><td class="num">1</td><td><span class="badge">paused</span></td>`,
				`<tr class="namespace" data-namespace="shop"><td><a href="/tasks?namespace=shop">shop</a></td><td class="num">3</td>`)
			contains(t, body, `<code>shop/flaky/call</code>`, `<span class="badge">open</span>`, "1/1",
				`data-api="POST /v1/breakers/reset" data-body='{"key": "shop/flaky/call"}'`)
			status, body = get(t, admin, en.url+"/schedules")
			require.Equal(t, http.StatusOK, status, body)
			contains(t, body, "shop/nightly/every-night", "30 2 * * *", "Europe/Paris", "/v1/schedules/shop/nightly/every-night/pause")
			status, body = get(t, admin, en.url+"/attention")
			require.Equal(t, http.StatusOK, status, body)
			contains(t, body, `<a href="/tasks/`+strconv.FormatInt(en.failed, 10)+`">`, "failed", `id="retry-attention"`)
			require.NotContains(t, body, `<a href="/tasks/`+strconv.FormatInt(en.completed, 10)+`">`, "a completed task needs nobody")
			status, body = get(t, admin, en.url+"/workers")
			require.Equal(t, http.StatusOK, status)
			contains(t, body, "shop.charge", "shop.ok")

			// The pause of the namespaces page's form: POST /v1/policies
			// with the session, as its script sends it.
			token := csrf(t, admin, en.url)
			req, err := http.NewRequest(http.MethodPost, en.url+"/v1/policies", strings.NewReader(`{"target": "shop", "paused": true, "reason": "stock count"}`))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set(server.CSRFHeader, token)
			req.Header.Set("Origin", en.url)
			res, err := admin.Do(req)
			require.NoError(t, err)
			res.Body.Close()
			require.Equal(t, http.StatusOK, res.StatusCode)
			changes, err := en.e.PolicyChanges(ctx, 10)
			require.NoError(t, err)
			require.Equal(t, "api:admin", changes[0].Actor)
			require.Equal(t, "stock count", changes[0].Reason)

			// tasks:read and workflows:read: the pages without actions, and
			// no namespaces page without policies:read.
			reader := client()
			require.Equal(t, http.StatusSeeOther, en.signIn(reader, en.reader).StatusCode)
			for _, page := range []string{"/schedules", "/attention"} {
				status, body := get(t, reader, en.url+page)
				require.Equal(t, http.StatusOK, status, page)
				require.NotContains(t, body, "data-api=", "%s: a read-only key sees no actions", page)
			}
			status, _ = get(t, reader, en.url+"/namespaces")
			require.Equal(t, http.StatusForbidden, status)
			_, body = get(t, reader, en.url+"/tasks")
			require.NotContains(t, body, `href="/namespaces"`, "the navigation lists only what the key may see")
		})
	}
}

// TestTasksTagFilterAndFilterActions: the tasks page filters by a tag and
// offers the bulk endpoints on the whole filter, which act on every
// matching task through the API.
func TestTasksTagFilterAndFilterActions(t *testing.T) {
	t.Parallel()
	en := newEnv(t, stores["sqlite"](t), server.Options{})
	ctx := context.Background()
	var tagged []int64
	for i := range 3 {
		res, err := en.e.Submit(ctx, weft.Submission{Workflow: "ops/approval", Input: map[string]any{"n": i}, Tags: map[string]string{"env": "staging"}})
		require.NoError(t, err)
		tagged = append(tagged, res.Task.ID)
	}
	admin := client()
	require.Equal(t, http.StatusSeeOther, en.signIn(admin, en.admin).StatusCode)
	status, body := get(t, admin, en.url+"/tasks?tag=env%3Dstaging")
	require.Equal(t, http.StatusOK, status, body)
	for _, id := range tagged {
		contains(t, body, `href="/tasks/`+strconv.FormatInt(id, 10)+`"`)
	}
	require.NotContains(t, body, `href="/tasks/`+strconv.FormatInt(en.failed, 10)+`"`, "an untagged task is filtered out")
	contains(t, body, `id="filter-cancel"`, `data-api="POST /v1/tasks/cancel"`, `&#34;tags&#34;:{&#34;env&#34;:&#34;staging&#34;}`)
	status, _ = get(t, admin, en.url+"/tasks?tag=nonsense")
	require.Equal(t, http.StatusBadRequest, status)

	// What the button sends: the bulk endpoint with the page's filter.
	token := csrf(t, admin, en.url)
	req, err := http.NewRequest(http.MethodPost, en.url+"/v1/tasks/cancel", strings.NewReader(`{"filter":{"tags":{"env":"staging"}},"reason":"staging reset"}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(server.CSRFHeader, token)
	req.Header.Set("Origin", en.url)
	res, err := admin.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	for _, id := range tagged {
		task, err := en.e.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, "cancelled", string(task.State))
	}
	reader := client()
	require.Equal(t, http.StatusSeeOther, en.signIn(reader, en.reader).StatusCode)
	_, body = get(t, reader, en.url+"/tasks?tag=env%3Dstaging")
	require.NotContains(t, body, `id="filter-cancel"`)
}
