package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"
)

// signals follows SIGINT and SIGTERM for the whole life of the process.
// The first one interrupts the command (its context is cancelled). While a
// command runs an engine (graceful), later signals never end the process
// abruptly: another SIGTERM is ignored, so that the engine drains and is
// marked stopped whatever a supervisor repeats (GNU timeout signals the
// child and then its whole group), and a SIGINT cuts the drain short (the
// engine cancels its handlers, leaves their steps to be reclaimed at once
// and is marked stopped). Other commands keep the usual behaviour: a second
// signal ends the process as if it had not been caught.
type signals struct {
	ch        chan os.Signal
	interrupt context.CancelFunc
	// hurry is cancelled by a SIGINT that comes after the first signal
	// while graceful is set.
	hurry    context.Context
	cutShort context.CancelFunc
	graceful atomic.Bool
	// log is the command's logger once it has one.
	log atomic.Pointer[slog.Logger]
}

// watchSignals starts following SIGINT and SIGTERM and returns the context
// that the first of them cancels.
func watchSignals() (context.Context, *signals) {
	ctx, interrupt := context.WithCancel(context.Background())
	s := &signals{ch: make(chan os.Signal, 8), interrupt: interrupt}
	s.hurry, s.cutShort = context.WithCancel(context.Background())
	signal.Notify(s.ch, os.Interrupt, syscall.SIGTERM)
	go s.loop()
	return ctx, s
}

func (s *signals) loop() {
	first := true
	for sig := range s.ch {
		if first {
			first = false
			s.interrupt()
			continue
		}
		if !s.graceful.Load() {
			// Nothing drains: end the process the way the signal would
			// have without a handler.
			signal.Reset(sig)
			if p, err := os.FindProcess(os.Getpid()); err == nil {
				_ = p.Signal(sig)
			}
			// Should the signal not end the process, end it anyway.
			time.Sleep(time.Second)
			os.Exit(exitInterrupted)
		}
		log := s.log.Load()
		if sig == os.Interrupt {
			if log != nil {
				log.Warn("interrupted again: cutting the drain short; running steps are cancelled and reclaimed", "signal", sig.String())
			}
			s.cutShort()
			continue
		}
		if log != nil {
			log.Info("already stopping: signal ignored while the engine drains (SIGINT cuts the drain short)", "signal", sig.String())
		}
	}
}

// runsEngine says that the command runs an engine: from now on a repeated
// signal does not end the process before the engine stopped. log is the
// command's logger.
func (a *app) runsEngine() {
	if a.signals == nil {
		return
	}
	a.signals.log.Store(a.log)
	a.signals.graceful.Store(true)
}

// hurried is done once the operator asked to cut the drain short (a SIGINT
// after the first signal); never, when the process follows no signals.
func (a *app) hurried() context.Context {
	if a.signals == nil {
		return context.Background()
	}
	return a.signals.hurry
}

// stopContext bounds a graceful stop: drain from now, or less if the
// operator cuts the drain short. It is not cancelled with ctx.
func (a *app) stopContext(ctx context.Context, drain time.Duration) (context.Context, context.CancelFunc) {
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), drain)
	unhook := context.AfterFunc(a.hurried(), cancel)
	return stopCtx, func() {
		unhook()
		cancel()
	}
}
