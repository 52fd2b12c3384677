package sessions

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/faults"
	"github.com/chatgate/chatgate/sessions/store"
)

// replica is one gateway of a test on a shared PostgreSQL schema.
func replica(t *testing.T, dsn string, ag agent.Agent, c *clock, opts Options) (*Manager, *store.DB) {
	t.Helper()
	db := openStore(t, store.DriverPostgres, dsn)
	opts.Now, opts.Logger = c.Now, quiet
	opts.Events = db.Events()
	m := New(db, ag, opts)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		m.Shutdown(ctx)
	})
	return m, db
}

// eventLog collects the events of other replicas that reach a manager's
// websocket route (watch).
type eventLog struct {
	replies chan ReplyEvent
	resets  chan ResetEvent
}

func watch(m *Manager) *eventLog {
	l := &eventLog{replies: make(chan ReplyEvent, 64), resets: make(chan ResetEvent, 64)}
	m.Routes().Register("websocket", Route{Reply: func(ev ReplyEvent) { l.replies <- ev }, Reset: func(ev ResetEvent) { l.resets <- ev }})
	return l
}

func (l *eventLog) reply(t *testing.T) ReplyEvent {
	t.Helper()
	select {
	case ev := <-l.replies:
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no reply event within 10s")
	}
	return ReplyEvent{}
}

// knowPeers waits until each manager knows another replica lives (its
// hello arrived, or its heartbeat was seen): replicas publish events only
// then, and a turn now stores its reply sooner than a hello travels.
func knowPeers(t *testing.T, ms ...*Manager) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for _, m := range ms {
		select {
		case <-m.hb.known: // the other's hello, heard on the listener's goroutine
		case <-timeout:
			t.Fatal("the replicas did not learn of each other within 10s")
		}
	}
}

func (l *eventLog) reset(t *testing.T) ResetEvent {
	t.Helper()
	select {
	case ev := <-l.resets:
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no reset event within 10s")
	}
	return ResetEvent{}
}

// A reply stored on replica A reaches replica B's listeners, which load it
// from storage; A does not get its own events back; a reset on B reaches
// A's reset listeners marked remote.
func TestRepliesAndResetsReachTheOtherReplica(t *testing.T) {
	dsn := postgresDSN(t)
	c := newClock(t0)
	a, _ := replica(t, dsn, agent.Echo{}, c, Options{})
	b, _ := replica(t, dsn, agent.Echo{}, c, Options{})
	la, lb := watch(a), watch(b)
	startRescuer(t, a)
	startRescuer(t, b)
	knowPeers(t, a, b)

	in := msg("websocket:ann", "hello")
	in.ClientMsgID = "c-1"
	out := handle(t, a, in)
	ev := lb.reply(t)
	if ev.Channel != "websocket" || ev.SessionKey != "websocket:ann" || ev.ConversationID != out.ConversationID ||
		ev.Seq != out.UserSeq || ev.ReplySeq != out.Reply.Seq || ev.State != TurnAnswered || ev.Missed {
		t.Fatalf("reply event on B = %+v, outcome on A = %+v", ev, out)
	}
	id, reply, err := b.Conversations().StoredReply(context.Background(), ev.ConversationID, ev.Seq, ev.ReplySeq)
	if err != nil || id != "c-1" || !reflect.DeepEqual(reply, out.Reply) {
		t.Fatalf("StoredReply on B = %q, %+v, %v; want c-1, %+v", id, reply, err, out.Reply)
	}

	// B resets bob. Notifications arrive in the order they were sent, and
	// A's reply was sent before B heard of it: when A hears of the reset,
	// it has already seen (and dropped) its own reply.
	if _, err := b.Reset(context.Background(), msg("websocket:bob", "")); err != nil {
		t.Fatal(err)
	}
	if local := lb.reset(t); local.Remote || local.SessionKey != "websocket:bob" {
		t.Fatalf("B's own reset = %+v", local)
	}
	remote := la.reset(t)
	if !remote.Remote || remote.SessionKey != "websocket:bob" || remote.Reason != ReasonManual || remote.NewConversation == "" {
		t.Fatalf("reset on A from B = %+v", remote)
	}
	select {
	case ev := <-la.replies:
		t.Fatalf("A got its own reply back: %+v", ev)
	default:
	}
	select {
	case ev := <-lb.resets:
		t.Fatalf("B got its own reset back: %+v", ev)
	default:
	}
}

// A replica whose listen connection is killed reconnects, tells its
// listeners that events may have been missed, and receives later ones.
func TestListenerReconnectsAfterItsConnectionIsKilled(t *testing.T) {
	dsn := postgresDSN(t)
	c := newClock(t0)
	a, _ := replica(t, dsn, agent.Echo{}, c, Options{})
	b, dbB := replica(t, dsn, agent.Echo{}, c, Options{})
	lb := watch(b)
	startRescuer(t, b)
	pid := dbB.Events().ListenPID()
	if pid == 0 {
		t.Fatal("B has no listen connection after Listen")
	}
	var killed bool
	if err := dbB.Gorm().Raw("SELECT pg_terminate_backend(?)", pid).Scan(&killed).Error; err != nil || !killed {
		t.Fatalf("terminate the listen backend %d: %v, %v", pid, killed, err)
	}
	if ev := lb.reply(t); !ev.Missed {
		t.Fatalf("first event after the kill = %+v, want Missed", ev)
	}
	if p := dbB.Events().ListenPID(); p == 0 || p == pid {
		t.Fatalf("listen backend after reconnect = %d (was %d)", p, pid)
	}
	out := handle(t, a, msg("websocket:ann", "after the kill"))
	if ev := lb.reply(t); ev.ReplySeq != out.Reply.Seq || ev.ConversationID != out.ConversationID {
		t.Fatalf("reply event after reconnect = %+v, outcome %+v", ev, out)
	}
}

// A turn that replica A's shutdown interrupts is run at once by replica B,
// woken by A's event: B's own rescue passes come an hour apart.
func TestInterruptedTurnWakesTheOtherReplica(t *testing.T) {
	dsn := postgresDSN(t)
	c := newClock(t0)
	slow := &recorder{block: make(chan struct{}), started: make(chan struct{}, 1)}
	a, _ := replica(t, dsn, slow, c, Options{})
	b, _ := replica(t, dsn, agent.Echo{}, c, Options{RescueEvery: time.Hour})
	delivered := make(chan Delivery, 4)
	for _, m := range []*Manager{a, b} {
		m.Routes().Register("websocket", Route{Deliver: func(_ context.Context, d Delivery) (string, error) {
			delivered <- d
			return "", nil
		}})
	}
	startRescuer(t, b) // its first pass finds nothing

	done := make(chan Outcome, 1)
	go func() {
		in := msg("websocket:ann", "long question")
		in.ClientMsgID = "c-1"
		out, _ := a.Handle(context.Background(), in, Hooks{})
		done <- out
	}()
	<-slow.started
	expired, cancel := context.WithCancel(context.Background())
	cancel()
	a.Shutdown(expired) // interrupts the turn at once
	if out := <-done; out.Reply.Status != MsgInterrupted {
		t.Fatalf("outcome on A = %+v, want interrupted", out)
	}
	select {
	case d := <-delivered:
		if d.ClientMsgID != "c-1" || d.Reply.Status != MsgOK || d.Reply.Text != "echo: long question (history: 0)" {
			t.Fatalf("delivery on B = %+v", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("B did not run the interrupted turn: its rescuer was not woken")
	}
}

// A replica whose store has a fault injector installed hears the other
// replicas' events as any other does, and its failures reach its own
// watcher: the injector is a hook of the store, not a wrapper hiding the
// store's events from the manager.
func TestFaultInjectedReplicaHearsEvents(t *testing.T) {
	dsn := postgresDSN(t)
	c := newClock(t0)
	a, _ := replica(t, dsn, agent.Echo{}, c, Options{})
	dbB := openStore(t, store.DriverPostgres, dsn)
	fs := faults.New(dbB)
	b := New(dbB, agent.Echo{}, Options{Now: c.Now, Logger: quiet, Events: dbB.Events(), RetryPause: 5 * time.Millisecond})
	t.Cleanup(func() {
		fs.Heal()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		b.Shutdown(ctx)
	})
	lb := watch(b)
	startRescuer(t, a)
	startRescuer(t, b)
	knowPeers(t, a, b)

	out := handle(t, a, msg("websocket:ann", "hello"))
	if ev := lb.reply(t); ev.ReplySeq != out.Reply.Seq || ev.ConversationID != out.ConversationID {
		t.Fatalf("reply event on B = %+v, outcome on A = %+v", ev, out)
	}
	fs.Down(faults.Before)
	if _, err := b.Handle(context.Background(), msg("websocket:bob", "while down"), Hooks{}); err == nil {
		t.Fatal("B stored a message with every store call failing")
	}
	if _, down := b.Health().StorageDown(); !down {
		t.Fatal("B's watcher did not see the injected failures")
	}
}
