package main

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	var lat []time.Duration
	for i := 100; i >= 1; i-- {
		lat = append(lat, time.Duration(i)*time.Millisecond)
	}
	r := summarize(4, lat, 2*time.Second, 1)
	if r.Turns != 100 || r.PerSecond != 50 || r.P50Millis != 51 || r.P99Millis != 100 || r.ErrorCount != 1 {
		t.Fatalf("summary = %+v", r)
	}
	if z := summarize(1, nil, time.Second, 0); z.PerSecond != 0 || z.Turns != 0 {
		t.Fatalf("empty summary = %+v", z)
	}
}

func TestGoals(t *testing.T) {
	r := &report{
		Store:            "sqlite",
		Echo:             []loadResult{{Clients: 1, PerSecond: 1000, P99Millis: 1}, {Clients: 50, PerSecond: 4000, P99Millis: 2}, {Clients: 500, PerSecond: 8000, P99Millis: 10}},
		Gateway:          []loadResult{{Clients: 1, PerSecond: 500, P99Millis: 2}, {Clients: 50, PerSecond: 2000, P99Millis: 9}, {Clients: 500, PerSecond: 3000, P99Millis: 40}},
		Postgres:         []loadResult{{Clients: 1, PerSecond: 400, P99Millis: 3}, {Clients: 50, PerSecond: 2500, P99Millis: 7}, {Clients: 500, PerSecond: 1000, P99Millis: 60}},
		RawRows:          []rawResult{{Driver: "sqlite", PerSecond: 10000}},
		Idle:             &idleResult{Connections: 10000, RSSPerConnKiB: 15},
		Sweeps:           []sweepResult{{Driver: "sqlite", Conversations: 1000000, Seconds: 12}},
		Locks:            locksResult{HeapMiB10k: 2, HeapMiB1M: 3},
		FirstChunkMillis: 20,
		FirstDelta: []ttfdResult{{Store: "sqlite", Clients: 1, Direct: loadResult{P50Millis: 21}, Gateway: loadResult{Turns: 10, P50Millis: 21.7}},
			{Store: "sqlite", Clients: 50, Direct: loadResult{P50Millis: 30}, Gateway: loadResult{Turns: 10, P50Millis: 30.1}},
			// Asked in turn: reported, no goal, and not the row the tools row is set beside.
			{Store: "sqlite", Clients: 1, InTurn: true, Direct: loadResult{P50Millis: 21}, Gateway: loadResult{Turns: 10, P50Millis: 30}},
			{Store: "sqlite", Clients: 1, Direct: loadResult{P50Millis: 21}, Gateway: loadResult{Turns: 10, P50Millis: 21.3}},
			{Store: "sqlite", Clients: 1, Direct: loadResult{P50Millis: 21}, Gateway: loadResult{Turns: 10, P50Millis: 21.5}, Tools: 6},
			// The answer's rest at once: reported, no goal, and not the store's first row.
			{Store: "postgres", Clients: 1, Burst: true, Direct: loadResult{P50Millis: 21}, Gateway: loadResult{Turns: 10, P50Millis: 30}},
			{Store: "postgres", Clients: 1, Direct: loadResult{P50Millis: 21}, Gateway: loadResult{Turns: 10, P50Millis: 21.2}}},
		ToolGap: []toolGapResult{{Store: "sqlite", Turns: 200, P50Millis: 0.8}},
	}
	met := map[string]bool{}
	for _, g := range goals(r) {
		met[g.Name] = g.Met
	}
	want := map[string]bool{
		"p99 at 50 clients ÷ echo p99, sqlite":           false, // 9 / 2
		"p99 at 50 clients ÷ echo p99, postgres":         true,  // 7 / 2
		"postgres turns/s ÷ sqlite turns/s, 50 clients":  true,  // 2500 / 2000
		"postgres turns/s ÷ sqlite turns/s, 500 clients": false, // 1000 / 3000
		"postgres p99 at 500 clients (ms)":               true,
		"RSS per idle connection (KiB)":                  true,
		"daily sweep, 1000000 conversations, sqlite (s)": false,
		"lock cache: 1M keys − 10k keys (MiB)":           true,
		// The first 1-client row of each store: 21.7 / 21, 21.2 / 21.
		"time to first delta p50, gateway ÷ direct, 1 client, first chunk 20 ms, sqlite":   false,
		"time to first delta p50, gateway ÷ direct, 1 client, first chunk 20 ms, postgres": true,
		// Beside the row just before it: 21.5 / 21.3.
		"time to first delta p50 with tools offered ÷ without, 1 client, sqlite": true,
		"a tool's result to the next model request, p50, sqlite (ms)":            true,
	}
	if len(goals(r)) != len(want) {
		t.Errorf("%d goals, want %d: %v", len(goals(r)), len(want), met)
	}
	for name, w := range want {
		if got, ok := met[name]; !ok || got != w {
			t.Errorf("goal %q met = %v (present %v), want %v", name, got, ok, w)
		}
	}
}

// The memory rows' goals: on ÷ off within the target, and only when
// memory was really on — a run whose requests carried no notes, or
// whose turns failed, misses them.
func TestMemoryGoals(t *testing.T) {
	r := &memoryReport{
		FirstDelta: []memFirstDeltaResult{
			{Store: "sqlite", Ratio: 1.04, NotesPerRequest: 18},
			{Store: "postgres", Ratio: 1.02, NotesPerRequest: 0},
		},
		Turns: []memTurnsResult{
			{Store: "sqlite", Clients: 50, Ratio: 0.95, NotesPerTurn: 19, On: []loadResult{{ErrorCount: 0}}},
			{Store: "postgres", Clients: 50, Ratio: 0.95, NotesPerTurn: 19, On: []loadResult{{ErrorCount: 2}}},
		},
	}
	met := map[string]bool{}
	for _, g := range memoryGoals(r) {
		met[g.Name] = g.Met
	}
	want := map[string]bool{
		"time to first delta p50 with memory on ÷ off, 1 client, sqlite":   true,
		"time to first delta p50 with memory on ÷ off, 1 client, postgres": false, // no notes carried
		"turns/s at 50 clients with memory on ÷ off, sqlite":               true,
		"turns/s at 50 clients with memory on ÷ off, postgres":             false, // errors
	}
	if len(met) != len(want) {
		t.Errorf("goals %v, want %v", met, want)
	}
	for name, w := range want {
		if got, ok := met[name]; !ok || got != w {
			t.Errorf("goal %q met = %v (present %v), want %v", name, got, ok, w)
		}
	}
	r.FirstDelta[0].Ratio = 1.2
	if g := memoryGoals(r)[0]; g.Met {
		t.Errorf("%s met at %.2f", g.Name, g.Value)
	}
}

// The CPU a turn against an echo's round trip is reported for each store
// at its largest load, the server's CPU counted with PostgreSQL's, and
// is no goal.
func TestTrackedCPURatio(t *testing.T) {
	r := &report{
		Store:    "sqlite",
		Echo:     []loadResult{{Clients: 50, CPUMicrosPerTurn: 25}, {Clients: 500, CPUMicrosPerTurn: 30}},
		Gateway:  []loadResult{{Clients: 50, CPUMicrosPerTurn: 200}, {Clients: 500, CPUMicrosPerTurn: 210}},
		Postgres: []loadResult{{Clients: 50, CPUMicrosPerTurn: 150}, {Clients: 500, CPUMicrosPerTurn: 160, ServerCPUMicrosPerTurn: 80}},
	}
	got := map[string]float64{}
	for _, f := range trackedFigures(r) {
		got[f.Name] = f.Value
	}
	want := map[string]float64{
		"CPU a turn ÷ CPU an echo round trip, 500 clients, sqlite":   7, // 210 / 30
		"CPU a turn ÷ CPU an echo round trip, 500 clients, postgres": 8, // (160 + 80) / 30
	}
	if len(got) != len(want) {
		t.Fatalf("tracked = %v, want %v", got, want)
	}
	for name, v := range want {
		if g, ok := got[name]; !ok || math.Abs(g-v) > 1e-9 {
			t.Errorf("%s = %v (present %v), want %v", name, g, ok, v)
		}
	}
	for _, g := range goals(r) {
		if strings.Contains(g.Name, "÷ A") || strings.Contains(g.Name, "echo round trip") {
			t.Errorf("a retired goal is back: %q", g.Name)
		}
	}
}
