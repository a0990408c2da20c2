package dashboard_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/workflow"
)

// chartText measures every text of the overview's charts as drawn: its
// size on screen (its font size times the scale from the chart's units
// to the screen's pixels), and whether it lies inside its chart's box;
// and, for each row of charts, the top of each chart.
const chartText = `(() => {
	const texts = [], rows = {};
	for (const fig of document.querySelectorAll(".charts figure")) {
		const svg = fig.querySelector("svg.chart");
		const box = svg.getBoundingClientRect();
		const row = Math.round(fig.getBoundingClientRect().top);
		(rows[row] = rows[row] || []).push(box.top);
		for (const t of svg.querySelectorAll("text")) {
			const r = t.getBoundingClientRect();
			const size = parseFloat(getComputedStyle(t).fontSize) * t.getScreenCTM().a;
			texts.push({text: t.textContent, size, height: r.height,
				inside: r.left >= box.left - 0.5 && r.right <= box.right + 0.5 && r.top >= box.top - 0.5 && r.bottom <= box.bottom + 0.5});
		}
	}
	return {texts, tops: Object.values(rows)};
})()`

// pageFit reports what does not fit the page at its width: the header's
// contents wider than the header, an input too narrow for its
// placeholder, a time in a table on more than two lines.
const pageFit = `(() => {
	const out = [];
	const header = document.querySelector("header.top");
	const hb = header.getBoundingClientRect();
	if (header.scrollWidth > header.clientWidth) out.push("the header scrolls: " + header.scrollWidth + " > " + header.clientWidth);
	for (const el of header.querySelectorAll("a, span, button, summary")) {
		const r = el.getBoundingClientRect();
		if (r.width > 0 && (r.right > hb.right + 0.5 || r.left < hb.left - 0.5)) out.push("header: " + el.textContent.trim() + " sticks out");
	}
	if (document.documentElement.scrollWidth > window.innerWidth) out.push("the page scrolls sideways");
	const ctx = document.createElement("canvas").getContext("2d");
	for (const input of document.querySelectorAll("input[placeholder]")) {
		const cs = getComputedStyle(input);
		ctx.font = cs.font;
		const room = input.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);
		const need = ctx.measureText(input.placeholder).width;
		if (need > room + 0.5) out.push("placeholder cut off: " + input.placeholder + " (" + need.toFixed(0) + " px in " + room.toFixed(0) + ")");
	}
	for (const time of document.querySelectorAll("td.when time")) {
		const lines = new Set([...time.getClientRects()].map(r => Math.round(r.top)));
		if (lines.size > 2) out.push("a time on " + lines.size + " lines: " + time.textContent);
	}
	return out;
})()`

// svgText lists the texts of every drawing on the page (charts, the
// graph, the timeline) drawn smaller than 11 px on screen.
const svgText = `(() => {
	const out = [];
	for (const t of document.querySelectorAll("svg text")) {
		const r = t.getBoundingClientRect();
		if (r.width === 0) continue; // not drawn (a folded details)
		const size = parseFloat(getComputedStyle(t).fontSize) * t.getScreenCTM().a;
		if (size < 11) out.push(t.closest("svg[class]").getAttribute("class") + ": " + t.textContent + " at " + size.toFixed(1) + " px");
	}
	return out;
})()`

type chartMeasure struct {
	Texts []struct {
		Text         string
		Size, Height float64
		Inside       bool
	}
	Tops [][]float64
}

// TestBrowserOverviewLegible loads the overview, with activity in several
// namespaces, at the widths operators use, from 700 px up: each text of
// each chart is at least 11 px on screen and inside its chart, the charts
// of a row start at one height; and on these pages, the task list, a task
// and the namespaces, the header, the task list's times and the forms'
// placeholders fit, and the page does not scroll sideways. With $WEFT_LAYOUT_SHOTS set it writes a
// screenshot of each page at each width there.
func TestBrowserOverviewLegible(t *testing.T) {
	t.Parallel()
	ctx := tab(t)
	en := newEnv(t, stores["sqlite"](t), server.Options{})
	bg := context.Background()
	var last []int64
	for _, ns := range []string{"billing", "media", "reporting-eu-west-1"} {
		require.NoError(t, en.e.Register(bg, workflow.New(ns, "job", "1").Step("run", "shop.ok")))
		var subs []weft.Submission
		for i := range 5 {
			subs = append(subs, weft.Submission{Workflow: ns + "/job", Input: map[string]any{"n": i}})
		}
		res, err := en.e.SubmitMany(bg, subs)
		require.NoError(t, err)
		last = append(last, res[len(res)-1].Task.ID)
	}
	for _, id := range last {
		en.waitTask(id, func(t *weft.Task) bool { return t.State == state.TaskCompleted })
	}
	shots := os.Getenv("WEFT_LAYOUT_SHOTS")
	signInAs(t, ctx, en, en.admin, "/")
	for _, width := range []int64{700, 800, 1024, 1400} {
		require.NoError(t, chromedp.Do(ctx, chromedp.EmulateViewport(width, 1000)))
		for _, page := range []struct{ name, path, wait string }{
			{"overview", "/", "svg.chart"},
			{"overview-7d", "/?window=7d", "svg.chart"},
			{"tasks", "/tasks", "#task-table"},
			{"task", fmt.Sprintf("/tasks/%d", en.awaiting), "#signal-form"},
			{"namespaces", "/namespaces", "#policy-form"},
		} {
			require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(en.url+page.path), chromedp.WaitVisible(chromedp.CSS(page.wait))))
			if shots != "" {
				png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(filepath.Join(shots, fmt.Sprintf("%s-%d.png", page.name, width)), png, 0o644))
			}
			misfits, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](pageFit))
			require.NoError(t, err)
			require.Empty(t, misfits, "%s at %d px", page.path, width)
			small, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](svgText))
			require.NoError(t, err)
			require.Empty(t, small, "%s at %d px: text drawn too small", page.path, width)
			if !strings.HasPrefix(page.name, "overview") {
				continue
			}
			m, err := chromedp.Run(ctx, chromedp.Evaluate[chartMeasure](chartText))
			require.NoError(t, err)
			require.NotEmpty(t, m.Texts, "%s at %d px: no chart text", page.path, width)
			for _, tx := range m.Texts {
				require.GreaterOrEqual(t, tx.Size, 11.0, "%s at %d px: %q drawn at %.1f px", page.path, width, tx.Text, tx.Size)
				require.GreaterOrEqual(t, tx.Height, 11.0, "%s at %d px: %q %.1f px high", page.path, width, tx.Text, tx.Height)
				require.True(t, tx.Inside, "%s at %d px: %q outside its chart", page.path, width, tx.Text)
			}
			for _, row := range m.Tops {
				for _, top := range row {
					require.InDelta(t, row[0], top, 0.5, "%s at %d px: the charts of a row start at %v", page.path, width, row)
				}
			}
		}
	}
}
