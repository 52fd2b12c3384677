// Command chatgate-bench measures the gateway against the physical limits
// of the machine it runs on, in one run, side by side:
//
//	A. a bare gorilla/websocket echo server driven by the same client code;
//	B. raw storage: message rows inserted with the best batching the driver allows;
//	the gateway (echo agent, real storage, WebSocket) at 1, 50 and 500 clients;
//	busy mode collect: bursts of 5 messages at 50 clients, one reply each;
//	time to first delta from a streaming model server, direct and through
//	the gateway, at 1 and 50 clients;
//	with PostgreSQL, what delivery to a client on another replica adds;
//	memory per idle WebSocket connection (a child process holding 10,000);
//	what users' notes (session.memory) cost a turn: time to first delta and
//	turns/s with memory on ÷ off, and the reads of a user's notes;
//	the daily reset sweep over 1,000,000 conversations;
//	the lock cache's memory at 10,000 and 1,000,000 keys.
//
// Load goes only to loopback; every loop is bounded in count and time.
//
//	go run ./cmd/chatgate-bench            # full run, a few minutes
//	go run ./cmd/chatgate-bench -quick     # seconds; CI runs it
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/chatgate/chatgate/internal/gctune"
)

func main() {
	// The gateway's collector pace (cmd/gateway does the same), so that
	// the in-process gateway runs as it does in production.
	gcPercent, gcFrom := gctune.Apply(os.Getenv)
	gcPace = fmt.Sprintf("GOGC %d (%s)", gcPercent, gcFrom)
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// gcPace is the collector's pace the run had, for its header.
var gcPace = "GOGC as the runtime set it"

type options struct {
	clients   []int
	messages  int
	duration  time.Duration
	store     string
	dsn       string
	idleConns int
	sweepRows int
	rawRows   int
	quick     bool
	jsonPath  string
	// firstChunk delays the streaming model server's first chunk, chunkGap
	// each one after it.
	firstChunk     time.Duration
	chunkGap       time.Duration
	firstDeltaOnly bool
	pgCostOnly     bool
	// turnsOnly runs the echo baseline and the gateway's turn rows alone.
	turnsOnly bool
	// schedules due at once, and idle schedules (reminders not due) for
	// the scheduler's memory; schedulesOnly measures them alone.
	schedules     int
	schedulesOver time.Duration
	idleSchedules int
	schedulesOnly bool
	// memoryOnly runs the memory rows alone (memory.go): the recall's
	// user keeps memoryNotes notes, recallQueries user messages are
	// asked, and the turn rows run memoryPairs pairs.
	memoryOnly    bool
	memoryNotes   int
	recallQueries int
	memoryPairs   int
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("chatgate-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	clients := fs.String("clients", "1,50,500", "concurrent clients, comma-separated")
	messages := fs.Int("messages", 200, "messages per client at most")
	duration := fs.Duration("duration", 8*time.Second, "time per measurement at most")
	store := fs.String("store", "sqlite", "storage for the gateway runs: sqlite or postgres")
	idle := fs.Int("idle-conns", 10000, "idle WebSocket connections for the memory measurement")
	sweep := fs.Int("sweep-conversations", 1_000_000, "conversations for the daily sweep")
	raw := fs.Int("raw-rows", 200_000, "rows for the raw storage baseline")
	quick := fs.Bool("quick", false, "small sizes, for CI: seconds instead of minutes")
	jsonPath := fs.String("json", "", "also write the JSON summary to this file")
	serveIdle := fs.Bool("serve-idle", false, "internal: run the idle-connection server (child process)")
	serveModel := fs.Bool("serve-model", false, "internal: run the streaming model server (child process)")
	modelClocks := fs.Bool("serve-model-clocks", false, "internal: with -serve-model, time each request and serve the times at /clocks")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	execTrace := fs.String("trace", "", "write an execution trace of the whole run to this file (go tool trace)")
	firstChunk := fs.Duration("llm-first-chunk", 20*time.Millisecond, "time the streaming model server takes to its first chunk")
	chunkGap := fs.Duration("llm-chunk-gap", 2*time.Millisecond, "time between the streaming model server's chunks after the first (0: the rest of the answer at once)")
	firstDeltaOnly := fs.Bool("first-delta-only", false, "measure only the time to first delta")
	pgCostOnly := fs.Bool("pg-cost-only", false, "measure only what a turn costs PostgreSQL (transactions, round trips, rows, WAL)")
	turnsOnly := fs.Bool("turns-only", false, "measure only the bare echo and the gateway's turns (on PostgreSQL too when CHATGATE_TEST_POSTGRES_DSN is set)")
	schedulesN := fs.Int("schedules", 10_000, "schedules due at the same time, for the scheduler's rate and lag")
	schedulesOver := fs.Duration("schedules-over", time.Minute, "the time -schedules are due over, evenly (0: all at the same second)")
	idleSchedulesN := fs.Int("idle-schedules", 100_000, "idle schedules (reminders not due) for the scheduler's memory")
	schedulesOnly := fs.Bool("schedules-only", false, "measure only the scheduler: schedules due at once, and idle schedules' memory (on PostgreSQL too when CHATGATE_TEST_POSTGRES_DSN is set)")
	serveIdleSchedules := fs.Bool("serve-idle-schedules", false, "internal: run a scheduler for the idle-schedule memory (child process)")
	memoryOnly := fs.Bool("memory-only", false, "measure only memory: time to first delta and turns/s with session.memory on ÷ off, and the reads of a user's notes (on PostgreSQL too when CHATGATE_TEST_POSTGRES_DSN is set)")
	memoryNotes := fs.Int("memory-notes", 10_000, "notes of the user whose reads the memory's recall row times")
	recallQueries := fs.Int("recall-queries", 500, "user messages the memory's recall row asks each read")
	memoryPairs := fs.Int("memory-pairs", 3, "pairs of turn runs, memory off then on, per store")
	breakdownOnly := fs.Bool("breakdown", false, "measure only where a turn's time goes: one client's path with clocks along it, and what 50 clients' turns waited for")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *serveIdle {
		return serveIdleChild(ctx, stdout, stderr)
	}
	if *serveIdleSchedules {
		return serveIdleSchedulesChild(ctx, os.Stdin, stdout, stderr)
	}
	if *serveModel {
		return serveModelChild(*firstChunk, *chunkGap, *modelClocks, os.Stdin, stdout, stderr)
	}
	o := options{messages: *messages, duration: *duration, store: *store, idleConns: *idle,
		sweepRows: *sweep, rawRows: *raw, quick: *quick, jsonPath: *jsonPath,
		dsn: os.Getenv("CHATGATE_TEST_POSTGRES_DSN"), firstChunk: *firstChunk, chunkGap: *chunkGap, firstDeltaOnly: *firstDeltaOnly, pgCostOnly: *pgCostOnly, turnsOnly: *turnsOnly,
		schedules: *schedulesN, schedulesOver: *schedulesOver, idleSchedules: *idleSchedulesN, schedulesOnly: *schedulesOnly,
		memoryOnly: *memoryOnly, memoryNotes: *memoryNotes, recallQueries: *recallQueries, memoryPairs: *memoryPairs}
	for _, c := range strings.Split(*clients, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(c))
		if err != nil || n < 1 {
			fmt.Fprintf(stderr, "chatgate-bench: bad -clients %q\n", *clients)
			return 2
		}
		o.clients = append(o.clients, n)
	}
	if o.quick { // small sizes, except for flags given explicitly
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		pick := func(name string, p *int, v int) {
			if !set[name] {
				*p = v
			}
		}
		if !set["clients"] {
			o.clients = []int{1, 20, 100}
		}
		if !set["duration"] {
			o.duration = 2 * time.Second
		}
		pick("messages", &o.messages, 30)
		pick("idle-conns", &o.idleConns, 500)
		pick("sweep-conversations", &o.sweepRows, 20_000)
		pick("raw-rows", &o.rawRows, 20_000)
		pick("schedules", &o.schedules, 200)
		if !set["schedules-over"] {
			o.schedulesOver = 2 * time.Second
		}
		pick("idle-schedules", &o.idleSchedules, 5_000)
		pick("memory-notes", &o.memoryNotes, 2_000)
		pick("recall-queries", &o.recallQueries, 200)
		pick("memory-pairs", &o.memoryPairs, 1)
	}
	if o.store == "postgres" && o.dsn == "" {
		fmt.Fprintln(stderr, "chatgate-bench: -store postgres needs CHATGATE_TEST_POSTGRES_DSN")
		return 2
	}
	for _, r := range []struct {
		path  string
		start func(io.Writer) error
		stop  func()
	}{
		{*cpuProfile, pprof.StartCPUProfile, pprof.StopCPUProfile},
		{*execTrace, trace.Start, trace.Stop},
	} {
		if r.path == "" {
			continue
		}
		f, err := os.Create(r.path)
		if err == nil {
			err = r.start(f)
		}
		if err != nil {
			fmt.Fprintf(stderr, "chatgate-bench: %v\n", err)
			return 1
		}
		defer f.Close() // after the stop below: deferred calls run last first
		defer r.stop()
	}
	if *breakdownOnly {
		b, err := breakdown(ctx, o, stderr)
		if err != nil {
			fmt.Fprintf(stderr, "chatgate-bench: %v\n", err)
			return 1
		}
		b.print(stdout)
		return writeJSON(b, o.jsonPath, stdout, stderr)
	}
	rep, err := measure(ctx, o, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "chatgate-bench: %v\n", err)
		return 1
	}
	rep.print(stdout)
	return writeJSON(rep, o.jsonPath, stdout, stderr)
}

// writeJSON prints v as JSON after the tables, and writes it to path when
// one is given; it returns the exit code.
func writeJSON(v any, path string, stdout, stderr io.Writer) int {
	data, _ := json.MarshalIndent(v, "", "  ")
	fmt.Fprintf(stdout, "\n%s\n", data)
	if path != "" {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			fmt.Fprintf(stderr, "chatgate-bench: %v\n", err)
			return 1
		}
	}
	return 0
}

// report is the JSON summary.
type report struct {
	Machine string `json:"machine"`
	// Wake is how soon this machine starts a readied goroutine beside a
	// busy one (wakeProbe).
	Wake     *wakeResult  `json:"machine_wake,omitempty"`
	GC       string       `json:"gc"`
	Quick    bool         `json:"quick"`
	Store    string       `json:"store"`
	Echo     []loadResult `json:"baseline_a_echo"`
	RawRows  []rawResult  `json:"baseline_b_storage"`
	Gateway  []loadResult `json:"gateway"`
	Postgres []loadResult `json:"gateway_postgres,omitempty"`
	// Cross is the latency a reply's cross-replica delivery adds
	// (PostgreSQL LISTEN/NOTIFY between two gateways; Clients: users).
	Cross *loadResult `json:"cross_replica_postgres,omitempty"`
	// PostgresCost is what a turn costs PostgreSQL (postgresCost).
	PostgresCost *pgCost `json:"postgres_cost_per_turn,omitempty"`
	// PostgresTwoReplicas is the same, two replicas on one database.
	PostgresTwoReplicas *pgCost       `json:"postgres_two_replicas,omitempty"`
	Collect             []burstResult `json:"collect_bursts,omitempty"`
	// FirstDelta is time to first delta, direct and through the gateway,
	// per store and client count.
	FirstDelta []ttfdResult `json:"time_to_first_delta,omitempty"`
	// FirstChunkMillis is the streaming model server's delay to its
	// first chunk in those rows.
	FirstChunkMillis float64 `json:"llm_first_chunk_ms"`
	// ChunkGapMillis is its time between the chunks after the first.
	ChunkGapMillis float64 `json:"llm_chunk_gap_ms"`
	// ToolGap is the gateway's time from a tool's result to the next
	// model request (toolGap).
	ToolGap []toolGapResult `json:"tool_result_to_next_request,omitempty"`
	Idle    *idleResult     `json:"idle_connections,omitempty"`
	// Fires are the scheduler's rate and lag with many schedules due at
	// once; IdleSchedules what idle ones cost its process (schedules.go).
	Fires         []firesResult         `json:"schedules_due_at_once,omitempty"`
	IdleSchedules []idleSchedulesResult `json:"idle_schedules,omitempty"`
	// Memory is what users' notes cost a turn (memory.go).
	Memory *memoryReport `json:"memory,omitempty"`
	Sweeps []sweepResult `json:"daily_sweep"`
	Locks  locksResult   `json:"lock_cache"`
	Goals  []goal        `json:"goals"`
	// Tracked are figures reported with no target (trackedFigures).
	Tracked []tracked `json:"tracked,omitempty"`
}

type loadResult struct {
	Clients    int     `json:"clients"`
	Turns      int     `json:"turns"`
	PerSecond  float64 `json:"per_second"`
	P50Millis  float64 `json:"p50_ms"`
	P99Millis  float64 `json:"p99_ms"`
	ErrorCount int     `json:"errors"`
	// CPUMicrosPerTurn is this process's CPU (the gateway and its
	// clients) over the step ÷ turns; ServerCPUMicrosPerTurn a local
	// PostgreSQL server's; CoresBusy both ÷ the step's time (cpuMeter).
	CPUMicrosPerTurn       float64 `json:"cpu_us_per_turn,omitempty"`
	ServerCPUMicrosPerTurn float64 `json:"server_cpu_us_per_turn,omitempty"`
	CoresBusy              float64 `json:"cores_busy,omitempty"`
}

type rawResult struct {
	Driver    string  `json:"driver"`
	Rows      int     `json:"rows"`
	PerSecond float64 `json:"rows_per_second"`
}

type idleResult struct {
	Connections   int     `json:"connections"`
	RSSPerConnKiB float64 `json:"rss_kib_per_connection"`
	HeapPerConnKB float64 `json:"heap_kib_per_connection"`
}

type sweepResult struct {
	Driver        string  `json:"driver"`
	Conversations int     `json:"conversations"`
	Seconds       float64 `json:"seconds"`
}

type locksResult struct {
	HeapMiB10k float64 `json:"heap_mib_10k_keys"`
	HeapMiB1M  float64 `json:"heap_mib_1m_keys"`
}

// tracked is a figure a run reports beside its goals, with no target.
type tracked struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
}

type goal struct {
	Name   string  `json:"name"`
	Target string  `json:"target"`
	Value  float64 `json:"value"`
	Met    bool    `json:"met"`
}

func (r *report) print(w io.Writer) {
	tw := newTable(w)
	fmt.Fprintf(w, "chatgate-bench on %s (store %s%s, %s)\n\n", r.Machine, r.Store, map[bool]string{true: ", quick"}[r.Quick], r.GC)
	if r.Wake != nil {
		r.Wake.print(w)
	}
	if len(r.Echo)+len(r.Gateway)+len(r.Postgres)+len(r.RawRows) > 0 || r.Cross != nil {
		fmt.Fprintln(tw, "measurement\tclients\tper second\tp50 ms\tp99 ms\terrors\tCPU µs each\tserver µs each\tcores busy\t")
	}
	row := func(name string, l loadResult) {
		// "-" where a figure was not measured (a row without CPU, a
		// server elsewhere).
		cpu, server, busy := "-", "-", "-"
		if l.CPUMicrosPerTurn > 0 {
			cpu, busy = fmt.Sprintf("%.0f", l.CPUMicrosPerTurn), fmt.Sprintf("%.2f", l.CoresBusy)
		}
		if l.ServerCPUMicrosPerTurn > 0 {
			server = fmt.Sprintf("%.0f", l.ServerCPUMicrosPerTurn)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.2f\t%.2f\t%d\t%s\t%s\t%s\t\n", name, l.Clients, l.PerSecond, l.P50Millis, l.P99Millis, l.ErrorCount,
			cpu, server, busy)
	}
	for _, l := range r.Echo {
		row("A: bare WebSocket echo (round trips)", l)
	}
	for _, l := range r.Gateway {
		row("gateway turns ("+r.Store+")", l)
	}
	for _, l := range r.Postgres {
		row("gateway turns (postgres)", l)
	}
	if r.Cross != nil {
		row("reply on the other replica, added (postgres)", *r.Cross)
	}
	for _, b := range r.RawRows {
		fmt.Fprintf(tw, "B: raw storage rows (%s)\t-\t%.0f\t\t\t\t\t\t\t\n", b.Driver, b.PerSecond)
	}
	tw.Flush()
	r.printCPUBounds(w)
	for _, c := range r.Collect {
		fmt.Fprintf(w, "\ncollect (%s, debounce %.0f ms): %d clients, bursts of %d: %.0f bursts/s (%.0f messages/s), %.2f agent calls per burst, p50 %.2f ms, p99 %.2f ms, %d errors",
			r.Store, c.DebounceMs, c.Clients, c.Burst, c.PerSecond, c.MessagesPerSecond, c.CallsPerBurst, c.P50Millis, c.P99Millis, c.ErrorCount)
	}
	if len(r.Collect) > 0 {
		fmt.Fprintln(w)
	}
	for _, c := range []*pgCost{r.PostgresCost, r.PostgresTwoReplicas} {
		if c == nil {
			continue
		}
		fmt.Fprintf(w, "\npostgres per turn, %d clients on %d replica(s) (%d turns, %.0f turns/s, p99 %.1f ms): %.2f transactions (pg_stat_database), %.2f transactions and %.2f round trips from the gateway's pools (pgx tracer), %.1f rows, %.0f WAL bytes; %.0f %% of conversation updates heap-only\n",
			c.Clients, c.Replicas, c.Turns, c.TurnsPerSecond, c.P99Millis, c.StatXactsPerTurn, c.XactsPerTurn, c.RoundTripsPerTurn, c.RowsPerTurn, c.WALBytesPerTurn, 100*c.ConversationUpdatesHOT)
	}
	if len(r.FirstDelta) > 0 {
		fmt.Fprintf(w, "\ntime to first delta (streaming model server, first chunk after %.0f ms, the others %g ms apart):\n", r.FirstChunkMillis, r.ChunkGapMillis)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "store\tclients\tdirect p50 ms\tdirect p99 ms\tgateway p50 ms\tgateway p99 ms\tadded p50 ms\tadded p99 ms\terrors\t")
		for _, f := range r.FirstDelta {
			store := f.Store
			if f.Compaction {
				store += " + compaction"
			}
			if f.Tools > 0 {
				store += fmt.Sprintf(" + %d tools (not called)", f.Tools)
			}
			if f.InTurn {
				store += ", asked in turn"
			}
			if f.Burst {
				store += ", the answer's rest at once"
			}
			fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%d\t\n", store, f.Clients, f.Direct.P50Millis, f.Direct.P99Millis,
				f.Gateway.P50Millis, f.Gateway.P99Millis, f.AddedP50Millis, f.AddedP99Millis, f.Direct.ErrorCount+f.Gateway.ErrorCount)
		}
		tw.Flush()
	}
	for _, g := range r.ToolGap {
		fmt.Fprintf(w, "\na tool's result to the next model request (%s, 1 client, %d turns): p50 %.3f ms, p99 %.3f ms, %d errors\n",
			g.Store, g.Turns, g.P50Millis, g.P99Millis, g.Errors)
	}
	fmt.Fprintln(w)
	if r.Memory != nil {
		r.Memory.print(w)
		fmt.Fprintln(w)
	}
	for _, f := range r.Fires {
		fmt.Fprintf(w, "%d schedules due over %g s (%s): %d fired, %.0f fires/s, lag due → model call p50 %.0f ms, p99 %.0f ms, max %.0f ms (planned in %.1f s)",
			f.Schedules, f.OverSeconds, f.Store, f.Fired, f.PerSecond, f.LagP50Millis, f.LagP99Millis, f.LagMaxMillis, f.PlanSeconds)
		if f.StatXactsPerFire > 0 {
			fmt.Fprintf(w, "; %.2f transactions per fire (pg_stat_database), %.2f from the gateway's pools", f.StatXactsPerFire, f.XactsPerFire)
		}
		fmt.Fprintln(w)
	}
	for _, m := range r.IdleSchedules {
		fmt.Fprintf(w, "idle schedules (%s): %d, %.0f B RSS and %.0f B heap each\n", m.Store, m.Schedules, m.RSSPerSchedB, m.HeapPerSchedB)
	}
	if r.Idle != nil {
		fmt.Fprintf(w, "idle WebSocket connections: %d, %.1f KiB RSS and %.1f KiB heap each\n", r.Idle.Connections, r.Idle.RSSPerConnKiB, r.Idle.HeapPerConnKB)
	}
	for _, s := range r.Sweeps {
		fmt.Fprintf(w, "daily sweep over %d conversations (%s): %.2f s\n", s.Conversations, s.Driver, s.Seconds)
	}
	if r.Locks.HeapMiB1M > 0 {
		fmt.Fprintf(w, "lock cache heap: %.2f MiB after 10,000 keys, %.2f MiB after 1,000,000 keys\n\n", r.Locks.HeapMiB10k, r.Locks.HeapMiB1M)
	}
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "goal\ttarget\tvalue\tmet")
	for _, g := range r.Goals {
		fmt.Fprintf(tw, "%s\t%s\t%.3g\t%v\n", g.Name, g.Target, g.Value, g.Met)
	}
	tw.Flush()
	if len(r.Tracked) > 0 {
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "\ntracked, no goal\tvalue")
		for _, t := range r.Tracked {
			fmt.Fprintf(tw, "%s\t%.3g\n", t.Name, t.Value)
		}
		tw.Flush()
	}
}

// newTable is a table of right-aligned columns, as the run prints them.
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
}

func machine() string {
	model := ""
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(line, "model name") {
				_, model, _ = strings.Cut(line, ":")
				break
			}
		}
	}
	return fmt.Sprintf("%d cores, %s, %s", runtime.NumCPU(), strings.TrimSpace(model), runtime.Version())
}
