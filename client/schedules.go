package client

import (
	"context"
	"net/url"

	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/wire"
)

// Schedule is a registered cron schedule with its last and next ticks.
type Schedule = wire.Schedule

// Schedules lists the schedules f selects (empty fields select all).
func (c *Client) Schedules(ctx context.Context, f store.ScheduleFilter) ([]Schedule, error) {
	q := url.Values{}
	for k, v := range map[string]string{"namespace": f.Namespace, "workflow": f.Workflow, "name": f.Name} {
		if v != "" {
			q.Set(k, v)
		}
	}
	path := "/v1/schedules"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var out wire.ScheduleList
	if _, err := c.do(ctx, "GET", path, nil, &out); err != nil {
		return nil, err
	}
	return out.Schedules, nil
}

func schedulePath(k wire.ScheduleKey) string {
	return "/v1/schedules/" + url.PathEscape(k.Namespace) + "/" + url.PathEscape(k.Workflow) + "/" + url.PathEscape(k.Name)
}

// Schedule returns one schedule with its pauses and resumptions.
func (c *Client) Schedule(ctx context.Context, k wire.ScheduleKey) (wire.ScheduleDetail, error) {
	var out wire.ScheduleDetail
	_, err := c.do(ctx, "GET", schedulePath(k), nil, &out)
	return out, err
}

// PauseSchedule pauses a schedule; reason, if not empty, is recorded in
// its audit with the client's credential.
func (c *Client) PauseSchedule(ctx context.Context, k wire.ScheduleKey, reason string) (Schedule, error) {
	var out Schedule
	_, err := c.do(ctx, "POST", schedulePath(k)+"/pause", taskAction(reason), &out)
	return out, err
}

// ResumeSchedule resumes a paused schedule from its next tick after now.
func (c *Client) ResumeSchedule(ctx context.Context, k wire.ScheduleKey, reason string) (Schedule, error) {
	var out Schedule
	_, err := c.do(ctx, "POST", schedulePath(k)+"/resume", taskAction(reason), &out)
	return out, err
}
