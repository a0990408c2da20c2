package dashboard

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/weftrun/weft/state"
)

var funcs = template.FuncMap{
	"resolvable": func(s state.Step) bool {
		switch s {
		case state.StepPending, state.StepReady, state.StepWaiting, state.StepFailed, state.StepExpired:
			return true
		}
		return false
	},
	"retryable":  func(s state.Step) bool { return s == state.StepFailed || s == state.StepExpired },
	"batchOf":    batchOf,
	"thousands":  thousands,
	"stepPage":   func() int { return stepPage },
	"hasJSON":    func(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" },
	"stateClass": stateClass,
	"sprintf":    fmt.Sprintf,
	"when":       when,

	"iso":      func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"ago":      func(t time.Time) string { return ago(time.Since(t)) },
	"handlers": handlerList,
	"dur":      func(d time.Duration) string { return short(d) },
	"took":     took,
	"tags":     sortedTags,
	"json":     jsonText,
	"shownKB":  func() string { return byteSize(jsonShown) },
	"pct":      func(f *float64) string { return fmt.Sprintf("%.0f%%", *f*100) },
	"num":      func(f *float64) float64 { return *f },
	"clip":     clip,
	"count":    func(n, limit int) string { return countText(n, limit) },
	"join":     strings.Join,
	// labelled gives a JSON document the name the page announces it by;
	// labelledAt also where the API serves it whole.
	"labelled": func(label string, raw json.RawMessage) labelledJSON { return labelledJSON{Label: label, Raw: raw} },
	"labelledAt": func(label string, raw json.RawMessage, whole string) labelledJSON {
		return labelledJSON{Label: label, Raw: raw, Whole: whole}
	},
}

// labelledJSON is a JSON document with its name, for the "json" template,
// and the API's address of it ("": none).
type labelledJSON struct {
	Label string
	Raw   json.RawMessage
	Whole string
}

// jsonShown bounds the JSON a page shows of one document (indented): a
// batch step's result of 10,000 items is 400 KB, which every live refresh
// would fetch again.
const jsonShown = 16 << 10

// shownJSON is a JSON document as a page shows it: indented, and its first
// jsonShown bytes when it is longer (Size says how long it is, indented).
type shownJSON struct {
	Text    string
	Clipped bool
	Size    string
}

func jsonText(raw json.RawMessage) shownJSON {
	if len(raw) == 0 {
		return shownJSON{}
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		buf.Reset()
		buf.Write(raw)
	}
	out := shownJSON{Text: buf.String()}
	if len(out.Text) > jsonShown {
		cut := out.Text[:jsonShown]
		for len(cut) > 0 && !utf8.ValidString(cut) {
			cut = cut[:len(cut)-1]
		}
		out = shownJSON{Text: cut + "\n…", Clipped: true, Size: byteSize(len(out.Text))}
	}
	return out
}

// byteSize says how big something is: "980 bytes", "380 KB", "2.1 MB".
func byteSize(n int) string {
	switch {
	case n < 1<<10:
		return plural(n, "byte")
	case n < 1<<20:
		return fmt.Sprintf("%d KB", n>>10)
	}
	return fmt.Sprintf("%.1f MB", float64(n)/(1<<20))
}

// took is how long something that started has run: until it finished, or
// until now; "—" when it has not started.
func took(started, finished *time.Time) string {
	switch {
	case started == nil:
		return "—"
	case finished == nil:
		return short(time.Since(*started))
	}
	return short(finished.Sub(*started))
}

// tag is one label of a task.
type tag struct{ Key, Value string }

// sortedTags returns a task's tags by key.
func sortedTags(m map[string]string) []tag {
	out := make([]tag, 0, len(m))
	for k, v := range m {
		out = append(out, tag{Key: k, Value: v})
	}
	slices.SortFunc(out, func(a, b tag) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// when writes a time in UTC, "2006-01-02 15:04:05", as a <time> that a
// narrow column breaks between the date and the time, never inside the
// date; "—" for no time.
func when(t any) template.HTML {
	var v time.Time
	switch t := t.(type) {
	case time.Time:
		v = t
	case *time.Time:
		if t != nil {
			v = *t
		}
	}
	if v.IsZero() {
		return "—"
	}
	v = v.UTC()
	return template.HTML(`<time datetime="` + v.Format(time.RFC3339) + `"><span class="date">` + v.Format(time.DateOnly) + `</span> ` + v.Format(time.TimeOnly) + `</time>`) //nolint:gosec // digits only
}

func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

func ago(d time.Duration) string {
	if d < 0 {
		return "in " + short(-d)
	}
	return short(d) + " ago"
}

// short formats a duration for people: 850ms, 12s, 3m20s, 5h4m, 3d2h.
func short(d time.Duration) string {
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}

// countText shows a bounded count: "100,000+" when it reached its limit.
func countText(n, limit int) string {
	s := thousands(n)
	if limit > 0 && n >= limit {
		s += "+"
	}
	return s
}

func thousands(n int) string {
	s := fmt.Sprint(n)
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 && s[0] != '-' {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}
