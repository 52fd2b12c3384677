package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestWakeProbe(t *testing.T) {
	w := wakeProbe(7, time.Millisecond, 2*time.Millisecond)
	if w.Rounds != 7 || w.SpinMillis != 2 {
		t.Fatalf("rounds %d, spin %v ms: want 7 and 2", w.Rounds, w.SpinMillis)
	}
	// Every start is timed from the moment the goroutine was readied, so
	// none is negative, and the quantiles come in order.
	if w.P50Micros <= 0 || w.P50Micros > w.P90Micros {
		t.Fatalf("p50 %v µs, p90 %v µs", w.P50Micros, w.P90Micros)
	}
	if w.AfterBusyPercent < 0 || w.AfterBusyPercent > 100 {
		t.Fatalf("after busy %v %%", w.AfterBusyPercent)
	}
	var out bytes.Buffer
	(&report{Machine: "m", Store: "sqlite", Wake: &w}).print(&out)
	if !strings.Contains(out.String(), "wake-up: a goroutine readied") {
		t.Fatalf("the report does not show the wake-up line:\n%s", out.String())
	}
}
