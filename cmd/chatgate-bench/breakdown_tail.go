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
	"github.com/chatgate/chatgate/sessions/store"
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
	// Commits is what the group commits of the run were like.
	Commits commitStats `json:"commits"`
}

// commitStats summarizes the store's group commits (store.CommitBatch)
// of a run: how many, how many writes each, how long each took from its
// worker's taking it to its outcome (building its statements, then the
// round trip: on PostgreSQL the pipeline, server and fsync; on SQLite the
// transaction), and how long the worker sat between one and the next.
type commitStats struct {
	Batches        int     `json:"batches"`
	WritesPerBatch float64 `json:"writes_per_batch"`
	BuildMicros    float64 `json:"build_us"`
	RoundMicros    float64 `json:"round_trip_us"`
	GapMicros      float64 `json:"gap_us"`
}

// appendParts splits an append's time (means, ms): before it was
// queued (the store's own work), its wait in the queue for the commit in
// flight, its batch's building and round trip, and after the outcome
// until its writer ran again.
type appendParts struct {
	Before float64 `json:"before_queue_ms"`
	Queue  float64 `json:"queue_ms"`
	Build  float64 `json:"build_ms"`
	Round  float64 `json:"round_trip_ms"`
	After  float64 `json:"after_ms"`
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
	// Message and Reply split each append (appendParts).
	Message appendParts `json:"message_append"`
	Reply   appendParts `json:"reply_append"`
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

// commitLog keeps the store's group commits of a run
// (store.DB.ObserveCommits) and finds an append's among them.
type commitLog struct {
	mu      sync.Mutex
	batches []store.CommitBatch
	// byKey: each session key's writes, as (batch, write) indexes.
	byKey map[string][][2]int
}

func (l *commitLog) add(b store.CommitBatch) {
	l.mu.Lock()
	l.batches = append(l.batches, b)
	l.mu.Unlock()
}

func (l *commitLog) index() {
	l.byKey = map[string][][2]int{}
	for i, b := range l.batches {
		for j, w := range b.Writes {
			if w.SessionKey != "" {
				l.byKey[w.SessionKey] = append(l.byKey[w.SessionKey], [2]int{i, j})
			}
		}
	}
}

// parts splits the append of key a timed (appendParts, in durations);
// false when no write of key was queued within it.
func (l *commitLog) parts(key string, a appendSpan) (before, queue, build, round, after time.Duration, ok bool) {
	for _, ij := range l.byKey[key] {
		b := l.batches[ij[0]]
		q := b.Writes[ij[1]].Queued
		if q.Before(a.start) || q.After(a.end) {
			continue
		}
		sent := b.Sent
		if sent.IsZero() {
			sent = b.Start
		}
		return q.Sub(a.start), b.Start.Sub(q), sent.Sub(b.Start), b.End.Sub(sent), a.end.Sub(b.End), true
	}
	return 0, 0, 0, 0, 0, false
}

// stats summarizes the batches with at least one append.
func (l *commitLog) stats() commitStats {
	var s commitStats
	var writes int
	var build, round, gap time.Duration
	var last time.Time
	for _, b := range l.batches {
		if len(b.Writes) == 0 || b.Writes[0].SessionKey == "" {
			continue
		}
		s.Batches++
		writes += len(b.Writes)
		sent := b.Sent
		if sent.IsZero() {
			sent = b.Start
		}
		build += sent.Sub(b.Start)
		round += b.End.Sub(sent)
		if !last.IsZero() && b.Start.After(last) {
			gap += b.Start.Sub(last)
		}
		last = b.End
	}
	if s.Batches > 0 {
		n := float64(s.Batches)
		s.WritesPerBatch = float64(writes) / n
		s.BuildMicros = float64(build.Microseconds()) / n
		s.RoundMicros = float64(round.Microseconds()) / n
		s.GapMicros = float64(gap.Microseconds()) / n
	}
	return s
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
	commits := &commitLog{}
	unobserve := db.ObserveCommits(commits.add)
	defer unobserve()
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
	unobserve()
	commits.mu.Lock()
	defer commits.mu.Unlock()
	commits.index()

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
		// parts: the message's append's [0] and the reply's [1], each
		// before, queue, build, round trip, after.
		parts [2][5]time.Duration
	}
	clock.mu.Lock()
	ws := make([]waited, len(turns))
	for i, tr := range turns {
		w := waited{total: tr.end.Sub(tr.start)}
		for _, a := range clock.done[tr.key] {
			if a.start.Before(tr.start) || a.end.After(tr.end) {
				continue
			}
			k := 0
			if a.reply {
				w.reply += a.end.Sub(a.start)
				k = 1
			} else {
				w.msg += a.end.Sub(a.start)
			}
			if before, queue, build, round, after, ok := commits.parts(tr.key, a); ok {
				for i, d := range [5]time.Duration{before, queue, build, round, after} {
					w.parts[k][i] += d
				}
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
		part := func(k, i int) float64 { return ms(func(w waited) time.Duration { return w.parts[k][i] }) }
		for k, p := range []*appendParts{&out.Message, &out.Reply} {
			*p = appendParts{Before: part(k, 0), Queue: part(k, 1), Build: part(k, 2), Round: part(k, 3), After: part(k, 4)}
		}
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
	t.Commits = commits.stats()
	t.All = group(ws)
	t.Slow = group(ws[len(ws)-max(1, len(ws)/100):])
	return t, nil
}
