package event

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBus: each subscriber gets every event published while it is
// subscribed, with its time set, and none after it unsubscribed.
func TestBus(t *testing.T) {
	t.Parallel()
	var b Bus
	require.False(t, b.Listened())
	b.Publish(Event{Kind: Ready}) // nobody listens
	var first, second []Kind
	stop1 := b.Subscribe(func(ev Event) {
		require.False(t, ev.At.IsZero())
		first = append(first, ev.Kind)
	})
	stop2 := b.Subscribe(func(ev Event) { second = append(second, ev.Kind) })
	require.True(t, b.Listened())
	b.Publish(Event{Kind: Claimed})
	stop1()
	b.Publish(Event{Kind: StepEnded})
	stop2()
	stop2()
	b.Publish(Event{Kind: Pruned})
	require.Equal(t, []Kind{Claimed}, first)
	require.Equal(t, []Kind{Claimed, StepEnded}, second)
}
