package main

import (
	"fmt"
	"io"
	"slices"
	"time"
)

// wakeResult is how soon this machine starts a goroutine made runnable
// while the goroutine that readied it keeps its thread busy, after the
// process sat idle: another core should take it within microseconds. On
// some virtual machines it often does not, and the goroutine waits until
// the busy thread blocks or its time slice ends. A hand-off on a turn's
// path (the connection's reader to its worker, the worker to the early
// call, a delta to the connection's writer) can pay this after the
// process idled, as it does while a model takes its time to the first
// token, so the time-to-first-delta rows move with it from machine to
// machine and day to day (docs/performance.md, "One core at a time").
type wakeResult struct {
	Rounds int `json:"rounds"`
	// SpinMillis is how long the readying goroutine stays busy; a round
	// that waited for all of it counts in AfterBusyPercent.
	SpinMillis float64 `json:"spin_ms"`
	P50Micros  float64 `json:"p50_us"`
	P90Micros  float64 `json:"p90_us"`
	// AfterBusyPercent: rounds whose goroutine started only once the
	// readying one stopped spinning.
	AfterBusyPercent float64 `json:"after_busy_percent"`
}

// wakeProbe runs rounds of: idle for idle, ready a goroutine, spin for
// spin without blocking, then wait for the goroutine's start time.
func wakeProbe(rounds int, idle, spin time.Duration) wakeResult {
	lat := make([]time.Duration, 0, rounds)
	late := 0
	started := make(chan time.Time, 1)
	for range rounds {
		time.Sleep(idle)
		t0 := time.Now()
		go func() { started <- time.Now() }()
		for time.Since(t0) < spin {
		}
		end := time.Now()
		s := <-started
		if !s.Before(end) {
			late++
		}
		lat = append(lat, s.Sub(t0))
	}
	slices.Sort(lat)
	at := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))].Nanoseconds()) / 1000 }
	return wakeResult{Rounds: rounds, SpinMillis: float64(spin.Microseconds()) / 1000,
		P50Micros: at(0.5), P90Micros: at(0.9), AfterBusyPercent: 100 * float64(late) / float64(rounds)}
}

func (w wakeResult) print(out io.Writer) {
	fmt.Fprintf(out, "wake-up: a goroutine readied after an idle spell while its readier stayed busy for %.0f ms started after p50 %.0f µs, p90 %.0f µs; %.0f %% of %d only once the readier stopped\n\n",
		w.SpinMillis, w.P50Micros, w.P90Micros, w.AfterBusyPercent, w.Rounds)
}
