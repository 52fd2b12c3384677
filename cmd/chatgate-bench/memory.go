package main

// Memory: what a user's notes (ledger.Note) cost a turn when
// session.memory is on — every turn reads the user's notes relevant to
// its message, then the newest (store.NotesFor), and puts those that fit
// inject_tokens in the model's request.
//
//   - first delta: one client asks directly, through a gateway with memory
//     off and through one with it on (session.memory.enabled, inject_tokens
//     400, the default), question by question in turn, the two gateways'
//     order swapped every question, so that the machine's noise falls on
//     all three alike. Each gateway has a store of its own holding the same
//     notes: memUsers users with memUserNotes notes each. The goal is the
//     gateway's p50 with memory on ÷ off.
//   - recall: store.NotesFor (a turn's read) and RecallNotes (the model's
//     recall tool) for one user with -memory-notes notes (10,000, the
//     most max_notes allows) and for one with memUserNotes, among
//     recallOthers other users' notes, each asked a user's message.
//   - turns: memUsers clients, each a user with memUserNotes notes, send
//     user messages through a gateway on the echo agent with memory off
//     and through one with it on, alternately, -memory-pairs times. The
//     goal is turns/s on ÷ off, over all pairs.
//
// The notes and messages are internal/notecorpus's: everyday words, as
// the full-text search meets them.

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/config"
	"github.com/chatgate/chatgate/internal/notecorpus"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/store"
)

const (
	// memUsers are the users of the first-delta and turn rows' stores, and
	// the turn row's clients; memUserNotes the notes each keeps.
	memUsers     = 50
	memUserNotes = 100
	// recallOthers are the other users of the recall row's store, each
	// with memUserNotes notes.
	recallOthers = 100
	// notesForLimit is what a turn asks NotesFor for (sessions'
	// injectCandidates), recallLimit what the recall tool asks RecallNotes
	// for (memtools' recallLimit).
	notesForLimit = 32
	recallLimit   = 20
)

// memoryReport holds the memory rows.
type memoryReport struct {
	FirstDelta []memFirstDeltaResult `json:"first_delta,omitempty"`
	Recall     []recallResult        `json:"recall,omitempty"`
	Turns      []memTurnsResult      `json:"turns,omitempty"`
}

// memFirstDeltaResult is time to first delta with memory off and on.
type memFirstDeltaResult struct {
	Store        string     `json:"store"`
	UserNotes    int        `json:"user_notes"`
	InjectTokens int        `json:"inject_tokens"`
	Direct       loadResult `json:"direct"`
	Off          loadResult `json:"memory_off"`
	On           loadResult `json:"memory_on"`
	// Ratio is On's p50 ÷ Off's.
	Ratio float64 `json:"on_off_p50"`
	// NotesPerRequest is the notes a model request carried, on average,
	// with memory on (0 with it off, checked).
	NotesPerRequest float64 `json:"notes_per_request"`
	// Load is /proc/loadavg's 1, 5 and 15 minutes at the row's start and
	// end.
	Load string `json:"load"`
}

// recallResult is one store read over many user messages.
type recallResult struct {
	Store     string  `json:"store"`
	Op        string  `json:"op"`
	Limit     int     `json:"limit"`
	UserNotes int     `json:"user_notes"`
	AllNotes  int     `json:"all_notes"`
	Queries   int     `json:"queries"`
	P50Millis float64 `json:"p50_ms"`
	P99Millis float64 `json:"p99_ms"`
	MaxMillis float64 `json:"max_ms"`
	// RowsPerQuery is the notes a read returned, on average.
	RowsPerQuery float64 `json:"rows_per_query"`
	// Segments is the pieces of SQLite's index (ftsSegments).
	Segments int    `json:"fts_segments,omitempty"`
	Load     string `json:"load"`
}

// memTurnsResult is turns with memory off and on, in alternating pairs.
type memTurnsResult struct {
	Store     string       `json:"store"`
	Clients   int          `json:"clients"`
	UserNotes int          `json:"user_notes"`
	Off       []loadResult `json:"memory_off"`
	On        []loadResult `json:"memory_on"`
	Loads     []string     `json:"loads"`
	// Ratio is the turns/s on ÷ off, summed over the pairs.
	Ratio float64 `json:"on_off_turns_per_second"`
	// NotesPerTurn is the notes a model request carried, on average,
	// with memory on.
	NotesPerTurn float64 `json:"notes_per_turn"`
}

// loadAvg is the machine's load average, 1, 5 and 15 minutes.
func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "-"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "-"
	}
	return strings.Join(f[:3], " ")
}

// memoryUser is the memory's user (sessions.MemoryUser) of the gateway's
// WebSocket client who says hello as name.
func memoryUser(name string) string {
	return sessions.MemoryUser(sessions.WebSocketKey(name), name)
}

// memClient is the name the i-th client of the memory rows says hello as.
func memClient(i int) string { return fmt.Sprint("mem-", i) }

// noteSet is notes to seed: each user's count.
type noteSet struct {
	users []string
	notes int
}

// seedNotes stores the notes of sets, user u of a set getting texts of
// corpus seed+u, written over the same months, in the order of their
// times. They go in statementRows at a time, each an INSERT of its own
// (its own commit): the triggers and generated columns of the full-text
// search run as for notes written a few at a time, and SQLite's index is
// in as many pieces (FTS5 segments) as a store that took them over time
// would be, within a few. On PostgreSQL the table is analysed after, as
// autovacuum would have done, so that its plans are those of a table of
// this size.
func seedNotes(ctx context.Context, db *store.DB, seed uint64, sets ...noteSet) error {
	type pending struct {
		at   float64 // the share of the months passed when it is written
		note ledger.Note
	}
	var all []pending
	u := 0
	for _, set := range sets {
		for _, user := range set.users {
			for j, text := range notecorpus.Notes(seed+uint64(u), set.notes) {
				all = append(all, pending{(float64(j) + 0.5) / float64(set.notes), ledger.Note{UserKey: user, Text: text, Author: ledger.NoteByModel}})
			}
			u++
		}
	}
	slices.SortStableFunc(all, func(a, b pending) int { return cmp.Compare(a.at, b.at) })
	months := 90 * 24 * time.Hour
	start := time.Now().Add(-months)
	rows := make([]ledger.Note, 0, statementRows)
	for i, p := range all {
		p.note.CreatedAt = start.Add(time.Duration(p.at * float64(months))).UTC()
		rows = append(rows, p.note)
		if len(rows) == cap(rows) || i == len(all)-1 {
			if err := db.Gorm().WithContext(ctx).Create(&rows).Error; err != nil {
				return fmt.Errorf("seed notes: %w", err)
			}
			rows = rows[:0]
		}
	}
	if db.Driver() == store.DriverPostgres {
		return db.Gorm().WithContext(ctx).Exec("ANALYZE notes").Error
	}
	return nil
}

// ftsSegments is how many pieces (FTS5 segments) SQLite's index of notes
// is in: a search looks each word up in every one. 0 on PostgreSQL.
func ftsSegments(ctx context.Context, db *store.DB) int {
	var n int
	if db.Driver() == store.DriverSQLite {
		db.Gorm().WithContext(ctx).Raw("SELECT COUNT(DISTINCT segid) FROM notes_terms_idx").Scan(&n)
	}
	return n
}

// noteCounter is the agent, counting the notes each request carries.
type noteCounter struct {
	agent.Agent
	requests, notes atomic.Int64
}

func (c *noteCounter) Reply(ctx context.Context, req agent.Request, onDelta func(string)) (agent.Reply, error) {
	c.requests.Add(1)
	c.notes.Add(int64(len(req.Memory)))
	return c.Agent.Reply(ctx, req, onDelta)
}

// perRequest is the notes a request carried on average since the last
// call, and resets the counts.
func (c *noteCounter) perRequest() float64 {
	r, n := c.requests.Swap(0), c.notes.Swap(0)
	if r == 0 {
		return 0
	}
	return float64(n) / float64(r)
}

// memPolicy is the WebSocket channel's policy of the memory rows: as the
// other rows', with session.memory on at its defaults when on is set.
func memPolicy(on bool) sessions.Policy {
	p := sessions.Policy{MaxHistory: ttfdMaxHistory}
	if on {
		p.Memory = sessions.MemoryPolicy{Default: sessions.MemorySettings{Enabled: true, InjectTokens: config.DefaultInjectTokens}}
	}
	return p
}

// memGateway opens a store on driver holding memUsers users' notes and
// serves a gateway on it whose agent is ag (counted), with memory on or
// off.
func memGateway(ctx context.Context, driver string, o options, ag agent.Agent, on bool) (string, *noteCounter, func(), error) {
	db, closeDB, err := openStore(ctx, driver, o)
	if err != nil {
		return "", nil, nil, err
	}
	users := make([]string, memUsers)
	for i := range users {
		users[i] = memoryUser(memClient(i))
	}
	if err := seedNotes(ctx, db, 1, noteSet{users, memUserNotes}); err != nil {
		closeDB()
		return "", nil, nil, err
	}
	counter := &noteCounter{Agent: ag}
	url, stop, err := serveGateway(db, closeDB, false, counter, memPolicy(on))
	if err != nil {
		return "", nil, nil, err
	}
	return url, counter, stop, nil
}

// measureMemory runs the memory rows on each of drivers: all of them, or
// with firstDeltaOnly the time to first delta alone.
func measureMemory(ctx context.Context, drivers []string, o options, firstDeltaOnly bool, step func(string), progress io.Writer) (*memoryReport, error) {
	rep := &memoryReport{}
	for _, driver := range drivers {
		step("memory on " + driver + ": time to first delta, off and on in turn")
		f, err := memFirstDelta(ctx, driver, o)
		if err != nil {
			return nil, fmt.Errorf("memory's first delta on %s: %w", driver, err)
		}
		rep.FirstDelta = append(rep.FirstDelta, f)
		if firstDeltaOnly {
			continue
		}
		step(fmt.Sprintf("memory on %s: recall among %d notes of one user", driver, o.memoryNotes))
		r, err := memRecall(ctx, driver, o, progress)
		if err != nil {
			return nil, fmt.Errorf("memory's recall on %s: %w", driver, err)
		}
		rep.Recall = append(rep.Recall, r...)
		step(fmt.Sprintf("memory on %s: turns at %d clients, off and on in turn", driver, memUsers))
		t, err := memTurns(ctx, driver, o)
		if err != nil {
			return nil, fmt.Errorf("memory's turns on %s: %w", driver, err)
		}
		rep.Turns = append(rep.Turns, t)
	}
	return rep, nil
}

// memFirstDelta measures memFirstDeltaResult on driver: o.messages
// questions a side, one client.
func memFirstDelta(ctx context.Context, driver string, o options) (memFirstDeltaResult, error) {
	res := memFirstDeltaResult{Store: driver, UserNotes: memUserNotes, InjectTokens: config.DefaultInjectTokens, Load: loadAvg()}
	llm, stopLLM, err := childLLM(ctx, o.firstChunk, o.chunkGap, false)
	if err != nil {
		return res, err
	}
	defer stopLLM()
	offURL, offCount, stopOff, err := memGateway(ctx, driver, o, benchOpenAI(llm), false)
	if err != nil {
		return res, err
	}
	defer stopOff()
	onURL, onCount, stopOn, err := memGateway(ctx, driver, o, benchOpenAI(llm), true)
	if err != nil {
		return res, err
	}
	defer stopOn()

	texts := notecorpus.Messages(7, 64)
	ctx, cancel := context.WithTimeout(ctx, 3*o.duration+10*time.Second)
	defer cancel()
	deadline := time.Now().Add(3 * o.duration)
	user := memClient(0)
	off, closeOff, err := gatewayAskerAs(ctx, offURL, user, texts)
	if err != nil {
		return res, err
	}
	defer closeOff()
	on, closeOn, err := gatewayAskerAs(ctx, onURL, user, texts)
	if err != nil {
		return res, err
	}
	defer closeOn()
	direct := directAskerSaying(benchOpenAI(llm), 0, texts)
	sides := []struct {
		a   asker
		lat []time.Duration
		err int
	}{{a: direct}, {a: off}, {a: on}}
	start := time.Now()
	for m := 0; m < o.messages && time.Now().Before(deadline); m++ {
		order := []int{0, 1, 2}
		if m%2 == 1 {
			order = []int{0, 2, 1}
		}
		for _, k := range order {
			s := &sides[k]
			first, ok, fatal := s.a(ctx, m)
			switch {
			case fatal:
				return res, fmt.Errorf("a client of the first-delta row failed at question %d", m)
			case ok:
				s.lat = append(s.lat, first)
			default:
				s.err++
			}
		}
	}
	elapsed := time.Since(start)
	res.Direct = summarize(1, sides[0].lat, elapsed, sides[0].err)
	res.Off = summarize(1, sides[1].lat, elapsed, sides[1].err)
	res.On = summarize(1, sides[2].lat, elapsed, sides[2].err)
	if res.Off.P50Millis > 0 {
		res.Ratio = res.On.P50Millis / res.Off.P50Millis
	}
	if n := offCount.perRequest(); n != 0 {
		return res, fmt.Errorf("with memory off, a request carried %.1f notes", n)
	}
	res.NotesPerRequest = onCount.perRequest()
	res.Load += " → " + loadAvg()
	return res, nil
}

// memRecall measures NotesFor and RecallNotes on driver, for a user with
// o.memoryNotes notes and for one with memUserNotes, among recallOthers
// users' notes: the four reads in turn for each of the user messages.
func memRecall(ctx context.Context, driver string, o options, progress io.Writer) ([]recallResult, error) {
	db, closeDB, err := openStore(ctx, driver, o)
	if err != nil {
		return nil, err
	}
	defer closeDB()
	big := memoryUser("recall-big")
	others := make([]string, recallOthers)
	for i := range others {
		others[i] = memoryUser(fmt.Sprint("recall-", i))
	}
	seeded := time.Now()
	if err := seedNotes(ctx, db, 100, noteSet{[]string{big}, o.memoryNotes}, noteSet{others, memUserNotes}); err != nil {
		return nil, err
	}
	all := o.memoryNotes + recallOthers*memUserNotes
	segments := ftsSegments(ctx, db)
	fmt.Fprintf(progress, "  %d notes stored in %.1f s\n", all, time.Since(seeded).Seconds())

	type read struct {
		op    string
		limit int
		user  string
		notes int
		call  func(ctx context.Context, user, query string, limit int) ([]ledger.Note, error)
		lat   []time.Duration
		rows  int
	}
	reads := []*read{
		{op: "NotesFor", limit: notesForLimit, user: big, notes: o.memoryNotes, call: db.NotesFor},
		{op: "RecallNotes", limit: recallLimit, user: big, notes: o.memoryNotes, call: db.RecallNotes},
		{op: "NotesFor", limit: notesForLimit, user: others[0], notes: memUserNotes, call: db.NotesFor},
		{op: "RecallNotes", limit: recallLimit, user: others[0], notes: memUserNotes, call: db.RecallNotes},
	}
	queries := o.recallQueries
	texts := notecorpus.Messages(11, queries)
	load := loadAvg()
	// A few first, unmeasured: the pools' connections and the pages
	// warm, as in a gateway that has run a while.
	for _, q := range texts[:min(len(texts), 20)] {
		for _, r := range reads {
			if _, err := r.call(ctx, r.user, q, r.limit); err != nil {
				return nil, err
			}
		}
	}
	for _, q := range texts {
		for _, r := range reads {
			t0 := time.Now()
			notes, err := r.call(ctx, r.user, q, r.limit)
			r.lat = append(r.lat, time.Since(t0))
			if err != nil {
				return nil, err
			}
			r.rows += len(notes)
		}
	}
	load += " → " + loadAvg()
	var out []recallResult
	for _, r := range reads {
		slices.Sort(r.lat)
		n := len(r.lat)
		out = append(out, recallResult{Store: driver, Op: r.op, Limit: r.limit, UserNotes: r.notes, AllNotes: all, Queries: n,
			P50Millis: ms(r.lat[n/2]), P99Millis: ms(r.lat[min(n-1, n*99/100)]), MaxMillis: ms(r.lat[n-1]),
			RowsPerQuery: float64(r.rows) / float64(n), Segments: segments, Load: load})
	}
	return out, nil
}

// memTurns measures memTurnsResult on driver: memUsers clients on the
// echo agent, o.memoryPairs pairs of runs (off, then on), each bounded by
// o.duration and o.messages a client.
func memTurns(ctx context.Context, driver string, o options) (memTurnsResult, error) {
	res := memTurnsResult{Store: driver, Clients: memUsers, UserNotes: memUserNotes}
	offURL, offCount, stopOff, err := memGateway(ctx, driver, o, agent.Echo{}, false)
	if err != nil {
		return res, err
	}
	defer stopOff()
	onURL, onCount, stopOn, err := memGateway(ctx, driver, o, agent.Echo{}, true)
	if err != nil {
		return res, err
	}
	defer stopOn()
	var meter cpuMeter
	if driver == store.DriverPostgres {
		meter.server, _ = localPGServer(o.dsn) // nil: not measured, as in the turn rows
	}
	texts := notecorpus.Messages(13, 256)
	// Every turn timed must have been a turn: the model called for it.
	run := func(url string, counter *noteCounter, pair int) (loadResult, error) {
		calls := counter.requests.Load()
		l := meter.measureCPU(ctx, func() loadResult { return driveSaying(ctx, url, memUsers, pair*o.messages, o, texts) })
		if n := counter.requests.Load() - calls; n < int64(l.Turns) {
			return l, fmt.Errorf("%d turns answered with %d model calls", l.Turns, n)
		}
		return l, nil
	}
	var offRate, onRate float64
	for pair := range o.memoryPairs {
		load := loadAvg()
		off, err := run(offURL, offCount, pair)
		if err != nil {
			return res, err
		}
		on, err := run(onURL, onCount, pair)
		if err != nil {
			return res, err
		}
		res.Off, res.On = append(res.Off, off), append(res.On, on)
		res.Loads = append(res.Loads, load+" → "+loadAvg())
		offRate += off.PerSecond
		onRate += on.PerSecond
	}
	if offRate > 0 {
		res.Ratio = onRate / offRate
	}
	if n := offCount.perRequest(); n != 0 {
		return res, fmt.Errorf("with memory off, a request carried %.1f notes", n)
	}
	res.NotesPerTurn = onCount.perRequest()
	return res, nil
}

// driveSaying is drive on the gateway's protocol, one message at a time,
// client i saying hello as memClient(i) and its message m saying
// texts[(i+m) % len(texts)]. Its messages' ids are "m<first+m>": a run
// of the same clients again starts past the last one's, since a message
// id the gateway has stored is a resend, answered with the stored reply
// instead of a turn.
func driveSaying(ctx context.Context, url string, n, first int, o options, texts []string) loadResult {
	return runClients(ctx, n, o, func(ctx context.Context, i int, deadline time.Time, fail func()) []time.Duration {
		c, err := dialClient(ctx, url, memClient(i))
		if err != nil {
			fail()
			return nil
		}
		defer c.Close()
		mine := make([]time.Duration, 0, o.messages)
		for m := 0; m < o.messages && time.Now().Before(deadline); m++ {
			t0 := time.Now()
			if !sendRound(c, first+m, 1, true, texts[(i+m)%len(texts)]) {
				fail()
				return nil
			}
			mine = append(mine, time.Since(t0))
		}
		return mine
	})
}

// print writes the memory rows.
func (r *memoryReport) print(w io.Writer) {
	for _, f := range r.FirstDelta {
		fmt.Fprintf(w, "\nmemory, time to first delta (%s, 1 client, a user with %d notes, inject_tokens %d, %.1f notes a request; load %s): direct p50 %.2f ms; memory off p50 %.2f, p99 %.2f ms; on p50 %.2f, p99 %.2f ms; on ÷ off p50 %.3f; %d errors\n",
			f.Store, f.UserNotes, f.InjectTokens, f.NotesPerRequest, f.Load, f.Direct.P50Millis, f.Off.P50Millis, f.Off.P99Millis, f.On.P50Millis, f.On.P99Millis, f.Ratio,
			f.Direct.ErrorCount+f.Off.ErrorCount+f.On.ErrorCount)
	}
	if len(r.Recall) > 0 {
		fmt.Fprintln(w, "\nmemory, reads of a user's notes (a user message as the query):")
		tw := newTable(w)
		fmt.Fprintln(tw, "store\tread\tlimit\tuser's notes\tall notes\tFTS5 segments\tqueries\tp50 ms\tp99 ms\tmax ms\trows\tload\t")
		for _, c := range r.Recall {
			seg := "-"
			if c.Segments > 0 {
				seg = fmt.Sprint(c.Segments)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%d\t%.3f\t%.3f\t%.3f\t%.1f\t%s\t\n", c.Store, c.Op, c.Limit, c.UserNotes, c.AllNotes, seg, c.Queries,
				c.P50Millis, c.P99Millis, c.MaxMillis, c.RowsPerQuery, c.Load)
		}
		tw.Flush()
	}
	for _, t := range r.Turns {
		fmt.Fprintf(w, "\nmemory, turns at %d clients (%s, echo agent, each a user with %d notes, %.1f notes a turn with memory on): on ÷ off %.3f\n",
			t.Clients, t.Store, t.UserNotes, t.NotesPerTurn, t.Ratio)
		tw := newTable(w)
		fmt.Fprintln(tw, "pair\toff turns/s\ton turns/s\toff p99 ms\ton p99 ms\toff CPU µs\ton CPU µs\toff server µs\ton server µs\terrors\tload\t")
		for i := range t.Off {
			off, on := t.Off[i], t.On[i]
			fmt.Fprintf(tw, "%d\t%.0f\t%.0f\t%.2f\t%.2f\t%.0f\t%.0f\t%.0f\t%.0f\t%d\t%s\t\n", i+1, off.PerSecond, on.PerSecond, off.P99Millis, on.P99Millis,
				off.CPUMicrosPerTurn, on.CPUMicrosPerTurn, off.ServerCPUMicrosPerTurn, on.ServerCPUMicrosPerTurn, off.ErrorCount+on.ErrorCount, t.Loads[i])
		}
		tw.Flush()
	}
}

// memoryGoals are the memory rows' goals.
func memoryGoals(r *memoryReport) []goal {
	if r == nil {
		return nil
	}
	var out []goal
	for _, f := range r.FirstDelta {
		if f.Ratio > 0 {
			out = append(out, goal{"time to first delta p50 with memory on ÷ off, 1 client, " + f.Store, "≤ 1.05", f.Ratio,
				f.Ratio <= 1.05 && f.NotesPerRequest > 0 && f.On.ErrorCount == 0})
		}
	}
	for _, t := range r.Turns {
		if t.Ratio > 0 {
			errs := 0
			for _, on := range t.On {
				errs += on.ErrorCount
			}
			out = append(out, goal{fmt.Sprintf("turns/s at %d clients with memory on ÷ off, %s", t.Clients, t.Store), "≥ 0.9", t.Ratio,
				t.Ratio >= 0.9 && t.NotesPerTurn > 0 && errs == 0})
		}
	}
	return out
}
