// Package taskview shows tasks and steps as text for the CLI: the view of
// a running task that `weft run` draws (live in a terminal, one line per
// change otherwise), a step's state, progress and the command that signals
// it, and the durations and abbreviations the listings share.
package taskview

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/weftrun/weft/internal/redact"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/wire"
)

// Options configures a progress view.
type Options struct {
	// Live redraws one view in place with ANSI escapes (for a terminal);
	// otherwise one plain line is written per step state change.
	Live bool
	// Color adds ANSI colours (live view only).
	Color bool
	// Width and Height are the terminal's size in cells; 0 means 80 for
	// the width and unbounded for the height.
	Width, Height int
	// Now returns the current time; default time.Now.
	Now func() time.Time
	// Loc is the zone of printed clock times; default time.Local.
	Loc *time.Location
	// DB is the --db flag given and Server the --server flag, repeated in
	// the command printed for a step waiting for a signal; "" when not
	// given.
	DB, Server string
}

// SignalCommand is the command that sends the signal a step waits for.
func SignalCommand(s *wire.Step, opts Options) string {
	cmd := fmt.Sprintf("weft signal %d %s --payload '{...}'", s.TaskID, s.Signal)
	switch {
	case opts.Server != "":
		cmd += " --server " + ShellQuote(redact.String(opts.Server))
	case opts.DB != "":
		cmd += " --db " + ShellQuote(redact.String(opts.DB))
	}
	return cmd
}

// ShellQuote quotes s for a POSIX shell when it needs it.
func ShellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=@%+,", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// StepProgress is a running step's reported progress: "60% row 6 of 10".
func StepProgress(s *wire.Step) string {
	if s.Progress == nil {
		return ""
	}
	text := fmt.Sprintf("%.0f%%", *s.Progress*100)
	if s.ProgressMessage != "" {
		text += " " + OneLine(s.ProgressMessage)
	}
	return text
}

// progress renders the progress of one task from successive snapshots of
// it. In live mode each Update redraws the whole view over the previous
// one; in plain mode each Update prints one line per step state change since
// the previous snapshot. It is not safe for concurrent use.
type progress struct {
	w    io.Writer
	opts Options

	frame int // live: spinner frame
	drawn int // live: lines of the view on screen

	started bool                // plain: the header line was printed
	seen    map[string]stepMark // plain: what was printed of each step
}

// stepMark is what the plain renderer last reported of a step.
type stepMark struct {
	state   state.Step
	attempt int
	sub     string
	ran     int // the last attempt whose "running" line was printed
}

// New returns a renderer writing to w.
func New(w io.Writer, opts Options) *progress {
	if opts.Width <= 0 {
		opts.Width = 80
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Loc == nil {
		opts.Loc = time.Local
	}
	return &progress{w: w, opts: opts, seen: map[string]stepMark{}}
}

// Update renders a new snapshot of the task.
func (p *progress) Update(t *wire.Task) error {
	if p.opts.Live {
		return p.draw(t, false)
	}
	return p.plain(t)
}

// Finish renders the last snapshot of the task and a Summary line.
func (p *progress) Finish(t *wire.Task) error {
	if p.opts.Live {
		if err := p.draw(t, true); err != nil {
			return err
		}
		sym, color := taskSymbol(t.State)
		_, err := fmt.Fprintf(p.w, "%s %s\n", p.paint(color, sym), Summary(t, p.opts.Now()))
		return err
	}
	if err := p.plain(t); err != nil {
		return err
	}
	_, err := fmt.Fprintf(p.w, "%s %s\n", p.clock(p.opts.Now()), Summary(t, p.opts.Now()))
	return err
}

// ANSI colours.
const (
	ansiReset   = "\x1b[0m"
	ansiBold    = "\x1b[1m"
	ansiDim     = "\x1b[2m"
	ansiRed     = "\x1b[31m"
	ansiGreen   = "\x1b[32m"
	ansiYellow  = "\x1b[33m"
	ansiBlue    = "\x1b[34m"
	ansiMagenta = "\x1b[35m"
	ansiCyan    = "\x1b[36m"
)

var spinner = []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}

// stepSymbol returns the symbol and colour of a step state; running steps
// get the spinner frame.
func stepSymbol(s state.Step, frame int) (sym, color string) {
	switch s {
	case state.StepCompleted, state.StepResolved:
		return "✓", ansiGreen
	case state.StepFailed:
		return "✗", ansiRed
	case state.StepRunning:
		return spinner[frame%len(spinner)], ansiCyan
	case state.StepWaiting:
		return "↻", ansiYellow
	case state.StepReady:
		return "○", ansiBlue
	case state.StepCancelled, state.StepExpired:
		return "⊘", ansiMagenta
	case state.StepSkipped:
		return "-", ansiDim
	default:
		return "·", ansiDim
	}
}

// taskSymbol returns the symbol and colour of a task state.
func taskSymbol(s state.Task) (sym, color string) {
	switch s {
	case state.TaskCompleted:
		return "✓", ansiGreen
	case state.TaskFailed:
		return "✗", ansiRed
	case state.TaskCancelled, state.TaskExpired:
		return "⊘", ansiMagenta
	case state.TaskRunning:
		return "▶", ansiCyan
	default:
		return "·", ansiDim
	}
}

func (p *progress) paint(color, s string) string {
	if !p.opts.Color || color == "" || s == "" {
		return s
	}
	return color + s + ansiReset
}

// seg is a piece of a line of the live view in one colour.
type seg struct{ text, color string }

// line joins segments, cut to fit the terminal width so that no line wraps
// (a wrapped line would break the redraw).
func (p *progress) line(segs ...seg) string {
	room := p.opts.Width - 1
	var b strings.Builder
	for _, s := range segs {
		if room <= 0 {
			break
		}
		text := s.text
		if n := utf8.RuneCountInString(text); n > room {
			text = cutRunes(text, room-1) + "…"
		}
		room -= utf8.RuneCountInString(text)
		b.WriteString(p.paint(s.color, text))
	}
	return b.String()
}

// draw redraws the live view over the previous one.
func (p *progress) draw(t *wire.Task, final bool) error {
	now := p.opts.Now()
	lines := p.view(t, now, final)
	var b strings.Builder
	if p.drawn > 0 {
		fmt.Fprintf(&b, "\x1b[%dA", p.drawn) // back to the first line of the view
	}
	for _, l := range lines {
		b.WriteString("\r\x1b[2K")
		b.WriteString(l)
		b.WriteByte('\n')
	}
	b.WriteString("\x1b[J") // clear what is left of a longer previous view
	p.drawn = len(lines)
	p.frame++
	_, err := io.WriteString(p.w, b.String())
	return err
}

// view returns the lines of the live view.
func (p *progress) view(t *wire.Task, now time.Time, final bool) []string {
	sym, color := taskSymbol(t.State)
	lines := []string{p.line(
		seg{sym + " ", color},
		seg{fmt.Sprintf("task %d", t.ID), ansiBold},
		seg{"  " + Ref(t) + "  ", ""},
		seg{string(t.State), color},
		seg{"  " + Duration(Elapsed(t, now)), ansiDim},
	)}

	done, failed := 0, false
	for _, s := range t.Steps {
		if s.State.Terminal() {
			done++
		}
		failed = failed || s.State == state.StepFailed || s.State == state.StepExpired
	}
	const barWidth = 24
	filled := 0
	if len(t.Steps) > 0 {
		filled = done * barWidth / len(t.Steps)
	}
	barColor := ansiGreen
	if failed {
		barColor = ansiRed
	}
	lines = append(lines, p.line(
		seg{"[", ""},
		seg{strings.Repeat("█", filled), barColor},
		seg{strings.Repeat("░", barWidth-filled), ansiDim},
		seg{fmt.Sprintf("] %d/%d steps", done, len(t.Steps)), ""},
	))

	nameWidth := 0
	for _, s := range t.Steps {
		nameWidth = max(nameWidth, min(utf8.RuneCountInString(s.Name), 24))
	}
	byName := make(map[string]state.Step, len(t.Steps))
	for _, s := range t.Steps {
		byName[s.Name] = s.State
	}
	shown, hidden := p.visibleSteps(t.Steps)
	for _, i := range shown {
		s := &t.Steps[i]
		frame := p.frame
		if final {
			frame = 0
		}
		sym, color := stepSymbol(s.State, frame)
		attempts := ""
		if s.Attempts > 0 {
			attempts = fmt.Sprintf("%d/%d", s.Attempts, s.MaxAttempts)
		}
		detail, detailColor := stepDetail(s, byName, now, p.opts)
		lines = append(lines, p.line(
			seg{"  ", ""},
			seg{sym, color},
			seg{" " + padRight(cutRunes(s.Name, nameWidth), nameWidth) + "  ", ""},
			seg{padRight(StepState(s), 9), color},
			seg{"  " + padRight(attempts, 5), ansiDim},
			seg{"  " + detail, detailColor},
		))
	}
	if hidden > 0 {
		lines = append(lines, p.line(seg{fmt.Sprintf("  … %d more steps", hidden), ansiDim}))
	}
	return lines
}

// visibleSteps picks the indexes of the steps that fit the terminal height,
// preferring those that need attention, in definition order, and counts
// the others.
func (p *progress) visibleSteps(steps []wire.Step) (shown []int, hidden int) {
	rows := len(steps)
	if p.opts.Height > 0 {
		rows = max(p.opts.Height-4, 1) // header, bar, "more" line and the cursor line
	}
	if len(steps) <= rows {
		shown = make([]int, len(steps))
		for i := range steps {
			shown[i] = i
		}
		return shown, 0
	}
	rank := func(s state.Step) int {
		switch s {
		case state.StepFailed, state.StepRunning:
			return 0
		case state.StepWaiting, state.StepExpired:
			return 1
		case state.StepReady:
			return 2
		case state.StepPending:
			return 3
		default:
			return 4
		}
	}
	order := make([]int, len(steps))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return rank(steps[order[a]].State) < rank(steps[order[b]].State) })
	shown = order[:rows]
	sort.Ints(shown)
	return shown, len(steps) - rows
}

// StepState is the state column of a step: its state, or "deferred" for
// a running step whose handler waits with its slot released.
func StepState(s *wire.Step) string {
	if s.State == state.StepRunning && s.Sub != "" {
		return s.Sub
	}
	return string(s.State)
}

// stepDetail is the last column of a step in the live view: its duration,
// what it waits for, or its error.
func stepDetail(s *wire.Step, states map[string]state.Step, now time.Time, opts Options) (text, color string) {
	switch s.State {
	case state.StepPending:
		var waiting []string
		for _, d := range s.DependsOn {
			if !states[d].Succeeded() {
				waiting = append(waiting, d)
			}
		}
		if len(waiting) > 0 {
			return "after " + strings.Join(waiting, ", "), ansiDim
		}
	case state.StepRunning:
		if s.StartedAt != nil {
			text := Duration(now.Sub(*s.StartedAt))
			if pt := StepProgress(s); pt != "" {
				text += " " + pt
			}
			return text, ansiDim
		}
	case state.StepCompleted, state.StepResolved:
		if s.StartedAt != nil && s.FinishedAt != nil {
			return Duration(s.FinishedAt.Sub(*s.StartedAt)), ansiDim
		}
	case state.StepWaiting:
		var b strings.Builder
		if s.Signal != "" {
			fmt.Fprintf(&b, "signal %q: %s", s.Signal, SignalCommand(s, opts))
			if s.RunAt != nil {
				fmt.Fprintf(&b, " (times out in %s)", Duration(max(s.RunAt.Sub(now), 0)))
			}
			return b.String(), ansiYellow
		}
		if s.RunAt != nil {
			what := "until"
			if s.Error != "" {
				what = "retry"
			}
			if d := s.RunAt.Sub(now); d > 0 {
				fmt.Fprintf(&b, "%s in %s", what, Duration(d))
			} else {
				fmt.Fprintf(&b, "%s due", what)
			}
		}
		if s.Error != "" {
			if b.Len() > 0 {
				b.WriteString(": ")
			}
			b.WriteString(OneLine(s.Error))
		}
		return b.String(), ansiYellow
	default:
		if s.Error != "" {
			return OneLine(s.Error), ansiRed
		}
	}
	return "", ""
}

// Ref returns "namespace/name@version" of a task's workflow.
func Ref(t *wire.Task) string { return t.Namespace + "/" + t.Workflow + "@" + t.Version }

// Elapsed is how long the task has existed, or took when it ended.
func Elapsed(t *wire.Task, now time.Time) time.Duration {
	end := now
	if t.State.Terminal() && t.FinishedAt != nil {
		end = *t.FinishedAt
	}
	return max(end.Sub(t.CreatedAt), 0)
}

// Duration rounds a duration for display: milliseconds under a second,
// tenths of a second under a minute, seconds above.
func Duration(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}

func timeOr(t *time.Time, def time.Time) time.Time {
	if t == nil {
		return def
	}
	return *t
}

// OneLine collapses runs of white space, newlines included, to one space.
func OneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// cutRunes shortens s to at most n runes.
func cutRunes(s string, n int) string {
	if n <= 0 {
		return ""
	}
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	i := 0
	for j := range s {
		if i == n {
			return s[:j]
		}
		i++
	}
	return s
}

// Abbrev shortens s to one line of at most n runes, marking a cut with "…".
func Abbrev(s string, n int) string {
	s = OneLine(s)
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return cutRunes(s, n-1) + "…"
}

func padRight(s string, n int) string {
	if pad := n - utf8.RuneCountInString(s); pad > 0 {
		return s + strings.Repeat(" ", pad)
	}
	return s
}
