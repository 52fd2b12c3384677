package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/agent/openai"
	"github.com/chatgate/chatgate/gateway"
	"github.com/chatgate/chatgate/sessions"
)

// Where a turn's time goes (-breakdown). Two measurements:
//
//   - one client, one message at a time, against the streaming model
//     server (first chunk after -llm-first-chunk): clocks along the path
//     of each message — the client's send, the gateway's spans (the
//     WebSocket worker taking the frame, the message's commit, the
//     agent call and its first token, from the tracing the gateway has
//     anyway, recorded in memory), the model call's HTTP request leaving
//     the OpenAI library, the model server's receipt of it and its first
//     chunk, and the client's receipt of the ack and the first delta —
//     beside the same clocks for the model called directly;
//   - 50 clients of the echo agent: each turn's time, against what it
//     waited for — its two appends in the store (the commit queue and
//     the batch's commit), the garbage collector's stop-the-world pauses
//     that fell inside it — and the run's totals from runtime/metrics
//     (GC cycles and CPU, scheduling latency, allocations per turn).
//
// Tracing is on in the first (it is what puts clocks along the path) and
// off in the second; both say so in their output.

// breakdownResult is -breakdown's JSON.
type breakdownResult struct {
	Store   string       `json:"store"`
	Path    []stageStat  `json:"one_client_path"`
	Request requestStats `json:"model_request"`
	Tail    *tailResult  `json:"tail,omitempty"`
}

// stageStat is one stage of the path: its p50 and p90 over the turns,
// for the gateway and, where the direct call has the same stage, for it.
type stageStat struct {
	Name      string  `json:"name"`
	P50Micros float64 `json:"p50_us"`
	P90Micros float64 `json:"p90_us"`
	// DirectP50Micros is the same stage of the direct call, when it has
	// one (HasDirect).
	DirectP50Micros float64 `json:"direct_p50_us"`
	HasDirect       bool    `json:"has_direct"`
}

// requestStats describes the model requests of the gateway's turns.
type requestStats struct {
	Turns       int     `json:"turns"`
	BodyBytes   float64 `json:"body_bytes_p50"`
	Messages    float64 `json:"messages_p50"`
	DirectBytes float64 `json:"direct_body_bytes_p50"`
}

func breakdown(ctx context.Context, o options, progress io.Writer) (*breakdownResult, error) {
	fmt.Fprintf(progress, "… breakdown: one client on %s, the model's first chunk after %s\n", o.store, o.firstChunk)
	r, err := breakdownPath(ctx, o)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(progress, "… breakdown: 50 clients on %s, echo agent\n", o.store)
	if r.Tail, err = breakdownTail(ctx, o, 50); err != nil {
		return nil, err
	}
	return r, nil
}

// spanRecorder keeps the ended spans' names, times and events.
type spanRecorder struct {
	mu    sync.Mutex
	spans map[string][]recordedSpan
}

type recordedSpan struct {
	start, end time.Time
	events     map[string]time.Time
}

func (r *spanRecorder) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (r *spanRecorder) OnEnd(s sdktrace.ReadOnlySpan) {
	rs := recordedSpan{start: s.StartTime(), end: s.EndTime()}
	for _, e := range s.Events() {
		if rs.events == nil {
			rs.events = map[string]time.Time{}
		}
		rs.events[e.Name] = e.Time
	}
	r.mu.Lock()
	r.spans[s.Name()] = append(r.spans[s.Name()], rs)
	r.mu.Unlock()
}
func (r *spanRecorder) Shutdown(context.Context) error   { return nil }
func (r *spanRecorder) ForceFlush(context.Context) error { return nil }

// byStart is the spans named name, in the order they started.
func (r *spanRecorder) byStart(name string) []recordedSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := slices.Clone(r.spans[name])
	sort.Slice(s, func(i, j int) bool { return s[i].start.Before(s[j].start) })
	return s
}

// modelClock is what the timed transport and the timed model server saw
// of each request, in order.
type modelClock struct {
	mu sync.Mutex
	clockTimes
}

type clockTimes struct {
	sent     []time.Time // the request left the OpenAI library (RoundTrip)
	arrived  []time.Time // the server's handler began
	read     []time.Time // it had read the body
	first    []time.Time // it began to write the first chunk
	bytes    []int
	messages []int
}

// take returns what the clock noted and starts it over.
func (c *modelClock) take() clockTimes {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.clockTimes
	c.clockTimes = clockTimes{}
	return t
}

// timedTransport notes when each request is handed to HTTP: the OpenAI
// library has built and encoded it by then.
type timedTransport struct {
	next  http.RoundTripper
	clock *modelClock
}

func (t *timedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	now := time.Now()
	t.clock.mu.Lock()
	t.clock.sent = append(t.clock.sent, now)
	t.clock.mu.Unlock()
	return t.next.RoundTrip(req)
}

// timedLLM is streamingLLM noting, for each request, when it came, when
// its body was read, its size and messages, and when the first chunk was
// flushed. It serves what it noted at /clocks (serverClocks), for the
// breakdown to read from the child process it runs in (serveModelChild).
func timedLLM(firstChunk, gap time.Duration) (string, func(), error) {
	clock := &modelClock{}
	mux := http.NewServeMux()
	mux.HandleFunc("/clocks", func(w http.ResponseWriter, r *http.Request) {
		t := clock.take()
		json.NewEncoder(w).Encode(serverClocks{Arrived: unixNanos(t.arrived), Read: unixNanos(t.read), First: unixNanos(t.first),
			Bytes: t.bytes, Messages: t.messages})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		arrived := time.Now()
		body, _ := io.ReadAll(r.Body)
		read := time.Now()
		flush, ok := startStream(w, r, firstChunk)
		if !ok {
			return
		}
		// (Timed as it is written: the client may have read it before
		// this handler runs again.)
		first := time.Now()
		sseChunk(w, contentDelta("Hello"), "")
		flush()
		clock.mu.Lock()
		clock.arrived = append(clock.arrived, arrived)
		clock.read = append(clock.read, read)
		clock.first = append(clock.first, first)
		clock.bytes = append(clock.bytes, len(body))
		clock.messages = append(clock.messages, bytes.Count(body, []byte(`"role":`)))
		clock.mu.Unlock()
		streamAnswer(r.Context(), w, flush, gap, ", this", " is", " a streamed", " answer.")
	})
	return serveModel(mux)
}

// serverClocks is the timed model server's clocks on the wire: wall-clock
// times, which two processes on one machine read alike.
type serverClocks struct {
	Arrived, Read, First []int64 // Unix nanoseconds
	Bytes, Messages      []int
}

func unixNanos(ts []time.Time) []int64 {
	out := make([]int64, len(ts))
	for i, t := range ts {
		out[i] = t.UnixNano()
	}
	return out
}

func fromUnixNanos(ns []int64) []time.Time {
	out := make([]time.Time, len(ns))
	for i, n := range ns {
		out[i] = time.Unix(0, n)
	}
	return out
}

// takeClocks returns what the transport and the model server at base
// (…/v1) noted since the last take, and starts both over.
func takeClocks(ctx context.Context, base string, clock *modelClock) (clockTimes, error) {
	t := clock.take()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(base, "/v1")+"/clocks", nil)
	if err != nil {
		return t, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return t, fmt.Errorf("model server clocks: %w", err)
	}
	defer resp.Body.Close()
	var sc serverClocks
	if err := json.NewDecoder(resp.Body).Decode(&sc); err != nil {
		return t, fmt.Errorf("model server clocks: %w", err)
	}
	t.arrived, t.read, t.first = fromUnixNanos(sc.Arrived), fromUnixNanos(sc.Read), fromUnixNanos(sc.First)
	t.bytes, t.messages = sc.Bytes, sc.Messages
	return t, nil
}

// breakdownPath times each stage of one client's messages, direct and
// through the gateway.
func breakdownPath(ctx context.Context, o options) (*breakdownResult, error) {
	// The model server runs in a child process, as the time-to-first-delta
	// rows' does: in this one, its 20 ms wait would end on the gateway's
	// scheduler, whose sleep is rounded to whole milliseconds from the
	// moment it goes idle, so its timer would fire late by however the
	// gateway's work after the request fell in that millisecond, and the
	// gateway would seem to slow the model down.
	clock := &modelClock{}
	llm, stopLLM, err := childLLM(ctx, o.firstChunk, o.chunkGap, true)
	if err != nil {
		return nil, err
	}
	defer stopLLM()
	timedOpenAI := func() *openai.Backend {
		return openai.New(openai.Config{BaseURL: llm, APIKey: "bench", Model: "mock", Timeout: time.Minute, MaxRetries: 2, Stream: true,
			HTTPClient: &http.Client{Transport: &timedTransport{next: http.DefaultTransport.(*http.Transport).Clone(), clock: clock}}})
	}

	// Direct: the call, the request leaving the library, the server's
	// receipt, its first chunk, the first delta.
	type directTurn struct{ call, delta time.Time }
	var direct []directTurn
	{
		ag := timedOpenAI()
		var history []agent.Message
		deadline := time.Now().Add(o.duration)
		for m := 0; m < o.messages && time.Now().Before(deadline); m++ {
			var d directTurn
			d.call = time.Now()
			req := agent.Request{SessionKey: "bench-direct", History: history, Input: "hello gateway"}
			reply, err := ag.Reply(ctx, req, func(string) {
				if d.delta.IsZero() {
					d.delta = time.Now()
				}
			})
			if err != nil {
				return nil, fmt.Errorf("direct call: %w", err)
			}
			direct = append(direct, d)
			history = append(history, agent.Message{Role: agent.RoleUser, Content: req.Input}, agent.Message{Role: agent.RoleAssistant, Content: reply.Text()})
			if len(history) > ttfdMaxHistory {
				history = history[len(history)-ttfdMaxHistory:]
			}
		}
	}
	dc, err := takeClocks(ctx, llm, clock)
	if err != nil {
		return nil, err
	}
	if len(dc.sent) != len(direct) || len(dc.arrived) != len(direct) {
		return nil, fmt.Errorf("direct: %d calls, %d requests sent, %d received", len(direct), len(dc.sent), len(dc.arrived))
	}

	// Through the gateway, traced in memory.
	rec := &spanRecorder{spans: map[string][]recordedSpan{}}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	db, closeDB, err := openStore(ctx, o.store, o)
	if err != nil {
		return nil, err
	}
	mgr := sessions.New(db, timedOpenAI(), sessions.Options{Logger: discard, HotConversations: 4096, Events: db.Events(),
		Policies: map[string]sessions.Policy{gateway.Channel: {MaxHistory: ttfdMaxHistory}}, TracerProvider: tp})
	ws := gateway.NewWebSocket(gateway.SessionsOf(mgr), gateway.WSOptions{RatePerSecond: 1e6, RateBurst: 1 << 20, HistoryLimit: 20, Logger: discard, TracerProvider: tp})
	url, stop, err := serveWS(mgr, ws, closeDB)
	if err != nil {
		return nil, err
	}
	defer stop()
	type gwTurn struct{ send, ack, delta time.Time }
	var turns []gwTurn
	c, err := dialClient(ctx, url, "breakdown-"+shortID())
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(o.duration)
	for m := 0; m < o.messages && time.Now().Before(deadline); m++ {
		id := fmt.Sprint("m", m)
		var t gwTurn
		t.send = time.Now()
		if err := c.WriteJSON(map[string]any{"type": "message", "id": id, "text": "hello gateway"}); err != nil {
			return nil, err
		}
		for {
			f, ok := readFrame(c)
			if !ok {
				return nil, fmt.Errorf("gateway: read failed at message %d", m)
			}
			now := time.Now()
			switch {
			case f["type"] == "ack" && f["id"] == id:
				t.ack = now
			case f["type"] == "delta" && f["reply_to"] == id && t.delta.IsZero():
				t.delta = now
			}
			if f["type"] == "reply" && f["reply_to"] == id {
				break
			}
		}
		turns = append(turns, t)
	}
	c.Close()
	stop()
	stop = func() {}

	wsMsg, stored, calls := rec.byStart("websocket message"), rec.byStart("store"), rec.byStart("agent call")
	gc, err := takeClocks(ctx, llm, clock)
	if err != nil {
		return nil, err
	}
	n := len(turns)
	if len(wsMsg) != n || len(stored) != n || len(calls) != n || len(gc.sent) != n || len(gc.arrived) != n {
		return nil, fmt.Errorf("gateway: %d turns, %d frames taken, %d commits, %d agent calls, %d requests sent, %d received",
			n, len(wsMsg), len(stored), len(calls), len(gc.sent), len(gc.arrived))
	}
	var stages []stageStat
	stage := func(name string, gw func(i int) time.Duration, dr func(i int) time.Duration) {
		s := stageStat{Name: name, HasDirect: dr != nil}
		s.P50Micros, s.P90Micros = durStats(n, gw)
		if dr != nil {
			s.DirectP50Micros, _ = durStats(len(direct), dr)
		}
		stages = append(stages, s)
	}
	firstToken := func(i int) time.Time { return calls[i].events["first token"] }
	stage("frame sent → the connection's worker has it", func(i int) time.Duration { return wsMsg[i].start.Sub(turns[i].send) }, nil)
	stage("worker → the message's commit begins", func(i int) time.Duration { return stored[i].start.Sub(wsMsg[i].start) }, nil)
	stage("the message's commit", func(i int) time.Duration { return stored[i].end.Sub(stored[i].start) }, nil)
	stage("frame sent → ack received", func(i int) time.Duration { return turns[i].ack.Sub(turns[i].send) }, nil)
	stage("frame sent → agent call starts (early)", func(i int) time.Duration { return calls[i].start.Sub(turns[i].send) }, nil)
	stage("agent call → request handed to HTTP (build, encode)", func(i int) time.Duration { return gc.sent[i].Sub(calls[i].start) },
		func(i int) time.Duration { return dc.sent[i].Sub(direct[i].call) })
	stage("handed to HTTP → model server has it", func(i int) time.Duration { return gc.arrived[i].Sub(gc.sent[i]) },
		func(i int) time.Duration { return dc.arrived[i].Sub(dc.sent[i]) })
	stage("model server: request → first chunk written", func(i int) time.Duration { return gc.first[i].Sub(gc.arrived[i]) },
		func(i int) time.Duration { return dc.first[i].Sub(dc.arrived[i]) })
	stage("first chunk written → first token in the gateway (stream read, parse)", func(i int) time.Duration { return firstToken(i).Sub(gc.first[i]) },
		func(i int) time.Duration { return direct[i].delta.Sub(dc.first[i]) })
	stage("first token → delta frame received by the client", func(i int) time.Duration { return turns[i].delta.Sub(firstToken(i)) }, nil)
	stage("frame sent → first delta (direct: call → first delta)", func(i int) time.Duration { return turns[i].delta.Sub(turns[i].send) },
		func(i int) time.Duration { return direct[i].delta.Sub(direct[i].call) })
	req := requestStats{Turns: n}
	req.BodyBytes = median(gc.bytes)
	req.Messages = median(gc.messages)
	req.DirectBytes = median(dc.bytes)
	return &breakdownResult{Store: o.store, Path: stages, Request: req}, nil
}

// serveWS serves ws (over mgr) on loopback, like serveGatewayWith.
func serveWS(mgr *sessions.Manager, ws *gateway.WebSocket, closeDB func()) (string, func(), error) {
	srv := gateway.New(discard)
	srv.Handle("GET /ws", ws)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		closeDB()
		return "", nil, err
	}
	go srv.Serve(ln)
	var once sync.Once
	return "ws://" + ln.Addr().String() + "/ws", func() {
		once.Do(func() {
			c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			srv.Shutdown(c)
			mgr.Shutdown(c)
			ws.Shutdown(c)
			closeDB()
		})
	}, nil
}

// durStats is the p50 and p90 of d(0..n-1), in µs.
func durStats(n int, d func(i int) time.Duration) (p50, p90 float64) {
	if n == 0 {
		return 0, 0
	}
	v := make([]time.Duration, n)
	for i := range v {
		v[i] = d(i)
	}
	slices.Sort(v)
	us := func(x time.Duration) float64 { return float64(x.Nanoseconds()) / 1000 }
	return us(v[n/2]), us(v[min(n-1, n*9/10)])
}

func median(v []int) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return float64(s[len(s)/2])
}

func (b *breakdownResult) print(w io.Writer) {
	fmt.Fprintf(w, "\nwhere a turn's time goes, %s, 1 client, one message at a time (%d turns; tracing on, in memory):\n", b.Store, b.Request.Turns)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "stage\tp50 µs\tp90 µs\tdirect p50 µs\t")
	for _, s := range b.Path {
		d := "-"
		if s.HasDirect {
			d = fmt.Sprintf("%.0f", s.DirectP50Micros)
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%s\t\n", s.Name, s.P50Micros, s.P90Micros, d)
	}
	tw.Flush()
	fmt.Fprintf(w, "model request body: %.0f bytes, %.0f messages (p50; direct %.0f bytes)\n", b.Request.BodyBytes, b.Request.Messages, b.Request.DirectBytes)
	if t := b.Tail; t != nil {
		fmt.Fprintf(w, "\n%d clients, echo agent, %s (tracing off): %d turns, %.0f turns/s, p50 %.2f ms, p99 %.2f ms\n",
			t.Clients, b.Store, t.Turns, t.PerSecond, t.P50Millis, t.P99Millis)
		fmt.Fprintf(w, "  whole process: %.0f allocations and %.0f bytes a turn (clients included), %d GC cycles (%.1f per 100 turns), GC %.0f %% of the CPU,\n"+
			"  GC pauses p99 %.0f µs, max %.0f µs; goroutines waited to run p50 %.0f µs, p99 %.0f µs (runtime/metrics /sched/latencies)\n",
			t.AllocsPerTurn, t.BytesPerTurn, t.GCCycles, 100*float64(t.GCCycles)/float64(max(1, t.Turns)), 100*t.GCCPUShare,
			t.GCPauseP99Us, t.GCPauseMaxUs, t.SchedP50Us, t.SchedP99Us)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "turns (means)\tturns\tturn ms\tmessage's append ms\treply's append ms\tthe rest ms\twith a GC pause\tGC pause µs\t")
		for _, g := range []struct {
			name string
			g    tailGroup
		}{{"all", t.All}, {"slowest 1 %", t.Slow}} {
			fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t%.0f %%\t%.0f\t\n", g.name, g.g.Turns, g.g.Millis, g.g.MessageAppend, g.g.ReplyAppend,
				g.g.Rest, 100*g.g.WithGCPause, g.g.GCPauseMicros)
		}
		tw.Flush()
		fmt.Fprintln(w, "  (an append's time is its wait for a batch and the batch's commit; the rest is WebSocket, the manager, the agent and scheduling)")
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "an append (means, ms)\tbefore the queue\tqueued behind a commit\tits batch built\tthe round trip\tuntil its writer runs\t")
		for _, g := range []struct {
			name string
			p    appendParts
		}{{"the message's, all", t.All.Message}, {"the reply's, all", t.All.Reply}, {"the message's, slowest 1 %", t.Slow.Message}, {"the reply's, slowest 1 %", t.Slow.Reply}} {
			fmt.Fprintf(tw, "%s\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t\n", g.name, g.p.Before, g.p.Queue, g.p.Build, g.p.Round, g.p.After)
		}
		tw.Flush()
		c := t.Commits
		fmt.Fprintf(w, "  the commits with appends: %d, %.1f writes each; built in %.0f µs, round trip %.0f µs, their worker idle %.0f µs between two (means)\n",
			c.Batches, c.WritesPerBatch, c.BuildMicros, c.RoundMicros, c.GapMicros)
	}
}
