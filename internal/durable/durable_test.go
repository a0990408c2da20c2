package durable_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/internal/durable"
)

// twoSteps calls "a" twice (a, a[2]), then "b" in parallel with "c".
func twoSteps(r *durable.Replay, _ json.RawMessage) (json.RawMessage, error) {
	step := func(name string) *durable.Handle {
		return r.Call(name, durable.Request{Item: durable.Item{Call: durable.CallStep}}, func(context.Context) (json.RawMessage, error) {
			return json.RawMessage(`"` + name + ` ran"`), nil
		})
	}
	for range 2 {
		if _, err := step("a").Wait(); err != nil {
			return nil, err
		}
	}
	b, c := step("b"), step("c")
	rb, err := b.Wait()
	if err != nil {
		return nil, err
	}
	if _, err := c.Wait(); err != nil {
		return nil, err
	}
	return rb, nil
}

func done(name string) durable.Recorded {
	return durable.Recorded{Name: name, Call: durable.CallStep, Ended: true, Succeeded: true, Result: json.RawMessage(`"` + name + `"`)}
}

func TestDrive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	names := func(o durable.Outcome) []string {
		var out []string
		for _, c := range o.Calls {
			out = append(out, c.Name)
		}
		return out
	}
	for _, tt := range []struct {
		name    string
		journal []durable.Recorded
		calls   []string
		value   string
		err     string
		waiting bool
	}{
		{name: "nothing recorded: the first call", calls: []string{"a"}},
		{name: "a name used again takes a count", journal: []durable.Recorded{done("a")}, calls: []string{"a[2]"}},
		{name: "calls made in parallel go together", journal: []durable.Recorded{done("a"), done("a[2]")}, calls: []string{"b", "c"}},
		{name: "all recorded: the result", journal: []durable.Recorded{done("a"), done("a[2]"), done("b"), done("c")}, value: `"b"`},
		{name: "a failed call", journal: []durable.Recorded{{Name: "a", Call: durable.CallStep, Ended: true, Error: "declined"}},
			err: `call "a" failed: declined`},
		{name: "another call where one was recorded", journal: []durable.Recorded{done("x")},
			err: `non-determinism: call 1 is step "a", but the task recorded step "x" there`},
		{name: "another kind", journal: []durable.Recorded{{Name: "a", Call: durable.CallSleep, Ended: true, Succeeded: true}},
			err: `non-determinism: call 1 is step "a", but the task recorded sleep "a" there`},
		{name: "fewer calls than recorded", journal: []durable.Recorded{done("a"), done("a[2]"), done("b"), done("c"), done("d")},
			err: `non-determinism: the function returned after 4 calls, but the task recorded 5 (the next is step "d")`},
		{name: "a recorded call not ended", journal: []durable.Recorded{{Name: "a", Call: durable.CallStep}}, waiting: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out := durable.Drive(ctx, 1, tt.journal, twoSteps, nil)
			require.Equal(t, tt.calls, names(out))
			require.Equal(t, tt.waiting, out.Waiting)
			if tt.err != "" {
				require.ErrorContains(t, out.Err, tt.err)
				require.True(t, durable.IsPermanent(out.Err), "running the function again cannot change it")
				return
			}
			require.NoError(t, out.Err)
			if tt.value != "" {
				require.JSONEq(t, tt.value, string(out.Value))
			}
		})
	}
}

func TestRunCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	journal := []durable.Recorded{done("a"), done("a[2]"), {Name: "b", Call: durable.CallStep}, {Name: "c", Call: durable.CallStep}}
	got, err := durable.RunCall(ctx, 1, journal, "c", twoSteps, nil)
	require.NoError(t, err)
	require.JSONEq(t, `"c ran"`, string(got), "c is reached before b is waited for")
	_, err = durable.RunCall(ctx, 1, journal, "zz", twoSteps, nil)
	require.ErrorContains(t, err, `the function waited for call "b" before it made call "zz"`)

	failing := func(r *durable.Replay, _ json.RawMessage) (json.RawMessage, error) {
		return r.Call("a", durable.Request{Item: durable.Item{Call: durable.CallStep}}, func(context.Context) (json.RawMessage, error) {
			panic("boom")
		}).Wait()
	}
	_, err = durable.RunCall(ctx, 1, []durable.Recorded{{Name: "a", Call: durable.CallStep}}, "a", failing, nil)
	require.ErrorContains(t, err, "function panicked: boom")

	bad := func(r *durable.Replay, _ json.RawMessage) (json.RawMessage, error) {
		return r.Call("no spaces", durable.Request{Item: durable.Item{Call: durable.CallStep}}, nil).Wait()
	}
	out := durable.Drive(ctx, 1, nil, bad, nil)
	require.ErrorContains(t, out.Err, `call name "no spaces"`)
	var ce *durable.CallError
	require.False(t, errors.As(out.Err, &ce))
}

// TestEncoded: a call's Go result as JSON; one that cannot be encoded
// fails through the caller's mark of a permanent failure.
func TestEncoded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	marked := errors.New("permanent")
	mark := func(err error) error { return fmt.Errorf("%w: %w", marked, err) }
	got, err := durable.Encoded("a", func(context.Context) (map[string]int, error) { return map[string]int{"n": 1}, nil }, mark)(ctx)
	require.NoError(t, err)
	require.JSONEq(t, `{"n": 1}`, string(got))
	_, err = durable.Encoded("a", func(context.Context) (chan int, error) { return make(chan int), nil }, mark)(ctx)
	require.ErrorIs(t, err, marked)
	require.ErrorContains(t, err, `result of call "a" is not JSON-encodable`)
	failed := errors.New("declined")
	_, err = durable.Encoded("a", func(context.Context) (int, error) { return 0, failed }, mark)(ctx)
	require.Equal(t, failed, err, "the code's own error as it is")
}
