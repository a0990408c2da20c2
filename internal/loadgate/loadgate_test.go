package loadgate

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParsePressure(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		in   string
		want float64
		err  string
	}{
		{"cpu", "some avg10=1.53 avg60=0.87 avg300=0.30 total=3000123\n", 1.53, ""},
		{"io with full", "some avg10=42.00 avg60=10.10 avg300=2.00 total=99\nfull avg10=30.00 avg60=5.00 avg300=1.00 total=50\n", 42, ""},
		{"full first", "full avg10=9.00 avg60=0 avg300=0 total=0\nsome avg10=0.00 avg60=0 avg300=0 total=0", 0, ""},
		{"no newline", "some avg10=100.00 avg60=0.00 avg300=0.00 total=1", 100, ""},
		{"empty", "", 0, `no "some" line`},
		{"only full", "full avg10=1.00 avg60=0 avg300=0 total=0\n", 0, `no "some" line`},
		{"no avg10", "some avg60=1.00 avg300=0 total=0\n", 0, "no avg10"},
		{"not a number", "some avg10=abc avg60=1 total=0\n", 0, "bad avg10"},
		{"negative", "some avg10=-1 avg60=1 total=0\n", 0, "bad avg10"},
		{"over 100", "some avg10=100.01 avg60=1 total=0\n", 0, "bad avg10"},
		{"NaN", "some avg10=NaN avg60=1 total=0\n", 0, "bad avg10"},
		{"bad bytes", "some avg10=\xff\xfe avg60=1 total=0\n", 0, "bad avg10"},
		{"binary", "\x00\x01\x02", 0, `no "some" line`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParsePressure([]byte(tc.in))
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.InDelta(t, tc.want, got, 1e-9)
		})
	}
}

func TestProcPressure(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "io"), []byte("some avg10=7.25 avg60=0 avg300=0 total=0\nfull avg10=1 avg60=0 avg300=0 total=0\n"), 0o600))
	v, err := ProcPressure{Dir: dir}.ReadPressure("io")
	require.NoError(t, err)
	require.InDelta(t, 7.25, v, 1e-9)
	_, err = ProcPressure{Dir: dir}.ReadPressure("cpu")
	require.ErrorIs(t, err, os.ErrNotExist)
}

// fakePressure is a Reader whose values a test sets.
type fakePressure struct {
	mu    sync.Mutex
	v     map[string]float64
	err   error
	reads int
}

func (f *fakePressure) set(r string, v float64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.v[r] = v
}

func (f *fakePressure) ReadPressure(r string) (float64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	return f.v[r], f.err
}

func TestLoadGateConfig(t *testing.T) {
	t.Parallel()
	ok := &fakePressure{v: map[string]float64{}}
	for _, tc := range []struct {
		name   string
		max    map[string]float64
		reader Reader
		err    string
	}{
		{"none", nil, nil, ""},
		{"valid", map[string]float64{"cpu": 80, "io": 0, "memory": 100}, ok, ""},
		{"unknown", map[string]float64{"disk": 50}, ok, `unknown resource "disk"`},
		{"too high", map[string]float64{"cpu": 101}, ok, "cpu must be a percentage from 0 to 100"},
		{"negative", map[string]float64{"io": -1}, ok, "io must be a percentage"},
		{"no PSI", map[string]float64{"cpu": 50}, &fakePressure{v: map[string]float64{}, err: os.ErrNotExist}, "Linux 4.20+"},
		{"no PSI dir", map[string]float64{"cpu": 50}, ProcPressure{Dir: filepath.Join(t.TempDir(), "missing")}, "needs Linux pressure stall information"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g, err := New(tc.max, tc.reader, nil)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.max == nil, g == nil)
		})
	}
}

// TestLoadGateCheck: the gate closes above a threshold, opens at or below
// it, reads the pressures at most once per interval and keeps the last
// value of a resource it cannot read.
func TestLoadGateCheck(t *testing.T) {
	t.Parallel()
	f := &fakePressure{v: map[string]float64{"cpu": 10, "io": 10}}
	g, err := New(map[string]float64{"cpu": 80, "io": 50}, f, nil)
	require.NoError(t, err)
	t0 := time.Unix(1000, 0)
	closed, ch, err := g.check(t0)
	require.NoError(t, err)
	require.False(t, closed)
	require.Nil(t, ch)

	f.set("io", 60)
	closed, ch, _ = g.check(t0.Add(time.Second / 2)) // not read again yet
	require.False(t, closed)
	require.Nil(t, ch)
	closed, ch, _ = g.check(t0.Add(time.Second))
	require.True(t, closed)
	require.Equal(t, &transition{closed: true, resource: "io", value: 60, threshold: 50}, ch)
	require.Equal(t, 900*time.Millisecond, g.Wait(t0.Add(1100*time.Millisecond)))

	f.mu.Lock()
	f.err = errors.New("gone")
	f.mu.Unlock()
	closed, ch, err = g.check(t0.Add(2 * time.Second))
	require.Error(t, err)
	require.True(t, closed, "an unreadable pressure keeps its last value")
	require.Nil(t, ch)
	reads := f.reads
	_, _, err = g.check(t0.Add(2500 * time.Millisecond))
	require.NoError(t, err)
	require.Equal(t, reads, f.reads, "read again only after the interval")
	_, _, err = g.check(t0.Add(3 * time.Second))
	require.NoError(t, err, "a run of failures is reported once")
	require.Greater(t, f.reads, reads)

	f.mu.Lock()
	f.err = nil
	f.mu.Unlock()
	f.set("io", 50)
	closed, ch, _ = g.check(t0.Add(4 * time.Second))
	require.False(t, closed)
	require.Equal(t, &transition{resource: "io", value: 50, threshold: 50}, ch)
}
