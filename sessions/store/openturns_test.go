package store

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions/ledger"
)

// openSeqs returns the seqs of a conversation's messages in the index of
// open turns (its condition, as the index has it).
func openSeqs(t testing.TB, db *DB, convID string) []int64 {
	t.Helper()
	var seqs []int64
	if err := db.Gorm().Raw("SELECT seq FROM messages WHERE conversation_id = ? AND "+openSQL("")+" ORDER BY seq", convID).
		Scan(&seqs).Error; err != nil {
		t.Fatal(err)
	}
	return seqs
}

// userRow is a user message stored as a claimed turn of lead.
func userRow(conv string, seq, lead int64, track bool, at time.Time) ledger.Message {
	return ledger.Message{ConversationID: conv, Seq: seq, Role: agent.RoleUser, Content: fmt.Sprint("q", seq), Status: ledger.MsgOK, CreatedAt: at,
		TurnState: ledger.TurnRunning, TurnOwner: "r1", TurnAttempt: 1, TurnLead: lead, TurnTrack: track}
}

// replyRow is a final reply to lead, stored at seq.
func replyRow(conv string, seq, lead int64, at time.Time) ledger.Message {
	return ledger.Message{ConversationID: conv, Seq: seq, Role: agent.RoleAssistant, Content: "a", ReplyTo: lead, Status: ledger.MsgOK, CreatedAt: at}
}

// TestFinalRepliesCloseTheirTurns: the transaction that stores a final
// reply takes the messages it answers out of the open turns — the lead, the
// messages of its burst the append names, a message never claimed — and
// nothing else: not a tool call, a tool's result or the partial reply of a
// shutdown, not the lead of a channel that confirms delivery, not a message
// of another turn even when the append names it. Appends that share a group commit do the same. The mark
// agrees with the stored replies as the ledger's SQL reads them.
func TestFinalRepliesCloseTheirTurns(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *DB) {
		db := open()
		ctx := context.Background()
		at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		all := createConversations(t, db, stmtRows+3, at, "")
		conv, convs := all[0], all[1:]
		seq := int64(0)
		answering := func(answers []int64, msgs ...ledger.Message) {
			t.Helper()
			for i := range msgs {
				msgs[i].ConversationID = conv.ID
			}
			if err := db.Append(ctx, ledger.Append{Conv: conv, ExpectSeq: seq, Messages: msgs, At: at, Answers: answers}); err != nil {
				t.Fatal(err)
			}
			seq += int64(len(msgs))
			conv.LastSeq = seq
		}
		add := func(msgs ...ledger.Message) { t.Helper(); answering(nil, msgs...) }
		reply := func(s, to int64, status, errText, toolCalls string) ledger.Message {
			r := replyRow(conv.ID, s, to, at)
			r.Status, r.Error, r.ToolCalls = status, errText, toolCalls
			return r
		}
		expect := func(want ...int64) {
			t.Helper()
			if got := openSeqs(t, db, conv.ID); !slices.Equal(got, want) {
				t.Fatalf("open turns %v, want %v", got, want)
			}
		}

		add(userRow(conv.ID, 1, 1, false, at))
		add(reply(2, 1, ledger.MsgOK, "", `[{"id":"c1","name":"clock"}]`),
			ledger.Message{Seq: 3, Role: agent.RoleTool, Content: "12:00", ToolCallID: "c1", ReplyTo: 1, Status: ledger.MsgOK, CreatedAt: at})
		add(reply(4, 1, ledger.MsgInterrupted, ledger.InterruptedByShutdown, ""))
		add(reply(5, 1, ledger.MsgInterrupted, ledger.InterruptedByMessage, ""))
		expect(1)
		add(reply(6, 1, ledger.MsgOK, "", ""))
		expect()

		// A burst of two, answered by a failure notice: both closed. A
		// message the reply does not answer is left open, even when the
		// append names it.
		add(userRow(conv.ID, 7, 8, false, at), userRow(conv.ID, 8, 8, false, at))
		expect(7, 8)
		answering([]int64{7, 8}, reply(9, 8, ledger.MsgFailed, "agent down", ""))
		expect()

		// A channel that confirms delivery: the lead stays open for its
		// delivery mark, the message merged into it is closed.
		add(userRow(conv.ID, 10, 11, false, at), userRow(conv.ID, 11, 11, true, at), userRow(conv.ID, 12, 12, false, at))
		answering([]int64{10, 11, 12}, reply(13, 11, ledger.MsgOK, "", ""))
		expect(11, 12)
		answering([]int64{12}, reply(14, 12, ledger.MsgOK, "", ""))
		expect(11)
		if err := db.MarkDelivered(ctx, conv.ID, 11, "r1", 1, "tg:1", "", at); err != nil {
			t.Fatal(err)
		}
		expect()

		// A message never claimed (no lead yet), a reply to another
		// message after it: only its own reply closes it.
		pending := userRow(conv.ID, 15, 0, false, at)
		pending.TurnState, pending.TurnAttempt = ledger.TurnPending, 0
		add(pending, userRow(conv.ID, 16, 16, false, at))
		answering([]int64{15, 16}, reply(17, 16, ledger.MsgOK, "", ""))
		expect(15)
		add(reply(18, 15, ledger.MsgOK, "", ""))
		expect()

		// Stopped by the user: settled.
		add(userRow(conv.ID, 19, 19, false, at))
		add(reply(20, 19, ledger.MsgInterrupted, ledger.InterruptedByUser, ""))
		expect()

		// Replies to many conversations in one group commit.
		for _, c := range convs {
			if err := db.Append(ctx, ledger.Append{Conv: c, Messages: []ledger.Message{userRow(c.ID, 1, 1, false, at)}, At: at}); err != nil {
				t.Fatal(err)
			}
			c.LastSeq = 1
		}
		release := holdWriter(db)
		var writes []func() error
		for _, c := range convs {
			writes = append(writes, func() error {
				r := reply(2, 1, ledger.MsgOK, "", "")
				r.ConversationID = c.ID
				return db.Append(ctx, ledger.Append{Conv: c, ExpectSeq: 1, Messages: []ledger.Message{r}, At: at})
			})
		}
		for i, err := range queueInOrder(db, release, writes) {
			if err != nil {
				t.Fatalf("reply %d: %v", i, err)
			}
		}
		for _, c := range convs {
			if got := openSeqs(t, db, c.ID); len(got) != 0 {
				t.Fatalf("%s: open turns %v after its reply", c.ID, got)
			}
		}

		// What marked the turns (Message.settlesTurn) and what the ledger's
		// queries read as a final reply (finalReplyWhere) agree.
		var final []int64
		if err := db.Gorm().Raw("SELECT seq FROM messages AS r WHERE r.conversation_id = ? AND "+ledger.FinalReplySQL("r")+" ORDER BY seq", conv.ID).
			Scan(&final).Error; err != nil {
			t.Fatal(err)
		}
		var settles []int64
		for _, m := range transcript(t, db, conv.ID) {
			if ledger.SettlesTurn(&m) {
				settles = append(settles, m.Seq)
			}
		}
		if !slices.Equal(final, settles) || len(final) != 7 {
			t.Fatalf("final replies in SQL %v, in Go %v", final, settles)
		}
	})
}

// TestClaimFindsTurnsAnsweredWithoutTheMark: turns answered by a replica
// that did not mark them (an earlier version, during a rolling deploy) are
// still open in the index, and are never run again: the rescuer's scan
// skips them, and a claim leaves them — a solo turn or a message merged
// into a burst — marks them answered, and takes, up to its limit, only the
// messages that wait.
func TestClaimFindsTurnsAnsweredWithoutTheMark(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *DB) {
		db := open()
		ctx := context.Background()
		// Three turns answered as a turn stores its reply: each reply's
		// append marks its message.
		now0 := time.Now().UTC()
		c0 := &ledger.Conversation{ID: "c-answered", SessionKey: "websocket:ann", Channel: "websocket", Status: ledger.StatusActive,
			StartedAt: now0, LastActivityAt: now0}
		if err := db.CreateConversation(ctx, c0); err != nil {
			t.Fatal(err)
		}
		conv := c0.ID
		for i := range int64(3) {
			rows := []ledger.Message{userRow(conv, 2*i+1, 2*i+1, false, now0), replyRow(conv, 2*i+2, 2*i+1, now0)}
			if err := db.Append(ctx, ledger.Append{Conv: c0, ExpectSeq: 2 * i, Messages: rows, At: now0}); err != nil {
				t.Fatal(err)
			}
		}
		if got := openSeqs(t, db, conv); len(got) != 0 {
			t.Fatalf("open turns %v after three answered turns", got)
		}
		c, err := db.Conversation(ctx, conv)
		if err != nil {
			t.Fatal(err)
		}
		// A burst of two (7, 8) and its reply, then two messages waiting.
		now := time.Now().UTC()
		rows := []ledger.Message{userRow(conv, 7, 8, false, now), userRow(conv, 8, 8, false, now),
			replyRow(conv, 9, 8, now)}
		for seq := int64(10); seq <= 11; seq++ {
			w := userRow(conv, seq, 0, false, now)
			w.TurnState, w.TurnAttempt, w.TurnOwner = ledger.TurnPending, 0, "gone"
			rows = append(rows, w)
		}
		if err := db.Append(ctx, ledger.Append{Conv: c, ExpectSeq: 6, Messages: rows, At: now, Answers: []int64{7, 8}}); err != nil {
			t.Fatal(err)
		}
		if err := db.Gorm().Exec("UPDATE messages SET turn_state = 'running' WHERE conversation_id = ? AND role = 'user' AND seq < 10", conv).Error; err != nil {
			t.Fatal(err)
		}
		if got := openSeqs(t, db, conv); !slices.Equal(got, []int64{1, 3, 5, 7, 8, 10, 11}) {
			t.Fatalf("open turns %v, want the unmarked 1, 3, 5, 7, 8 and the waiting 10, 11", got)
		}
		orphans, err := db.OrphanTurns(ctx, time.Now().Add(-time.Hour), []string{"next"}, 10)
		if err != nil || len(orphans) != 2 || orphans[0].Seq != 10 || orphans[1].Seq != 11 {
			t.Fatalf("turns of gone replicas %+v, %v: want only 10 and 11", orphans, err)
		}
		b, err := db.ClaimBatch(ctx, ledger.Claim{ConversationID: conv, Owner: "next", TakeOver: true, Alive: []string{"next"}, Now: time.Now(), Limit: 1})
		if err != nil || b == nil || len(b.Rows) != 1 || b.Rows[0].Seq != 10 || b.Rows[0].Content != "q10" {
			t.Fatalf("claim %+v, %v: want 10 alone", b, err)
		}
		if got := openSeqs(t, db, conv); !slices.Equal(got, []int64{10, 11}) {
			t.Fatalf("open turns %v after the claim, want 10 (claimed) and 11", got)
		}
	})
}

// TestReleasedTelegramTurnLeavesItsBurstSettled: handing a Telegram
// turn's delivery back makes its lead due, not the messages merged into it,
// which its reply settled: once the lead is delivered, nothing of the turn
// is due. A message an earlier version left due once settled is not due.
func TestReleasedTelegramTurnLeavesItsBurstSettled(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *DB) {
		db := open()
		ctx := context.Background()
		at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		conv := createConversations(t, db, 1, at, "")[0]
		rows := []ledger.Message{userRow(conv.ID, 1, 2, false, at), userRow(conv.ID, 2, 2, true, at),
			replyRow(conv.ID, 3, 2, at)}
		if err := db.Append(ctx, ledger.Append{Conv: conv, Messages: rows, At: at, Answers: []int64{1, 2}}); err != nil {
			t.Fatal(err)
		}
		due := at.Add(time.Minute)
		if err := db.ReleaseTurn(ctx, conv.ID, 2, "r1", 1, due, "send failed"); err != nil {
			t.Fatal(err)
		}
		var dueSeqs []int64
		if err := db.Gorm().Raw("SELECT seq FROM messages WHERE conversation_id = ? AND turn_due IS NOT NULL", conv.ID).Scan(&dueSeqs).Error; err != nil {
			t.Fatal(err)
		}
		turns, err := db.DueTurns(ctx, due, 10)
		if err != nil || len(turns) != 1 || turns[0].Seq != 2 || !slices.Equal(dueSeqs, []int64{2}) {
			t.Fatalf("due turns %+v (stored due: %v), %v: want the lead alone", turns, dueSeqs, err)
		}
		c, err := db.ClaimTurn(ctx, conv.ID, 2, "", 1, "r2", due)
		if err != nil || c == nil || !c.Answered {
			t.Fatalf("claim of the delivery %+v, %v", c, err)
		}
		if err := db.MarkDelivered(ctx, conv.ID, 2, "r2", c.Attempt, "tg:1", "", due); err != nil {
			t.Fatal(err)
		}
		// An earlier version's leftover: a settled message still due.
		if err := db.Gorm().Exec("UPDATE messages SET turn_due = ? WHERE conversation_id = ? AND seq = 1", due, conv.ID).Error; err != nil {
			t.Fatal(err)
		}
		if turns, err := db.DueTurns(ctx, due, 10); err != nil || len(turns) != 0 {
			t.Fatalf("due turns %+v, %v after the delivery: want none", turns, err)
		}
		if got := openSeqs(t, db, conv.ID); len(got) != 0 {
			t.Fatalf("open turns %v after the delivery", got)
		}
	})
}

// TestOpenIndexAddedToEarlierDatabase: a database of the version before
// the index of open turns gets it when it opens, with its answered turns
// marked (and only those) and no settled turn left due, and loses the
// index by time.
func TestOpenIndexAddedToEarlierDatabase(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *DB) {
		db := open()
		ctx := context.Background()
		at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		conv := createConversations(t, db, 1, at, "")[0]
		rows := []ledger.Message{
			userRow(conv.ID, 1, 1, false, at), // answered
			replyRow(conv.ID, 2, 1, at),
			userRow(conv.ID, 3, 4, false, at), // merged into 4, answered
			userRow(conv.ID, 4, 4, true, at),  // answered, waits for its delivery mark
			replyRow(conv.ID, 5, 4, at),
			userRow(conv.ID, 6, 6, false, at), // cut by a shutdown
			{Seq: 7, Role: agent.RoleAssistant, Content: "par", ReplyTo: 6, Status: ledger.MsgInterrupted, Error: ledger.InterruptedByShutdown, CreatedAt: at},
			userRow(conv.ID, 8, 0, false, at), // never claimed
		}
		for i := range rows {
			rows[i].ConversationID = conv.ID
		}
		if err := db.Append(ctx, ledger.Append{Conv: conv, Messages: rows, At: at}); err != nil {
			t.Fatal(err)
		}
		for _, stmt := range []string{
			"DROP INDEX " + openIndex,
			"UPDATE messages SET turn_state = 'running' WHERE role = 'user'",
			// Left due by an earlier version: a merged message once its
			// Telegram lead was handed back, and a turn a shutdown cut.
			"UPDATE messages SET turn_due = created_at WHERE seq IN (3, 6)",
			"CREATE INDEX ix_messages_user_created ON messages (created_at) WHERE role = 'user'",
		} {
			if err := db.Gorm().Exec(stmt).Error; err != nil {
				t.Fatal(err)
			}
		}
		if err := migrateModels(db.Gorm()); err != nil {
			t.Fatal(err)
		}
		if !db.Gorm().Migrator().HasIndex(&ledger.Message{}, openIndex) || db.Gorm().Migrator().HasIndex(&ledger.Message{}, "ix_messages_user_created") {
			t.Fatal("want the index of open turns, and no index by time")
		}
		var states []string
		if err := db.Gorm().Raw("SELECT turn_state FROM messages WHERE conversation_id = ? AND role = 'user' ORDER BY seq", conv.ID).
			Scan(&states).Error; err != nil {
			t.Fatal(err)
		}
		want := []string{ledger.TurnAnswered, ledger.TurnAnswered, ledger.TurnRunning, ledger.TurnRunning, ledger.TurnRunning}
		if !slices.Equal(states, want) {
			t.Fatalf("turn states after migrating %q, want %q", states, want)
		}
		if got := openSeqs(t, db, conv.ID); !slices.Equal(got, []int64{4, 6, 8}) {
			t.Fatalf("open turns %v, want 4, 6, 8", got)
		}
		var due []int64
		if err := db.Gorm().Raw("SELECT seq FROM messages WHERE turn_due IS NOT NULL ORDER BY seq").Scan(&due).Error; err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(due, []int64{6}) {
			t.Fatalf("due after migrating: %v, want the cut turn 6 alone", due)
		}
	})
}

// A turn claimed, answered and delivered between TurnAt's read of its
// message and its read of the reply is told as it is then — tracked, with
// its delivery's reference — not as the message was before its claim,
// paired with the reply (a fire was once settled sent on such a read,
// without the chat's reference).
func TestTurnAtReadsTheMessageAgainOnceItFindsAReply(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *DB) {
		db := open()
		ctx := context.Background()
		at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		conv := createConversations(t, db, 1, at, "")[0]
		pending := userRow(conv.ID, 1, 0, false, at)
		pending.TurnState, pending.TurnOwner, pending.TurnAttempt = ledger.TurnPending, "", 0
		if err := db.Append(ctx, ledger.Append{Conv: conv, ExpectSeq: 0, Messages: []ledger.Message{pending}, At: at}); err != nil {
			t.Fatal(err)
		}
		db.afterTurnRead = func() {
			db.afterTurnRead = nil
			b, err := db.ClaimBatch(ctx, ledger.Claim{ConversationID: conv.ID, Owner: "r1", Now: at, Limit: 10, Track: true})
			if err != nil || b == nil {
				t.Fatalf("claim: %+v, %v", b, err)
			}
			conv.LastSeq, conv.Epoch = b.LastSeq, b.Epoch
			if err := db.Append(ctx, ledger.Append{Conv: conv, ExpectSeq: b.LastSeq, At: at, Answers: []int64{1},
				Messages: []ledger.Message{replyRow(conv.ID, b.LastSeq+1, b.Lead(), at)}}); err != nil {
				t.Fatalf("reply: %v", err)
			}
			if err := db.MarkDelivered(ctx, conv.ID, b.Lead(), "r1", b.Attempt, "tg-1", "", at); err != nil {
				t.Fatalf("delivered: %v", err)
			}
		}
		tr, err := db.TurnAt(ctx, conv.ID, 1)
		if err != nil || tr == nil {
			t.Fatalf("turn: %+v, %v", tr, err)
		}
		if db.afterTurnRead != nil {
			t.Fatal("the turn was not claimed between TurnAt's reads")
		}
		if !tr.Track || tr.DeliveryRef != "tg-1" || tr.State != ledger.TurnDelivered || tr.ReplySeq != 2 {
			t.Fatalf("a turn read across its claim, reply and delivery: %+v", tr)
		}
	})
}
