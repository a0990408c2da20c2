package dashboard

import (
	"fmt"
	"html"
	"html/template"
	"math"
	"strings"
	"time"
)

// palette colours the namespaces of a chart, in order.
var palette = []string{"#2563eb", "#d97706", "#059669", "#db2777", "#7c3aed", "#0891b2", "#65a30d", "#dc2626"}

type line struct {
	Name   string
	Values []float64
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

// lineChart draws one line per series over the buckets of the axis, with a
// legend, as an inline SVG. Its accessible name says what it shows (name:
// the measure and its unit), over which time, and when each series peaked.
func lineChart(ax timeAxis, lines []line, valueFormat, name string) template.HTML {
	const w, h, left, right, top, bottom = 640.0, 180.0, 48.0, 12.0, 12.0, 40.0
	pw, ph := w-left-right, h-top-bottom
	maxV := 0.0
	for _, l := range lines {
		for _, v := range l.Values {
			maxV = math.Max(maxV, v)
		}
	}
	if maxV == 0 {
		maxV = 1
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %.0f %.0f" role="img" aria-label="%s" xmlns="http://www.w3.org/2000/svg">`,
		w, h, html.EscapeString(chartSummary(ax, lines, valueFormat, name)))
	for i := 0; i <= 4; i++ {
		y := top + ph*float64(i)/4
		fmt.Fprintf(&b, `<line class="grid" x1="%.0f" x2="%.0f" y1="%.1f" y2="%.1f"/>`, left, w-right, y, y)
		fmt.Fprintf(&b, `<text class="tick" x="%.0f" y="%.1f" text-anchor="end">%s</text>`, left-6, y+4, html.EscapeString(fmt.Sprintf(valueFormat, maxV*float64(4-i)/4)))
	}
	x := func(i int) float64 {
		if ax.n <= 1 {
			return left
		}
		return left + pw*float64(i)/float64(ax.n-1)
	}
	for _, i := range []int{0, ax.n / 2, ax.n - 1} {
		fmt.Fprintf(&b, `<text class="tick" x="%.1f" y="%.0f" text-anchor="middle">%s</text>`, x(i), top+ph+14, ax.label(i))
	}
	if len(lines) == 0 {
		fmt.Fprintf(&b, `<text class="empty" x="%.0f" y="%.0f" text-anchor="middle">no task finished in this window</text>`, left+pw/2, top+ph/2)
	}
	for li, l := range lines {
		color := palette[li%len(palette)]
		var pts []string
		for i, v := range l.Values {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(i), top+ph-ph*v/maxV))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"><title>%s</title></polyline>`, color, strings.Join(pts, " "), html.EscapeString(l.Name))
		lx := left + float64(li%4)*140
		ly := h - 8 - float64(li/4)*0
		fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="10" height="10" fill="%s"/><text class="legend" x="%.0f" y="%.0f">%s</text>`,
			lx, ly-9, color, lx+14, ly, html.EscapeString(clip(l.Name, 18)))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) //nolint:gosec // every text in it is escaped above
}

// chartSummary is a chart's text alternative: what it shows, over which
// time, and when each series peaked.
func chartSummary(ax timeAxis, lines []line, valueFormat, name string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s by namespace, %s to %s UTC", name, ax.label(0), ax.label(ax.n-1))
	if len(lines) == 0 {
		b.WriteString(": no task finished in this window")
		return b.String()
	}
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
			fmt.Fprintf(&b, "%s%s %s throughout", sep, l.Name, fmt.Sprintf(valueFormat, 0.0))
			continue
		}
		fmt.Fprintf(&b, "%s%s peak %s at %s", sep, l.Name, fmt.Sprintf(valueFormat, l.Values[peak]), ax.label(peak))
	}
	return b.String()
}
