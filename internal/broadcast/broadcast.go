// Package broadcast holds a signal that any number of goroutines wait on
// and that one call wakes all at once: a channel closed and replaced.
package broadcast

import "sync"

// Signal wakes every goroutine waiting on it when it fires. Its zero value
// is ready to use; a Signal must not be copied once used.
type Signal struct {
	mu sync.Mutex
	ch chan struct{} // nil until someone waits: a Fire then costs nothing
}

// C returns a channel closed at the next Fire. Taken before a read, it
// wakes its holder for a change made while the read ran.
func (s *Signal) C() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

// Fire closes the channel of C, waking everyone who took it; those who
// take it after wait for the next Fire.
func (s *Signal) Fire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}
