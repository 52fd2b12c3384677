package sessions_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chatgate/chatgate/tools/inproc"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/faults"
	"github.com/chatgate/chatgate/internal/mcptest"
	"github.com/chatgate/chatgate/internal/pgtest"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/store"
	"github.com/chatgate/chatgate/tools"
	"github.com/chatgate/chatgate/tools/mcpclient"
	"github.com/chatgate/chatgate/tools/memtools"
)

// The fault-at-every-step harness. Each scenario runs once without faults,
// which counts its ledger calls (N); then once for every k in 1..N with an
// outage that starts at the k-th call — before it reaches the database,
// and again after it landed with its answer lost — and ends once it has
// failed a few calls. After the outage, with no restart, every scenario
// checks the same invariants:
//
//   - every user message is answered exactly once: one final reply per
//     turn in storage, and one reply shown to its user per message (on a
//     channel that confirms delivery, one send, marked delivered);
//   - no turn is left that no runner holds and nobody may claim: all are
//     settled within 10 s;
//   - no session lease is left behind;
//   - each user's next message is answered.
//
// Clients behave as the real ones do: a message whose store failed (no
// ack) is sent again with its id once the outage is over.

// faultScenario is one shape of traffic.
type faultScenario struct {
	name    string
	channel string // telegram: delivery confirmed; websocket: not
	busy    sessions.BusyPolicy
	users   int
	msgs    int
	// edit: each user then edits their first message (during its
	// debounce, or after its turn started: either way it is answered
	// once — in place, or as a new message quoting it).
	edit bool
	// tools: every turn first calls a side-effecting tool (an MCP test
	// server's counter, over the SDK's in-memory transport), then
	// answers; no call runs twice.
	tools bool
	// memory: every turn first has the model keep a note through the
	// gateway's own memory tools (memtools), then answers; each call
	// that ran keeps one note, none is kept twice.
	memory bool
}

var faultScenarios = []faultScenario{
	{name: "websocket-queue", channel: "websocket", busy: sessions.BusyPolicy{Mode: sessions.BusyQueue}, users: 2, msgs: 2},
	{name: "websocket-collect", channel: "websocket", busy: sessions.BusyPolicy{Mode: sessions.BusyCollect}, users: 2, msgs: 3},
	{name: "telegram-collect-debounce", channel: "telegram", busy: sessions.BusyPolicy{Mode: sessions.BusyCollect, Debounce: 30 * time.Millisecond}, users: 2, msgs: 3},
	{name: "telegram-interrupt", channel: "telegram", busy: sessions.BusyPolicy{Mode: sessions.BusyInterrupt}, users: 2, msgs: 2},
	{name: "telegram-edit-debounce", channel: "telegram", busy: sessions.BusyPolicy{Mode: sessions.BusyCollect, Debounce: 30 * time.Millisecond}, users: 2, msgs: 2, edit: true},
	{name: "websocket-tools", channel: "websocket", busy: sessions.BusyPolicy{Mode: sessions.BusyQueue}, users: 2, msgs: 2, tools: true},
	{name: "telegram-memory", channel: "telegram", busy: sessions.BusyPolicy{Mode: sessions.BusyQueue}, users: 2, msgs: 2, memory: true},
}

func TestFaultAtEveryStep(t *testing.T) {
	if testing.Short() {
		t.Skip("the fault-at-every-step harness runs in the full suite")
	}
	for _, driver := range []string{store.DriverSQLite, store.DriverPostgres} {
		for _, sc := range faultScenarios {
			if driver == store.DriverPostgres && sc.name == "websocket-queue" {
				continue // the PostgreSQL runs take the scenarios that share more
			}
			t.Run(driver+"/"+sc.name, func(t *testing.T) {
				t.Parallel()
				open := faultDB(t, driver)
				visitFaults(t, sc.name+" on "+driver, func(k int, mode faults.Mode) faultRun { return runFaults(t, open, sc, k, mode) })
			})
		}
		// An extraction at reset, with the Extractor driving it
		// (runExtractionFaults).
		t.Run(driver+"/reset-extraction", func(t *testing.T) {
			t.Parallel()
			open := faultDB(t, driver)
			visitFaults(t, "reset-extraction on "+driver, func(k int, mode faults.Mode) faultRun { return runExtractionFaults(t, open, k, mode) })
		})
		// A schedule's fire, with the scheduler driving it (runFireFaults).
		t.Run(driver+"/schedule-fire", func(t *testing.T) {
			t.Parallel()
			open := faultDB(t, driver)
			visitFaults(t, "schedule-fire on "+driver, func(k int, mode faults.Mode) faultRun { return runFireFaults(t, open, k, mode) })
		})
	}
}

// visitFaults runs a scenario once clean, which counts its ledger calls
// (N), then with an outage from each k in 1..N, before and after the
// call (FAULT_K=k runs one), stopping at the first run whose invariants
// broke, and logs the points visited.
func visitFaults(t *testing.T, what string, run func(k int, mode faults.Mode) faultRun) {
	t.Helper()
	clean := run(0, faults.Before)
	n := clean.calls
	if n == 0 {
		t.Fatalf("%s made no ledger call", what)
	}
	visited := map[string]int{}
	for _, mode := range []faults.Mode{faults.Before, faults.After} {
		for k := 1; k <= n; k++ {
			if only := os.Getenv("FAULT_K"); only != "" && only != fmt.Sprint(k) {
				continue
			}
			r := run(k, mode)
			if r.struck != "" {
				visited[mode.String()+" "+r.struck]++
			}
			if t.Failed() {
				t.Fatalf("outage from step %d (%s, %s): invariants broken; steps of the clean run: %s", k, mode, r.struck,
					strings.Join(clean.steps, ", "))
			}
		}
	}
	var kinds []string
	for k, v := range visited {
		kinds = append(kinds, fmt.Sprintf("%s×%d", k, v))
	}
	slices.Sort(kinds)
	t.Logf("%s: %d fault points visited (%d steps × before/after); struck first: %s", what, 2*n, n, strings.Join(kinds, ", "))
}

// healAfter ends fs's outage (from step k; none when k is 0) once it has
// failed a few calls, or the run made fewer than k — whatever the
// clients are doing — and closes the channel it returns then.
func healAfter(fs *faults.Injector, k int) <-chan struct{} {
	if k == 0 {
		healed := make(chan struct{})
		close(healed)
		return healed
	}
	return fs.HealAfter(3, 500*time.Millisecond)
}

// runLog is a run's log, and what prints it when the test failed by
// then (deferred by the run).
func runLog(t *testing.T, label string) (*slog.Logger, func()) {
	logs := &syncBuffer{}
	return slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})), func() {
		if t.Failed() {
			t.Logf("%s: the run's log:\n%s", label, logs.String())
		}
	}
}

// faultDB returns what opens a fresh database for one run: a new SQLite
// file, or the scenario's PostgreSQL schema emptied.
func faultDB(t *testing.T, driver string) func() *store.DB {
	var pg string
	if driver == store.DriverPostgres {
		pg = pgtest.DSN(t)
	}
	return func() *store.DB {
		dsn := filepath.Join(t.TempDir(), "gateway.db")
		if pg != "" {
			dsn = pg
		}
		db, err := store.Open(context.Background(), driver, dsn, store.OpenOptions{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		if pg != "" {
			if err := db.Gorm().Exec("TRUNCATE messages, conversations, session_leases, replicas, channel_states, leaders, tool_calls, notes, usage_days").Error; err != nil {
				t.Fatal(err)
			}
		}
		return db
	}
}

// faultRun is what one run saw.
type faultRun struct {
	calls  int      // counted ledger calls
	steps  []string // their names
	struck string   // the call the outage started at
}

// countingAgent echoes and counts its calls.
type countingAgent struct {
	agent.Echo
	calls atomic.Int32
}

func (a *countingAgent) Reply(ctx context.Context, req agent.Request, onDelta func(string)) (agent.Reply, error) {
	a.calls.Add(1)
	if onDelta != nil {
		onDelta("…")
	}
	return a.Echo.Reply(ctx, req, onDelta)
}

// runFaults runs sc once with an outage from step k (none when k is 0)
// and checks the invariants.
func runFaults(t *testing.T, open func() *store.DB, sc faultScenario, k int, mode faults.Mode) faultRun {
	t.Helper()
	label := fmt.Sprintf("outage from step %d (%s)", k, mode)
	db := open()
	defer db.Close()
	fs := faults.New(db)
	if k > 0 {
		fs.Outage(k, mode)
	}
	var ag agent.Agent = &countingAgent{}
	var toolbox sessions.Toolbox
	var toolSrv *mcptest.Server
	if sc.tools {
		ag = &toolModel{Script: once(call("c", "t__counter", map[string]string{"key": "k"}))}
		toolSrv, toolbox = faultTools(t)
	}
	var m *sessions.Manager
	if sc.memory {
		ag = &toolModel{Script: once(call("c", "memory__remember", map[string]string{"text": "The user keeps bees."}))}
		toolbox = faultMemoryTools(t, func() *sessions.Manager { return m })
	}
	var logs syncBuffer
	defer func() {
		if t.Failed() {
			t.Logf("%s: the run's log:\n%s", label, logs.String())
		}
	}()
	track := sc.channel == "telegram"
	policy := sessions.Policy{MaxHistory: 20, Reset: sessions.ResetPolicy{Mode: sessions.ResetNone}, Busy: sc.busy}
	if sc.memory {
		policy.Memory = sessions.MemoryPolicy{Default: sessions.MemorySettings{Enabled: true, InjectTokens: 200, MaxNotes: 100}}
	}
	m = sessions.New(db, ag, sessions.Options{Events: db.Events(), MemoryTools: sc.memory,
		Policies:    map[string]sessions.Policy{sc.channel: policy},
		Logger:      slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		RescueEvery: 20 * time.Millisecond, RetryPause: 10 * time.Millisecond, Tools: toolbox,
	})
	var mu sync.Mutex
	shown := map[string]int{} // client message id → replies shown covering it
	show := func(r sessions.Reply, id string) {
		mu.Lock()
		defer mu.Unlock()
		ids := r.Covers
		if len(ids) == 0 {
			ids = []string{id}
		}
		for _, c := range ids {
			shown[c]++
		}
	}
	m.Routes().Register(sc.channel, sessions.Route{Deliver: func(ctx context.Context, d sessions.Delivery) (string, error) {
		show(d.Reply, d.ClientMsgID)
		return "sent", nil
	}, Track: track})
	startRescuer(t, m)
	defer m.Shutdown(context.Background())

	var waits sync.WaitGroup
	// answer does what a channel does with a ticket's outcome.
	answer := func(tk *sessions.Ticket, id string) {
		defer waits.Done()
		out, err := tk.Wait(context.Background())
		switch {
		case err != nil, out.Merged, out.Pending, out.Reply.Seq == 0:
			return // another turn, runner or delivery carries the reply
		case track && out.Turn.Claim == "":
			// A confirming channel sends only under a delivery claim:
			// without one the reply was delivered before, or the turn
			// was cut by a newer message, whose turn answers both.
			return
		}
		show(out.Reply, id)
		if out.Turn.Claim != "" {
			m.Delivered(context.Background(), out.Turn, "sent", nil)
		}
	}
	key := func(u int) string {
		if track {
			return sessions.TelegramDMKey(int64(100 + u))
		}
		return sessions.WebSocketKey(fmt.Sprintf("u%d", u))
	}
	submit := func(u int, id string) error {
		in := sessions.Inbound{Channel: sc.channel, SessionKey: key(u), UserID: fmt.Sprint(100 + u), ChatID: fmt.Sprint(100 + u),
			ClientMsgID: id, Text: id}
		tk, err := m.Submit(context.Background(), in, sessions.Hooks{})
		if err != nil {
			return err
		}
		waits.Add(1)
		go answer(tk, id)
		return nil
	}
	// edited: the edits answered as new messages (their ids), by user.
	edited := map[string]int{}
	editID := func(u int) string { return fmt.Sprintf("u%d-e0", u) }
	editText := func(u int) string { return fmt.Sprintf("u%d-m0 edited", u) }
	edit := func(u int) error {
		in := sessions.Inbound{Channel: sc.channel, SessionKey: key(u), UserID: fmt.Sprint(100 + u), ChatID: fmt.Sprint(100 + u),
			ClientMsgID: editID(u), Text: editText(u)}
		out, err := m.Edit(context.Background(), in, fmt.Sprintf("u%d-m0", u), sessions.Hooks{})
		if err != nil {
			return err
		}
		if out.Ticket != nil {
			mu.Lock()
			edited[editID(u)] = u
			mu.Unlock()
			waits.Add(1)
			go answer(out.Ticket, editID(u))
		}
		return nil
	}
	healed := healAfter(fs, k)
	var ids []string
	var unacked sync.Map  // id → user
	var unedited sync.Map // user → true: the edit to send again
	var senders sync.WaitGroup
	for u := range sc.users {
		senders.Add(1)
		go func() {
			defer senders.Done()
			for i := range sc.msgs {
				id := fmt.Sprintf("u%d-m%d", u, i)
				if err := submit(u, id); err != nil {
					unacked.Store(id, u)
				}
			}
			if sc.edit {
				if err := edit(u); err != nil {
					unedited.Store(u, true)
				}
			}
		}()
		for i := range sc.msgs {
			ids = append(ids, fmt.Sprintf("u%d-m%d", u, i))
		}
	}
	senders.Wait()
	<-healed
	struck := ""
	if steps := fs.Steps(); k > 0 && len(steps) >= k {
		struck = steps[k-1]
	}
	// Clients send again what was never acknowledged.
	deadline := time.Now().Add(10 * time.Second)
	// sendAgain resends until the gateway takes it, pausing between tries
	// as a client backs off.
	sendAgain := func(what string, send func() error) {
		for {
			err := send()
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("%s: %s could not be sent again: %v", label, what, err)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	unacked.Range(func(id, u any) bool {
		sendAgain(id.(string), func() error { return submit(u.(int), id.(string)) })
		return true
	})
	// The edits that failed go again, as a client sends them again (after
	// the message they edit, which it sent again above).
	unedited.Range(func(u, _ any) bool {
		sendAgain(fmt.Sprintf("user %d's edit", u), func() error { return edit(u.(int)) })
		return true
	})
	mu.Lock()
	for id := range edited {
		ids = append(ids, id)
	}
	mu.Unlock()
	// Every message answered, and on a confirming channel delivered,
	// within 10 s of the outage's end, with no restart.
	unsettled := func() []string {
		var out []string
		for u := range sc.users {
			msgIDs := []string{}
			for i := range sc.msgs {
				msgIDs = append(msgIDs, fmt.Sprintf("u%d-m%d", u, i))
			}
			mu.Lock()
			if _, ok := edited[editID(u)]; ok {
				msgIDs = append(msgIDs, editID(u))
			}
			mu.Unlock()
			for _, id := range msgIDs {
				tr, err := db.TurnByClientID(faults.Aside(context.Background()), key(u), id)
				switch {
				case err != nil:
					out = append(out, id+": "+err.Error())
				case tr == nil:
					out = append(out, id+": not stored")
				case tr.State == sessions.TurnDelivered, !track && isSettled(tr.State):
				case track && tr.Lead != tr.Seq && isSettled(tr.State):
					// merged: its lead's delivery carries it
				default:
					out = append(out, fmt.Sprintf("%s: %s owner=%q attempt=%d due=%v lead=%d", id, tr.State, tr.Owner, tr.Attempts, tr.DueAt, tr.Lead))
				}
			}
		}
		return out
	}
	for left := unsettled(); len(left) > 0; left = unsettled() {
		if time.Now().After(deadline) {
			t.Errorf("%s: unsettled 10 s after the outage: %s (waiting on storage: %d)", label, strings.Join(left, "; "), m.WaitingOnStorage())
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Each user's next message is answered.
	for u := range sc.users {
		id := fmt.Sprintf("u%d-next", u)
		if err := submit(u, id); err != nil {
			t.Errorf("%s: user %d's next message: %v", label, u, err)
		}
		ids = append(ids, id)
	}
	allDone := make(chan struct{})
	go func() { waits.Wait(); close(allDone) }()
	select {
	case <-allDone:
	case <-time.After(10 * time.Second):
		t.Errorf("%s: turns still waited on 10 s after the outage", label)
	}
	for left := unsettled(); len(left) > 0; left = unsettled() {
		if time.Now().After(deadline.Add(10 * time.Second)) {
			t.Errorf("%s: unsettled after the next messages: %s", label, strings.Join(left, "; "))
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Exactly once: in storage, and to the user.
	for _, line := range finalRepliesPerTurn(t, db) {
		t.Errorf("%s: %s", label, line)
	}
	// An edit is answered once: its text replaced the message's, or it
	// was stored as a message of its own — never both.
	for u := range sc.users {
		if !sc.edit {
			break
		}
		var rows []sessions.Message
		if err := db.Gorm().Where("client_msg_id IN ?", []string{fmt.Sprintf("u%d-m0", u), editID(u)}).Find(&rows).Error; err != nil {
			t.Fatal(err)
		}
		inPlace, asNew := false, false
		for _, r := range rows {
			inPlace = inPlace || (r.ClientMsgID != nil && *r.ClientMsgID != editID(u) && r.Content == editText(u))
			asNew = asNew || (r.ClientMsgID != nil && *r.ClientMsgID == editID(u))
		}
		if inPlace == asNew {
			t.Errorf("%s: user %d's edit answered in place %v and as a new message %v: want exactly one", label, u, inPlace, asNew)
		}
	}
	if os.Getenv("FAULT_DUMP") != "" {
		var rows []sessions.Message
		db.Gorm().Order("conversation_id, seq").Find(&rows)
		for _, r := range rows {
			t.Logf("%s %d %s %q reply_to=%d status=%s err=%q state=%s owner=%s att=%d lead=%d", r.ConversationID[:4], r.Seq, r.Role, r.Content, r.ReplyTo, r.Status, r.Error, r.TurnState, r.TurnOwner, r.TurnAttempt, r.TurnLead)
		}
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		var wrong []string
		for _, id := range ids {
			// A confirming channel sends each reply once; a WebSocket
			// client may be sent a stored reply again for a message it
			// sent again (it knows the id), but gets it at least once.
			if shown[id] == 0 || (track && shown[id] != 1) {
				wrong = append(wrong, fmt.Sprintf("%s shown %d times", id, shown[id]))
			}
		}
		mu.Unlock()
		if len(wrong) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: %s", label, strings.Join(wrong, "; "))
			break
		}
	}
	// No tool call ran twice: each call's idempotency key reached the
	// server at most once, and every call recorded has its outcome.
	if sc.tools {
		seen := map[string]int{}
		for _, c := range toolSrv.Calls() {
			key, _ := c.Meta[tools.MetaKey].(string)
			seen[key]++
		}
		for key, n := range seen {
			if n > 1 {
				t.Errorf("%s: tool call %s ran %d times", label, key, n)
			}
		}
		var open []ledger.ToolCall
		if err := db.Gorm().Where("state NOT IN ?", []string{ledger.ToolDone, ledger.ToolUnknown}).Find(&open).Error; err != nil {
			t.Fatal(err)
		}
		for _, c := range open {
			t.Errorf("%s: tool call %s/%d/%s left %s", label, c.ConversationID, c.MessageSeq, c.CallID, c.State)
		}
	}
	// Every memory call that ran kept its note once: as many notes as
	// calls recorded done, none lost, none twice (a call run again after
	// a cut finds its note by its key).
	if sc.memory {
		var calls, notes int64
		if err := db.Gorm().Model(&ledger.ToolCall{}).Where("name = ? AND state = ?", "memory__remember", ledger.ToolDone).Count(&calls).Error; err != nil {
			t.Fatal(err)
		}
		if err := db.Gorm().Model(&ledger.Note{}).Count(&notes).Error; err != nil {
			t.Fatal(err)
		}
		var open []ledger.ToolCall
		if err := db.Gorm().Where("state NOT IN ?", []string{ledger.ToolDone, ledger.ToolUnknown}).Find(&open).Error; err != nil {
			t.Fatal(err)
		}
		if calls == 0 || notes != calls || len(open) > 0 {
			t.Errorf("%s: %d memory calls done, %d notes kept, %d calls left open: want one note per call", label, calls, notes, len(open))
		}
	}
	// No lease outlives its replica's clean stop (a running replica keeps
	// its leases across turns for a moment: the store's kept leases).
	m.Shutdown(context.Background())
	if db.Driver() == store.DriverPostgres {
		var n int64
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if err := db.Gorm().Raw("SELECT count(*) FROM session_leases").Scan(&n).Error; err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("%s: %d session leases left", label, n)
				break
			}
		}
	}
	return faultRun{calls: fs.Calls(), steps: fs.Steps(), struck: struck}
}

func isSettled(state string) bool {
	switch state {
	case sessions.TurnAnswered, sessions.TurnFailed, sessions.TurnExpired, sessions.TurnDelivered:
		return true
	}
	return false
}

// finalRepliesPerTurn lists every user message whose turn does not have
// exactly one final reply.
func finalRepliesPerTurn(t *testing.T, db *store.DB) []string {
	t.Helper()
	rows, err := db.Gorm().Raw(`SELECT u.conversation_id, u.seq, COALESCE(u.client_msg_id, ''),
		(SELECT count(*) FROM messages AS r WHERE r.conversation_id = u.conversation_id AND r.role = 'assistant'
			AND r.reply_to = (CASE WHEN u.turn_lead > 0 THEN u.turn_lead ELSE u.seq END)
			AND (r.tool_calls IS NULL OR r.tool_calls = '')
			AND NOT (r.status = 'interrupted' AND r.error IN ('shutdown', 'new message')))
		FROM messages AS u WHERE u.role = 'user'`).Rows()
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var conv, id string
		var seq, n int64
		if err := rows.Scan(&conv, &seq, &id, &n); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			out = append(out, fmt.Sprintf("message %s (seq %d) has %d final replies", id, seq, n))
		}
	}
	if err := rows.Err(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	return out
}

// faultTools is an MCP test server whose tools run without asking.
func faultTools(t *testing.T) (*mcptest.Server, sessions.Toolbox) {
	srv, set := toolServer(t, mcpclient.ServerConfig{Approve: tools.ApproveAuto})
	return srv, mcpclient.Offer{Set: set}
}

// faultMemoryTools is the gateway's own memory tools over the manager mgr
// gives (built after its toolbox), as the gateway serves them.
func faultMemoryTools(t *testing.T, mgr func() *sessions.Manager) sessions.Toolbox {
	tr, closeFn, err := inproc.Connect(context.Background(), memtools.NewServer(func() memtools.Backend {
		if m := mgr(); m != nil {
			return m.Memory()
		}
		return nil
	}), "memory tools")
	if err != nil {
		t.Fatal(err)
	}
	set := mcpclient.New([]mcpclient.ServerConfig{{Name: memtools.ServerName, Transport: tr, Approve: tools.ApproveAuto, Idempotent: true,
		Caller: true, Timeout: 10 * time.Second}}, slog.New(slog.DiscardHandler))
	set.Start(context.Background())
	t.Cleanup(func() { set.Close(); _ = closeFn() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := set.WaitListed(ctx, memtools.ServerName); err != nil {
		t.Fatal(err)
	}
	return mcpclient.Offer{Set: set}
}

// syncBuffer is a log sink shared by a run's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A message whose store landed while its answer was lost (the client was
// told it failed), stored behind a running turn whose reply then lands
// after it: the next message is not taken for the first of a settled
// conversation and run ahead of it. The conversation answers in order,
// each message once. (The newest message being a reply once counted as
// proof that nothing earlier waited, and the next message ran alone,
// ahead of the stored one.)
func TestAMessageStoredWithItsAnswerLostIsAnsweredInOrder(t *testing.T) {
	db, err := store.Open(context.Background(), store.DriverSQLite, filepath.Join(t.TempDir(), "gateway.db"),
		store.OpenOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	fs := faults.New(db)
	ag := &gatedAgent{gate: make(chan struct{}), started: make(chan struct{}, 4)}
	m := sessions.New(db, ag, sessions.Options{Events: db.Events(), Logger: slog.New(slog.DiscardHandler),
		Policies: map[string]sessions.Policy{"websocket": {MaxHistory: 20, Reset: sessions.ResetPolicy{Mode: sessions.ResetNone},
			Busy: sessions.BusyPolicy{Mode: sessions.BusyCollect}}}})
	defer m.Shutdown(context.Background())
	key := sessions.WebSocketKey("u")
	submit := func(id string) (*sessions.Ticket, error) {
		return m.Submit(context.Background(), sessions.Inbound{Channel: "websocket", SessionKey: key, UserID: "u", ClientMsgID: id, Text: id}, sessions.Hooks{})
	}
	t0, err := submit("m0")
	if err != nil {
		t.Fatal(err)
	}
	<-ag.started
	fs.Outage(fs.Calls()+1, faults.After)
	if _, err := submit("m1"); err == nil {
		t.Fatal("m1's store reported success through the fault")
	}
	fs.Heal()
	close(ag.gate) // m0's reply lands after m1
	wait := func(tk *sessions.Ticket) sessions.Outcome {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		out, err := tk.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	wait(t0)
	t2, err := submit("m2") // before the client sends m1 again
	if err != nil {
		t.Fatal(err)
	}
	t1, err := submit("m1")
	if err != nil {
		t.Fatal(err)
	}
	wait(t2)
	wait(t1)
	replyOf := func(id string) int64 {
		tr, err := db.TurnByClientID(context.Background(), key, id)
		if err != nil || tr == nil || tr.ReplySeq == 0 {
			t.Fatalf("%s: %+v, %v", id, tr, err)
		}
		return tr.ReplySeq
	}
	if r1, r2 := replyOf("m1"), replyOf("m2"); r1 > r2 {
		t.Fatalf("m2 was answered (seq %d) before m1 (seq %d), which was stored first", r2, r1)
	}
	for _, line := range finalRepliesPerTurn(t, db) {
		t.Error(line)
	}
}
