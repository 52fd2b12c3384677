package sessions

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions/store"
	"github.com/chatgate/chatgate/sessions/storetest"
)

// holdFirst is an echo agent whose calls block, streaming "partial "
// first, until released — the first call only, unless all is set. It
// records every request.
type holdFirst struct {
	mu       sync.Mutex
	requests []agent.Request
	started  chan agent.Request
	release  chan struct{}
	all      bool
}

func newHoldFirst() *holdFirst {
	return &holdFirst{started: make(chan agent.Request, 16), release: make(chan struct{})}
}

func (h *holdFirst) Name() string  { return "hold" }
func (h *holdFirst) Model() string { return "echo" }
func (h *holdFirst) Reply(ctx context.Context, req agent.Request, onDelta func(string)) (agent.Reply, error) {
	h.mu.Lock()
	h.requests = append(h.requests, req)
	first := len(h.requests) == 1
	h.mu.Unlock()
	h.started <- req
	if first || h.all {
		if onDelta != nil {
			onDelta("partial ")
		}
		select {
		case <-ctx.Done():
			return agent.Reply{}, ctx.Err()
		case <-h.release:
		}
	}
	return agent.Echo{}.Reply(ctx, req, onDelta)
}

func (h *holdFirst) calls() []agent.Request {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.requests)
}

func busyPolicy(b BusyPolicy) map[string]Policy {
	return map[string]Policy{"websocket": {MaxHistory: 100, Busy: b}}
}

func submit(t *testing.T, m *Manager, in Inbound) *Ticket {
	t.Helper()
	tk, err := m.Submit(context.Background(), in, Hooks{})
	if err != nil {
		t.Fatalf("Submit(%q): %v", in.Text, err)
	}
	return tk
}

func wait(t *testing.T, tk *Ticket) Outcome {
	t.Helper()
	out, err := tk.Wait(context.Background())
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	return out
}

func withID(in Inbound, id string) Inbound {
	in.ClientMsgID = id
	return in
}

// Five messages sent while a turn runs are stored and acknowledged at
// once, and answered by one agent call that sees each of them; the reply
// covers all five.
func TestCollectMergesMessagesThatArriveDuringATurn(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		ag := newHoldFirst()
		m := newManager(t, db, ag, newClock(t0), busyPolicy(BusyPolicy{Mode: BusyCollect}))
		first := submit(t, m, withID(msg("websocket:ann", "first"), "c-0"))
		<-ag.started
		var burst []*Ticket
		for i := 1; i <= 5; i++ {
			// Submit returns once the message is stored: the turn running
			// does not hold it up.
			burst = append(burst, submit(t, m, withID(msg("websocket:ann", fmt.Sprint("m", i)), fmt.Sprint("c-", i))))
		}
		for i, tk := range burst {
			if tk.Seq() != int64(i+2) {
				t.Fatalf("message %d stored at seq %d, want %d", i+1, tk.Seq(), i+2)
			}
		}
		close(ag.release)
		if out := wait(t, first); out.Reply.Text != "echo: first (history: 0)" {
			t.Fatalf("first reply = %+v", out.Reply)
		}
		var outs []Outcome
		for _, tk := range burst {
			outs = append(outs, wait(t, tk))
		}
		for _, out := range outs[:4] {
			if !out.Merged || out.Reply.Seq != outs[4].Reply.Seq {
				t.Fatalf("an earlier message of the burst = %+v, want merged into the last one's reply", out)
			}
		}
		last := outs[4]
		want := []string{"c-1", "c-2", "c-3", "c-4", "c-5"}
		if last.Merged || !slices.Equal(last.Reply.Covers, want) || last.Reply.Text != "echo: m1\nm2\nm3\nm4\nm5 (history: 2)" {
			t.Fatalf("the burst's reply = %+v, want one covering %v", last, want)
		}
		calls := ag.calls()
		if len(calls) != 2 || !slices.Equal(calls[1].Inputs(), []string{"m1", "m2", "m3", "m4", "m5"}) || len(calls[1].History) != 2 {
			t.Fatalf("agent calls = %+v, want two, the second with the five messages after the first turn", calls)
		}
		conv := conversations(t, db, "websocket:ann")[0]
		rows := transcript(t, db, conv.ID)
		var users, replies int
		for _, r := range rows {
			if r.Role == "user" {
				users++
			} else {
				replies++
			}
		}
		if users != 6 || replies != 2 || rows[len(rows)-1].ReplyTo != 6 {
			t.Fatalf("transcript = %+v, want six messages and two replies, the last answering seq 6", rows)
		}
		// The burst's reply closed all five of its messages.
		if open := storetest.OpenTurns(t, db, conv.ID); len(open) != 0 {
			t.Fatalf("open turns %v after the burst's reply", open)
		}
		// A resend of any covered id gets that reply, from storage.
		again := handle(t, m, withID(msg("websocket:ann", "m2"), "c-2"))
		if !again.Duplicate || again.Reply.Seq != last.Reply.Seq || !slices.Equal(again.Reply.Covers, want) {
			t.Fatalf("resend of c-2 = %+v", again)
		}
		if n := len(ag.calls()); n != 2 {
			t.Fatalf("%d agent calls after the resend, want 2", n)
		}
	})
}

// max_batch caps a turn; the rest start the next one.
func TestMaxBatchSplitsABurst(t *testing.T) {
	db := openStore(t, store.DriverSQLite, t.TempDir()+"/g.db")
	ag := newHoldFirst()
	m := newManager(t, db, ag, newClock(t0), busyPolicy(BusyPolicy{Mode: BusyCollect, MaxBatch: 2}))
	first := submit(t, m, msg("websocket:ann", "first"))
	<-ag.started
	var burst []*Ticket
	for i := 1; i <= 3; i++ {
		burst = append(burst, submit(t, m, msg("websocket:ann", fmt.Sprint("m", i))))
	}
	close(ag.release)
	wait(t, first)
	for _, tk := range burst {
		wait(t, tk)
	}
	calls := ag.calls()
	if len(calls) != 3 || !slices.Equal(calls[1].Inputs(), []string{"m1", "m2"}) || !slices.Equal(calls[2].Inputs(), []string{"m3"}) {
		t.Fatalf("agent calls = %+v, want [first] [m1 m2] [m3]", calls)
	}
}

// Queue mode keeps one turn per message, in order, each seeing the turns
// before it.
func TestQueueRunsOneTurnPerMessage(t *testing.T) {
	db := openStore(t, store.DriverSQLite, t.TempDir()+"/g.db")
	ag := newHoldFirst()
	m := newManager(t, db, ag, newClock(t0), queued)
	first := submit(t, m, msg("websocket:ann", "first"))
	<-ag.started
	a, b := submit(t, m, msg("websocket:ann", "a")), submit(t, m, msg("websocket:ann", "b"))
	close(ag.release)
	wait(t, first)
	if out := wait(t, a); out.Merged || out.Reply.Text != "echo: a (history: 2)" {
		t.Fatalf("a = %+v", out)
	}
	if out := wait(t, b); out.Reply.Text != "echo: b (history: 4)" {
		t.Fatalf("b = %+v", out)
	}
}

// Interrupt: a message during a turn cancels it — its partial reply is
// stored interrupted — and one new turn answers both.
func TestInterruptAnswersEverythingInOneNewTurn(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		ag := newHoldFirst()
		m := newManager(t, db, ag, newClock(t0), busyPolicy(BusyPolicy{Mode: BusyInterrupt}))
		first := submit(t, m, withID(msg("websocket:ann", "tell me a long story"), "c-1"))
		<-ag.started
		second := submit(t, m, withID(msg("websocket:ann", "actually, a short one"), "c-2"))
		cut := wait(t, first)
		if cut.Reply.Status != MsgInterrupted || cut.Reply.Error != InterruptedByMessage || cut.Reply.Text != "partial " {
			t.Fatalf("the interrupted turn = %+v", cut.Reply)
		}
		out := wait(t, second)
		if !slices.Equal(out.Reply.Covers, []string{"c-1", "c-2"}) || out.Reply.Status != MsgOK ||
			out.Reply.Text != "echo: tell me a long story\nactually, a short one (history: 0)" {
			t.Fatalf("the new turn = %+v", out.Reply)
		}
		conv := conversations(t, db, "websocket:ann")[0]
		rows := transcript(t, db, conv.ID)
		if len(rows) != 4 || rows[2].Status != MsgInterrupted || rows[2].ReplyTo != 1 || rows[3].ReplyTo != 2 {
			t.Fatalf("transcript = %+v", rows)
		}
		// The partial reply is not history for what comes next.
		if next := handle(t, m, msg("websocket:ann", "thanks")); next.Reply.Text != "echo: thanks (history: 3)" {
			t.Fatalf("next = %+v", next.Reply)
		}
		// Both messages are answered: nothing is claimable after a restart.
		m2 := newManager(t, db, agent.Echo{}, newClock(t0.Add(time.Minute)), nil)
		m2.Routes().Register("websocket", Route{Deliver: noopDeliver})
		if ran, _, err := m2.Rescuer().Recover(context.Background(), time.Hour); ran != 0 || err != nil {
			t.Fatalf("Recover ran %d (%v) after the interrupt, want 0", ran, err)
		}
	})
}

// Debounce: messages closer together than debounce_ms are one turn. The
// clock moves 300 ms between messages (the pace of a person typing) and
// only once the runner waits on it; the turn starts when it has moved a
// whole debounce past the last one.
func TestDebounceWaitsForMoreMessages(t *testing.T) {
	db := openStore(t, store.DriverSQLite, t.TempDir()+"/g.db")
	rec := &recorder{}
	c := newClock(t0)
	m := New(db, rec, Options{Now: c.Now, After: c.After, Logger: quiet,
		Policies: busyPolicy(BusyPolicy{Mode: BusyCollect, Debounce: time.Second})})
	t.Cleanup(func() { m.Shutdown(context.Background()) })
	var tickets []*Ticket
	for i := range 3 {
		tickets = append(tickets, submit(t, m, msg("websocket:ann", fmt.Sprint("part ", i+1))))
		if !c.WaitTimers(i+1, 20*time.Second) { // the runner waits out the debounce again
			t.Fatalf("the runner did not wait after message %d", i+1)
		}
		if i < 2 {
			c.Advance(300 * time.Millisecond)
		}
	}
	if n := rec.calls.Load(); n != 0 {
		t.Fatalf("%d agent calls before the debounce passed", n)
	}
	c.Advance(time.Second)
	out := wait(t, tickets[2])
	if n := rec.calls.Load(); n != 1 || out.Reply.Text != "echo: part 1\npart 2\npart 3 (history: 0)" {
		t.Fatalf("%d agent calls, reply %q; want one for the three", n, out.Reply.Text)
	}
}

// Stop while a burst waits out its debounce stops that turn: nothing is
// run, nothing stored is dropped, and what comes next is answered.
func TestStopDuringDebounce(t *testing.T) {
	db := openStore(t, store.DriverSQLite, t.TempDir()+"/g.db")
	rec := &recorder{}
	m := newManager(t, db, rec, newClock(t0), busyPolicy(BusyPolicy{Mode: BusyCollect, Debounce: time.Hour, DebounceMax: time.Hour}))
	tk := submit(t, m, msg("websocket:ann", "never mind"))
	if !m.Stop("websocket:ann") {
		t.Fatal("Stop found nothing to stop")
	}
	out := wait(t, tk)
	if out.Reply.Status != MsgInterrupted || out.Reply.Error != InterruptedByUser || rec.calls.Load() != 0 {
		t.Fatalf("stopped burst = %+v after %d agent calls", out.Reply, rec.calls.Load())
	}
	if m.Stop("websocket:ann") {
		t.Fatal("a second Stop found something to stop")
	}
}

// A reset in the middle of a burst: the messages before it are answered
// in the old conversation, those after it in the new one.
func TestResetMidBurst(t *testing.T) {
	db := openStore(t, store.DriverSQLite, t.TempDir()+"/g.db")
	ag := newHoldFirst()
	m := newManager(t, db, ag, newClock(t0), busyPolicy(BusyPolicy{Mode: BusyCollect}))
	first := submit(t, m, msg("websocket:ann", "first"))
	<-ag.started
	before := submit(t, m, msg("websocket:ann", "before"))
	ev, err := m.Reset(context.Background(), msg("websocket:ann", ""))
	if err != nil {
		t.Fatal(err)
	}
	after := submit(t, m, msg("websocket:ann", "after"))
	close(ag.release)
	wait(t, first)
	b, a := wait(t, before), wait(t, after)
	if b.ConversationID != ev.OldConversation || b.Reply.Text != "echo: before (history: 2)" {
		t.Fatalf("before the reset = %+v, want answered in %s", b, ev.OldConversation)
	}
	if a.ConversationID != ev.NewConversation || a.Reply.Text != "echo: after (history: 0)" {
		t.Fatalf("after the reset = %+v, want answered in %s", a, ev.NewConversation)
	}
}

// A shutdown during a debounce wait answers the burst before it ends,
// once; a shutdown whose deadline cuts a merged turn leaves it to the
// next start, which answers it once, completely.
func TestShutdownDuringABurst(t *testing.T) {
	t.Run("debounce", func(t *testing.T) {
		db := openStore(t, store.DriverSQLite, t.TempDir()+"/g.db")
		rec := &recorder{}
		m := New(db, rec, Options{Now: newClock(t0).Now, Logger: quiet, Policies: busyPolicy(BusyPolicy{Debounce: time.Hour, DebounceMax: time.Hour})})
		a, b := submit(t, m, msg("websocket:ann", "a")), submit(t, m, msg("websocket:ann", "b"))
		if err := m.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		wait(t, a)
		if out := wait(t, b); rec.calls.Load() != 1 || out.Reply.Text != "echo: a\nb (history: 0)" {
			t.Fatalf("burst answered by %d calls: %+v", rec.calls.Load(), out.Reply)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		db := openStore(t, store.DriverSQLite, t.TempDir()+"/g.db")
		ag := newHoldFirst()
		ag.all = true
		c := newClock(t0)
		m := New(db, ag, Options{Now: c.Now, Logger: quiet, Policies: busyPolicy(BusyPolicy{})})
		first := submit(t, m, msg("websocket:ann", "first"))
		<-ag.started
		a, b := submit(t, m, msg("websocket:ann", "a")), submit(t, m, msg("websocket:ann", "b"))
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // the deadline has passed
		m.Shutdown(ctx)
		if out := wait(t, first); out.Reply.Error != InterruptedByShutdown {
			t.Fatalf("first = %+v", out.Reply)
		}
		for _, tk := range []*Ticket{a, b} {
			if _, err := tk.Wait(context.Background()); !errors.Is(err, ErrShuttingDown) {
				t.Fatalf("a message the shutdown left waiting = %v, want ErrShuttingDown", err)
			}
		}
		c.Advance(time.Minute)
		rec := &recorder{}
		m2 := newManager(t, db, rec, c, busyPolicy(BusyPolicy{}))
		var got []Delivery
		var mu sync.Mutex
		m2.Routes().Register("websocket", Route{Deliver: func(_ context.Context, d Delivery) (string, error) {
			mu.Lock()
			got = append(got, d)
			mu.Unlock()
			return "", nil
		}})
		ran, _, err := m2.Rescuer().Recover(context.Background(), time.Hour)
		if err != nil || ran != 1 || rec.calls.Load() != 1 {
			t.Fatalf("Recover ran %d turns with %d calls (%v), want one turn for the three messages", ran, rec.calls.Load(), err)
		}
		if len(got) != 1 || got[0].Reply.Text != "echo: first\na\nb (history: 0)" || got[0].UserSeq != 3 {
			t.Fatalf("delivered = %+v", got)
		}
		if ran, _, _ := m2.Rescuer().Recover(context.Background(), time.Hour); ran != 0 {
			t.Fatalf("a second pass ran %d", ran)
		}
	})
}

// Two replicas on PostgreSQL: a burst whose messages reach both (the
// client reconnected mid-burst) is one turn, run by one of them.
func TestBurstSplitAcrossReplicasIsOneTurn(t *testing.T) {
	dsn := postgresDSN(t)
	c := newClock(t0)
	ag := newHoldFirst()
	policy := busyPolicy(BusyPolicy{Mode: BusyCollect})
	a := newManager(t, openStore(t, store.DriverPostgres, dsn), ag, c, policy)
	b := newManager(t, openStore(t, store.DriverPostgres, dsn), ag, c, policy)
	for _, m := range []*Manager{a, b} {
		m.Routes().Register("websocket", Route{Deliver: noopDeliver})
	}
	first := submit(t, a, withID(msg("websocket:split", "first"), "c-0"))
	<-ag.started
	onA := submit(t, a, withID(msg("websocket:split", "on A"), "c-1"))
	onB := submit(t, b, withID(msg("websocket:split", "on B"), "c-2"))
	close(ag.release)
	wait(t, first)
	outA, outB := wait(t, onA), wait(t, onB)
	calls := ag.calls()
	if len(calls) != 2 || !slices.Equal(calls[1].Inputs(), []string{"on A", "on B"}) {
		t.Fatalf("agent calls = %+v, want the split burst in one", calls)
	}
	// Whichever replica ran it, each message's outcome agrees.
	for _, out := range []Outcome{outA, outB} {
		if !out.Merged && !out.Pending && !slices.Equal(out.Reply.Covers, []string{"c-1", "c-2"}) {
			t.Fatalf("outcome = %+v", out)
		}
	}
}
