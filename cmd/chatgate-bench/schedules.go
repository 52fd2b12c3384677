package main

// Schedules: how fast the scheduler runs a minute in which many schedules
// are due, and what idle schedules cost in memory.
//
//   - fires: n operator schedules (bot.yaml's kind), each to a
//     conversation of its own on a channel whose route confirms delivery
//     (as Telegram's does), due over one minute (-schedules-over; 0: all
//     at the same second). Their fires are planned ahead, as the
//     scheduler plans them (ledger rows due), and
//     the scheduler runs them over a real store and the session manager
//     with a model stub answering at once. Measured: fires per second
//     (n ÷ the time from the first due time to the last delivery), the
//     lag from each fire's due time to its model call (p50, p99), and on
//     PostgreSQL the transactions per fire.
//   - idle: a child process runs the scheduler over a store; its RSS is
//     sampled before and after m reminders not due for a year are added
//     to the database (by this process), after passes of the scheduler.
//     Idle schedules live in the database: the difference ÷ m is what
//     each costs the process.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/schedules"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/store"
)

// scheduleChannel is the bench's channel: a route that confirms delivery.
const scheduleChannel = "bench"

type firesResult struct {
	Store     string `json:"store"`
	Schedules int    `json:"schedules"`
	// OverSeconds: the due times are spread evenly over this long (0: all
	// due at the same second).
	OverSeconds float64 `json:"due_over_seconds"`
	Fired       int     `json:"fired"`
	PerSecond   float64 `json:"fires_per_second"`
	// Lag is from the due time to the model call.
	LagP50Millis float64 `json:"lag_p50_ms"`
	LagP99Millis float64 `json:"lag_p99_ms"`
	LagMaxMillis float64 `json:"lag_max_ms"`
	// PlanSeconds is how long planning the fires took (not in the rates).
	PlanSeconds float64 `json:"plan_seconds"`
	// On PostgreSQL: pg_stat_database transactions from just before the
	// due time until every fire settled ÷ fires (the server's count,
	// heartbeats included), and the gateway's own from its pools' tracer.
	StatXactsPerFire float64 `json:"stat_transactions_per_fire,omitempty"`
	XactsPerFire     float64 `json:"transactions_per_fire,omitempty"`
}

type idleSchedulesResult struct {
	Store         string  `json:"store"`
	Schedules     int     `json:"schedules"`
	RSSPerSchedB  float64 `json:"rss_bytes_per_schedule"`
	HeapPerSchedB float64 `json:"heap_bytes_per_schedule"`
}

// fireStub is the model: it notes when each fire's call came and answers
// at once (agent.Echo).
type fireStub struct {
	mu    sync.Mutex
	calls []stubCall
	done  chan struct{}
	want  int
}

type stubCall struct {
	key string
	at  time.Time
}

func (*fireStub) Name() string  { return "fire-stub" }
func (*fireStub) Model() string { return "stub" }

func (f *fireStub) Reply(ctx context.Context, req agent.Request, onDelta func(string)) (agent.Reply, error) {
	at := time.Now()
	f.mu.Lock()
	f.calls = append(f.calls, stubCall{req.SessionKey, at})
	if len(f.calls) == f.want {
		close(f.done)
	}
	f.mu.Unlock()
	return agent.Echo{}.Reply(ctx, req, onDelta)
}

// measureFires runs n schedules due in the same minute on driver.
func measureFires(ctx context.Context, driver string, n int, o options, progress io.Writer) (firesResult, error) {
	res := firesResult{Store: driver, Schedules: n, OverSeconds: o.schedulesOver.Seconds()}
	counter := &pgCounter{}
	opts := store.OpenOptions{Logger: discard}
	if driver == store.DriverPostgres {
		opts.Tracer = counter
	}
	db, closeDB, err := openStoreWith(ctx, driver, o, opts)
	if err != nil {
		return res, err
	}
	defer closeDB()

	// The times they are due: spread evenly over o.schedulesOver (0: all
	// at one second), from far enough ahead for the plan. Each schedule is
	// due once, at its planned row's time (schedules.At): a schedule whose
	// planned row is not one of its own times has that row dropped and
	// its own latest time fired instead — a cron's minute boundary before
	// the due times would have every schedule fire at once, seconds early.
	first := time.Now().Add(5*time.Second + time.Duration(n)*time.Millisecond).Truncate(time.Second).UTC()
	dues := make([]time.Time, n)
	index := make(map[string]int, n)
	list := make([]sessions.OperatorSchedule, n)
	fires := make([]ledger.ScheduleFire, n)
	for i := range list {
		dues[i] = first.Add(time.Duration(int64(o.schedulesOver) * int64(i) / int64(n))).Truncate(time.Second)
		user := fmt.Sprint("s", i)
		target := sessions.ScheduleTarget{Channel: scheduleChannel, SessionKey: scheduleChannel + ":" + user, UserID: user, ChatID: user}
		index[target.SessionKey] = i
		list[i] = sessions.OperatorSchedule{Name: fmt.Sprint("bench-", i), When: schedules.At(dues[i]), Target: target, Prompt: "Check in."}
		fires[i] = ledger.ScheduleFire{ScheduleKey: schedules.OperatorKey(list[i].Name), DueAt: dues[i], SessionKey: target.SessionKey, CreatedAt: time.Now()}
	}
	due, last := first, dues[n-1]
	// Planned as the scheduler plans them (PlanFires), in one go: the
	// scheduler's own first pass then finds them planned.
	began := time.Now()
	if _, err := db.PlanFires(ctx, fires); err != nil {
		return res, err
	}

	stub := &fireStub{done: make(chan struct{}), want: n}
	mgr := sessions.New(db, stub, sessions.Options{Logger: discard, HotConversations: 4096, Events: db.Events(),
		Policies: map[string]sessions.Policy{scheduleChannel: {MaxHistory: 20}}})
	var mu sync.Mutex
	delivered := 0
	allDelivered := make(chan struct{})
	var lastDelivery time.Time
	mgr.Routes().Register(scheduleChannel, sessions.Route{Track: true, Deliver: func(context.Context, sessions.Delivery) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		delivered++
		if delivered == n {
			lastDelivery = time.Now()
			close(allDelivered)
		}
		return fmt.Sprint("m", delivered), nil
	}})
	s := sessions.NewScheduler(mgr, sessions.SchedulerOptions{}, discard)
	s.SetSchedules(list)
	// The first pass reads every schedule's latest fire: before the due
	// time, as a running gateway has long done.
	if err := s.Pass(ctx); err != nil {
		return res, err
	}
	res.PlanSeconds = time.Since(began).Seconds()
	if !time.Now().Before(due) {
		return res, fmt.Errorf("planning %d schedules took %.1f s, past their due time", n, res.PlanSeconds)
	}
	s.Start()
	defer func() {
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Stop(c)
		mgr.Shutdown(c)
	}()

	var before int64
	var x0 int64
	var stat func() (int64, error)
	if driver == store.DriverPostgres {
		stat = func() (int64, error) {
			var x int64
			err := db.Gorm().Raw("SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()").Scan(&x).Error
			return x, err
		}
		// Just before the due time: the planning is not counted.
		select {
		case <-time.After(time.Until(due) - 500*time.Millisecond):
		case <-ctx.Done():
			return res, ctx.Err()
		}
		if before, err = stat(); err != nil {
			return res, err
		}
		x0 = counter.xacts.Load()
	}
	fmt.Fprintf(progress, "  %d fires planned in %.1f s, due from %s UTC to %s\n", n, res.PlanSeconds, first.Format(time.TimeOnly), last.Format(time.TimeOnly))
	limit := time.Until(last) + 5*time.Minute
	select {
	case <-allDelivered:
	case <-time.After(limit):
		mu.Lock()
		d := delivered
		mu.Unlock()
		return res, fmt.Errorf("%d of %d fires delivered %s after their due time", d, n, limit)
	case <-ctx.Done():
		return res, ctx.Err()
	}
	// Every fire settled: its delivery's mark and the fire's own row.
	for {
		var settled int64
		if err := db.Gorm().Model(&ledger.ScheduleFire{}).Where("due_at <= ? AND state = ?", last, ledger.FireSent).Count(&settled).Error; err != nil {
			return res, err
		}
		if int(settled) == n {
			break
		}
		if time.Since(lastDelivery) > time.Minute {
			return res, fmt.Errorf("%d of %d fires settled a minute after the last delivery", settled, n)
		}
		time.Sleep(100 * time.Millisecond) // polling storage for the settles
	}
	if driver == store.DriverPostgres {
		x := counter.xacts.Load() - x0
		after, err := settledCounts(ctx, stat)
		if err != nil {
			return res, err
		}
		res.StatXactsPerFire = float64(after-before) / float64(n)
		res.XactsPerFire = float64(x) / float64(n)
	}
	stub.mu.Lock()
	lags := make([]time.Duration, len(stub.calls))
	for i, c := range stub.calls {
		lags[i] = c.at.Sub(dues[index[c.key]])
	}
	stub.mu.Unlock()
	slices.Sort(lags)
	res.Fired = len(lags)
	res.LagP50Millis = ms(lags[len(lags)/2])
	res.LagP99Millis = ms(lags[min(len(lags)-1, len(lags)*99/100)])
	res.LagMaxMillis = ms(lags[len(lags)-1])
	res.PerSecond = float64(n) / lastDelivery.Sub(first).Seconds()
	return res, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// serveIdleSchedulesChild runs a scheduler over the store named on its
// stdin's first line ("driver dsn"), prints READY, and answers each
// further line with its memory as JSON after two passes and a GC.
func serveIdleSchedulesChild(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) int {
	in := bufio.NewScanner(stdin)
	if !in.Scan() {
		return 1
	}
	driver, dsn, _ := strings.Cut(in.Text(), " ")
	db, err := store.Open(ctx, driver, dsn, store.OpenOptions{Logger: discard})
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	defer db.Close()
	mgr := sessions.New(db, agent.Echo{}, sessions.Options{Logger: discard, Events: db.Events(),
		Policies: map[string]sessions.Policy{scheduleChannel: {MaxHistory: 20}}})
	mgr.Routes().Register(scheduleChannel, sessions.Route{Track: true, Deliver: func(context.Context, sessions.Delivery) (string, error) { return "", nil }})
	s := sessions.NewScheduler(mgr, sessions.SchedulerOptions{}, discard)
	s.Start()
	defer func() {
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Stop(c)
		mgr.Shutdown(c)
	}()
	fmt.Fprintln(stdout, "READY")
	for in.Scan() {
		for range 2 {
			if err := s.Pass(ctx); err != nil {
				fmt.Fprintln(stderr, err)
				return 1
			}
		}
		runtime.GC()
		debug.FreeOSMemory()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		json.NewEncoder(stdout).Encode(memSample{RSSKiB: rssKiB(), HeapKiB: float64(m.HeapInuse+m.StackInuse) / 1024})
	}
	return 0
}

// idleSchedules measures m idle reminders' memory in a child scheduler.
func idleSchedules(ctx context.Context, driver string, m int, o options) (idleSchedulesResult, error) {
	res := idleSchedulesResult{Store: driver, Schedules: m}
	db, closeDB, err := openStore(ctx, driver, o)
	if err != nil {
		return res, err
	}
	defer closeDB()
	dsn := ""
	switch driver {
	case store.DriverSQLite:
		if err := db.Gorm().Raw("SELECT file FROM pragma_database_list WHERE name = 'main'").Scan(&dsn).Error; err != nil {
			return res, err
		}
	case store.DriverPostgres:
		var schema string
		if err := db.Gorm().Raw("SELECT current_schema()").Scan(&schema).Error; err != nil {
			return res, err
		}
		sep := "?"
		if strings.Contains(o.dsn, "?") {
			sep = "&"
		}
		dsn = o.dsn + sep + "search_path=" + schema
	}
	exe, err := os.Executable()
	if err != nil {
		return res, err
	}
	cmd := exec.CommandContext(ctx, exe, "-serve-idle-schedules")
	stdin, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return res, err
	}
	defer func() { stdin.Close(); cmd.Wait() }()
	lines := bufio.NewReader(out)
	fmt.Fprintf(stdin, "%s %s\n", driver, dsn)
	if line, err := lines.ReadString('\n'); err != nil || line != "READY\n" {
		return res, fmt.Errorf("the scheduler child did not start: %q %v", line, err)
	}
	sample := func() (memSample, error) {
		var s memSample
		fmt.Fprintln(stdin, "mem")
		line, err := lines.ReadString('\n')
		if err != nil {
			return s, err
		}
		return s, json.Unmarshal([]byte(line), &s)
	}
	// A few reminders first, so that the before is a scheduler that has
	// read reminders (its pools and statements warm).
	seed := func(from, to int) error {
		next := time.Now().AddDate(1, 0, 0).UTC()
		rows := make([]ledger.Reminder, 0, 1000)
		for i := from; i < to; i++ {
			rows = append(rows, ledger.Reminder{SessionKey: fmt.Sprint(scheduleChannel, ":idle-", i), Channel: scheduleChannel,
				Spec: schedules.Spec{Every: 24 * time.Hour}.Text(), Timezone: "UTC", Text: "Water the plants.", NextDueAt: &next, CreatedAt: time.Now()})
			if len(rows) == cap(rows) || i == to-1 {
				if err := db.Gorm().WithContext(ctx).CreateInBatches(&rows, statementRows).Error; err != nil {
					return err
				}
				rows = rows[:0]
			}
		}
		return nil
	}
	if err := seed(0, 100); err != nil {
		return res, err
	}
	before, err := sample()
	if err != nil {
		return res, err
	}
	if err := seed(100, 100+m); err != nil {
		return res, err
	}
	after, err := sample()
	if err != nil {
		return res, err
	}
	res.RSSPerSchedB = (after.RSSKiB - before.RSSKiB) * 1024 / float64(m)
	res.HeapPerSchedB = (after.HeapKiB - before.HeapKiB) * 1024 / float64(m)
	return res, nil
}

// measureSchedules runs both measurements on each store.
func measureSchedules(ctx context.Context, rep *report, drivers []string, o options, step func(string), progress io.Writer) error {
	for _, driver := range drivers {
		step(fmt.Sprintf("%d schedules due over %s on %s", o.schedules, o.schedulesOver, driver))
		f, err := measureFires(ctx, driver, o.schedules, o, progress)
		if err != nil {
			return fmt.Errorf("schedules on %s: %w", driver, err)
		}
		rep.Fires = append(rep.Fires, f)
		step(fmt.Sprintf("memory of %d idle schedules on %s (child process)", o.idleSchedules, driver))
		m, err := idleSchedules(ctx, driver, o.idleSchedules, o)
		if err != nil {
			return fmt.Errorf("idle schedules on %s: %w", driver, err)
		}
		rep.IdleSchedules = append(rep.IdleSchedules, m)
	}
	return nil
}
