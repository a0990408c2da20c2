package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
	deadline := task.Steps[0].RunAt.UTC().Format("2006-01-02 15:04:05")

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
