package spans

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
)

func TestDerivedIDs(t *testing.T) {
	t.Parallel()
	a := trace.TraceID{1, 2, 3}
	b := trace.TraceID{4, 5, 6}
	seen := map[trace.SpanID]string{}
	for name, sid := range map[string]trace.SpanID{
		"task 1": TaskID(a, 1), "task 2": TaskID(a, 2), "step 1": StepID(a, 1), "attempt 1.1": AttemptID(a, 1, 1),
		"attempt 1.2": AttemptID(a, 1, 2), "synthetic": Synthetic(a), "task 1 of b": TaskID(b, 1),
	} {
		require.True(t, sid.IsValid(), name)
		require.Empty(t, seen[sid], "%s and %s share an id", name, seen[sid])
		seen[sid] = name
	}
	require.Equal(t, StepID(a, 7), StepID(a, 7), "any engine derives the same id")
}

func TestGeneratorGivesTheIDsAsked(t *testing.T) {
	t.Parallel()
	tid, sid := trace.TraceID{9}, trace.SpanID{7}
	gotT, gotS := Generator{}.NewIDs(WithID(context.Background(), tid, sid))
	require.Equal(t, tid, gotT)
	require.Equal(t, sid, gotS)
	require.Equal(t, sid, Generator{}.NewSpanID(WithID(context.Background(), trace.TraceID{}, sid), tid))
	gotT, gotS = Generator{}.NewIDs(context.Background())
	require.True(t, gotT.IsValid() && gotS.IsValid(), "random ids otherwise")
}

func TestTraceOf(t *testing.T) {
	t.Parallel()
	tid := trace.TraceID{0xab, 1}
	synthetic := "00-" + tid.String() + "-" + Synthetic(tid).String() + "-01"
	got, parent, ok := traceOf(synthetic, "")
	require.True(t, ok)
	require.Equal(t, tid, got)
	require.False(t, parent.IsValid(), "a trace weft started has no parent span")

	caller := "00-" + tid.String() + "-00f067aa0ba902b7-01"
	_, parent, ok = traceOf(caller, "k=v")
	require.True(t, ok)
	require.Equal(t, "00f067aa0ba902b7", parent.SpanID().String())
	require.Equal(t, "k=v", parent.TraceState().String())

	for _, bad := range []string{"", "01-" + tid.String() + "-00f067aa0ba902b7-01", "00-zz-00f067aa0ba902b7-01"} {
		_, _, ok := traceOf(bad, "")
		require.False(t, ok, bad)
	}
}
