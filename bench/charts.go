package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"image/color"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

var (
	weftColor  = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	riverColor = color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}
)

// latestResults reads the results file and keeps the newest result of
// each scenario and backend.
func latestResults(path string) (map[string]*result, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("results: %w", err)
	}
	defer f.Close()
	out := map[string]*result{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for line := 1; sc.Scan(); line++ {
		var r result
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		out[r.Scenario+"/"+r.Backend] = &r
	}
	return out, sc.Err()
}

// drawCharts draws, from the newest result of each scenario and backend:
// throughput.png (weft beside River), dag7.png (latency distribution) and
// depth.png (claim cost by queue depth).
func drawCharts(resultsPath, dir string) error {
	res, err := latestResults(resultsPath)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var drawn []string
	for _, c := range []struct {
		file string
		draw func(map[string]*result) (*plot.Plot, error)
	}{
		{"throughput.png", throughputChart},
		{"dag7.png", dag7Chart},
		{"depth.png", depthChart},
	} {
		p, err := c.draw(res)
		if errors.Is(err, errNoData) {
			fmt.Fprintf(os.Stderr, "bench: %s: no results to draw it from\n", c.file)
			continue
		}
		if err != nil {
			return fmt.Errorf("%s: %w", c.file, err)
		}
		path := filepath.Join(dir, c.file)
		if err := p.Save(16*vg.Centimeter, 10*vg.Centimeter, path); err != nil {
			return fmt.Errorf("save %s: %w", path, err)
		}
		drawn = append(drawn, path)
	}
	for _, p := range drawn {
		fmt.Println("wrote", p)
	}
	return nil
}

var errNoData = errors.New("no data")

func throughputChart(res map[string]*result) (*plot.Plot, error) {
	var labels []string
	var weftV, riverV plotter.Values
	for _, sc := range []string{"single", "submit"} {
		for _, b := range []string{"sqlite", "postgres"} {
			r := res[sc+"/"+b]
			if r == nil || r.Weft == nil {
				continue
			}
			labels = append(labels, sc+" "+b)
			weftV = append(weftV, r.Weft.Value)
			rv := 0.0
			if r.River != nil {
				rv = r.River.Value
			}
			riverV = append(riverV, rv)
		}
	}
	if len(labels) == 0 {
		return nil, errNoData
	}
	p := plot.New()
	p.Title.Text = "Throughput, median of alternating runs (higher is better)"
	p.Y.Label.Text = "tasks (jobs) per second"
	w := vg.Points(18)
	wb, err := plotter.NewBarChart(weftV, w)
	if err != nil {
		return nil, err
	}
	wb.Color, wb.LineStyle.Width, wb.Offset = weftColor, 0, -w/2
	rb, err := plotter.NewBarChart(riverV, w)
	if err != nil {
		return nil, err
	}
	rb.Color, rb.LineStyle.Width, rb.Offset = riverColor, 0, w/2
	p.Add(wb, rb, plotter.NewGrid())
	p.Legend.Add("weft", wb)
	p.Legend.Add("River", rb)
	top := 0.0
	for i := range weftV {
		top = max(top, weftV[i], riverV[i])
	}
	p.Y.Min, p.Y.Max = 0, top*1.2 // room for the legend above the bars
	p.Legend.Top, p.Legend.Left = true, true
	p.NominalX(labels...)
	return p, nil
}

func dag7Chart(res map[string]*result) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "weft: 7-step DAG, submit to completed, idle engine"
	p.X.Label.Text = "latency (ms)"
	p.Y.Label.Text = "share of runs completed (CDF)"
	found := false
	for i, b := range []string{"sqlite", "postgres"} {
		r := res["dag7/"+b]
		if r == nil || r.Weft == nil || len(r.Weft.Latencies) == 0 {
			continue
		}
		lat := r.Weft.Latencies
		pts := make(plotter.XYs, len(lat))
		for j, v := range lat {
			pts[j] = plotter.XY{X: v, Y: float64(j+1) / float64(len(lat))}
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return nil, err
		}
		l.Color = plotutil.Color(i)
		l.Width = vg.Points(2)
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("%s (p50 %.1f, p99 %.1f ms, %d runs)", b, r.Weft.Metrics["p50_ms"], r.Weft.Metrics["p99_ms"], len(lat)), l)
		found = true
	}
	if !found {
		return nil, errNoData
	}
	p.Add(plotter.NewGrid())
	p.Legend.Left, p.Legend.Top = false, false
	p.Legend.YOffs = vg.Points(10)
	return p, nil
}

func depthChart(res map[string]*result) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "weft: time per claim of 100 steps by queue depth"
	p.X.Label.Text = "steps queued"
	p.Y.Label.Text = "ms per ClaimSteps (median)"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	found := false
	for i, b := range []string{"sqlite", "postgres"} {
		r := res["depth/"+b]
		if r == nil || r.Weft == nil || len(r.Weft.Depth) == 0 {
			continue
		}
		pts := make(plotter.XYs, len(r.Weft.Depth))
		for j, d := range r.Weft.Depth {
			pts[j] = plotter.XY{X: float64(d.Depth), Y: d.ClaimMS}
		}
		l, s, err := plotter.NewLinePoints(pts)
		if err != nil {
			return nil, err
		}
		l.Color, s.Color = plotutil.Color(i), plotutil.Color(i)
		l.Width = vg.Points(2)
		p.Add(l, s)
		p.Legend.Add(b, l, s)
		found = true
	}
	if !found {
		return nil, errNoData
	}
	p.Y.Min = 0
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	p.Legend.Left = true
	return p, nil
}
