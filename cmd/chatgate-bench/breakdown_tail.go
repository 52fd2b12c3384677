package main

import (
	"context"
	"fmt"
	"runtime/debug"
	"runtime/metrics"
	"sort"
	"sync"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/ledger"
)

// What 50 clients' turns waited for (-breakdown's second part): each
// turn related to its appends, the collector's pauses and the scheduler.

// tailResult is the 50-client measurement.
type tailResult struct {
	Clients       int     `json:"clients"`
	Turns         int     `json:"turns"`
	PerSecond     float64 `json:"per_second"`
	P50Millis     float64 `json:"p50_ms"`
	P99Millis     float64 `json:"p99_ms"`
	AllocsPerTurn float64 `json:"allocs_per_turn"`
	BytesPerTurn  float64 `json:"bytes_per_turn"`
	GCCycles      int     `json:"gc_cycles"`
	GCCPUShare    float64 `json:"gc_cpu_share"`
	GCPauseP99Us  float64 `json:"gc_pause_p99_us"`
	GCPauseMaxUs  float64 `json:"gc_pause_max_us"`
	SchedP50Us    float64 `json:"sched_latency_p50_us"`
	SchedP99Us    float64 `json:"sched_latency_p99_us"`
	// All and Slow are what the turns waited for, all of them and the
	// slowest 1 %.
	All  tailGroup `json:"all"`
	Slow tailGroup `json:"slowest_1pct"`
}

// tailGroup is what a group of turns waited for, means (so that the
// parts add up to the whole).
type tailGroup struct {
	Turns int `json:"turns"`
	// Millis is the turn's time; MessageAppend and ReplyAppend the
	// store's calls (each: waiting for a batch, then its commit);
	// Rest what is neither (WebSocket, the manager, the echo agent,
	// scheduling).
	Millis        float64 `json:"turn_ms"`
	MessageAppend float64 `json:"message_append_ms"`
	ReplyAppend   float64 `json:"reply_append_ms"`
	Rest          float64 `json:"rest_ms"`
	// WithGCPause is the share of the turns during which the collector
	// stopped the world at least once; GCPauseMicros the pause time
	// inside them, mean.
	WithGCPause   float64 `json:"with_gc_pause"`
	GCPauseMicros float64 `json:"gc_pause_us_mean"`
}

// appendClock is a store hook noting each Append's start and end, by
// session key.
type appendClock struct {
	mu      sync.Mutex
	started map[uint64]time.Time
	done    map[string][]appendSpan
}

type appendSpan struct {
	start, end time.Time
	reply      bool
}

func (h *appendClock) Before(_ context.Context, c ledger.Call) error {
	if c.Op == "Append" {
		h.mu.Lock()
		h.started[c.ID] = time.Now()
		h.mu.Unlock()
	}
	return nil
}

func (h *appendClock) After(_ context.Context, c ledger.Call, err error) error {
	if c.Op != "Append" || c.Append == nil || c.Append.Conv == nil {
		return err
	}
	now := time.Now()
	h.mu.Lock()
	start := h.started[c.ID]
	delete(h.started, c.ID)
	reply := len(c.Append.Messages) > 0 && c.Append.Messages[0].Role != agent.RoleUser
	key := c.Append.Conv.SessionKey
	h.done[key] = append(h.done[key], appendSpan{start: start, end: now, reply: reply})
	h.mu.Unlock()
	return err
}

// gcPauses collects the collector's stop-the-world pauses (end time and
// length) while it runs, polling often enough that none is lost.
type gcPauses struct {
	mu     sync.Mutex
	ends   []time.Time
	pauses []time.Duration
	last   int64
}

func (g *gcPauses) poll() {
	var s debug.GCStats
	s.PauseEnd = make([]time.Time, 256)
	debug.ReadGCStats(&s)
	g.mu.Lock()
	defer g.mu.Unlock()
	fresh := int(min(s.NumGC-g.last, int64(len(s.Pause))))
	for i := 0; i < fresh; i++ {
		g.ends = append(g.ends, s.PauseEnd[i])
		g.pauses = append(g.pauses, s.Pause[i])
	}
	g.last = s.NumGC
}

// within is the pause time that ended inside [a, b], and whether any did.
func (g *gcPauses) within(a, b time.Time) (time.Duration, bool) {
	var sum time.Duration
	any := false
	for i, e := range g.ends {
		if !e.Before(a) && !e.After(b) {
			sum += g.pauses[i]
			any = true
		}
	}
	return sum, any
}

var tailMetrics = []string{
	"/gc/cycles/total:gc-cycles",
	"/gc/pauses:seconds",
	"/sched/latencies:seconds",
	"/cpu/classes/gc/total:cpu-seconds",
	"/cpu/classes/total:cpu-seconds",
	"/gc/heap/allocs:objects",
	"/gc/heap/allocs:bytes",
	"/gc/heap/tiny/allocs:objects",
}

func readMetrics() []metrics.Sample {
	s := make([]metrics.Sample, len(tailMetrics))
	for i, name := range tailMetrics {
		s[i].Name = name
	}
	metrics.Read(s)
	return s
}

// histDelta is the p-quantile (and the max) of the histogram after minus
// before, in µs.
func histDelta(before, after *metrics.Float64Histogram, p float64) (q, maxUs float64) {
	counts := make([]uint64, len(after.Counts))
	var total uint64
	for i := range counts {
		counts[i] = after.Counts[i] - before.Counts[i]
		total += counts[i]
	}
	if total == 0 {
		return 0, 0
	}
	want := uint64(p * float64(total))
	var seen uint64
	q = -1
	for i, c := range counts {
		seen += c
		if q < 0 && seen > want {
			q = after.Buckets[i+1] * 1e6 // the bucket's upper bound
		}
		if c > 0 {
			maxUs = after.Buckets[i+1] * 1e6
		}
	}
	return q, maxUs
}

// breakdownTail runs n clients of the echo agent and relates each turn to
// what it waited for.
func breakdownTail(ctx context.Context, o options, n int) (*tailResult, error) {
	db, closeDB, err := openStore(ctx, o.store, o)
	if err != nil {
		return nil, err
	}
	clock := &appendClock{started: map[uint64]time.Time{}, done: map[string][]appendSpan{}}
	remove := db.Observe(clock)
	defer remove()
	url, stop, err := serveGateway(db, closeDB, false, agent.Echo{}, sessions.Policy{MaxHistory: 20})
	if err != nil {
		return nil, err
	}
	defer stop()

	type turn struct {
		key        string
		start, end time.Time
	}
	var mu sync.Mutex
	var turns []turn
	pauses := &gcPauses{}
	pauses.poll()
	stopPoll := make(chan struct{})
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stopPoll:
				pauses.poll()
				return
			case <-t.C:
				pauses.poll()
			}
		}
	}()
	before := readMetrics()
	res := runClients(ctx, n, o, func(ctx context.Context, i int, deadline time.Time, fail func()) []time.Duration {
		user := fmt.Sprintf("tail-%d-%s", i, shortID())
		c, err := dialClient(ctx, url, user)
		if err != nil {
			fail()
			return nil
		}
		defer c.Close()
		var mine []time.Duration
		var times []turn
		for m := 0; m < o.messages && time.Now().Before(deadline); m++ {
			t0 := time.Now()
			if !sendRound(c, m, 1, true, "hello gateway") {
				fail()
				return nil
			}
			t1 := time.Now()
			mine = append(mine, t1.Sub(t0))
			times = append(times, turn{key: "websocket:" + user, start: t0, end: t1})
		}
		mu.Lock()
		turns = append(turns, times...)
		mu.Unlock()
		return mine
	})
	after := readMetrics()
	close(stopPoll)
	<-polled

	t := &tailResult{Clients: n, Turns: res.Turns, PerSecond: res.PerSecond, P50Millis: res.P50Millis, P99Millis: res.P99Millis}
	if res.Turns == 0 {
		return t, nil
	}
	turnsF := float64(res.Turns)
	t.GCCycles = int(after[0].Value.Uint64() - before[0].Value.Uint64())
	t.GCPauseP99Us, t.GCPauseMaxUs = histDelta(before[1].Value.Float64Histogram(), after[1].Value.Float64Histogram(), 0.99)
	t.SchedP50Us, _ = histDelta(before[2].Value.Float64Histogram(), after[2].Value.Float64Histogram(), 0.50)
	t.SchedP99Us, _ = histDelta(before[2].Value.Float64Histogram(), after[2].Value.Float64Histogram(), 0.99)
	if cpu := after[4].Value.Float64() - before[4].Value.Float64(); cpu > 0 {
		t.GCCPUShare = (after[3].Value.Float64() - before[3].Value.Float64()) / cpu
	}
	t.AllocsPerTurn = float64(after[5].Value.Uint64()-before[5].Value.Uint64()+after[7].Value.Uint64()-before[7].Value.Uint64()) / turnsF
	t.BytesPerTurn = float64(after[6].Value.Uint64()-before[6].Value.Uint64()) / turnsF

	// Each turn's appends: those of its key inside its time.
	type waited struct {
		total, msg, reply, pause time.Duration
		paused                   bool
	}
	clock.mu.Lock()
	ws := make([]waited, len(turns))
	for i, tr := range turns {
		w := waited{total: tr.end.Sub(tr.start)}
		for _, a := range clock.done[tr.key] {
			if a.start.Before(tr.start) || a.end.After(tr.end) {
				continue
			}
			if a.reply {
				w.reply += a.end.Sub(a.start)
			} else {
				w.msg += a.end.Sub(a.start)
			}
		}
		w.pause, w.paused = pauses.within(tr.start, tr.end)
		ws[i] = w
	}
	clock.mu.Unlock()
	sort.Slice(ws, func(i, j int) bool { return ws[i].total < ws[j].total })
	group := func(g []waited) tailGroup {
		out := tailGroup{Turns: len(g)}
		if len(g) == 0 {
			return out
		}
		ms := func(f func(w waited) time.Duration) float64 {
			var sum time.Duration
			for _, w := range g {
				sum += f(w)
			}
			return float64(sum.Microseconds()) / 1000 / float64(len(g))
		}
		out.Millis = ms(func(w waited) time.Duration { return w.total })
		out.MessageAppend = ms(func(w waited) time.Duration { return w.msg })
		out.ReplyAppend = ms(func(w waited) time.Duration { return w.reply })
		out.Rest = ms(func(w waited) time.Duration { return w.total - w.msg - w.reply })
		var paused int
		var pause time.Duration
		for _, w := range g {
			if w.paused {
				paused++
			}
			pause += w.pause
		}
		out.WithGCPause = float64(paused) / float64(len(g))
		out.GCPauseMicros = float64(pause.Microseconds()) / float64(len(g))
		return out
	}
	t.All = group(ws)
	t.Slow = group(ws[len(ws)-max(1, len(ws)/100):])
	return t, nil
}
