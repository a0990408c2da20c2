package cliview

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/weftrun/weft/internal/duration"
	"github.com/weftrun/weft/internal/taskview"
	"github.com/weftrun/weft/wire"
)

// Schedules writes the schedule list of `weft schedules`.
func Schedules(w io.Writer, list []wire.Schedule) error {
	w = printable{w}
	tw := newTable(w)
	fmt.Fprintln(tw, "SCHEDULE\tCRON\tTIME ZONE\tCATCH-UP\tSTATE\tLAST TICK\tNEXT TICK")
	for _, s := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.String(), s.Cron, orDash(s.TimeZone), catchUpText(s), scheduleState(s),
			Time(s.LastTick), nextTickText(s))
	}
	return flushTable(tw)
}

// Schedule writes a schedule's fields and its audit (pauses and
// resumptions) as its history.
func Schedule(w io.Writer, s wire.Schedule, audit []wire.ScheduleAuditEntry) error {
	w = printable{w}
	tw := newTable(w)
	fmt.Fprintf(tw, "Schedule:\t%s\n", s.ScheduleKey)
	fmt.Fprintf(tw, "Workflow:\t%s/%s@%s\n", s.Namespace, s.Workflow, s.Version)
	fmt.Fprintf(tw, "Cron:\t%s\n", s.Cron)
	fmt.Fprintf(tw, "Time zone:\t%s\n", orDash(s.TimeZone))
	fmt.Fprintf(tw, "Catch-up:\t%s\n", catchUpText(s))
	fmt.Fprintf(tw, "Input:\t%s\n", taskview.Abbrev(string(s.Input), 100))
	fmt.Fprintf(tw, "State:\t%s\n", scheduleState(s))
	fmt.Fprintf(tw, "Last tick:\t%s\n", Time(s.LastTick))
	fmt.Fprintf(tw, "Next tick:\t%s\n", nextTickText(s))
	for _, e := range audit {
		line := fmt.Sprintf("%s %s by %s", Time(&e.At), e.Action, e.Actor)
		if e.Reason != "" {
			line += ": " + e.Reason
		}
		fmt.Fprintf(tw, "History:\t%s\n", line)
	}
	return flushTable(tw)
}

func catchUpText(s wire.Schedule) string {
	if s.CatchUp == "all" {
		return fmt.Sprintf("all (max %d)", s.MaxCatchUp)
	}
	return s.CatchUp
}

func scheduleState(s wire.Schedule) string {
	if s.Paused {
		return "paused"
	}
	return "active"
}

func nextTickText(s wire.Schedule) string {
	if s.Paused {
		return "-"
	}
	return Time(&s.NextTick)
}

// Workers writes the live engines and remote workers of `weft workers`,
// with how long ago, at now, each last heartbeated.
func Workers(w io.Writer, list []wire.Worker, now time.Time) error {
	w = printable{w}
	tw := newTable(w)
	fmt.Fprintln(tw, "ID\tKIND\tHOST\tHANDLERS\tHELD\tHEARTBEAT")
	for _, wk := range list {
		kind := wk.Kind
		if wk.Leader {
			kind += " (leader)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s ago\n", wk.ID, kind, wk.Host, taskview.Abbrev(orDash(strings.Join(wk.Handlers, ",")), 60), wk.Held,
			taskview.Duration(now.Sub(wk.HeartbeatAt).Round(time.Second)))
	}
	return flushTable(tw)
}

// OperatorLog writes the entries of the operator log, in the order given.
func OperatorLog(w io.Writer, entries []wire.OperatorEntry) error {
	w = printable{w}
	tw := newTable(w)
	fmt.Fprintln(tw, "TIME\tACTOR\tACTION\tSUBJECT\tREASON")
	for _, e := range entries {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", Time(&e.At), e.Actor, e.Action, e.Subject, orDash(taskview.Abbrev(e.Reason, 80)))
	}
	return flushTable(tw)
}

// Retentions writes the retention set on each namespace, by state.
func Retentions(w io.Writer, list []wire.RetentionSetting) error {
	w = printable{w}
	tw := newTable(w)
	fmt.Fprintln(tw, "NAMESPACE\tSTATE\tKEEP\tSET\tBY")
	for _, r := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Namespace, r.State, duration.Format(time.Duration(r.Keep)), Time(&r.UpdatedAt), orDash(r.UpdatedBy))
	}
	return flushTable(tw)
}

// Keys writes the API keys of `weft keys list`: never their secrets,
// which the records do not hold.
func Keys(w io.Writer, keys []wire.APIKey) error {
	w = printable{w}
	tw := newTable(w)
	fmt.Fprintln(tw, "ID\tNAME\tPERMISSIONS\tCREATED\tREVOKED")
	for _, k := range keys {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", k.ID, k.Name, strings.Join(k.Permissions, " "), Time(&k.CreatedAt), Time(k.RevokedAt))
	}
	return flushTable(tw)
}

// Webhooks writes the webhooks of `weft webhooks list` with their filter,
// state and last error. A webhook's secret is not shown.
func Webhooks(w io.Writer, ws []wire.Webhook) error {
	w = printable{w}
	tw := newTable(w)
	fmt.Fprintln(tw, "ID\tURL\tFILTER\tSTATE\tDELIVERED\tFAILURES\tLAST ERROR")
	for _, wh := range ws {
		filter := strings.Join(append([]string{wh.Namespace, wh.Workflow}, wh.Types...), " ")
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\t%s\n", wh.ID, wh.URL, orDash(strings.TrimSpace(filter)), wh.State, wh.Delivered,
			wh.Failures, orDash(taskview.Abbrev(wh.LastError, 80)))
	}
	return flushTable(tw)
}
