package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/google/uuid"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/gateway"
	"github.com/chatgate/chatgate/locks"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/store"
)

var discard = slog.New(slog.DiscardHandler)

// statementRows is the rows per multi-row INSERT in bulk loads.
const statementRows = 64

func measure(ctx context.Context, o options, progress io.Writer) (*report, error) {
	rep := &report{Machine: machine(), GC: gcPace, Quick: o.quick, Store: o.store, FirstChunkMillis: float64(o.firstChunk.Microseconds()) / 1000,
		ChunkGapMillis: float64(o.chunkGap.Microseconds()) / 1000}
	// Each step labels this goroutine, and so every goroutine started from
	// here on (servers, their connections, the stores' committers), with
	// its name: a -cpuprofile then shows one step with
	// go tool pprof -tagfocus 'step=gateway on sqlite'.
	step := func(s string) {
		fmt.Fprintf(progress, "… %s\n", s)
		pprof.SetGoroutineLabels(pprof.WithLabels(ctx, pprof.Labels("step", s)))
	}
	rounds := 100
	if o.quick {
		rounds = 20
	}
	step("the machine's wake-up of a readied goroutine")
	w := wakeProbe(rounds, 5*time.Millisecond, 3*time.Millisecond)
	rep.Wake = &w
	firstDeltaRuns := func() error {
		stores := []string{o.store}
		if o.dsn != "" && o.store != store.DriverPostgres {
			stores = append(stores, store.DriverPostgres)
		}
		for _, driver := range stores {
			step("time to first delta on " + driver + ": direct and through the gateway")
			f, err := firstDelta(ctx, driver, o)
			if err != nil {
				return err
			}
			rep.FirstDelta = append(rep.FirstDelta, f...)
			step("a tool's result to the next model request on " + driver)
			g, err := toolGap(ctx, driver, o)
			if err != nil {
				return err
			}
			rep.ToolGap = append(rep.ToolGap, g)
		}
		return nil
	}
	if o.pgCostOnly {
		if o.dsn == "" {
			return nil, fmt.Errorf("-pg-cost-only needs CHATGATE_TEST_POSTGRES_DSN")
		}
		step("what a turn costs PostgreSQL: transactions, round trips, rows and WAL at 50 clients")
		c, err := postgresCost(ctx, 50, 1, o)
		if err != nil {
			return nil, err
		}
		rep.PostgresCost = &c
		return rep, nil
	}
	if o.schedulesOnly {
		drivers := []string{store.DriverSQLite}
		if o.dsn != "" {
			drivers = append(drivers, store.DriverPostgres)
		}
		if err := measureSchedules(ctx, rep, drivers, o, step, progress); err != nil {
			return nil, err
		}
		rep.Goals, rep.Tracked = goals(rep), trackedFigures(rep)
		return rep, nil
	}
	if o.memoryOnly {
		drivers := []string{store.DriverSQLite}
		if o.dsn != "" {
			drivers = append(drivers, store.DriverPostgres)
		}
		m, err := measureMemory(ctx, drivers, o, false, step, progress)
		if err != nil {
			return nil, err
		}
		rep.Memory = m
		rep.Goals, rep.Tracked = goals(rep), trackedFigures(rep)
		return rep, nil
	}
	if o.firstDeltaOnly {
		if err := firstDeltaRuns(); err != nil {
			return nil, err
		}
		rep.Goals, rep.Tracked = goals(rep), trackedFigures(rep)
		return rep, nil
	}

	step("baseline A: bare WebSocket echo")
	echoURL, stopEcho := echoServer()
	for _, n := range o.clients {
		rep.Echo = append(rep.Echo, cpuMeter{}.measureCPU(ctx, func() loadResult { return drive(ctx, echoURL, n, o, false, 1) }))
	}
	stopEcho()

	drivers := []string{store.DriverSQLite}
	if o.dsn != "" {
		drivers = append(drivers, store.DriverPostgres)
	}
	for _, driver := range drivers {
		if o.turnsOnly {
			break
		}
		step("baseline B: raw storage on " + driver)
		r, err := rawInserts(ctx, driver, o)
		if err != nil {
			return nil, err
		}
		rep.RawRows = append(rep.RawRows, r)
	}

	gatewayRuns := func(driver string) ([]loadResult, error) {
		url, stop, err := gatewayServer(ctx, driver, o)
		if err != nil {
			return nil, err
		}
		defer stop()
		var meter cpuMeter
		if driver == store.DriverPostgres {
			if meter.server, err = localPGServer(o.dsn); err != nil {
				fmt.Fprintf(progress, "  the PostgreSQL server's CPU is not measured: %v\n", err)
			}
		}
		var out []loadResult
		for _, n := range o.clients {
			out = append(out, meter.measureCPU(ctx, func() loadResult { return drive(ctx, url, n, o, true, 1) }))
		}
		return out, nil
	}
	step("gateway on " + o.store)
	var err error
	if rep.Gateway, err = gatewayRuns(o.store); err != nil {
		return nil, err
	}
	if o.dsn != "" && o.store != store.DriverPostgres {
		step("gateway on postgres")
		if rep.Postgres, err = gatewayRuns(store.DriverPostgres); err != nil {
			return nil, err
		}
	}

	if o.turnsOnly {
		rep.Goals, rep.Tracked = goals(rep), trackedFigures(rep)
		return rep, nil
	}
	if o.dsn != "" {
		step("what a turn costs PostgreSQL: transactions, round trips, rows and WAL at 50 clients")
		c, err := postgresCost(ctx, 50, 1, o)
		if err != nil {
			return nil, err
		}
		rep.PostgresCost = &c
		step("the same over two gateway replicas sharing the database, 50 clients each")
		two, err := postgresCost(ctx, 100, 2, o)
		if err != nil {
			return nil, err
		}
		rep.PostgresTwoReplicas = &two
	}

	for _, debounce := range []time.Duration{0, 100 * time.Millisecond} {
		step(fmt.Sprintf("collect: bursts of 5 messages at 50 clients on %s, debounce %s", o.store, debounce))
		collect, err := collectBursts(ctx, o.store, 50, 5, debounce, o)
		if err != nil {
			return nil, err
		}
		rep.Collect = append(rep.Collect, collect)
	}

	if err := firstDeltaRuns(); err != nil {
		return nil, err
	}

	if o.dsn != "" {
		step("replies delivered on another replica (two gateways on postgres)")
		c, err := crossReplica(ctx, o)
		if err != nil {
			return nil, err
		}
		rep.Cross = &c
	}

	// Memory (users' notes): the quick run, which CI runs, only its time
	// to first delta, some 10 s on both stores.
	if rep.Memory, err = measureMemory(ctx, drivers, o, o.quick, step, progress); err != nil {
		return nil, err
	}

	step(fmt.Sprintf("memory of %d idle connections (child process)", o.idleConns))
	if rep.Idle, err = idleMemory(ctx, o); err != nil {
		fmt.Fprintf(progress, "  skipped: %v\n", err)
		rep.Idle = nil
	}
	if err := measureSchedules(ctx, rep, drivers, o, step, progress); err != nil {
		return nil, err
	}
	for _, driver := range drivers {
		step(fmt.Sprintf("daily sweep over %d conversations on %s", o.sweepRows, driver))
		s, err := sweep(ctx, driver, o)
		if err != nil {
			return nil, err
		}
		rep.Sweeps = append(rep.Sweeps, s)
	}
	step("lock cache memory")
	rep.Locks = locksResult{HeapMiB10k: lockHeap(10_000), HeapMiB1M: lockHeap(1_000_000)}
	rep.Goals, rep.Tracked = goals(rep), trackedFigures(rep)
	return rep, nil
}

// openStore opens a fresh database: a temporary SQLite file, or a new
// schema on the PostgreSQL server, removed by the returned func.
func openStore(ctx context.Context, driver string, o options) (*store.DB, func(), error) {
	return openStoreWith(ctx, driver, o, store.OpenOptions{Logger: discard})
}

// openStoreWith is openStore with the store's options.
func openStoreWith(ctx context.Context, driver string, o options, opts store.OpenOptions) (*store.DB, func(), error) {
	switch driver {
	case store.DriverSQLite:
		dir, err := os.MkdirTemp("", "chatgate-bench")
		if err != nil {
			return nil, nil, err
		}
		db, err := store.Open(ctx, driver, filepath.Join(dir, "bench.db"), opts)
		if err != nil {
			os.RemoveAll(dir)
			return nil, nil, err
		}
		return db, func() { db.Close(); os.RemoveAll(dir) }, nil
	case store.DriverPostgres:
		admin, err := gorm.Open(postgres.Open(o.dsn), &gorm.Config{Logger: logger.Discard})
		if err != nil {
			return nil, nil, err
		}
		schema := "bench_" + shortID()
		if err := admin.Exec("CREATE SCHEMA " + schema).Error; err != nil {
			return nil, nil, err
		}
		sep := "?"
		if strings.Contains(o.dsn, "?") {
			sep = "&"
		}
		db, err := store.Open(ctx, driver, o.dsn+sep+"search_path="+schema, opts)
		if err != nil {
			return nil, nil, err
		}
		return db, func() {
			db.Close()
			admin.Exec("DROP SCHEMA " + schema + " CASCADE")
			if s, err := admin.DB(); err == nil {
				s.Close()
			}
		}, nil
	}
	return nil, nil, fmt.Errorf("unknown store %q", driver)
}

// gatewayServer runs the real gateway stack in process: store, session
// manager with the echo agent, WebSocket channel, HTTP server on loopback.
func gatewayServer(ctx context.Context, driver string, o options) (string, func(), error) {
	db, closeDB, err := openStore(ctx, driver, o)
	if err != nil {
		return "", nil, err
	}
	return serveGateway(db, closeDB, false, agent.Echo{}, sessions.Policy{MaxHistory: 20})
}

// serveGateway serves a session manager of db (agent ag, the WebSocket
// channel's policy) over WebSocket on
// loopback, its rescuer (and with it the events of other replicas)
// running when rescue is set. The returned func stops it and closeDB.
func serveGateway(db *store.DB, closeDB func(), rescue bool, ag agent.Agent, policy sessions.Policy) (string, func(), error) {
	return serveGatewayWith(db, closeDB, rescue, ag, policy, nil)
}

// serveGatewayWith is serveGateway whose turns offer the model tools.
func serveGatewayWith(db *store.DB, closeDB func(), rescue bool, ag agent.Agent, policy sessions.Policy, toolbox sessions.Toolbox) (string, func(), error) {
	mgr := sessions.New(db, ag, sessions.Options{Logger: discard, HotConversations: 4096, Events: db.Events(),
		Policies: map[string]sessions.Policy{gateway.Channel: policy}, Tools: toolbox})
	ws := gateway.NewWebSocket(gateway.SessionsOf(mgr), gateway.WSOptions{RatePerSecond: 1e6, RateBurst: 1 << 20, HistoryLimit: 20, Logger: discard})
	if rescue {
		r := mgr.Rescuer()
		r.Listen()
		// It ends with the manager's drain, below.
		r.Start()
	}
	srv := gateway.New(discard)
	srv.Handle("GET /ws", ws)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		closeDB()
		return "", nil, err
	}
	go srv.Serve(ln)
	return "ws://" + ln.Addr().String() + "/ws", func() {
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(c)
		mgr.Shutdown(c)
		ws.Shutdown(c)
		closeDB()
	}, nil
}

// rawInserts is baseline B: message rows with no gateway, in the best
// batching this driver allows: one transaction per 1,000 rows, written as
// multi-row INSERTs of 64 rows (the pure-Go SQLite driver binds parameters
// in time quadratic in their number per statement, so much larger
// statements get slower, not faster).
func rawInserts(ctx context.Context, driver string, o options) (rawResult, error) {
	db, closeDB, err := openStore(ctx, driver, o)
	if err != nil {
		return rawResult{}, err
	}
	defer closeDB()
	const batch = 1000
	rows := make([]sessions.Message, batch)
	conv := uuid.NewString()
	start := time.Now()
	seq := int64(0)
	for done := 0; done < o.rawRows; done += batch {
		for i := range rows {
			seq++
			rows[i] = sessions.Message{ConversationID: conv, Seq: seq, Role: "user", Content: "hello gateway", Status: "ok", CreatedAt: time.Now()}
		}
		if err := db.Gorm().WithContext(ctx).CreateInBatches(&rows, statementRows).Error; err != nil {
			return rawResult{}, fmt.Errorf("raw insert: %w", err)
		}
	}
	return rawResult{Driver: driver, Rows: int(seq), PerSecond: float64(seq) / time.Since(start).Seconds()}, nil
}

// sweep times the daily sweep over o.sweepRows active conversations that
// all started before the boundary.
func sweep(ctx context.Context, driver string, o options) (sweepResult, error) {
	db, closeDB, err := openStore(ctx, driver, o)
	if err != nil {
		return sweepResult{}, err
	}
	defer closeDB()
	old := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const batch = 1000
	convs := make([]sessions.Conversation, 0, batch)
	for i := 0; i < o.sweepRows; i++ {
		convs = append(convs, sessions.Conversation{ID: uuid.NewString(), SessionKey: fmt.Sprint("websocket:sweep-", i), Channel: "websocket",
			Status: sessions.StatusActive, StartedAt: old, LastActivityAt: old})
		if len(convs) == batch || i == o.sweepRows-1 {
			if err := db.Gorm().WithContext(ctx).CreateInBatches(&convs, statementRows).Error; err != nil {
				return sweepResult{}, fmt.Errorf("seed conversations: %w", err)
			}
			convs = convs[:0]
		}
	}
	now := time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC)
	mgr := sessions.New(db, agent.Echo{}, sessions.Options{Logger: discard, Now: func() time.Time { return now },
		Policies: map[string]sessions.Policy{"websocket": {MaxHistory: 10, Reset: sessions.ResetPolicy{Mode: sessions.ResetDaily, AtHour: 4, Location: time.UTC}}}})
	start := time.Now()
	n, err := sessions.NewSweeper(mgr, nil).SweepDaily(ctx, "websocket")
	took := time.Since(start)
	if err != nil {
		return sweepResult{}, err
	}
	if n != o.sweepRows {
		return sweepResult{}, fmt.Errorf("sweep archived %d of %d", n, o.sweepRows)
	}
	return sweepResult{Driver: driver, Conversations: n, Seconds: took.Seconds()}, nil
}

func lockHeap(keys int) float64 {
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	c := locks.New(locks.Options{})
	ctx := context.Background()
	for i := 0; i < keys; i++ {
		r, _ := c.Acquire(ctx, fmt.Sprint("telegram:dm:", i))
		r()
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(c)
	return max(0, float64(after.HeapAlloc)-float64(before.HeapAlloc)) / (1 << 20)
}

// findLoad is the result for clients in ls, or nil.
func findLoad(ls []loadResult, clients int) *loadResult {
	for i := range ls {
		if ls[i].Clients == clients {
			return &ls[i]
		}
	}
	return nil
}

// trackedFigures are the figures a run reports beside its goals, with no
// target: each store's CPU a turn at its largest load (the gateway and its
// clients, and a local PostgreSQL server's) ÷ the CPU a bare echo's round
// trip took at that load. (It was a goal on turns/s, ≥ 0.2 of the echo's
// round trips; retired: a durable turn is two commits and three frames,
// and no item of its profile is over 3 %. See docs/performance.md.)
func trackedFigures(r *report) []tracked {
	var out []tracked
	for _, run := range []struct {
		store string
		rows  []loadResult
	}{{r.Store, r.Gateway}, {store.DriverPostgres, r.Postgres}} {
		if len(run.rows) == 0 {
			continue
		}
		gw := run.rows[len(run.rows)-1]
		echo := findLoad(r.Echo, gw.Clients)
		if echo == nil || echo.CPUMicrosPerTurn <= 0 || gw.CPUMicrosPerTurn <= 0 {
			continue
		}
		out = append(out, tracked{fmt.Sprintf("CPU a turn ÷ CPU an echo round trip, %d clients, %s", gw.Clients, run.store),
			(gw.CPUMicrosPerTurn + gw.ServerCPUMicrosPerTurn) / echo.CPUMicrosPerTurn})
	}
	return out
}

func goals(r *report) []goal {
	var out []goal
	find := findLoad
	last := func(ls []loadResult) *loadResult {
		if len(ls) == 0 {
			return nil
		}
		return &ls[len(ls)-1]
	}
	// The goals are ratios within one run, on this machine: what the
	// gateway adds over a bare echo, and over calling the model directly.
	// Each store's turn rows against the echo: its largest load's rate and
	// its middle load's tail.
	runs := []struct {
		store string
		rows  []loadResult
	}{{r.Store, r.Gateway}, {store.DriverPostgres, r.Postgres}}
	for _, run := range runs {
		if len(run.rows) > 0 {
			// The 50-client row when there is one, else the middle load.
			mid := find(run.rows, 50)
			if mid == nil {
				mid = &run.rows[len(run.rows)/2]
			}
			if e := find(r.Echo, mid.Clients); e != nil && e.P99Millis > 0 {
				ratio := mid.P99Millis / e.P99Millis
				out = append(out, goal{fmt.Sprintf("p99 at %d clients ÷ echo p99, %s", mid.Clients, run.store), "≤ 4", ratio, ratio <= 4})
			}
		}
	}
	// PostgreSQL against SQLite at every load past one client, and its
	// tail at the largest.
	for _, pg := range r.Postgres {
		lite := find(r.Gateway, pg.Clients)
		if pg.Clients <= 1 || lite == nil || lite.PerSecond <= 0 {
			continue
		}
		ratio := pg.PerSecond / lite.PerSecond
		out = append(out, goal{fmt.Sprintf("postgres turns/s ÷ sqlite turns/s, %d clients", pg.Clients), "≥ 1", ratio, ratio >= 1 && pg.ErrorCount == 0})
	}
	if pg := last(r.Postgres); pg != nil && pg.Clients > 1 {
		out = append(out, goal{fmt.Sprintf("postgres p99 at %d clients (ms)", pg.Clients), "≤ 200", pg.P99Millis, pg.P99Millis <= 200 && pg.ErrorCount == 0})
	}
	if c := r.PostgresCost; c != nil {
		out = append(out, goal{fmt.Sprintf("postgres transactions per turn, %d clients", c.Clients), "≤ 0.2", c.StatXactsPerTurn, c.StatXactsPerTurn <= 0.2})
	}
	var plain, before *ttfdResult
	seen := map[string]bool{}
	for i, f := range r.FirstDelta {
		if f.InTurn || f.Burst {
			continue // reported beside the goal's rows, not a goal of its own
		}
		first := !seen[f.Store] && f.Clients == 1 && !f.Compaction && f.Tools == 0
		if first {
			seen[f.Store] = true
		}
		switch {
		case f.Tools > 0 && before != nil && before.Store == f.Store && before.Gateway.P50Millis > 0 && f.Gateway.Turns > 0:
			// Beside the row just before it, without tools.
			ratio := f.Gateway.P50Millis / before.Gateway.P50Millis
			out = append(out, goal{"time to first delta p50 with tools offered ÷ without, 1 client, " + f.Store, "≤ 1.05", ratio, ratio <= 1.05})
		case first && f.Gateway.Turns > 0 && f.Direct.P50Millis > 0:
			if f.Store == store.DriverSQLite {
				plain = &r.FirstDelta[i]
			}
			ratio := f.Gateway.P50Millis / f.Direct.P50Millis
			out = append(out, goal{fmt.Sprintf("time to first delta p50, gateway ÷ direct, 1 client, first chunk %.0f ms, %s", r.FirstChunkMillis, f.Store),
				"≤ 1.02", ratio, ratio <= 1.02})
		case f.Compaction && plain != nil && plain.Gateway.P50Millis > 0 && f.Gateway.Turns > 0:
			ratio := f.Gateway.P50Millis / plain.Gateway.P50Millis
			out = append(out, goal{"time to first delta p50 with compaction ÷ without, 1 client, sqlite", "≤ 1.1", ratio, ratio <= 1.1})
		}
		if f.Clients == 1 && f.Tools == 0 && !f.Compaction {
			before = &r.FirstDelta[i]
		}
	}
	out = append(out, memoryGoals(r.Memory)...)
	for _, g := range r.ToolGap {
		if g.Store == store.DriverSQLite && g.Turns > 0 {
			out = append(out, goal{"a tool's result to the next model request, p50, sqlite (ms)", "≤ 1", g.P50Millis, g.P50Millis <= 1 && g.Errors == 0})
		}
	}
	if r.Idle != nil {
		out = append(out, goal{"RSS per idle connection (KiB)", "≤ 20", r.Idle.RSSPerConnKiB, r.Idle.RSSPerConnKiB <= 20})
	}
	for _, s := range r.Sweeps {
		if s.Driver == store.DriverSQLite {
			out = append(out, goal{fmt.Sprintf("daily sweep, %d conversations, sqlite (s)", s.Conversations), "≤ 10", s.Seconds, s.Seconds <= 10})
		}
	}
	if r.Cross != nil && r.Cross.Turns > 0 {
		out = append(out, goal{"p99 added by delivery on another replica (ms)", "≤ 100", r.Cross.P99Millis, r.Cross.P99Millis <= 100 && r.Cross.ErrorCount == 0})
	}
	for _, f := range r.Fires {
		out = append(out, goal{fmt.Sprintf("fire lag p99, due → model call, %d schedules due over %g s, %s (ms)", f.Schedules, f.OverSeconds, f.Store), "≤ 1000",
			f.LagP99Millis, f.LagP99Millis <= 1000 && f.Fired == f.Schedules})
	}
	for _, m := range r.IdleSchedules {
		kib := m.RSSPerSchedB / 1024
		out = append(out, goal{fmt.Sprintf("RSS per idle schedule, %d, %s (KiB)", m.Schedules, m.Store), "≤ 1", kib, kib <= 1})
	}
	if r.Locks.HeapMiB1M > 0 {
		growth := r.Locks.HeapMiB1M - r.Locks.HeapMiB10k
		out = append(out, goal{"lock cache: 1M keys − 10k keys (MiB)", "≤ 10", growth, growth <= 10})
	}
	return out
}
