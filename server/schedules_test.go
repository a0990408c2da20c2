package server_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/wire"
)

const scheduledTemplate = `namespace: ops
name: report
version: "1"
schedules:
  - name: nightly
    cron: "0 3 * * *"
    time_zone: Europe/Paris
    input: { full: true }
    catch_up: latest
steps:
  - name: build
    handler: go.add
`

// TestSchedulesAPI: a template registered through the API registers its
// schedules; they are listed, paused and resumed through the Go client,
// with the acting credential in the schedule's audit, and the permissions
// hold.
func TestSchedulesAPI(t *testing.T) {
	t.Parallel()
	for name, open := range backends() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			en := newEnv(t, open(t), server.Options{})
			ctx := context.Background()
			c, err := client.New(en.url, en.admin)
			require.NoError(t, err)
			_, err = c.RegisterTemplate(ctx, "report.yaml", []byte(scheduledTemplate))
			require.NoError(t, err)

			list, err := c.Schedules(ctx, store.ScheduleFilter{Namespace: "ops"})
			require.NoError(t, err)
			require.Len(t, list, 1)
			s := list[0]
			require.Equal(t, wire.ScheduleKey{Namespace: "ops", Workflow: "report", Name: "nightly"}, s.ScheduleKey)
			require.Equal(t, "0 3 * * *", s.Cron)
			require.Equal(t, "Europe/Paris", s.TimeZone)
			require.Equal(t, "latest", s.CatchUp)
			require.JSONEq(t, `{"full":true}`, string(s.Input))
			require.False(t, s.Paused)
			require.Nil(t, s.LastTick)
			require.Equal(t, 3, s.NextTick.In(mustZone(t, "Europe/Paris")).Hour())
			none, err := c.Schedules(ctx, store.ScheduleFilter{Namespace: "other"})
			require.NoError(t, err)
			require.Empty(t, none)

			paused, err := c.PauseSchedule(ctx, s.ScheduleKey, "quarter close")
			require.NoError(t, err)
			require.True(t, paused.Paused)
			resumed, err := c.ResumeSchedule(ctx, s.ScheduleKey, "")
			require.NoError(t, err)
			require.False(t, resumed.Paused)
			detail, err := c.Schedule(ctx, s.ScheduleKey)
			require.NoError(t, err)
			require.Len(t, detail.Audit, 2)
			require.Equal(t, "paused", detail.Audit[0].Action)
			require.Equal(t, "quarter close", detail.Audit[0].Reason)
			require.Equal(t, "api:test-admin:*", detail.Audit[0].Actor)
			require.Equal(t, "resumed", detail.Audit[1].Action)

			_, err = c.PauseSchedule(ctx, wire.ScheduleKey{Namespace: "ops", Workflow: "report", Name: "nope"}, "")
			require.True(t, client.IsCode(err, "not_found"), "%v", err)
			_, err = c.Schedule(ctx, wire.ScheduleKey{Namespace: "ops", Workflow: "report", Name: "nope"})
			require.True(t, client.IsCode(err, "not_found"), "%v", err)

			reader := en.key(server.PermWorkflowsRead)
			require.Equal(t, http.StatusOK, en.do("GET", "/v1/schedules", reader, nil).status)
			require.Equal(t, http.StatusForbidden, en.do("POST", "/v1/schedules/ops/report/nightly/pause", reader, nil).status)
			r := en.do("POST", "/v1/schedules/ops/report/nightly/pause", en.admin, `{"reason": 5}`)
			require.Equal(t, http.StatusBadRequest, r.status)
		})
	}
}

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	require.NoError(t, err)
	return loc
}
