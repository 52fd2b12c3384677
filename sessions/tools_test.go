package sessions_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/clocktest"
	"github.com/chatgate/chatgate/internal/mcptest"
	"github.com/chatgate/chatgate/internal/tooltest"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/store"
	"github.com/chatgate/chatgate/sessions/storetest"
	"github.com/chatgate/chatgate/tools"
	"github.com/chatgate/chatgate/tools/mcpclient"
)

// The model, its scripts and the tool server are tooltest's.
type toolModel = tooltest.Model

var (
	once = tooltest.Once
	call = tooltest.Call
)

func toolServer(t *testing.T, cfg mcpclient.ServerConfig) (*mcptest.Server, *mcpclient.Set) {
	t.Helper()
	return tooltest.Server(t, cfg)
}

type toolRig struct {
	db     *store.DB
	model  *toolModel
	srv    *mcptest.Server
	set    *mcpclient.Set
	events chan sessions.ToolEvent
	asks   chan sessions.ToolAsk
}

func (r *toolRig) manager(t *testing.T, replica string, clock *clocktest.Clock, opts sessions.Options) *sessions.Manager {
	t.Helper()
	opts.Events, opts.Tools, opts.ReplicaID = r.db.Events(), mcpclient.Offer{Set: r.set}, replica
	opts.Policies = map[string]sessions.Policy{"websocket": {MaxHistory: 50, Reset: sessions.ResetPolicy{Mode: sessions.ResetNone},
		Busy: sessions.BusyPolicy{Mode: sessions.BusyQueue}}}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if clock != nil {
		opts.Now, opts.After = clock.Now, clock.After
	}
	opts.RescueEvery, opts.RetryPause = 20*time.Millisecond, 10*time.Millisecond
	m := sessions.New(r.db, r.model, opts)
	m.Routes().Register("websocket", sessions.Route{Ask: r.ask})
	return m
}

// ask is the rig's channel asking its user: the ask goes to r.asks.
func (r *toolRig) ask(ctx context.Context, a sessions.ToolAsk) (string, error) {
	r.asks <- a
	return "ask-" + fmt.Sprint(a.Call.ID), nil
}

// next is the next start (or another replica): a manager that runs
// what is claimable, delivering what nobody waits for to delivered.
func (r *toolRig) next(t *testing.T, replica string) (*sessions.Manager, chan sessions.Delivery) {
	t.Helper()
	m := r.manager(t, replica, nil, sessions.Options{})
	t.Cleanup(func() { m.Shutdown(context.Background()) })
	delivered := make(chan sessions.Delivery, 4)
	m.Routes().Register("websocket", sessions.Route{Ask: r.ask, Deliver: func(ctx context.Context, d sessions.Delivery) (string, error) {
		delivered <- d
		return "", nil
	}})
	startRescuer(t, m)
	return m, delivered
}

func newToolRig(t *testing.T, open func() *store.DB, cfg mcpclient.ServerConfig, script func(agent.Request) []agent.ToolCall) *toolRig {
	srv, set := toolServer(t, cfg)
	return &toolRig{db: open(), model: &toolModel{Script: script}, srv: srv, set: set,
		events: make(chan sessions.ToolEvent, 64), asks: make(chan sessions.ToolAsk, 8)}
}

func (r *toolRig) submit(t *testing.T, m *sessions.Manager, user, id, text string) *sessions.Ticket {
	t.Helper()
	in := sessions.Inbound{Channel: "websocket", SessionKey: sessions.WebSocketKey(user), UserID: user, ClientMsgID: id, Text: text}
	tk, err := m.Submit(context.Background(), in, sessions.Hooks{OnTool: func(ev sessions.ToolEvent) { r.events <- ev }})
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func wait(t *testing.T, tk *sessions.Ticket) sessions.Outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := tk.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// transcript is the key's active conversation as role:content lines.
func transcript(t *testing.T, db *store.DB, key string) []string {
	t.Helper()
	c, err := db.ActiveConversation(context.Background(), key)
	if err != nil || c == nil {
		t.Fatalf("no conversation of %s: %v", key, err)
	}
	var out []string
	for _, m := range storetest.Transcript(t, db, c.ID) {
		line := m.Role + ":" + m.Content
		if m.ToolCalls != "" {
			line += " calls=" + m.ToolCalls
		}
		out = append(out, line)
	}
	return out
}

func toolCalls(t *testing.T, db *store.DB) []ledger.ToolCall {
	t.Helper()
	var rows []ledger.ToolCall
	if err := db.Gorm().Order("id").Find(&rows).Error; err != nil {
		t.Fatal(err)
	}
	return rows
}

func TestToolCallRunsOnceAndItsResultReachesTheModel(t *testing.T) {
	storetest.Drivers(t, func(t *testing.T, open func() *store.DB) {
		r := newToolRig(t, open, mcpclient.ServerConfig{}, once(call("c1", "t__counter", map[string]string{"key": "k"})))
		m := r.manager(t, "a", nil, sessions.Options{})
		defer m.Shutdown(context.Background())
		out := wait(t, r.submit(t, m, "u1", "m1", "count it"))
		if out.Reply.Text != "answer: 1" || out.Reply.Status != ledger.MsgOK {
			t.Fatalf("reply = %+v", out.Reply)
		}
		if n := r.srv.Count(); n != 1 {
			t.Fatalf("counter ran %d times, want 1", n)
		}
		lines := transcript(t, r.db, sessions.WebSocketKey("u1"))
		want := []string{"user:count it", `assistant: calls=[{"id":"c1","name":"t__counter","arguments":"{\"key\":\"k\"}"}]`, "tool:1", "assistant:answer: 1"}
		if !slices.Equal(lines, want) {
			t.Fatalf("transcript:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
		}
		rows := toolCalls(t, r.db)
		if len(rows) != 1 || rows[0].State != ledger.ToolDone || rows[0].Runs != 1 || rows[0].Result != "1" {
			t.Fatalf("tool calls = %+v", rows)
		}
		calls := r.srv.Calls()
		if len(calls) != 1 || calls[0].Meta[tools.MetaKey] != rows[0].IdempotencyKey() {
			t.Fatalf("server saw %+v, want the idempotency key %q", calls, rows[0].IdempotencyKey())
		}
		// The export (`gateway sessions show`, the admin page) shows the
		// call where it stands.
		c, _ := r.db.ActiveConversation(context.Background(), sessions.WebSocketKey("u1"))
		ex, err := r.db.ExportConversation(context.Background(), c.ID)
		if err != nil {
			t.Fatal(err)
		}
		var text strings.Builder
		ex.Write(&text, store.FormatText)
		if !strings.Contains(text.String(), `calls t__counter {"key":"k"} → done, 1 run`) {
			t.Fatalf("export:\n%s", text.String())
		}
		var statuses []string
		for len(statuses) < 2 {
			statuses = append(statuses, (<-r.events).Status)
		}
		if !slices.Equal(statuses, []string{sessions.ToolStarted, sessions.ToolDone}) {
			t.Fatalf("tool events = %v", statuses)
		}
		// The next turn's history carries the call with its result.
		wait(t, r.submit(t, m, "u1", "m2", "again"))
		reqs := r.model.Requests()
		hist := reqs[len(reqs)-1].History
		var roles []string
		for _, h := range hist {
			roles = append(roles, h.Role)
		}
		if !slices.Equal(roles, []string{"user", "assistant", "tool", "assistant", "user", "assistant", "tool", "assistant"}[:len(roles)]) || len(roles) < 4 {
			t.Fatalf("history roles of the next turn's last call = %v", roles)
		}
	})
}

func TestToolRoundsParallelCallsAndTheirLimit(t *testing.T) {
	storetest.Drivers(t, func(t *testing.T, open func() *store.DB) {
		// Two calls in one answer, then a second round, then the answer.
		script := func(req agent.Request) []agent.ToolCall {
			switch rounds := countRounds(req.Turn); rounds {
			case 0:
				return []agent.ToolCall{call("a", "t__counter", map[string]string{"key": "a"}), call("b", "t__echo", map[string]string{"text": "hi"})}
			case 1:
				return []agent.ToolCall{call("c", "t__counter", map[string]string{"key": "a"})}
			}
			return nil
		}
		r := newToolRig(t, open, mcpclient.ServerConfig{}, script)
		m := r.manager(t, "a", nil, sessions.Options{})
		out := wait(t, r.submit(t, m, "u1", "m1", "go"))
		if out.Reply.Text != "answer: 1 | hi | 2" {
			t.Fatalf("reply = %q", out.Reply.Text)
		}
		m.Shutdown(context.Background())

		// A model that always asks: after max_rounds it is told to answer
		// without tools.
		r2 := newToolRig(t, open, mcpclient.ServerConfig{}, func(req agent.Request) []agent.ToolCall {
			return []agent.ToolCall{call(fmt.Sprintf("x%d", countRounds(req.Turn)), "t__counter", map[string]string{"key": "loop"})}
		})
		m2 := r2.manager(t, "b", nil, sessions.Options{MaxToolRounds: 3})
		defer m2.Shutdown(context.Background())
		out = wait(t, r2.submit(t, m2, "u2", "m1", "loop"))
		if out.Reply.Text != "answer: 1 | 2 | 3" || r2.srv.Count() != 3 {
			t.Fatalf("reply = %q after %d runs, want 3 rounds", out.Reply.Text, r2.srv.Count())
		}
		reqs := r2.model.Requests()
		if len(reqs) != 4 || !reqs[3].NoMoreTools || reqs[2].NoMoreTools || len(reqs[3].Tools) == 0 {
			t.Fatalf("%d model calls; the last should be told to answer without tools", len(reqs))
		}
	})
}

func countRounds(turn []agent.Message) int {
	n := 0
	for _, m := range turn {
		if m.Role == agent.RoleAssistant && len(m.ToolCalls) > 0 {
			n++
		}
	}
	return n
}

func TestToolErrorsTimeoutsAndBigResultsReachTheModel(t *testing.T) {
	storetest.Drivers(t, func(t *testing.T, open func() *store.DB) {
		r := newToolRig(t, open, mcpclient.ServerConfig{Timeout: 200 * time.Millisecond, MaxResultBytes: 64},
			once(call("f", "t__fail", map[string]string{"message": "no"}), call("s", "t__slow", map[string]any{}),
				call("b", "t__big", map[string]any{"bytes": 1000})))
		m := r.manager(t, "a", nil, sessions.Options{})
		defer m.Shutdown(context.Background())
		out := wait(t, r.submit(t, m, "u1", "m1", "try"))
		parts := strings.Split(strings.TrimPrefix(out.Reply.Text, "answer: "), " | ")
		if len(parts) != 3 || !strings.Contains(parts[0], "failed: no") || !strings.Contains(parts[1], "The call failed") ||
			!strings.Contains(parts[2], "[result cut") || len(parts[2]) > 200 {
			t.Fatalf("results = %q", parts)
		}
		states := map[string]string{}
		for _, c := range toolCalls(t, r.db) {
			states[c.CallID] = c.State
		}
		if states["f"] != ledger.ToolFailed || states["s"] != ledger.ToolFailed || states["b"] != ledger.ToolDone {
			t.Fatalf("states = %v", states)
		}
	})
}

// A call cut by a shutdown is never run again blindly: the next run of
// the turn (another replica, or this one's next start) tells the model
// its effect is unknown — unless the tool is idempotent, when it runs
// again. Either way the user gets one reply.
func TestToolCallCutByShutdownIsNotRunAgainUnlessIdempotent(t *testing.T) {
	for _, idem := range []bool{false, true} {
		t.Run(fmt.Sprintf("idempotent=%v", idem), func(t *testing.T) {
			storetest.Drivers(t, func(t *testing.T, open func() *store.DB) {
				r := newToolRig(t, open, mcpclient.ServerConfig{Idempotent: idem}, func(req agent.Request) []agent.ToolCall {
					if len(req.Turn) == 0 {
						return []agent.ToolCall{call("s", "t__slow", map[string]any{"seconds": 0.3})}
					}
					return nil
				})
				a := r.manager(t, "a", nil, sessions.Options{InterruptGrace: 5 * time.Second})
				tk := r.submit(t, a, "u1", "m1", "slowly")
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := r.srv.Started(ctx, mcptest.Slow, 1); err != nil {
					t.Fatal(err)
				}
				cut, stop := context.WithCancel(context.Background())
				stop()
				a.Shutdown(cut) // the drain's deadline has passed: the turn is cut
				if _, err := tk.Wait(ctx); err == nil {
					// (its outcome may be the interruption: no reply shown)
				}
				rows := toolCalls(t, r.db)
				if len(rows) != 1 || rows[0].State != ledger.ToolStarted {
					t.Fatalf("after the cut: %+v, want the call started", rows)
				}
				_, delivered := r.next(t, "b")
				var d sessions.Delivery
				select {
				case d = <-delivered:
				case <-ctx.Done():
					t.Fatal("the turn was not run again")
				}
				want, runs := "answer: "+sessions.ToolUnknownText, 1
				if idem {
					want, runs = "answer: done", 2
				}
				if d.Reply.Text != want {
					t.Fatalf("reply = %q, want %q", d.Reply.Text, want)
				}
				if err := r.srv.Await(ctx, func(calls []mcptest.Call) bool { return len(calls) >= runs }); err != nil {
					t.Fatal(err)
				}
				if n := len(r.srv.Calls()); n != runs {
					t.Fatalf("slow started %d times, want %d", n, runs)
				}
				// One final reply, and the transcript keeps the call with
				// its one result.
				lines := transcript(t, r.db, sessions.WebSocketKey("u1"))
				var finals, results int
				for _, l := range lines {
					if strings.HasPrefix(l, "assistant:answer") {
						finals++
					}
					if strings.HasPrefix(l, "tool:") {
						results++
					}
				}
				if finals != 1 || results != 1 {
					t.Fatalf("transcript:\n%s", strings.Join(lines, "\n"))
				}
			})
		})
	}
}

func TestToolApproval(t *testing.T) {
	storetest.Drivers(t, func(t *testing.T, open func() *store.DB) {
		clock := clocktest.New(time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC))
		r := newToolRig(t, open, mcpclient.ServerConfig{Approve: tools.ApproveAsk,
			PerTool: map[string]mcpclient.ToolConfig{mcptest.Echo: {Approve: tools.ApproveAuto}}},
			once(call("c", "t__counter", map[string]string{"key": "k"}), call("e", "t__echo", map[string]string{"text": "free"})))
		m := r.manager(t, "a", clock, sessions.Options{ApproveTimeout: time.Minute})
		defer m.Shutdown(context.Background())
		ctx := context.Background()

		// Allowed: it runs; the read-only tool ran without asking.
		tk := r.submit(t, m, "u1", "m1", "count")
		a := <-r.asks
		if a.Call.Name != "t__counter" || a.UserID != "u1" || a.Call.ExpiresAt.IsZero() {
			t.Fatalf("ask = %+v", a)
		}
		if _, err := m.Approvals().DecideTool(ctx, sessions.ToolDecision{SessionKey: sessions.WebSocketKey("u2"), UserID: "u2", ID: a.Call.ID, Allow: true}); err != sessions.ErrToolNotYours {
			t.Fatalf("another user's decision: %v, want ErrToolNotYours", err)
		}
		if _, err := m.Approvals().DecideTool(ctx, sessions.ToolDecision{SessionKey: a.SessionKey, UserID: "u1", ID: a.Call.ID, Allow: true}); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Approvals().DecideTool(ctx, sessions.ToolDecision{SessionKey: a.SessionKey, UserID: "u1", ID: a.Call.ID, Allow: false}); err != sessions.ErrToolDecided {
			t.Fatalf("a second decision: %v, want ErrToolDecided", err)
		}
		if out := wait(t, tk); out.Reply.Text != "answer: 1 | free" {
			t.Fatalf("reply = %q", out.Reply.Text)
		}

		// Denied: it never runs, and the model is told.
		tk = r.submit(t, m, "u1", "m2", "count again")
		a = <-r.asks
		if _, err := m.Approvals().DecideTool(ctx, sessions.ToolDecision{SessionKey: a.SessionKey, UserID: "u1", ID: a.Call.ID}); err != nil {
			t.Fatal(err)
		}
		if out := wait(t, tk); out.Reply.Text != "answer: "+sessions.ToolDeniedText+" | free" {
			t.Fatalf("reply = %q", out.Reply.Text)
		}

		// Nobody answers: at its expiry (the fake clock) it counts as denied.
		tk = r.submit(t, m, "u1", "m3", "and again")
		a = <-r.asks
		clock.Advance(2 * time.Minute)
		if out := wait(t, tk); out.Reply.Text != "answer: "+sessions.ToolExpiredText+" | free" {
			t.Fatalf("reply = %q", out.Reply.Text)
		}
		// A tap after the expiry is told so, and changes nothing.
		if _, err := m.Approvals().DecideTool(ctx, sessions.ToolDecision{SessionKey: a.SessionKey, UserID: "u1", ID: a.Call.ID, Allow: true}); err != sessions.ErrToolExpired {
			t.Fatalf("a decision after the expiry: %v, want ErrToolExpired", err)
		}
		if n := r.srv.Count(); n != 1 {
			t.Fatalf("counter ran %d times, want once (allowed once)", n)
		}
	})
}

// An ask that waits across a restart is asked again by the next run, and
// runs once when allowed.
func TestToolAskSurvivesARestart(t *testing.T) {
	storetest.Drivers(t, func(t *testing.T, open func() *store.DB) {
		r := newToolRig(t, open, mcpclient.ServerConfig{Approve: tools.ApproveAsk}, once(call("c", "t__counter", map[string]string{"key": "k"})))
		a := r.manager(t, "a", nil, sessions.Options{})
		r.submit(t, a, "u1", "m1", "count")
		first := <-r.asks
		cut, stop := context.WithCancel(context.Background())
		stop()
		a.Shutdown(cut)
		if rows := toolCalls(t, r.db); len(rows) != 1 || rows[0].State != ledger.ToolAsking || rows[0].AskRef == "" {
			t.Fatalf("after the restart: %+v, want the call asking with its ask's reference", rows)
		}
		b, delivered := r.next(t, "b")
		again := <-r.asks
		if again.Call.ID != first.Call.ID {
			t.Fatalf("asked again about call %d, want %d", again.Call.ID, first.Call.ID)
		}
		if _, err := b.Approvals().DecideTool(context.Background(), sessions.ToolDecision{SessionKey: again.SessionKey, UserID: "u1", ID: again.Call.ID, Allow: true}); err != nil {
			t.Fatal(err)
		}
		if d := <-delivered; d.Reply.Text != "answer: 1" {
			t.Fatalf("reply = %q", d.Reply.Text)
		}
		if n := r.srv.Count(); n != 1 {
			t.Fatalf("counter ran %d times", n)
		}
	})
}

// /stop cancels a running call (MCP cancellation reaches the server), its
// outcome is stored, and the transcript keeps the call with it.
func TestStopCancelsARunningToolCall(t *testing.T) {
	storetest.Drivers(t, func(t *testing.T, open func() *store.DB) {
		r := newToolRig(t, open, mcpclient.ServerConfig{}, once(call("s", "t__slow", map[string]any{})))
		m := r.manager(t, "a", nil, sessions.Options{})
		defer m.Shutdown(context.Background())
		tk := r.submit(t, m, "u1", "m1", "wait for it")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := r.srv.Started(ctx, mcptest.Slow, 1); err != nil {
			t.Fatal(err)
		}
		if !m.Stop(sessions.WebSocketKey("u1")) {
			t.Fatal("no turn to stop")
		}
		out := wait(t, tk)
		if out.Reply.Status != ledger.MsgInterrupted || out.Reply.Error != ledger.InterruptedByUser {
			t.Fatalf("reply = %+v, want stopped", out.Reply)
		}
		if err := r.srv.Await(ctx, func(calls []mcptest.Call) bool { return len(calls) == 1 && calls[0].Cancelled }); err != nil {
			t.Fatalf("the server never saw the call cancelled: %v", err)
		}
		rows := toolCalls(t, r.db)
		if len(rows) != 1 || rows[0].State != ledger.ToolCancelled || rows[0].Result != sessions.ToolStoppedText {
			t.Fatalf("tool calls = %+v", rows)
		}
		lines := transcript(t, r.db, sessions.WebSocketKey("u1"))
		if len(lines) < 3 || lines[2] != "tool:"+sessions.ToolStoppedText {
			t.Fatalf("transcript:\n%s", strings.Join(lines, "\n"))
		}
	})
}

// The model is called with a round's results while they are being
// stored; what it streams reaches the user only once they are.
func TestNothingStreamsBeforeTheRoundsResultsAreStored(t *testing.T) {
	storetest.Drivers(t, func(t *testing.T, open func() *store.DB) {
		r := newToolRig(t, open, mcpclient.ServerConfig{}, once(call("s", "t__slow", map[string]any{"seconds": 0.2})))
		r.model.Answered = make(chan int, 4)
		m := r.manager(t, "a", nil, sessions.Options{})
		defer m.Shutdown(context.Background())
		var mu sync.Mutex
		var deltas []string
		in := sessions.Inbound{Channel: "websocket", SessionKey: sessions.WebSocketKey("u1"), UserID: "u1", ClientMsgID: "m1", Text: "go"}
		tk, err := m.Submit(context.Background(), in, sessions.Hooks{OnDelta: func(d string) {
			mu.Lock()
			deltas = append(deltas, d)
			mu.Unlock()
		}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := r.srv.Started(ctx, mcptest.Slow, 1); err != nil {
			t.Fatal(err)
		}
		release := storetest.HoldWrites(t, r.db) // the round's results wait
		select {
		case <-r.model.Answered: // the model answered the results
		case <-ctx.Done():
			t.Fatal("the model was not called with the results while they were being stored")
		}
		mu.Lock()
		early := slices.Clone(deltas)
		mu.Unlock()
		release()
		out := wait(t, tk)
		if len(early) > 0 {
			t.Fatalf("streamed %q before the results were stored", early)
		}
		mu.Lock()
		defer mu.Unlock()
		if out.Reply.Text != "answer: done" || strings.Join(deltas, "") != "answer: done" {
			t.Fatalf("reply %q, deltas %q", out.Reply.Text, deltas)
		}
	})
}

// A turn that asks before its channel can (a turn resumed while the
// gateway starts, before the channel registered) asks once it can.
func TestToolAskWaitsForItsChannel(t *testing.T) {
	storetest.Drivers(t, func(t *testing.T, open func() *store.DB) {
		r := newToolRig(t, open, mcpclient.ServerConfig{Approve: tools.ApproveAsk}, once(call("c", "t__counter", map[string]string{"key": "k"})))
		m := sessions.New(r.db, r.model, sessions.Options{Events: r.db.Events(), Tools: mcpclient.Offer{Set: r.set}, Logger: slog.New(slog.DiscardHandler),
			Policies: map[string]sessions.Policy{"websocket": {MaxHistory: 50, Busy: sessions.BusyPolicy{Mode: sessions.BusyQueue}}}})
		defer m.Shutdown(context.Background())
		tk := r.submit(t, m, "u1", "m1", "count")
		for ev := range r.events {
			if ev.Status == sessions.ToolAsking {
				break // stored asking, with nobody to ask yet
			}
		}
		m.Routes().Register("websocket", sessions.Route{Ask: func(ctx context.Context, a sessions.ToolAsk) (string, error) {
			r.asks <- a
			return "", nil
		}})
		a := <-r.asks
		if _, err := m.Approvals().DecideTool(context.Background(), sessions.ToolDecision{SessionKey: a.SessionKey, UserID: "u1", ID: a.Call.ID, Allow: true}); err != nil {
			t.Fatal(err)
		}
		if out := wait(t, tk); out.Reply.Text != "answer: 1" {
			t.Fatalf("reply = %q", out.Reply.Text)
		}
	})
}

// In busy mode interrupt a newer message cancels a running call: its
// outcome is kept (cancelled), and one turn answers both messages,
// seeing the call with it.
func TestANewerMessageCancelsARunningToolCall(t *testing.T) {
	storetest.Drivers(t, func(t *testing.T, open func() *store.DB) {
		r := newToolRig(t, open, mcpclient.ServerConfig{}, func(req agent.Request) []agent.ToolCall {
			if req.Input == "wait" && len(req.Turn) == 0 {
				return []agent.ToolCall{call("s", "t__slow", map[string]any{})}
			}
			return nil
		})
		m := sessions.New(r.db, r.model, sessions.Options{Events: r.db.Events(), Tools: mcpclient.Offer{Set: r.set}, Logger: slog.New(slog.DiscardHandler),
			Policies: map[string]sessions.Policy{"websocket": {MaxHistory: 50, Busy: sessions.BusyPolicy{Mode: sessions.BusyInterrupt}}}})
		defer m.Shutdown(context.Background())
		first := r.submit(t, m, "u1", "m1", "wait")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := r.srv.Started(ctx, mcptest.Slow, 1); err != nil {
			t.Fatal(err)
		}
		second := r.submit(t, m, "u1", "m2", "never mind")
		out := wait(t, second)
		if out.Reply.Status != ledger.MsgOK {
			t.Fatalf("reply = %+v", out.Reply)
		}
		wait(t, first) // merged into the newer turn, or cut: either way settled
		if err := r.srv.Await(ctx, func(calls []mcptest.Call) bool { return len(calls) == 1 && calls[0].Cancelled }); err != nil {
			t.Fatalf("the server never saw the call cancelled: %v", err)
		}
		rows := toolCalls(t, r.db)
		if len(rows) != 1 || rows[0].State != ledger.ToolCancelled || rows[0].Result != sessions.ToolCutText {
			t.Fatalf("tool calls = %+v", rows)
		}
		// The turn that answered both saw the call and its outcome.
		reqs := r.model.Requests()
		last := reqs[len(reqs)-1]
		var saw bool
		for _, msg := range append(append([]agent.Message{}, last.History...), last.Turn...) {
			saw = saw || (msg.Role == agent.RoleTool && msg.Content == sessions.ToolCutText)
		}
		if !saw || last.Input != "never mind" {
			t.Fatalf("the last model call (input %q) did not see the cut call", last.Input)
		}
	})
}
