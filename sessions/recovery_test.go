package sessions

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/store"
)

func TestRecoverRerunsInterruptedTurnsOnce(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		c := newClock(t0)
		// A gateway stops while three turns run: one interrupted by the
		// shutdown, one the user had stopped, and one user message whose
		// turn never stored anything (a crash).
		rec := &recorder{block: make(chan struct{}), started: make(chan struct{}, 4)}
		m1 := New(db, rec, Options{Now: c.Now, Logger: quiet})
		shutdownTurn := make(chan Outcome, 1)
		go func() {
			shutdownTurn <- handle(t, m1, Inbound{Channel: "websocket", SessionKey: "websocket:a", ClientMsgID: "a-1", Text: "interrupted"})
		}()
		<-rec.started
		stoppedTurn := make(chan Outcome, 1)
		go func() { stoppedTurn <- handle(t, m1, msg("websocket:b", "stopped")) }()
		<-rec.started
		m1.Stop("websocket:b")
		if out := <-stoppedTurn; out.Reply.Error != InterruptedByUser {
			t.Fatalf("stopped turn = %+v", out)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		m1.Shutdown(ctx)
		if out := <-shutdownTurn; out.Reply.Error != InterruptedByShutdown {
			t.Fatalf("interrupted turn = %+v", out)
		}
		crashed := Conversation{ID: "00000000-0000-0000-0000-00000000000c", SessionKey: "websocket:c", Channel: "websocket",
			Status: StatusActive, StartedAt: t0, LastActivityAt: t0}
		if err := db.CreateConversation(context.Background(), &crashed); err != nil {
			t.Fatal(err)
		}
		if err := db.Append(context.Background(), ledger.Append{Conv: &crashed, RequireActive: true, At: t0,
			Messages: []Message{crashedTurn(Message{ConversationID: crashed.ID, Seq: 1, Role: "user", Content: "crashed", Status: MsgOK, CreatedAt: t0})}}); err != nil {
			t.Fatal(err)
		}

		// The next start runs the interrupted and the crashed turn again.
		c.Advance(10 * time.Minute)
		m2 := newManager(t, db, agent.Echo{}, c, nil)
		var mu sync.Mutex
		var got []Delivery
		m2.Routes().Register("websocket", Route{Deliver: func(_ context.Context, d Delivery) (string, error) {
			mu.Lock()
			got = append(got, d)
			mu.Unlock()
			return "", nil
		}})
		ran, expired, err := m2.Rescuer().Recover(context.Background(), time.Hour)
		if err != nil || ran != 2 || expired != 0 {
			t.Fatalf("Recover = %d ran, %d expired, %v; want 2, 0", ran, expired, err)
		}
		sort.Slice(got, func(i, j int) bool { return got[i].SessionKey < got[j].SessionKey })
		if len(got) != 2 || got[0].SessionKey != "websocket:a" || got[0].ClientMsgID != "a-1" ||
			got[0].Reply.Text != "echo: interrupted (history: 0)" || got[1].Reply.Text != "echo: crashed (history: 0)" {
			t.Fatalf("recovered = %+v", got)
		}
		a := conversations(t, db, "websocket:a")[0]
		rows := transcript(t, db, a.ID)
		if len(rows) != 3 || rows[1].Status != MsgInterrupted || rows[2].Status != MsgOK || rows[2].ReplyTo != 1 {
			t.Fatalf("transcript of a = %+v", rows)
		}
		// The resent id is now answered from storage with the new reply.
		out := handle(t, m2, Inbound{Channel: "websocket", SessionKey: "websocket:a", ClientMsgID: "a-1", Text: "interrupted"})
		if !out.Duplicate || out.Reply.Seq != 3 || out.Reply.Status != MsgOK {
			t.Fatalf("resend after recovery = %+v", out)
		}
		// Once: a second pass finds nothing.
		if ran, expired, _ := m2.Rescuer().Recover(context.Background(), time.Hour); ran != 0 || expired != 0 {
			t.Fatalf("second Recover = %d, %d", ran, expired)
		}
		if b := conversations(t, db, "websocket:b")[0]; len(transcript(t, db, b.ID)) != 2 {
			t.Fatal("a turn the user stopped was run again")
		}
	})
}

func TestRecoverMarksOldTurns(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		c := newClock(t0)
		conv := Conversation{ID: "00000000-0000-0000-0000-0000000000aa", SessionKey: "websocket:old", Channel: "websocket",
			Status: StatusActive, StartedAt: t0, LastActivityAt: t0}
		db.CreateConversation(context.Background(), &conv)
		db.Append(context.Background(), ledger.Append{Conv: &conv, RequireActive: true, At: t0,
			Messages: []Message{crashedTurn(Message{ConversationID: conv.ID, Seq: 1, Role: "user", Content: "old", Status: MsgOK, CreatedAt: t0})}})
		c.Advance(2 * time.Hour)
		rec := &recorder{}
		m := newManager(t, db, rec, c, nil)
		m.Routes().Register("websocket", Route{Deliver: func(context.Context, Delivery) (string, error) { return "", nil }})
		ran, expired, err := m.Rescuer().Recover(context.Background(), time.Hour)
		if err != nil || ran != 0 || expired != 1 || rec.calls.Load() != 0 {
			t.Fatalf("Recover = %d, %d, %v (agent calls %d); want 0, 1", ran, expired, err, rec.calls.Load())
		}
		rows := transcript(t, db, conv.ID)
		if len(rows) != 2 || rows[1].Status != MsgFailed || rows[1].Content != ExpiredText {
			t.Fatalf("rows = %+v", rows)
		}
	})
}

func TestExclusiveRunsOnceAcrossProcesses(t *testing.T) {
	dsn := postgresDSN(t)
	a := openStore(t, store.DriverPostgres, dsn)
	b := openStore(t, store.DriverPostgres, dsn)
	inside := make(chan struct{})
	leave := make(chan struct{})
	done := make(chan bool)
	go func() {
		ran, err := a.Exclusive(context.Background(), "sweep", func() error {
			close(inside)
			<-leave
			return nil
		})
		if err != nil {
			t.Error(err)
		}
		done <- ran
	}()
	<-inside
	ran, err := b.Exclusive(context.Background(), "sweep", func() error { return nil })
	if err != nil || ran {
		t.Fatalf("second process ran = %v (%v) while the first held the lock", ran, err)
	}
	// A deployment in another schema of the same database runs its own.
	other := openStore(t, store.DriverPostgres, postgresDSN(t))
	if ran, err := other.Exclusive(context.Background(), "sweep", func() error { return nil }); err != nil || !ran {
		t.Fatalf("another schema's sweep ran = %v (%v) while this schema's held its lock", ran, err)
	}
	close(leave)
	if !<-done {
		t.Fatal("first process did not run")
	}
	if ran, _ := b.Exclusive(context.Background(), "sweep", func() error { return nil }); !ran {
		t.Fatal("the lock was not released with the transaction")
	}
}

// crashedTurn makes m the message of a turn whose replica died while
// running it: claimed by a replica that no longer heartbeats.
func crashedTurn(m Message) Message {
	m.TurnState, m.TurnOwner, m.TurnAttempt = TurnRunning, "dead-replica", 1
	return m
}
