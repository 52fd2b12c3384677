package sessions

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/store"
)

// Deterministic regressions of the ledger's claims, beside the
// fault-at-every-step harness (TestFaultAtEveryStep), which found them by
// chance.

// A claim of this replica never takes a turn a runner here holds: a
// message stored already claimed, as its own turn, while its call runs.
// (The rescuer's claim for another turn of the conversation once took
// it, and both ran it.)
func TestAClaimNeverTakesATurnHeldHere(t *testing.T) {
	db := openStore(t, store.DriverSQLite, filepath.Join(t.TempDir(), "gateway.db"))
	rec := &recorder{block: make(chan struct{}), started: make(chan struct{}, 2)}
	m := newManager(t, db, rec, newClock(t0), map[string]Policy{"websocket": {MaxHistory: 20, Busy: BusyPolicy{Mode: BusyCollect}}})
	in := msg("websocket:ann", "hello")
	in.ClientMsgID = "a1"
	tk, err := m.Submit(context.Background(), in, Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	<-rec.started // stored as its own turn, running, held here
	conv := tk.ConversationID()
	b, err := m.store.ClaimBatch(context.Background(), ledger.Claim{ConversationID: conv, Owner: m.opts.ReplicaID,
		Held: m.heldSeqs(in.SessionKey, conv), TakeOver: true, Alive: []string{m.opts.ReplicaID}, Now: m.now(), Limit: 20})
	if err != nil {
		t.Fatal(err)
	}
	if b != nil {
		t.Fatalf("a claim took the running turn %+v", b.Rows)
	}
	close(rec.block)
	if _, err := tk.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := rec.calls.Load(); n != 1 {
		t.Fatalf("the model ran %d times, want once", n)
	}
}

// In busy mode queue a rescue of a turn runs the turns before it first,
// one a turn, and returns only once the turn it was given is answered —
// it does not claim the oldest and leave the one it found.
func TestQueueRescueRunsUntilItsTurnIsAnswered(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gateway.db")
	rec := &recorder{block: make(chan struct{}), started: make(chan struct{}, 4)}
	a := New(openStore(t, store.DriverSQLite, path), rec, Options{Policies: queued, Now: newClock(t0).Now, Logger: quiet})
	var last *Ticket
	for _, id := range []string{"q0", "q1", "q2"} {
		in := msg("websocket:ann", id)
		in.ClientMsgID = id
		tk, err := a.Submit(context.Background(), in, Hooks{})
		if err != nil {
			t.Fatal(err)
		}
		last = tk
	}
	<-rec.started // q0 runs; q1 and q2 wait
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	a.Shutdown(ctx) // q0 is interrupted and handed back; q1, q2 stay pending
	cancel()

	db := openStore(t, store.DriverSQLite, path)
	b := newManager(t, db, &recorder{}, newClock(t0.Add(time.Minute)), queued)
	b.Routes().Register("websocket", Route{Deliver: func(context.Context, Delivery) (string, error) { return "", nil }})
	d := ledger.DueTurn{ConversationID: last.ConversationID(), Seq: last.Seq(), SessionKey: "websocket:ann", Channel: "websocket", UserID: "ann"}
	if _, err := b.rescue.rescueTurn(context.Background(), d, 0, false); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"q0", "q1", "q2"} {
		tr, err := db.TurnByClientID(context.Background(), "websocket:ann", id)
		if err != nil || tr == nil || !tr.Settled() {
			t.Fatalf("%s after the rescue of q2: %+v, %v", id, tr, err)
		}
	}
	// One answer each (q0's reply cut by the shutdown stays stored).
	answers := map[int64]int{}
	for _, r := range transcript(t, db, last.ConversationID()) {
		if ledger.IsFinalReply(&r) && r.Status == MsgOK {
			answers[r.ReplyTo]++
		}
	}
	if len(answers) != 3 {
		t.Fatalf("answers by message: %v, want one for each of 3", answers)
	}
	for seq, n := range answers {
		if n != 1 {
			t.Fatalf("message %d answered %d times", seq, n)
		}
	}
}

// A reply whose append failed is appended again only once the turn shows
// no reply: the failed try may have landed, and the cached conversation
// may have been refreshed since (the user's next message, another turn),
// so the same append again need not find the conversation moved. (Two
// replies to one turn, found by the fault harness.)
func TestARetriedReplyAppendFirstLooksWhetherItLanded(t *testing.T) {
	db := openStore(t, store.DriverSQLite, filepath.Join(t.TempDir(), "gateway.db"))
	m := newManager(t, db, &recorder{}, newClock(t0), map[string]Policy{"websocket": {MaxHistory: 20}})
	ctx := context.Background()
	conv := &Conversation{ID: "c1", SessionKey: "websocket:ann", Channel: "websocket", UserID: "ann", Status: StatusActive, StartedAt: t0, LastActivityAt: t0}
	if err := db.CreateConversation(ctx, conv); err != nil {
		t.Fatal(err)
	}
	user := Message{ConversationID: "c1", Seq: 1, Role: "user", Content: "hi", Status: MsgOK, CreatedAt: t0,
		TurnState: TurnRunning, TurnOwner: m.opts.ReplicaID, TurnAttempt: 1, TurnLead: 1}
	if err := db.Append(ctx, ledger.Append{Conv: conv, ExpectSeq: 0, RequireActive: true, Messages: []Message{user}, At: t0}); err != nil {
		t.Fatal(err)
	}
	hc := &hotConv{conv: *conv, cap: 20}
	reply := func() []Message {
		return []Message{{ConversationID: "c1", Role: "assistant", Content: "hello", ReplyTo: 1, Status: MsgOK, CreatedAt: t0}}
	}
	// The first try lands, its answer lost: the cache is not told.
	landed := *conv
	msgs := reply()
	msgs[0].Seq = 2
	if err := db.Append(ctx, ledger.Append{Conv: &landed, ExpectSeq: 1, Messages: msgs, At: t0, TurnSeq: 1}); err != nil {
		t.Fatal(err)
	}
	// Something else refreshes the cached conversation meanwhile.
	fresh, err := db.Conversation(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	hc.conv = *fresh
	done, err := m.tryAppendReply(ctx, hc, reply(), t0, agent.Usage{}, 0, models{}, []int64{1}, 1, TurnAnswered, "", nil, func() bool { return false },
		errors.New("commit: connection reset"))
	if !done || err != nil {
		t.Fatalf("retry: done %v, %v", done, err)
	}
	var n int64
	db.Gorm().Model(&Message{}).Where("conversation_id = ? AND role = ?", "c1", "assistant").Count(&n)
	if n != 1 {
		t.Fatalf("%d replies stored for one turn, want 1", n)
	}
}
