package broadcast

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestSignal(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, s *Signal)
	}{
		{"a channel taken before a Fire is closed by it", func(t *testing.T, s *Signal) {
			ch := s.C()
			require.False(t, closed(ch))
			s.Fire()
			require.True(t, closed(ch))
		}},
		{"a channel taken after a Fire waits for the next", func(t *testing.T, s *Signal) {
			first := s.C()
			s.Fire()
			next := s.C()
			require.True(t, closed(first))
			require.False(t, closed(next))
			s.Fire()
			require.True(t, closed(next))
		}},
		{"a Fire that nobody waits for is not kept", func(t *testing.T, s *Signal) {
			s.Fire()
			require.False(t, closed(s.C()))
		}},
		{"every waiter wakes", func(t *testing.T, s *Signal) {
			const n = 20
			var taken, woke sync.WaitGroup
			taken.Add(n)
			woke.Add(n)
			for range n {
				go func() {
					ch := s.C()
					taken.Done()
					<-ch
					woke.Done()
				}()
			}
			taken.Wait()
			s.Fire()
			all := make(chan struct{})
			go func() { woke.Wait(); close(all) }()
			select {
			case <-all:
			case <-time.After(10 * time.Second):
				t.Fatal("not every waiter woke")
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, &Signal{})
		})
	}
}
