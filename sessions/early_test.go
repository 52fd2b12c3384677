package sessions

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/store"
	"github.com/chatgate/chatgate/sessions/storetest"
)

// streamer is an agent that streams "first " at once, tells started,
// and finishes ("first done") when finish is closed or fails when its
// context ends, which it reports on cancelled.
type streamer struct {
	started   chan agent.Request
	finish    chan struct{}
	cancelled chan error
}

func newStreamer() *streamer {
	return &streamer{started: make(chan agent.Request, 4), finish: make(chan struct{}), cancelled: make(chan error, 4)}
}

func (s *streamer) Name() string  { return "streamer" }
func (s *streamer) Model() string { return "m" }
func (s *streamer) Reply(ctx context.Context, req agent.Request, onDelta func(string)) (agent.Reply, error) {
	onDelta("first ")
	s.started <- req
	select {
	case <-s.finish:
	case <-ctx.Done():
		s.cancelled <- context.Cause(ctx)
		return agent.Reply{}, ctx.Err()
	}
	onDelta("done")
	return agent.Reply{Messages: []agent.Message{{Role: agent.RoleAssistant, Content: "first done"}}, Model: "m"}, nil
}

// hookLog records a message's hooks in the order they were called.
type hookLog struct {
	mu     sync.Mutex
	events []string
}

func (l *hookLog) add(e string) {
	l.mu.Lock()
	l.events = append(l.events, e)
	l.mu.Unlock()
}

func (l *hookLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.events)
}

func (l *hookLog) hooks() Hooks {
	return Hooks{
		OnAck:   func(a Ack) { l.add(fmt.Sprint("ack ", a.Seq)) },
		OnDelta: func(d string) { l.add("delta " + d) },
	}
}

// waitFor returns what ch brings; a generous bound keeps a broken
// mechanism from hanging the run (it is no timing assertion).
func waitFor[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s", what)
		panic("unreachable")
	}
}

// TestAgentCallOverlapsTheCommit: a message that is its own turn (SQLite,
// nothing of its key waiting or running) has its agent call started while
// its commit is still held — with the history the commit makes true — and
// what the model streams meanwhile reaches the hooks only after OnAck.
func TestAgentCallOverlapsTheCommit(t *testing.T) {
	for _, mode := range []BusyMode{BusyCollect, BusyInterrupt} {
		t.Run(string(mode), func(t *testing.T) {
			db := openStore(t, store.DriverSQLite, filepath.Join(t.TempDir(), "gateway.db"))
			policies := map[string]Policy{"websocket": {MaxHistory: 10, Busy: BusyPolicy{Mode: mode}}}
			key := "websocket:ann"
			// A first turn, by a gateway that then stops (so that nothing of
			// it still runs), gives the next one history.
			first := newManager(t, db, agent.Echo{}, newClock(t0), policies)
			handle(t, first, msg(key, "hello"))
			if err := first.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			ag := newStreamer()
			m := newManager(t, db, ag, newClock(t0), policies)
			warmUp(t, m)

			release := sync.OnceFunc(storetest.HoldWrites(t, db))
			t.Cleanup(release) // a failed test lets the held writer go before the store closes // the commit of the next message waits
			var log hookLog
			type submitted struct {
				t   *Ticket
				err error
			}
			done := make(chan submitted, 1)
			go func() {
				tk, err := m.Submit(context.Background(), msg(key, "again"), log.hooks())
				done <- submitted{tk, err}
			}()
			req := waitFor(t, ag.started, "agent call while the commit is held")
			// The model has streamed "first " by now; the message is not
			// stored, so nothing may be shown yet.
			if ev := log.get(); len(ev) != 0 {
				t.Fatalf("hooks called before the commit landed: %q", ev)
			}
			if req.Input != "again" || len(req.History) != 2 || req.History[0].Content != "hello" || req.History[1].Content != "echo: hello (history: 0)" {
				t.Fatalf("early request = %+v; want the stored history and the new message", req)
			}
			release()
			s := waitFor(t, done, "Submit after the commit")
			if s.err != nil {
				t.Fatal(s.err)
			}
			if ev := log.get(); !slices.Equal(ev, []string{"ack 3", "delta first "}) {
				t.Fatalf("hooks = %q; want the ack, then the held delta", ev)
			}
			close(ag.finish)
			out, err := s.t.Wait(context.Background())
			if err != nil || out.Reply.Text != "first done" || out.Reply.Status != MsgOK {
				t.Fatalf("outcome = %+v, %v", out, err)
			}
			if ev := log.get(); !slices.Equal(ev, []string{"ack 3", "delta first ", "delta done"}) {
				t.Fatalf("hooks = %q", ev)
			}
			rows := transcript(t, db, out.ConversationID)
			if len(rows) != 4 || rows[2].Content != "again" || rows[3].Content != "first done" || rows[3].ReplyTo != 3 {
				t.Fatalf("stored %+v", rows)
			}
			if tn := turnAt(t, db, out.ConversationID, 3); tn.Attempts != 1 || tn.ReplySeq != 4 {
				t.Fatalf("turn = %+v; want answered once, on its first attempt", tn)
			}
		})
	}
}

// TestFailedCommitCancelsTheEarlyCall: when the commit of a message whose
// agent call started early fails, the call is cancelled, the message is
// neither acknowledged nor stored, nothing it streamed is shown, the
// caller gets the commit's error — and the key's next message runs as usual.
func TestFailedCommitCancelsTheEarlyCall(t *testing.T) {
	db := openStore(t, store.DriverSQLite, filepath.Join(t.TempDir(), "gateway.db"))
	ag := newStreamer()
	m := newManager(t, db, ag, newClock(t0), nil)
	refuse := `CREATE TRIGGER refuse_poison BEFORE INSERT ON messages WHEN NEW.content = 'poison'
		BEGIN SELECT RAISE(ABORT, 'injected: the disk is full'); END`
	if err := db.Gorm().Exec(refuse).Error; err != nil {
		t.Fatal(err)
	}
	key := "websocket:ann"
	// The conversation exists and the heartbeat beats before the writer is
	// held: the message's append is the only write left.
	if _, err := m.Reset(context.Background(), msg(key, "")); err != nil {
		t.Fatal(err)
	}
	release := sync.OnceFunc(storetest.HoldWrites(t, db))
	t.Cleanup(release) // a failed test lets the held writer go before the store closes
	var log hookLog
	done := make(chan error, 1)
	go func() {
		_, err := m.Submit(context.Background(), msg(key, "poison"), log.hooks())
		done <- err
	}()
	waitFor(t, ag.started, "agent call while the commit is held")
	release()
	err := waitFor(t, done, "Submit after the failed commit")
	if err == nil || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("Submit = %v; want the commit's error", err)
	}
	// Submit returned after the call ended: it was cancelled.
	select {
	case <-ag.cancelled:
	default:
		t.Fatal("the agent call was not cancelled")
	}
	if ev := log.get(); len(ev) != 0 {
		t.Fatalf("hooks = %q; want none: nothing was stored", ev)
	}
	var n int64
	if err := db.Gorm().Model(&Message{}).Count(&n).Error; err != nil || n != 0 {
		t.Fatalf("%d messages stored (%v), want none", n, err)
	}
	// The key is free again: its next message is answered.
	close(ag.finish)
	out := handle(t, m, msg(key, "hello"))
	if out.Reply.Text != "first done" || out.UserSeq != 1 {
		t.Fatalf("next message: %+v", out)
	}
}

// warmUp resets another key, so that m's heartbeat is written before a
// test holds the writer.
func warmUp(t *testing.T, m *Manager) {
	t.Helper()
	if _, err := m.Reset(context.Background(), msg("websocket:warm-up", "")); err != nil {
		t.Fatal(err)
	}
}

// TestStopReachesAnEarlyCall: a Stop that comes while the message's
// commit is still in flight stops its already running agent call, like
// any running turn's: the partial reply is stored as stopped once the
// message is, and the turn is not run again.
func TestStopReachesAnEarlyCall(t *testing.T) {
	db := openStore(t, store.DriverSQLite, filepath.Join(t.TempDir(), "gateway.db"))
	ag := newStreamer()
	m := newManager(t, db, ag, newClock(t0), nil)
	key := "websocket:ann"
	if _, err := m.Reset(context.Background(), msg(key, "")); err != nil {
		t.Fatal(err)
	}
	release := sync.OnceFunc(storetest.HoldWrites(t, db))
	t.Cleanup(release)
	var log hookLog
	done := make(chan *Ticket, 1)
	go func() {
		tk, err := m.Submit(context.Background(), msg(key, "long question"), log.hooks())
		if err != nil {
			t.Error(err)
		}
		done <- tk
	}()
	waitFor(t, ag.started, "agent call while the commit is held")
	if !m.Stop(key) {
		t.Fatal("Stop found no running turn")
	}
	if cause := waitFor(t, ag.cancelled, "cancelled call"); !errors.Is(cause, errStoppedByUser) {
		t.Fatalf("call ended by %v, want the user's stop", cause)
	}
	release()
	tk := waitFor(t, done, "Submit after the commit")
	if tk == nil {
		t.FailNow()
	}
	out, err := tk.Wait(context.Background())
	if err != nil || out.Reply.Status != MsgInterrupted || out.Reply.Error != InterruptedByUser || out.Reply.Text != "first " {
		t.Fatalf("outcome = %+v, %v; want the partial reply, stopped", out, err)
	}
	if ev := log.get(); !slices.Equal(ev, []string{"ack 1", "delta first "}) {
		t.Fatalf("hooks = %q", ev)
	}
	rows := transcript(t, db, out.ConversationID)
	if len(rows) != 2 || rows[1].Status != MsgInterrupted || rows[1].Error != InterruptedByUser {
		t.Fatalf("stored %+v", rows)
	}
	select {
	case req := <-ag.started:
		t.Fatalf("the stopped turn was run again: %+v", req)
	default:
	}
}

// teller is an agent that, asked, notes the question as out and then
// streams its first delta: an agent without HTTP tells the gateway its
// request is out that way (an HTTP one when the request is written).
type teller struct{ out sync.Map }

func (a *teller) Name() string  { return "teller" }
func (a *teller) Model() string { return "m" }
func (a *teller) Reply(_ context.Context, req agent.Request, onDelta func(string)) (agent.Reply, error) {
	a.out.Store(req.Input, true)
	onDelta("answer")
	return agent.Reply{Messages: []agent.Message{{Role: agent.RoleAssistant, Content: "answer"}}, Model: "m"}, nil
}

// appendWatch notes, for each user message appended, whether the teller
// had its question out when the append reached the store.
type appendWatch struct {
	ag    *teller
	mu    sync.Mutex
	after map[string]bool
}

func (w *appendWatch) Before(_ context.Context, c ledger.Call) error {
	if c.Op != "Append" || c.Append == nil {
		return nil
	}
	for _, msg := range c.Append.Messages {
		if msg.Role == agent.RoleUser {
			_, out := w.ag.out.Load(msg.Content)
			w.mu.Lock()
			w.after[msg.Content] = out
			w.mu.Unlock()
		}
	}
	return nil
}

func (w *appendWatch) After(_ context.Context, _ ledger.Call, err error) error { return err }

// waitTurnEnded waits until nothing of key waits or runs and its turn
// lock is free.
func waitTurnEnded(t *testing.T, m *Manager, key string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if m.idle(key) {
			if release, ok := m.turnLocks.TryAcquire(key); ok {
				release()
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the last turn of %s did not end", key)
		}
		runtime.Gosched()
	}
}

// TestEarlyRequestGoesOutBeforeTheCommit: the message's append reaches
// the store only once its early call's request is out, so that the
// commit's work does not hold the core the request needs.
func TestEarlyRequestGoesOutBeforeTheCommit(t *testing.T) {
	db := openStore(t, store.DriverSQLite, filepath.Join(t.TempDir(), "gateway.db"))
	ag := &teller{}
	m := newManager(t, db, ag, newClock(t0), nil)
	m.earlySendWait = time.Minute // only the request's going out ends the wait here
	warmUp(t, m)
	w := &appendWatch{ag: ag, after: map[string]bool{}}
	defer db.Observe(w)()
	for i := range 5 {
		text := fmt.Sprint("question ", i)
		// A message that comes while the key's last turn still holds its
		// lock (its reply resolved, its runner not yet done) is stored
		// before its call, as any turn's: wait for the last turn to end.
		waitTurnEnded(t, m, "websocket:ann")
		if out := handle(t, m, msg("websocket:ann", text)); out.Reply.Text != "answer" {
			t.Fatalf("%s: outcome %+v", text, out)
		}
		w.mu.Lock()
		after, seen := w.after[text]
		w.mu.Unlock()
		if !seen || !after {
			t.Fatalf("%s: appended (%v) before its request was out", text, seen)
		}
	}
}
