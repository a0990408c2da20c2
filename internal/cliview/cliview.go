// Package cliview holds the CLI's text views of the API's records: tables
// and detail views of tasks, steps, audit trails, events, policies, rates,
// breakers, schedules, workers, keys and webhooks. Each view writes wire
// types to an io.Writer; the commands fetch the records and choose between
// a view and JSON.
package cliview

import (
	"bytes"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"
)

// timeLayout is how views print times, in the local zone.
const timeLayout = "2006-01-02 15:04:05"

// Time is a time as the views print it, in the local zone; "-" for none.
func Time(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.Local().Format(timeLayout)
}

// printable is w for a view: the control characters of recorded text (an
// escape sequence a terminal would obey, a carriage return that would
// overwrite the line, in a reason or a name) are written escaped, as
// \x1b, so that nothing a view prints can drive the terminal; the tabs and
// newlines that shape the view pass. Every view writes through it.
type printable struct{ w io.Writer }

func (p printable) Write(b []byte) (int, error) {
	if !bytes.ContainsFunc(b, unsafeControl) {
		return p.w.Write(b)
	}
	out := make([]byte, 0, len(b)+16)
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if unsafeControl(r) {
			out = fmt.Appendf(out, `\x%02x`, r)
		} else {
			out = append(out, b[i:i+size]...)
		}
		i += size
	}
	if _, err := p.w.Write(out); err != nil {
		return 0, err
	}
	return len(b), nil
}

// unsafeControl reports a control character other than the newline and
// the tab.
func unsafeControl(r rune) bool { return unicode.IsControl(r) && r != '\n' && r != '\t' }

func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 8, 2, ' ', 0) }

func flushTable(tw *tabwriter.Writer) error {
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// tagList prints tags as k=v, sorted.
func tagList(tags map[string]string) string {
	if len(tags) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(tags))
	for k := range tags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + tags[k]
	}
	return strings.Join(parts, ",")
}

// taskIDs lists task ids, separated by commas.
func taskIDs(ids []int64) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.FormatInt(id, 10)
	}
	return strings.Join(parts, ", ")
}
