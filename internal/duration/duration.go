// Package duration is the text of a duration everywhere weft reads or
// writes one for people: workflow files, the CLI and the REST API. It is
// Go's syntax ("90s", "1h30m", "10ms") and whole days ("7d").
package duration

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// maxDays bounds the days form: 100,000 days is about 274 years.
const maxDays = 100_000

// Parse reads a duration: whole days ("7d") or Go's syntax ("90s",
// "1h30m"). A negative duration is refused.
func Parse(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.Atoi(days); err == nil && n >= 0 && n <= maxDays {
			return time.Duration(n) * 24 * time.Hour, nil
		}
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q (use Go syntax such as 10ms, 30s, 1m, or days such as 7d)", s)
	}
	if v < 0 {
		return 0, fmt.Errorf("duration %q must not be negative", s)
	}
	return v, nil
}

// Format writes d as Parse reads it, in its shortest form: whole days as
// "7d", else Go's syntax without zero units ("2m", not "2m0s"; "1h", not
// "1h0m0s").
func Format(d time.Duration) string {
	const day = 24 * time.Hour
	if d > 0 && d%day == 0 && d/day <= maxDays {
		return strconv.FormatInt(int64(d/day), 10) + "d"
	}
	s := d.String()
	if t, ok := strings.CutSuffix(s, "m0s"); ok {
		s = t + "m"
	}
	if t, ok := strings.CutSuffix(s, "h0m"); ok {
		s = t + "h"
	}
	return s
}

// Duration is a time.Duration whose JSON is its text, as Format writes and
// Parse reads it: workflow.Duration and wire.Duration are this type.
type Duration time.Duration

// MarshalJSON writes the duration in its shortest form ("2m", "7d").
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(Format(time.Duration(d))) }

// UnmarshalJSON reads a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string such as \"10s\" or \"7d\": %w", err)
	}
	v, err := Parse(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}
