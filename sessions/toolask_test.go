package sessions_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/clocktest"
	"github.com/chatgate/chatgate/internal/pgtest"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/store"
	"github.com/chatgate/chatgate/sessions/storetest"
	"github.com/chatgate/chatgate/tools"
	"github.com/chatgate/chatgate/tools/mcpclient"
)

// askRig is a manager whose channel asks into asks and hears of each
// ask's end in settled.
func (r *toolRig) askManager(t *testing.T, replica string, clock *clocktest.Clock, busy sessions.BusyMode) (*sessions.Manager, chan sessions.ToolAsk, chan sessions.Delivery) {
	t.Helper()
	return r.askManagerOn(t, r.db, replica, clock, busy)
}

// askManagerOn is askManager on db, a store of the rig's database of
// its own (a replica's).
func (r *toolRig) askManagerOn(t *testing.T, db *store.DB, replica string, clock *clocktest.Clock, busy sessions.BusyMode) (*sessions.Manager, chan sessions.ToolAsk, chan sessions.Delivery) {
	t.Helper()
	opts := sessions.Options{Events: db.Events(), Tools: mcpclient.Offer{Set: r.set}, ReplicaID: replica, Logger: slog.New(slog.DiscardHandler),
		Policies:       map[string]sessions.Policy{"websocket": {MaxHistory: 50, Busy: sessions.BusyPolicy{Mode: busy}}},
		ApproveTimeout: 30 * time.Second, RescueEvery: 20 * time.Millisecond, RetryPause: 10 * time.Millisecond}
	if clock != nil {
		opts.Now, opts.After = clock.Now, clock.After
	}
	m := sessions.New(db, r.model, opts)
	settled := make(chan sessions.ToolAsk, 8)
	delivered := make(chan sessions.Delivery, 4)
	m.Routes().Register("websocket", sessions.Route{Ask: func(ctx context.Context, a sessions.ToolAsk) (string, error) {
		r.asks <- a
		return "ask-" + replica, nil
	}, AskSettled: func(ctx context.Context, a sessions.ToolAsk, ref string) {
		settled <- a
	}, Deliver: func(ctx context.Context, d sessions.Delivery) (string, error) {
		delivered <- d
		return "", nil
	}})
	return m, settled, delivered
}

// /stop, or a newer message in busy mode interrupt, ends a call waiting
// for its user's decision as cancelled: the channel takes its ask back,
// the call is no longer asked on a client's return, a decision after it
// changes nothing, and the call never runs.
func TestACutTurnCancelsItsAsk(t *testing.T) {
	for _, c := range []struct {
		name string
		busy sessions.BusyMode
		text string
	}{
		{"stop", sessions.BusyQueue, sessions.ToolStoppedBeforeText},
		{"newer message", sessions.BusyInterrupt, sessions.ToolCutBeforeText},
	} {
		t.Run(c.name, func(t *testing.T) {
			storetest.Drivers(t, func(t *testing.T, open func() *store.DB) {
				r := newToolRig(t, open, mcpclient.ServerConfig{Approve: tools.ApproveAsk}, func(req agent.Request) []agent.ToolCall {
					if req.Input == "count" && len(req.Turn) == 0 {
						return []agent.ToolCall{call("c", "t__counter", map[string]string{"key": "k"})}
					}
					return nil
				})
				m, settled, _ := r.askManager(t, "a", nil, c.busy)
				defer m.Shutdown(context.Background())
				key := sessions.WebSocketKey("u1")
				tk := r.submit(t, m, "u1", "m1", "count")
				a := within(t, r.asks, "the ask")
				var next *sessions.Ticket
				if c.busy == sessions.BusyInterrupt {
					next = r.submit(t, m, "u1", "m2", "never mind")
				} else if !m.Stop(key) {
					t.Fatal("no turn to stop")
				}
				wait(t, tk)
				if next != nil {
					wait(t, next)
				}
				if got := within(t, settled, "the ask's end"); got.Call.ID != a.Call.ID || got.Call.Status != sessions.ToolCancelled {
					t.Fatalf("the channel heard the ask end as %+v, want cancelled", got.Call)
				}
				rows := toolCalls(t, r.db)
				if len(rows) != 1 || rows[0].State != ledger.ToolCancelled || rows[0].Result != c.text {
					t.Fatalf("tool calls = %+v, want the ask cancelled", rows)
				}
				pending, err := m.Approvals().PendingToolAsks(context.Background(), key)
				if err != nil || len(pending) != 0 {
					t.Fatalf("asks pending after the cut: %+v %v", pending, err)
				}
				if _, err := m.Approvals().DecideTool(context.Background(), sessions.ToolDecision{SessionKey: key, UserID: "u1", ID: a.Call.ID, Allow: true}); err != sessions.ErrToolDecided {
					t.Fatalf("allowing the cancelled call: %v, want ErrToolDecided", err)
				}
				// The session goes on, and the call never ran.
				if out := wait(t, r.submit(t, m, "u1", "m3", "hello")); out.Reply.Status != ledger.MsgOK {
					t.Fatalf("the next turn: %+v", out.Reply)
				}
				if n := r.srv.Count(); n != 0 {
					t.Fatalf("the cancelled call ran %d times", n)
				}
			})
		})
	}
}

// An ask has one deadline for its whole life. A run of the turn after a
// restart asks again until the first ask's deadline, not a new one; an
// ask whose deadline passed while no gateway ran counts as denied at
// once: it is not asked again, and a decision on it is refused.
func TestAnAskKeepsItsDeadlineAcrossRestarts(t *testing.T) {
	for _, down := range []time.Duration{10 * time.Second, time.Minute} {
		t.Run("down "+down.String(), func(t *testing.T) {
			storetest.Drivers(t, func(t *testing.T, open func() *store.DB) {
				clock := clocktest.New(time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC))
				r := newToolRig(t, open, mcpclient.ServerConfig{Approve: tools.ApproveAsk}, once(call("c", "t__counter", map[string]string{"key": "k"})))
				a, _, _ := r.askManager(t, "a", clock, sessions.BusyQueue)
				key := sessions.WebSocketKey("u1")
				r.submit(t, a, "u1", "m1", "count")
				first := within(t, r.asks, "the first ask")
				if want := clock.Now().Add(30 * time.Second); !first.Call.ExpiresAt.Equal(want) {
					t.Fatalf("the first ask expires at %v, want %v", first.Call.ExpiresAt, want)
				}
				cut, stop := context.WithCancel(context.Background())
				stop()
				a.Shutdown(cut)
				clock.Advance(down)

				b, settled, delivered := r.askManager(t, "b", clock, sessions.BusyQueue)
				defer b.Shutdown(context.Background())
				startRescuer(t, b)
				if down < 30*time.Second {
					again := within(t, r.asks, "the ask again")
					if again.Call.ID != first.Call.ID || !again.Call.ExpiresAt.Equal(first.Call.ExpiresAt) {
						t.Fatalf("asked again until %v, want the first ask's deadline %v", again.Call.ExpiresAt, first.Call.ExpiresAt)
					}
					rows := toolCalls(t, r.db)
					if len(rows) != 1 || rows[0].ExpiresAt == nil || !rows[0].ExpiresAt.Equal(first.Call.ExpiresAt) {
						t.Fatalf("stored deadline %+v, want %v", rows, first.Call.ExpiresAt)
					}
					clock.Advance(30 * time.Second)
				}
				d := within(t, delivered, "the reply")
				if d.Reply.Text != "answer: "+sessions.ToolExpiredText {
					t.Fatalf("reply = %q, want the ask expired", d.Reply.Text)
				}
				if got := within(t, settled, "the ask's end"); got.Call.Status != sessions.ToolExpired {
					t.Fatalf("the channel heard the ask end as %q, want expired", got.Call.Status)
				}
				select {
				case again := <-r.asks:
					if down >= 30*time.Second {
						t.Fatalf("an ask past its deadline was asked again: %+v", again.Call)
					}
				default:
				}
				if _, err := b.Approvals().DecideTool(context.Background(), sessions.ToolDecision{SessionKey: key, UserID: "u1", ID: first.Call.ID, Allow: true}); err != sessions.ErrToolExpired {
					t.Fatalf("allowing an expired call: %v, want ErrToolExpired", err)
				}
				rows := toolCalls(t, r.db)
				if len(rows) != 1 || rows[0].State != ledger.ToolDenied || rows[0].DecidedBy != ledger.ToolExpiredBy || r.srv.Count() != 0 {
					t.Fatalf("tool calls = %+v after %d runs, want denied by its expiry and never run", rows, r.srv.Count())
				}
			})
		})
	}
}

// A client coming back is not asked about a call whose ask is past its
// deadline, whether or not a turn has stored its expiry yet.
func TestPendingAsksLeaveOutExpiredOnes(t *testing.T) {
	storetest.Drivers(t, func(t *testing.T, open func() *store.DB) {
		clock := clocktest.New(time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC))
		r := newToolRig(t, open, mcpclient.ServerConfig{Approve: tools.ApproveAsk}, once(call("c", "t__counter", map[string]string{"key": "k"})))
		a, _, _ := r.askManager(t, "a", clock, sessions.BusyQueue)
		key := sessions.WebSocketKey("u1")
		r.submit(t, a, "u1", "m1", "count")
		within(t, r.asks, "the ask")
		cut, stop := context.WithCancel(context.Background())
		stop()
		a.Shutdown(cut) // stays asking, with nobody waiting for it
		b, _, _ := r.askManager(t, "b", clock, sessions.BusyQueue)
		defer b.Shutdown(context.Background())
		if pending, err := b.Approvals().PendingToolAsks(context.Background(), key); err != nil || len(pending) != 1 {
			t.Fatalf("before its deadline: %+v %v, want the ask", pending, err)
		}
		clock.Advance(31 * time.Second)
		if pending, err := b.Approvals().PendingToolAsks(context.Background(), key); err != nil || len(pending) != 0 {
			t.Fatalf("past its deadline: %+v %v, want none", pending, err)
		}
	})
}

// within is the next value of ch, or the test's end: what was to come
// (what) never came.
func within[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(20 * time.Second):
		t.Fatalf("%s never came", what)
		panic("unreachable")
	}
}

// On PostgreSQL, another replica's channel is told of an ask, marked
// Remote and read from the ledger, and of its end; a decision made on
// that replica lets the turn go on where it runs. A Remote ask carries
// no chat and no earlier reference: a channel that asks by a message of
// its own (Telegram) leaves it to the replica running the turn.
func TestAnAskReachesTheOtherReplica(t *testing.T) {
	for _, blip := range []bool{false, true} {
		t.Run(map[bool]string{false: "live", true: "reads fail on B"}[blip], func(t *testing.T) { askReachesTheOtherReplica(t, blip) })
	}
}

// failReads fails the first n storage calls named op, before they are
// made: a database that does not answer for a while.
type failReads struct {
	op     string
	mu     sync.Mutex
	n      int
	failed int
}

func (f *failReads) Before(_ context.Context, c ledger.Call) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c.Op == f.op && f.failed < f.n {
		f.failed++
		return errors.New("injected: the database does not answer")
	}
	return nil
}

func (f *failReads) After(_ context.Context, _ ledger.Call, err error) error { return err }

func askReachesTheOtherReplica(t *testing.T, blip bool) {
	dsn := pgtest.DSN(t)
	r := newToolRig(t, func() *store.DB { return storetest.Open(t, store.DriverPostgres, dsn, store.OpenOptions{}) },
		mcpclient.ServerConfig{Approve: tools.ApproveAsk}, once(call("c", "t__counter", map[string]string{"key": "k"})))
	a, settledA, _ := r.askManager(t, "a", nil, sessions.BusyQueue)
	defer a.Shutdown(context.Background())
	startRescuer(t, a)
	dbB := storetest.Open(t, store.DriverPostgres, dsn, store.OpenOptions{})
	// With blip, B's reads of the call its ask event names fail twice:
	// the ask is read again until storage answers, not dropped.
	fail := &failReads{op: "ToolCall"}
	if blip {
		fail.n = 2
	}
	defer dbB.Observe(fail)()
	b, _, _ := r.askManagerOn(t, dbB, "b", nil, sessions.BusyQueue)
	defer b.Shutdown(context.Background())
	remote, settledB := make(chan sessions.ToolAsk, 4), make(chan sessions.ToolAsk, 4)
	b.Routes().Register("websocket", sessions.Route{Ask: func(ctx context.Context, a sessions.ToolAsk) (string, error) {
		remote <- a
		return "", nil
	}, AskSettled: func(ctx context.Context, a sessions.ToolAsk, ref string) { settledB <- a }})
	startRescuer(t, b)
	for _, m := range []*sessions.Manager{a, b} {
		select {
		case <-m.PeersKnown():
		case <-time.After(10 * time.Second):
			t.Fatal("the replicas did not learn of each other within 10s")
		}
	}

	tk := r.submit(t, a, "u1", "m1", "count")
	local := within(t, r.asks, "the ask on A")
	got := within(t, remote, "the ask on B")
	if !got.Remote || local.Remote || got.ChatID != "" || got.Ref != "" || got.Channel != "websocket" || got.SessionKey != local.SessionKey ||
		got.UserID != "u1" || got.Call.ID != local.Call.ID || got.Call.Seq != local.Call.Seq || got.Call.Name != "t__counter" ||
		got.Call.Arguments != local.Call.Arguments || got.Call.CallID != local.Call.CallID || got.Call.Status != sessions.ToolAsking ||
		got.Call.ExpiresAt.Sub(local.Call.ExpiresAt).Abs() >= time.Millisecond { // as stored: PostgreSQL keeps microseconds
		t.Fatalf("ask on B = %+v, on A = %+v", got, local)
	}
	if _, err := b.Approvals().DecideTool(context.Background(), sessions.ToolDecision{SessionKey: got.SessionKey, UserID: "u1", ID: got.Call.ID, Allow: true}); err != nil {
		t.Fatal(err)
	}
	if out := wait(t, tk); out.Reply.Text != "answer: 1" {
		t.Fatalf("reply = %q", out.Reply.Text)
	}
	if end := within(t, settledA, "the end on A"); end.Remote || end.Call.Status != sessions.ToolStarted {
		t.Fatalf("end on A = %+v", end)
	}
	end := within(t, settledB, "the end on B")
	if !end.Remote || end.Call.ID != local.Call.ID || end.Call.Seq != local.Call.Seq || end.Call.Status != sessions.ToolStarted || end.SessionKey != local.SessionKey {
		t.Fatalf("end on B = %+v", end)
	}
	if n := r.srv.Count(); n != 1 {
		t.Fatalf("counter ran %d times", n)
	}
	if fail.failed != fail.n {
		t.Fatalf("reads failed on B: %d, want %d", fail.failed, fail.n)
	}
}
