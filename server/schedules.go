package server

import (
	"context"
	"fmt"
	"net/http"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/wire"
	"github.com/weftrun/weft/workflow"
)

// This file holds the routes of cron schedules: list, one with its audit,
// pause and resume.

func (s *Server) listSchedules(r *http.Request) (int, any, error) {
	q := r.URL.Query()
	f := weft.ScheduleFilter{Namespace: q.Get("namespace"), Workflow: q.Get("workflow"), Name: q.Get("name")}
	var err error
	if f.Namespace, f.Workflow, err = workflow.ParseFilter(f.Namespace, f.Workflow); err != nil {
		return 0, nil, err
	}
	list, err := s.engine.Schedules(r.Context(), f)
	if err != nil {
		return 0, nil, err
	}
	list = visible(r, list, func(s weft.Schedule) string { return s.Namespace })
	if list == nil {
		list = []weft.Schedule{}
	}
	return http.StatusOK, wire.ScheduleList{Schedules: wire.List(list, wire.ScheduleOf)}, nil
}

func scheduleKey(r *http.Request) weft.ScheduleKey {
	return weft.ScheduleKey{Namespace: r.PathValue("namespace"), Workflow: r.PathValue("workflow"), Name: r.PathValue("name")}
}

func (s *Server) getSchedule(r *http.Request) (int, any, error) {
	k := scheduleKey(r)
	list, err := s.engine.Schedules(r.Context(), weft.ScheduleFilter(k))
	if err != nil {
		return 0, nil, err
	}
	if len(list) == 0 {
		return 0, nil, fmt.Errorf("schedule %s: %w", k, store.ErrNotFound)
	}
	audit, err := s.engine.ScheduleAudit(r.Context(), k)
	if err != nil {
		return 0, nil, err
	}
	if audit == nil {
		audit = []weft.ScheduleAuditEntry{}
	}
	return http.StatusOK, wire.ScheduleDetail{Schedule: wire.ScheduleOf(list[0]), Audit: wire.List(audit, wire.ScheduleAuditEntryOf)}, nil
}

func (s *Server) pauseSchedule(r *http.Request) (int, any, error) {
	return s.scheduleAction(r, (*weft.Engine).PauseSchedule)
}

func (s *Server) resumeSchedule(r *http.Request) (int, any, error) {
	return s.scheduleAction(r, (*weft.Engine).ResumeSchedule)
}

// scheduleAction pauses or resumes a schedule as the request's principal,
// with the body's reason, and answers with the schedule.
func (s *Server) scheduleAction(r *http.Request, act func(*weft.Engine, context.Context, weft.ScheduleKey, weft.Operator) (weft.Schedule, error)) (int, any, error) {
	op, err := taskOperator(r)
	if err != nil {
		return 0, nil, err
	}
	rec, err := act(s.engine, r.Context(), scheduleKey(r), op)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, wire.ScheduleOf(rec), nil
}
