package dashboard

import (
	"errors"
	"html/template"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/weftrun/weft/store"
)

// countLimit bounds each state's count on the overview, and activityLimit
// the finished tasks its charts read.
const (
	countLimit    = 100_000
	activityLimit = 50_000
)

// windows are the overview's time ranges and their bucket sizes.
var windows = []struct {
	Name           string
	Span, Interval time.Duration
}{
	{"1h", time.Hour, time.Minute},
	{"6h", 6 * time.Hour, 5 * time.Minute},
	{"24h", 24 * time.Hour, 30 * time.Minute},
	{"7d", 7 * 24 * time.Hour, 4 * time.Hour},
}

type overviewData struct {
	Counts     []store.StateCount
	CountLimit int
	Depth      []store.QueueCount
	Window     string
	Windows    []string
	Namespaces []string
	Charts     []chart
	Truncated  bool
	// ActivityLimit is how many finished tasks the charts read at most.
	ActivityLimit int
	// Legend names the colour of each namespace in the charts.
	Legend []swatch
}

type chart struct {
	Title, Unit string
	SVG         template.HTML
}

func (d *Dashboard) overview(r *http.Request) (string, any, error) {
	ctx := r.Context()
	win := r.URL.Query().Get("window")
	if win == "" {
		win = "1h"
	}
	idx := -1
	data := overviewData{CountLimit: countLimit, ActivityLimit: activityLimit, Window: win}
	for i, w := range windows {
		data.Windows = append(data.Windows, w.Name)
		if w.Name == win {
			idx = i
		}
	}
	if idx < 0 {
		return "", nil, badInput("window: %q is not one of %v", win, data.Windows)
	}
	st := d.in(r)
	w := windows[idx]
	now := d.now().Truncate(w.Interval)
	since := now.Add(-w.Span + w.Interval)
	// The three reads are independent: run them at once, so the page
	// costs the slowest of them rather than their sum.
	var (
		wg                         sync.WaitGroup
		act                        store.Activity
		countErr, depthErr, actErr error
	)
	wg.Go(func() { data.Counts, countErr = st.CountTasksByState(ctx, countLimit) })
	wg.Go(func() { data.Depth, depthErr = st.QueueDepth(ctx) })
	wg.Go(func() {
		act, actErr = st.TaskActivity(ctx, store.ActivityQuery{Since: since, Bucket: w.Interval, MaxTasks: activityLimit})
	})
	wg.Wait()
	if err := errors.Join(countErr, depthErr, actErr); err != nil {
		return "", nil, err
	}
	data.Truncated = act.Truncated
	n := int(w.Span / w.Interval)
	type series struct{ finished, failed, waited, wait []float64 }
	byNS := map[string]*series{}
	for _, b := range act.Buckets {
		s := byNS[b.Namespace]
		if s == nil {
			s = &series{make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)}
			byNS[b.Namespace] = s
			data.Namespaces = append(data.Namespaces, b.Namespace)
		}
		i := int(b.Start.Sub(since) / w.Interval)
		if i < 0 || i >= n {
			continue
		}
		s.finished[i] += float64(b.Finished)
		s.failed[i] += float64(b.Failed)
		s.waited[i] += float64(b.Waited)
		s.wait[i] += b.WaitTotal.Seconds()
	}
	sort.Strings(data.Namespaces)
	perMin := w.Interval.Minutes()
	var thr, wait, fail []line
	for _, ns := range data.Namespaces {
		s := byNS[ns]
		t, wt, f := make([]float64, n), make([]float64, n), make([]float64, n)
		for i := range n {
			t[i] = s.finished[i] / perMin
			if s.waited[i] > 0 {
				wt[i] = s.wait[i] / s.waited[i]
			}
			if s.finished[i] > 0 {
				f[i] = 100 * s.failed[i] / s.finished[i]
			}
		}
		thr, wait, fail = append(thr, line{ns, t}), append(wait, line{ns, wt}), append(fail, line{ns, f})
	}
	axis := timeAxis{start: since, step: w.Interval, n: n}
	mk := func(title, unit string, lines []line, m measure) chart {
		return chart{Title: title, Unit: unit, SVG: lineChart(axis, lines, m, title+" ("+unit+")")}
	}
	data.Charts = []chart{
		mk("Throughput", "tasks finished per minute", thr, perMinute),
		mk("Queue wait", "mean time from run_at to start, by finish time", wait, seconds),
		mk("Failure rate", "% of finished tasks that failed or expired", fail, percent),
	}
	data.Legend = legendOf(thr)
	return "Overview", data, nil
}

// stateClass names a state's colour class.
func stateClass(s string) string { return "st-" + s }
