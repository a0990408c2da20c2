package dashboard

import (
	"fmt"
	"html"
	"html/template"
	"math"
	"strconv"
	"strings"
	"time"
)

// palette colours the namespaces of a chart, in order.
var palette = []string{"#2563eb", "#d97706", "#059669", "#db2777", "#7c3aed", "#0891b2", "#65a30d", "#dc2626"}

type line struct {
	Name   string
	Values []float64
}

// swatch is a line's entry in a legend: its name and colour.
type swatch struct{ Name, Color string }

// legendOf names the colour of each line, as lineChart draws them.
func legendOf(lines []line) []swatch {
	out := make([]swatch, len(lines))
	for i, l := range lines {
		out[i] = swatch{l.Name, palette[i%len(palette)]}
	}
	return out
}

type timeAxis struct {
	start time.Time
	step  time.Duration
	n     int
}

// label names the time of the axis's bucket i, in UTC.
func (ax timeAxis) label(i int) string {
	t := ax.start.Add(time.Duration(i) * ax.step).UTC()
	if ax.step*time.Duration(ax.n) > 24*time.Hour {
		return t.Format("Jan 2 15:04")
	}
	return t.Format("15:04")
}

// measure is what a chart's values count, which says how to write them.
type measure int

const (
	perMinute measure = iota // tasks per minute
	seconds                  // a duration in seconds
	percent                  // a share, 0 to 100
)

// text writes v, on an axis whose ticks are step apart: with as many
// decimals as the step needs, and its unit.
func (m measure) text(v, step float64) string {
	unit := ""
	switch m {
	case seconds:
		unit = "s"
		if step < 1 {
			v, step, unit = v*1000, step*1000, "ms"
		}
	case percent:
		unit = "%"
	}
	decimals := 0
	for d := step; d > 0 && math.Abs(d-math.Round(d)) > 1e-9*d && decimals < 6; d *= 10 {
		decimals++
	}
	return strconv.FormatFloat(v, 'f', decimals, 64) + unit
}

// ticks are the chart's gridlines: four steps of a round size (1, 2, 2.5
// or 5 times a power of ten) from zero to at least maxV.
func ticks(maxV float64, m measure) (step, top float64) {
	if maxV <= 0 {
		maxV = 1
	}
	raw := maxV / 4
	pow := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, k := range []float64{1, 2, 2.5, 5, 10} {
		if step = k * pow; step >= raw*(1-1e-9) {
			break
		}
	}
	if m == percent && maxV <= 100 && step*4 > 100 {
		step = 25
	}
	return step, step * 4
}

// Chart geometry, in CSS pixels: the charts do not scale their text with
// their width. The plot spans the chart's width; each value label sits at
// the left above its gridline, and the time labels below the plot.
const (
	chartTop    = 18.0  // room for the label of the top gridline
	chartPlot   = 132.0 // the plot's height
	chartBottom = 22.0  // the time labels
)

// lineChart draws one line per series over the buckets of the axis as an
// inline SVG as wide as its box, with text of the page's size at any
// width. Its accessible name says what it shows (name: the measure and
// its unit), over which time, and when each series peaked. legendOf names
// its colours.
func lineChart(ax timeAxis, lines []line, m measure, name string) template.HTML {
	maxV := 0.0
	for _, l := range lines {
		for _, v := range l.Values {
			maxV = math.Max(maxV, v)
		}
	}
	step, top := ticks(maxV, m)
	h := chartTop + chartPlot + chartBottom
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" width="100%%" height="%.0f" role="img" aria-label="%s" xmlns="http://www.w3.org/2000/svg">`,
		h, html.EscapeString(chartSummary(ax, lines, m, step, name)))
	for i := 0; i <= 4; i++ {
		y := chartTop + chartPlot*float64(i)/4
		fmt.Fprintf(&b, `<line class="grid" x1="0" x2="100%%" y1="%.1f" y2="%.1f"/>`, y, y)
	}
	// The lines, in a plot of the axis's units stretched to the chart's
	// width; their strokes keep their width.
	span := math.Max(float64(ax.n-1), 1)
	fmt.Fprintf(&b, `<svg x="0" y="%.0f" width="100%%" height="%.0f" viewBox="0 0 %.0f 100" preserveAspectRatio="none" overflow="visible">`,
		chartTop, chartPlot, span)
	for li, l := range lines {
		var pts []string
		for i, v := range l.Values {
			pts = append(pts, fmt.Sprintf("%d,%.2f", i, 100-100*v/top))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" vector-effect="non-scaling-stroke" points="%s"><title>%s</title></polyline>`,
			palette[li%len(palette)], strings.Join(pts, " "), html.EscapeString(l.Name))
	}
	b.WriteString(`</svg>`)
	// The labels over the lines, each with a halo of the background.
	for i := 0; i <= 4; i++ {
		y := chartTop + chartPlot*float64(i)/4
		fmt.Fprintf(&b, `<text class="tick" x="0" y="%.1f">%s</text>`, y-4, html.EscapeString(m.text(top*float64(4-i)/4, step)))
	}
	for _, t := range []struct {
		i      int
		anchor string
	}{{0, "start"}, {ax.n / 2, "middle"}, {ax.n - 1, "end"}} {
		fmt.Fprintf(&b, `<text class="tick" x="%.2f%%" y="%.0f" text-anchor="%s">%s</text>`,
			100*float64(t.i)/span, chartTop+chartPlot+16, t.anchor, ax.label(t.i))
	}
	if len(lines) == 0 {
		fmt.Fprintf(&b, `<text class="empty" x="50%%" y="%.0f" text-anchor="middle">no task finished in this window</text>`, chartTop+chartPlot/2)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) //nolint:gosec // every text in it is escaped above
}

// chartSummary is a chart's text alternative: what it shows, over which
// time, and when each series peaked.
func chartSummary(ax timeAxis, lines []line, m measure, step float64, name string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s by namespace, %s to %s UTC", name, ax.label(0), ax.label(ax.n-1))
	if len(lines) == 0 {
		b.WriteString(": no task finished in this window")
		return b.String()
	}
	// Peaks to a tenth of a tick's precision.
	step /= 10
	for i, l := range lines {
		peak := 0
		for j, v := range l.Values {
			if v > l.Values[peak] {
				peak = j
			}
		}
		sep := "; "
		if i == 0 {
			sep = ": "
		}
		if len(l.Values) == 0 || l.Values[peak] == 0 {
			fmt.Fprintf(&b, "%s%s %s throughout", sep, l.Name, m.text(0, step))
			continue
		}
		fmt.Fprintf(&b, "%s%s peak %s at %s", sep, l.Name, m.text(l.Values[peak], step), ax.label(peak))
	}
	return b.String()
}
