package sessions

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/store"
)

// storeCrashed stores, as a replica that died mid-turn would have left
// it, a user message with its claimed turn whose lease ended 30 s after at.
func storeCrashed(t *testing.T, db *store.DB, key, channel, clientID, text string, at time.Time) (Conversation, *Turn) {
	t.Helper()
	ctx := context.Background()
	conv, err := db.ActiveConversation(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if conv == nil {
		conv = &Conversation{ID: uuid.NewString(), SessionKey: key,
			Channel: channel, Status: StatusActive, StartedAt: at, LastActivityAt: at, ChatID: "42"}
		if err := db.CreateConversation(ctx, conv); err != nil {
			t.Fatal(err)
		}
	}
	seq := conv.LastSeq + 1
	um := crashedTurn(Message{ConversationID: conv.ID, Seq: seq, Role: agent.RoleUser, Content: text, Status: MsgOK, CreatedAt: at})
	if clientID != "" {
		um.ClientMsgID = &clientID
	}
	if err := db.Append(ctx, ledger.Append{Conv: conv, ExpectSeq: conv.LastSeq, RequireActive: true, At: at, Messages: []Message{um}}); err != nil {
		t.Fatal(err)
	}
	return *conv, ledger.TurnOf(&um)
}

func turnAt(t *testing.T, db *store.DB, convID string, seq int64) Turn {
	t.Helper()
	tn, err := db.TurnAt(context.Background(), convID, seq)
	if err != nil || tn == nil {
		t.Fatalf("turn %s/%d: %v, %v", convID, seq, tn, err)
	}
	return *tn
}

func noopDeliver(context.Context, Delivery) (string, error) { return "", nil }

// die makes m look like a replica whose process ended: its heartbeat
// stops, and on PostgreSQL its last one is older than the lease (on
// SQLite every other replica is a process that ended).
func die(t *testing.T, db *store.DB, m *Manager) {
	t.Helper()
	m.rescue.endLoops()
	m.hb.halt()
	if db.Driver() == store.DriverPostgres {
		if err := db.Gorm().Exec("UPDATE replicas SET heartbeat_at = now() - interval '1 hour' WHERE id = ?", m.ReplicaID()).Error; err != nil {
			t.Fatal(err)
		}
	}
}

// A replica that stops heartbeating in the middle of a turn (it froze, or
// lost the database) has the turn taken over by another replica's next
// pass, which forgets it afterwards; the late reply of the first is not
// stored.
func TestTurnsOfAGoneReplicaAreTakenOver(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		c := newClock(t0)
		rec := &recorder{block: make(chan struct{}), started: make(chan struct{}, 1)}
		m1 := newManager(t, db, rec, c, nil)
		late := make(chan error, 1)
		acked := make(chan Ack, 1)
		go func() {
			_, err := m1.Handle(context.Background(), msg("websocket:ann", "hello"), Hooks{OnAck: func(a Ack) { acked <- a }})
			late <- err
		}()
		// The call may start while the message's commit is in flight
		// (Manager.startEarly): the turn is the dead replica's once both happened.
		<-rec.started
		<-acked
		die(t, db, m1)
		db2 := open()
		m2 := newManager(t, db2, agent.Echo{}, c, nil)
		m2.Routes().Register("websocket", Route{Deliver: noopDeliver})
		if err := m2.hb.ensure(); err != nil {
			t.Fatal(err)
		}
		if ran, _, err := m2.rescue.rescuePass(context.Background(), time.Hour, false); ran != 1 || err != nil {
			t.Fatalf("periodic pass ran %d (%v), want the gone replica's turn", ran, err)
		}
		var left int64
		db2.Gorm().Raw("SELECT count(*) FROM replicas WHERE id = ?", m1.ReplicaID()).Scan(&left)
		if left != 0 {
			t.Fatal("the gone replica was not forgotten after its turns were taken over")
		}
		close(rec.block)
		if err := <-late; !errors.Is(err, ledger.ErrLostClaim) {
			t.Fatalf("the frozen replica's late reply: %v, want ErrLostClaim", err)
		}
		expectPairedTurns(t, db2, "websocket:ann", 1)
	})
}

// A turn whose replica died is claimable by every path at once — a resend
// of its message on one replica, and the rescuers of two replicas (on
// SQLite, one gateway per file: of the same one) — and runs exactly once.
func TestClaimableTurnRunsOnceWhicheverPathWins(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		dbA := open()
		c := newClock(t0)
		conv, _ := storeCrashed(t, dbA, "websocket:ann", "websocket", "c-1", "are you there?", t0)
		rec := &recorder{}
		a := newManager(t, dbA, rec, c, nil)
		b := a
		if dbA.Driver() == store.DriverPostgres {
			b = newManager(t, open(), rec, c, nil)
		}
		for _, m := range []*Manager{a, b} {
			m.Routes().Register("websocket", Route{Deliver: noopDeliver})
		}
		var wg sync.WaitGroup
		var resend Outcome
		wg.Add(3)
		go func() {
			defer wg.Done()
			in := msg("websocket:ann", "are you there?")
			in.ClientMsgID = "c-1"
			resend = handle(t, a, in)
		}()
		for _, m := range []*Manager{a, b} {
			go func() {
				defer wg.Done()
				if _, _, err := m.Rescuer().Recover(context.Background(), time.Hour); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		if n := rec.calls.Load(); n != 1 {
			t.Fatalf("agent called %d times, want 1", n)
		}
		rows := transcript(t, dbA, conv.ID)
		if len(rows) != 2 || rows[1].Content != "echo: are you there? (history: 0)" {
			t.Fatalf("transcript = %+v", rows)
		}
		if !resend.Duplicate || (!resend.Pending && resend.Reply.Seq != 2) {
			t.Fatalf("resend = %+v: neither the reply nor pending", resend)
		}
		if tn := turnAt(t, dbA, conv.ID, 1); tn.State != TurnAnswered || tn.ReplySeq != 2 || tn.Attempts != 2 || tn.DueAt != nil || tn.Owner == "dead-replica" {
			t.Fatalf("turn = %+v", tn)
		}
	})
}

// A runner whose lease ran out and whose turn another runner claimed and
// answered stores nothing: its settle finds the claim gone.
func TestRunnerThatLostItsClaimStoresNothing(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		dbA, dbB := open(), open()
		c := newClock(t0)
		rec := &recorder{block: make(chan struct{}), started: make(chan struct{}, 1)}
		a := newManager(t, dbA, rec, c, nil)
		type result struct {
			out Outcome
			err error
		}
		done := make(chan result, 1)
		acked := make(chan Ack, 1)
		go func() {
			out, err := a.Handle(context.Background(), msg("websocket:ann", "slow"), Hooks{OnAck: func(a Ack) { acked <- a }})
			done <- result{out, err}
		}()
		// The call may start while the message's commit is in flight
		// (Manager.startEarly): B can claim the turn once it is stored.
		<-rec.started
		<-acked
		conv, err := dbB.ActiveConversation(context.Background(), "websocket:ann")
		if err != nil || conv == nil {
			t.Fatal(conv, err)
		}
		// Replica A stops heartbeating (cut off from the database, say): B
		// takes it for gone and takes the turn over.
		now := c.Now()
		claimed, err := dbB.ClaimTurn(context.Background(), conv.ID, 1, a.ReplicaID(), 1, "replica-b", now)
		if err != nil || claimed == nil || claimed.State != TurnRunning || claimed.Attempt != 2 {
			t.Fatalf("B's claim = %+v, %v", claimed, err)
		}
		// B stores its reply under the epoch its claim moved the
		// conversation to.
		conv, err = dbB.Conversation(context.Background(), conv.ID)
		if err != nil || conv.Epoch != 1 {
			t.Fatalf("conversation after the claim = %+v, %v; want epoch 1", conv, err)
		}
		replyB := []Message{{ConversationID: conv.ID, Seq: 2, Role: agent.RoleAssistant, Content: "from B", ReplyTo: 1, Status: MsgOK, CreatedAt: now}}
		if err := dbB.Append(context.Background(), ledger.Append{Conv: conv, ExpectSeq: 1, Messages: replyB, At: now}); err != nil {
			t.Fatal(err)
		}
		close(rec.block)
		r := <-done
		if !errors.Is(r.err, ErrReplyNotStored) || !errors.Is(r.err, ledger.ErrLostClaim) || r.out.Reply.Text != "" {
			t.Fatalf("A's outcome = %+v, %v; want no reply and ErrLostClaim", r.out, r.err)
		}
		rows := transcript(t, dbA, conv.ID)
		if len(rows) != 2 || rows[1].Content != "from B" {
			t.Fatalf("transcript = %+v, want B's reply only", rows)
		}
		if tn := turnAt(t, dbA, conv.ID, 1); tn.State != TurnAnswered || tn.ReplySeq != 2 || tn.Owner != "replica-b" {
			t.Fatalf("turn = %+v", tn)
		}
		// An append under the epoch A saw is refused, whatever its seq.
		err = dbA.Append(context.Background(), ledger.Append{Conv: &Conversation{ID: conv.ID, LastSeq: 2}, ExpectSeq: 2, At: now,
			Messages: []Message{{ConversationID: conv.ID, Seq: 3, Role: agent.RoleAssistant, Content: "late", ReplyTo: 1, Status: MsgOK, CreatedAt: now}}})
		if !errors.Is(err, ledger.ErrStale) {
			t.Fatalf("an append under the old epoch = %v, want ErrStale", err)
		}
		// An answered turn whose channel does not confirm delivery is
		// claimable by nobody.
		if c, err := dbA.ClaimTurn(context.Background(), conv.ID, 1, "replica-b", 2, "replica-c", now); c != nil || err != nil {
			t.Fatalf("claiming an answered turn = %+v, %v", c, err)
		}
	})
}

// A resend that arrives after an idle sweep archived its conversation is
// answered from storage, not run again in a new conversation.
func TestResendAfterSweepIsAnsweredFromStorage(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		c := newClock(t0)
		rec := &recorder{}
		idle := map[string]Policy{"websocket": {MaxHistory: 10, Reset: ResetPolicy{Mode: ResetIdle, IdleFor: time.Minute}}}
		m := newManager(t, db, rec, c, idle)
		in := msg("websocket:ann", "hello")
		in.ClientMsgID = "c-1"
		first := handle(t, m, in)
		c.Advance(2 * time.Minute)
		if n, err := NewSweeper(m, nil).SweepIdle(context.Background()); n != 1 || err != nil {
			t.Fatalf("sweep = %d, %v", n, err)
		}
		again := handle(t, m, in)
		if !again.Duplicate || !reflect.DeepEqual(again.Reply, first.Reply) || again.ConversationID != first.ConversationID {
			t.Fatalf("resend after the sweep = %+v, want %+v", again, first)
		}
		// Also after a lazy reset, and from a fresh process.
		handle(t, m, msg("websocket:ann", "new topic"))
		c.Advance(2 * time.Minute)
		m2 := newManager(t, db, rec, c, idle)
		if again := handle(t, m2, in); !again.Duplicate || !reflect.DeepEqual(again.Reply, first.Reply) {
			t.Fatalf("resend after a lazy reset = %+v", again)
		}
		if n := rec.calls.Load(); n != 2 {
			t.Fatalf("agent called %d times, want 2", n)
		}
	})
}

// A replica whose cache holds a stale activity time cannot archive a
// conversation another replica has just used.
func TestStaleCacheCannotResetAConversation(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		dbA, dbB := open(), open()
		c := newClock(t0)
		idle := map[string]Policy{"websocket": {MaxHistory: 10, Reset: ResetPolicy{Mode: ResetIdle, IdleFor: time.Hour}}}
		a := newManager(t, dbA, agent.Echo{}, c, idle)
		b := newManager(t, dbB, agent.Echo{}, c, idle)
		handle(t, a, msg("websocket:ann", "one")) // A caches the conversation
		c.Advance(59 * time.Minute)
		handle(t, b, msg("websocket:ann", "two")) // B uses it; A's copy is stale
		c.Advance(2 * time.Minute)
		out := handle(t, a, msg("websocket:ann", "three"))
		if out.Reset != nil {
			t.Fatalf("A reset the conversation from its stale cache: %+v", out.Reset)
		}
		if convs := conversations(t, dbA, "websocket:ann"); len(convs) != 1 || convs[0].Status != StatusActive {
			t.Fatalf("conversations = %+v", convs)
		}
		expectPairedTurns(t, dbA, "websocket:ann", 3)
	})
}

// toolCaller is a model that answers with a tool call.
type toolCaller struct{ calls atomic.Int32 }

func (*toolCaller) Name() string  { return "tools" }
func (*toolCaller) Model() string { return "tools" }
func (a *toolCaller) Reply(context.Context, agent.Request, func(string)) (agent.Reply, error) {
	a.calls.Add(1)
	return agent.Reply{Messages: []agent.Message{{Role: agent.RoleAssistant,
		ToolCalls: []agent.ToolCall{{ID: "call_1", Name: "search", Arguments: "{}"}}}}}, nil
}

// The gateway offers the model no tools: a reply asking for one fails the
// turn with a plain message, stored once and never run again.
func TestToolCallsFailTheTurnOnce(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		c := newClock(t0)
		ag := &toolCaller{}
		m := newManager(t, db, ag, c, nil)
		m.Routes().Register("websocket", Route{Deliver: noopDeliver})
		out := handle(t, m, msg("websocket:ann", "look it up"))
		if out.Reply.Status != MsgFailed || out.Reply.Text != ToolCallsText || out.Reply.Error != "model returned tool calls: search" {
			t.Fatalf("outcome = %+v", out)
		}
		rows := transcript(t, db, out.ConversationID)
		if len(rows) != 2 || rows[1].ToolCalls != "" {
			t.Fatalf("transcript = %+v: the tool call must not enter the history", rows)
		}
		if tn := turnAt(t, db, out.ConversationID, 1); tn.State != TurnFailed || tn.DueAt != nil {
			t.Fatalf("turn = %+v", tn)
		}
		c.Advance(time.Hour)
		if ran, _, _ := m.Rescuer().Recover(context.Background(), 2*time.Hour); ran != 0 || ag.calls.Load() != 1 {
			t.Fatalf("recovery ran %d, agent calls %d; want 0, 1", ran, ag.calls.Load())
		}
	})
}

// A channel that confirms delivery keeps its turns open until it marks
// them delivered; a delivery that never completed (the process died after
// storing the reply) is claimed again by the next process — by a resend,
// or by the rescuer — and made once.
func TestTrackedDeliveryIsMadeOnce(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		c := newClock(t0)
		var delivered []Delivery
		var mu sync.Mutex
		manager := func() *Manager {
			m := newManager(t, db, agent.Echo{}, c, nil)
			m.Routes().Register("telegram", Route{Deliver: func(_ context.Context, d Delivery) (string, error) {
				mu.Lock()
				defer mu.Unlock()
				delivered = append(delivered, d)
				return fmt.Sprintf("tg-%d", len(delivered)), nil
			}, Track: true})
			return m
		}
		m1 := manager()
		in := Inbound{Channel: "telegram", SessionKey: "telegram:dm:7", UserID: "7", ChatID: "7", ClientMsgID: "7:1", Text: "hi"}
		first := handle(t, m1, in)
		if first.Turn.Claim == "" {
			t.Fatalf("live outcome holds no delivery claim: %+v", first)
		}
		// The reply is not sent yet. A redelivery while this process holds
		// the delivery leaves it to the holder.
		if again := handle(t, m1, in); !again.Duplicate || again.Turn.Claim != "" {
			t.Fatalf("redelivery while held = %+v", again)
		}
		// The process dies before sending; the next one gets the update again.
		die(t, db, m1)
		m2 := manager()
		again := handle(t, m2, in)
		if !again.Duplicate || again.Turn.Claim == "" || !reflect.DeepEqual(again.Reply, first.Reply) {
			t.Fatalf("redelivery to the next process = %+v, want the delivery claimed", again)
		}
		if err := m2.Delivered(context.Background(), again.Turn, "tg-0", nil); err != nil {
			t.Fatal(err)
		}
		if tn := turnAt(t, db, first.ConversationID, 1); tn.State != TurnDelivered || tn.DeliveryRef != "tg-0" || tn.DueAt != nil {
			t.Fatalf("turn = %+v", tn)
		}
		if again := handle(t, m2, in); again.Turn.Claim != "" {
			t.Fatalf("redelivery of a delivered turn = %+v", again)
		}
		// The rescuer of the next process delivers a reply whose delivery
		// never completed.
		in.ClientMsgID, in.Text = "7:2", "still there?"
		second := handle(t, m2, in)
		die(t, db, m2)
		m3 := manager()
		for range 2 {
			if _, _, err := m3.Rescuer().Recover(context.Background(), time.Hour); err != nil {
				t.Fatal(err)
			}
		}
		if len(delivered) != 1 || !reflect.DeepEqual(delivered[0].Reply, second.Reply) || delivered[0].ChatID != "7" || delivered[0].ClientMsgID != "7:2" {
			t.Fatalf("rescuer delivered %+v", delivered)
		}
		if tn := turnAt(t, db, second.ConversationID, 3); tn.State != TurnDelivered || tn.DeliveryRef != "tg-1" {
			t.Fatalf("turn = %+v", tn)
		}
		// A delivery the channel refuses for good closes the turn; any other
		// failure gives it back for a later try.
		in.ClientMsgID, in.Text = "7:3", "third"
		third := handle(t, m3, in)
		if err := m3.Delivered(context.Background(), third.Turn, "", errors.New("network down")); err != nil {
			t.Fatal(err)
		}
		if tn := turnAt(t, db, third.ConversationID, 5); tn.State != TurnAnswered || tn.Owner != "" || tn.DueAt == nil || !tn.DueAt.Equal(c.Now().Add(time.Minute)) {
			t.Fatalf("turn after a failed delivery = %+v", tn)
		}
		in.ClientMsgID, in.Text = "7:4", "fourth"
		fourth := handle(t, m3, in)
		if err := m3.Delivered(context.Background(), fourth.Turn, "", fmt.Errorf("%w: bot was blocked by the user", ErrUndeliverable)); err != nil {
			t.Fatal(err)
		}
		if tn := turnAt(t, db, fourth.ConversationID, 7); tn.State != TurnDelivered || tn.Error == "" {
			t.Fatalf("turn after a refused delivery = %+v", tn)
		}
	})
}

// Upgrading a database written before the ledger gives its messages turns:
// answered ones closed, recent unanswered ones claimable (the rescuer
// answers them once), old unanswered ones expired.
func TestUpgradeGivesEarlierMessagesTheirTurns(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		ctx := context.Background()
		now := time.Now().UTC()
		conv := Conversation{ID: "00000000-0000-0000-0000-0000000000b1", SessionKey: "websocket:old", Channel: "websocket",
			Status: StatusActive, StartedAt: now, LastActivityAt: now}
		db.CreateConversation(ctx, &conv)
		id := "c-1"
		msgs := []Message{
			{ConversationID: conv.ID, Seq: 1, Role: "user", Content: "answered", ClientMsgID: &id, Status: MsgOK, CreatedAt: now.Add(-time.Minute)},
			{ConversationID: conv.ID, Seq: 2, Role: "assistant", Content: "echo: answered (history: 0)", ReplyTo: 1, Status: MsgOK, CreatedAt: now.Add(-time.Minute)},
			{ConversationID: conv.ID, Seq: 3, Role: "user", Content: "ancient", Status: MsgOK, CreatedAt: now.AddDate(0, 0, -30)},
			{ConversationID: conv.ID, Seq: 4, Role: "user", Content: "unanswered", Status: MsgOK, CreatedAt: now.Add(-time.Minute)},
		}
		if err := db.Append(ctx, ledger.Append{Conv: &conv, At: now, Messages: msgs}); err != nil {
			t.Fatal(err)
		}
		// As an earlier version left it: no turn columns.
		if err := db.Gorm().Migrator().DropIndex(&Message{}, "ix_messages_turn_due"); err != nil {
			t.Fatal(err)
		}
		for _, col := range []string{"turn_state", "turn_owner", "turn_attempt", "turn_due", "turn_track", "delivery_ref", "delivered_at"} {
			if err := db.Gorm().Migrator().DropColumn(&Message{}, col); err != nil {
				t.Fatal(col, err)
			}
		}
		db.Close()
		db = open()
		for seq, want := range map[int64]string{1: TurnDelivered, 3: TurnExpired, 4: TurnInterrupted} {
			if tn := turnAt(t, db, conv.ID, seq); tn.State != want {
				t.Fatalf("turn %d = %+v, want %s", seq, tn, want)
			}
		}
		rec := &recorder{}
		m := newManager(t, db, rec, newClock(now), nil)
		m.Routes().Register("websocket", Route{Deliver: noopDeliver})
		if ran, expired, err := m.Rescuer().Recover(ctx, time.Hour); ran != 1 || expired != 0 || err != nil {
			t.Fatalf("Recover = %d, %d, %v; want the unanswered one run", ran, expired, err)
		}
		if rec.last().Input != "unanswered" {
			t.Fatalf("recovered %q", rec.last().Input)
		}
		in := msg("websocket:old", "answered")
		in.ClientMsgID = "c-1"
		if out := handle(t, m, in); !out.Duplicate || out.Reply.Seq != 2 {
			t.Fatalf("resend of a message answered before the upgrade = %+v", out)
		}
	})
}

// gate is an agent whose calls wait until released, counting how many run
// at once.
type gate struct {
	running, most atomic.Int32
	started       chan struct{}
	release       chan struct{}
}

func (*gate) Name() string  { return "gate" }
func (*gate) Model() string { return "gate" }
func (g *gate) Reply(ctx context.Context, req agent.Request, onDelta func(string)) (agent.Reply, error) {
	n := g.running.Add(1)
	defer g.running.Add(-1)
	for {
		most := g.most.Load()
		if n <= most || g.most.CompareAndSwap(most, n) {
			break
		}
	}
	g.started <- struct{}{}
	<-g.release
	return agent.Echo{}.Reply(ctx, req, onDelta)
}

// Recovery runs claimed turns side by side, at most recovery.concurrency
// at once, and each user's turns in order.
func TestRecoveryRunsTurnsInParallel(t *testing.T) {
	db := openStore(t, store.DriverSQLite, t.TempDir()+"/gateway.db")
	c := newClock(t0)
	const users, concurrency = 20, 16
	for i := range users {
		key := fmt.Sprintf("websocket:u%02d", i)
		storeCrashed(t, db, key, "websocket", "", "first", t0)
		storeCrashed(t, db, key, "websocket", "", "second", t0)
	}
	c.Advance(time.Minute)
	g := &gate{started: make(chan struct{}, 2*users), release: make(chan struct{})}
	m := New(db, g, Options{Now: c.Now, Logger: quiet, RecoveryConcurrency: concurrency, Policies: queued})
	m.Routes().Register("websocket", Route{Deliver: noopDeliver})
	done := make(chan int)
	go func() {
		ran, _, _ := m.Rescuer().Recover(context.Background(), time.Hour)
		done <- ran
	}()
	for range concurrency {
		<-g.started
	}
	close(g.release)
	if ran := <-done; ran != 2*users {
		t.Fatalf("recovered %d turns, want %d", ran, 2*users)
	}
	if most := g.most.Load(); most != concurrency {
		t.Fatalf("at most %d turns ran at once, want %d", most, concurrency)
	}
	for i := range users {
		conv := conversations(t, db, fmt.Sprintf("websocket:u%02d", i))[0]
		rows := transcript(t, db, conv.ID)
		if len(rows) != 4 || rows[2].ReplyTo != 1 || rows[3].ReplyTo != 2 || rows[3].Content != "echo: second (history: 2)" {
			t.Fatalf("user %d: %+v; want both answered, in order", i, rows)
		}
	}
	m.Shutdown(context.Background())
}

// A reply the database refuses is kept in memory and stored once it
// accepts it: the model is not called again, and the user gets that
// reply.
func TestUnstorableReplyIsKeptUntilStored(t *testing.T) {
	db := openStore(t, store.DriverSQLite, t.TempDir()+"/gateway.db")
	c := newClock(t0)
	rec := &recorder{}
	m := New(db, rec, Options{Now: c.Now, Logger: quiet, LeaseTTL: 300 * time.Millisecond, RescueEvery: 20 * time.Millisecond})
	t.Cleanup(func() { m.Shutdown(context.Background()) })
	m.Routes().Register("websocket", Route{Deliver: noopDeliver})
	startRescuer(t, m)
	refuse := `CREATE TRIGGER refuse_replies BEFORE INSERT ON messages WHEN NEW.role = 'assistant'
		BEGIN SELECT RAISE(ABORT, 'injected: the disk is full'); END`
	if err := db.Gorm().Exec(refuse).Error; err != nil {
		t.Fatal(err)
	}
	tk, err := m.Submit(context.Background(), msg("websocket:ann", "hello"), Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for m.WaitingOnStorage() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the reply never waited on storage")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := db.Gorm().Exec("DROP TRIGGER refuse_replies").Error; err != nil {
		t.Fatal(err)
	}
	out, err := tk.Wait(context.Background())
	if err != nil || out.Reply.Text != "echo: hello (history: 0)" {
		t.Fatalf("outcome = %+v, %v; want the kept reply", out, err)
	}
	expectPairedTurns(t, db, "websocket:ann", 1)
	if n := rec.calls.Load(); n != 1 {
		t.Fatalf("agent called %d times, want 1 (the reply was kept)", n)
	}
	// The conversation the failures touched is looked at once more by
	// the rescuer, which finds nothing left to claim.
	for deadline := time.Now().Add(10 * time.Second); m.WaitingOnStorage() != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("WaitingOnStorage = %d after the reply was stored", m.WaitingOnStorage())
		}
	}
	if n := rec.calls.Load(); n != 1 {
		t.Fatalf("agent called %d times after the rescuer's look, want 1", n)
	}
}
