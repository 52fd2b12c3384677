package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// A stop takes at most shutdown.drain_timeout + stopAllowance. The drain
// timeout covers running turns, sweeps, purges and Telegram's queued
// updates; the allowance is for what comes after it: up to interruptGrace
// for the turns the deadline cancelled to store their partial replies,
// the rest for closing the WebSocket connections (1001) and the HTTP
// server and flushing the store.
const (
	interruptGrace = 3 * time.Second
	stopAllowance  = 5 * time.Second
)

// catchSignals catches SIGHUP, which reloads bot.yaml, and SIGINT and
// SIGTERM, which stop the gateway.
func (s *server) catchSignals(ctx context.Context) {
	// SIGHUP reloads bot.yaml. It is caught from here on, before the pid
	// file names this process: an early `gateway reload` never ends it.
	hups := make(chan os.Signal, 1)
	signal.Notify(hups, syscall.SIGHUP)
	s.onExit(func() { signal.Stop(hups) })
	s.hups = hups

	// The first SIGINT/SIGTERM (or ctx) starts a graceful stop; a second
	// one cuts the drain short (the flush still happens).
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	s.onExit(func() { signal.Stop(sigs) })
	stopCtx, stop := context.WithCancel(ctx)
	s.onExit(stop)
	hardCtx, hardStop := context.WithCancel(context.Background())
	s.onExit(hardStop)
	s.stopCtx, s.hardCtx = stopCtx, hardCtx
	log := s.log
	go func() {
		select {
		case sig := <-sigs:
			log.Info("stopping: draining running turns", slog.String("signal", sig.String()))
			stop()
		case <-stopCtx.Done():
		}
		select {
		case sig := <-sigs:
			log.Warn("second signal: interrupting running turns now", slog.String("signal", sig.String()))
			hardStop()
		case <-hardCtx.Done():
		}
	}()
}

// wait serves until the first signal (or ctx), or until the HTTP server
// fails, and returns the exit code so far.
func (s *server) wait() int {
	select {
	case <-s.stopCtx.Done():
		return 0
	case err := <-s.serveErr:
		s.log.Error("http server failed", slog.String("error", err.Error()))
		return 1
	}
}

// shutdown stops the gateway and returns the exit code: code, or 1 when
// the drain or the store's close failed.
func (s *server) shutdown(code int) int {
	// Shutdown (DESIGN §8): one deadline, drain_timeout from the first
	// signal, for turns, sweeps, purges and queued Telegram updates; then
	// at most stopAllowance for storing interrupted replies, closing
	// connections and flushing the store. A second signal ends the drain
	// at once; the rest still happens.
	stopAt := time.Now()
	drainCtx, cancelDrain := context.WithDeadline(s.hardCtx, stopAt.Add(s.cfg.Shutdown.DrainTimeout.D()))
	defer cancelDrain()
	finishCtx, cancelFinish := context.WithDeadline(context.Background(), stopAt.Add(s.cfg.Shutdown.DrainTimeout.D()+stopAllowance))
	defer cancelFinish()

	s.stopTaking()
	if !s.drain(drainCtx, finishCtx) {
		code = 1
	}
	s.closeConnections(finishCtx)
	if !s.flush(finishCtx) {
		code = 1
	}
	s.log.Info("chatgate stopped")
	return code
}

// stopTaking turns readiness off, and the channels take no new work. The
// listener stays open through the drain: /readyz answers 503, the webhook
// 503, and a WebSocket upgrade 503.
func (s *server) stopTaking() {
	s.stopServices()
	s.srv.Drain()
	s.ws.StopAccepting()
	if s.bot != nil {
		s.bot.StopTaking()
	}
	s.stopPolling()
}

// drain waits for the session manager and the Telegram bot, in parallel.
// The manager interrupts what still runs at drainCtx's deadline and
// returns at most interruptGrace later. It reports false when the
// manager's drain failed (logged).
func (s *server) drain(drainCtx, finishCtx context.Context) bool {
	ok := true
	var drained sync.WaitGroup
	drained.Go(func() {
		if err := s.mgr.Shutdown(drainCtx); err != nil {
			s.log.Error("drain", slog.String("error", err.Error()))
			ok = false
		}
	})
	drained.Go(func() {
		select {
		case <-s.pollDone:
		case <-finishCtx.Done():
		}
		if s.bot != nil {
			// Updates still queued end quickly (the manager refuses them);
			// their offsets stay, and Telegram sends them again after the
			// restart.
			s.bot.Wait(finishCtx)
		}
	})
	drained.Wait()
	return ok
}

// closeConnections closes the WebSocket connections with 1001 and the
// HTTP servers, in parallel. Every reply that finished or was interrupted
// is stored and queued to its connection by now.
func (s *server) closeConnections(finishCtx context.Context) {
	var closed sync.WaitGroup
	closed.Go(func() { s.ws.Shutdown(finishCtx) })
	closed.Go(func() {
		if err := s.srv.Shutdown(finishCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			s.log.Warn("http shutdown", slog.String("error", err.Error()))
		}
	})
	if s.metricsSrv != nil {
		closed.Go(func() { s.metricsSrv.Shutdown(finishCtx) })
	}
	closed.Wait()
}

// flush sends the traces and closes the store. It reports false when the
// store did not close cleanly (logged).
func (s *server) flush(finishCtx context.Context) bool {
	// The spans of the drained turns go out before the process ends.
	if err := s.stopTracing(finishCtx); err != nil {
		s.log.Warn("flushing traces", slog.String("error", err.Error()))
	}
	if err := s.db.Close(); err != nil {
		s.log.Error("closing storage", slog.String("error", err.Error()))
		return false
	}
	return true
}
