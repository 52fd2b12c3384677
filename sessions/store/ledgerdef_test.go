package store

import (
	"context"
	"errors"
	"math/rand"
	"slices"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions/ledger"
)

// claimByDefinition is what ClaimBatch must take, by the ledger's
// definition in one query: the claimable user messages whose final reply
// is not stored (finalReplyOf probed for each, as every claim did before
// the index of open turns), oldest first, up to the limit.
func claimByDefinition(t *testing.T, db *DB, c ledger.Claim) (seqs []int64, took, foreign bool, attempt int) {
	t.Helper()
	alive := c.Alive
	if !slices.Contains(alive, c.Owner) {
		alive = append(slices.Clone(alive), c.Owner)
	}
	held := c.Held
	if len(held) == 0 {
		held = []int64{-1}
	}
	rows, err := db.Gorm().Raw(`SELECT u.seq, u.turn_state, u.turn_attempt, u.turn_owner
			FROM messages AS u WHERE u.conversation_id = ? AND u.role = 'user' AND u.turn_state IN ('pending', 'interrupted', 'running')
			AND (u.turn_state IN ('pending', 'interrupted') OR u.turn_owner = ''
				OR (u.turn_owner = ? AND u.seq NOT IN ?) OR (? AND u.turn_owner NOT IN ?))
			AND (u.turn_due IS NULL OR u.turn_due <= ?)
			AND NOT `+ledger.AnsweredSQL("u")+`
			ORDER BY u.seq LIMIT ?`, c.ConversationID, c.Owner, held, c.TakeOver, alive, c.Now, c.Limit).Rows()
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var s int64
		var state, by string
		var n int
		if err := rows.Scan(&s, &state, &n, &by); err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, s)
		attempt = max(attempt, n)
		took = took || state == ledger.TurnRunning
		foreign = foreign || (by != c.Owner && by != "")
	}
	return seqs, took, foreign, attempt + 1
}

// checkMarks fails when a user message stored answered has no final reply
// (finalReplyOf), and counts the answered ones still stored open.
func checkMarks(t *testing.T, db *DB, conv string, step int) (unmarkedAnswered int) {
	t.Helper()
	type row struct {
		Seq      int64
		State    string
		Track    bool
		Answered bool
	}
	var rs []row
	if err := db.Gorm().Raw(`SELECT u.seq AS seq, u.turn_state AS state, u.turn_track AS track, `+ledger.AnsweredSQL("u")+` AS answered
		FROM messages AS u WHERE u.conversation_id = ? AND u.role = 'user' ORDER BY u.seq`, conv).Scan(&rs).Error; err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.State == ledger.TurnAnswered && !r.Answered {
			t.Fatalf("step %d: seq %d marked answered but finalReplyOf is false (%+v)", step, r.Seq, rs)
		}
		if (r.State == ledger.TurnRunning || r.State == ledger.TurnPending || r.State == ledger.TurnInterrupted) && !r.Track && r.Answered {
			unmarkedAnswered++
		}
	}
	return
}

// TestLedgerAgreesWithItsDefinition runs random histories — messages
// stored pending or already claimed, claims by three owners with random
// held messages, live owners and limits, replies of every kind (final,
// failed, expired, stopped, tool calls, shutdown and new-message partials
// handed back), replies naming a wrong message among those they answer,
// replies of an earlier version that does not mark, hand-backs and
// delivery marks — and checks after every step that no message is marked
// answered without a final reply, and at every claim that ClaimBatch took
// exactly what the ledger's definition says (rows, took, foreign,
// attempt). Then the upgrade's marking is checked against the same
// definition.
func TestLedgerAgreesWithItsDefinition(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *DB) {
		db := open()
		ctx := context.Background()
		at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		convs := createConversations(t, db, 16, at, "")
		owners := []string{"r1", "r2", "r3"}
		totalUnmarked, claims, nonEmpty := 0, 0, 0
		for ci, conv := range convs {
			rng := rand.New(rand.NewSource(int64(ci) + 1))
			type active struct {
				b     *ledger.Batch
				owner string
				track bool
			}
			var batches []active
			refresh := func() {
				c, err := db.Conversation(ctx, conv.ID)
				if err != nil {
					t.Fatal(err)
				}
				*conv = *c
			}
			now := at
			for step := 0; step < 120; step++ {
				now = now.Add(time.Second)
				refresh()
				switch op := rng.Intn(10); {
				case op < 3: // user messages
					n := 1 + rng.Intn(2)
					var msgs []ledger.Message
					for i := 0; i < n; i++ {
						s := conv.LastSeq + int64(i) + 1
						m := ledger.Message{ConversationID: conv.ID, Seq: s, Role: agent.RoleUser, Content: "q", Status: ledger.MsgOK, CreatedAt: now,
							TurnState: ledger.TurnPending, TurnOwner: owners[rng.Intn(3)]}
						if n == 1 && rng.Intn(3) == 0 {
							m.TurnState, m.TurnAttempt, m.TurnLead, m.TurnTrack = ledger.TurnRunning, 1, s, rng.Intn(2) == 0
							batches = append(batches, active{&ledger.Batch{ConversationID: conv.ID, Attempt: 1, Rows: []ledger.BatchRow{{Seq: s}}}, m.TurnOwner, m.TurnTrack})
						}
						msgs = append(msgs, m)
					}
					if err := db.Append(ctx, ledger.Append{Conv: conv, ExpectSeq: conv.LastSeq, Messages: msgs, At: now}); err != nil {
						t.Fatal(err)
					}
				case op < 6: // claim
					owner := owners[rng.Intn(3)]
					var held []int64
					for s := int64(1); s <= conv.LastSeq; s++ {
						if rng.Intn(4) == 0 {
							held = append(held, s)
						}
					}
					var alive []string
					for _, o := range owners {
						if rng.Intn(2) == 0 {
							alive = append(alive, o)
						}
					}
					c := ledger.Claim{ConversationID: conv.ID, Owner: owner, Held: held, TakeOver: rng.Intn(2) == 0, Alive: alive,
						Now: now, Limit: 1 + rng.Intn(3), Track: rng.Intn(3) == 0}
					wantSeqs, took, foreign, attempt := claimByDefinition(t, db, c)
					b, err := db.ClaimBatch(ctx, c)
					if err != nil {
						t.Fatal(err)
					}
					claims++
					var got []int64
					if b != nil {
						got = b.Seqs()
						nonEmpty++
					}
					if !slices.Equal(got, wantSeqs) {
						t.Fatalf("conv %d step %d: claimed %v, by definition %v", ci, step, got, wantSeqs)
					}
					if b != nil && (b.Took != took || b.Foreign != foreign || b.Attempt != attempt) {
						t.Fatalf("conv %d step %d: took/foreign/attempt %v %v %d, by definition %v %v %d", ci, step, b.Took, b.Foreign, b.Attempt, took, foreign, attempt)
					}
					if b != nil {
						batches = append(batches, active{b, owner, c.Track})
					}
				case op < 9 && len(batches) > 0: // reply for a batch
					i := rng.Intn(len(batches))
					a := batches[i]
					batches = slices.Delete(batches, i, i+1)
					lead := a.b.Lead()
					answers := a.b.Seqs()
					if rng.Intn(4) == 0 && conv.LastSeq > 0 {
						answers = append(answers, 1+rng.Int63n(conv.LastSeq)) // a wrong seq
					}
					var msgs []ledger.Message
					var settle *ledger.Settle
					r := replyRow(conv.ID, 0, lead, now)
					switch rng.Intn(7) {
					case 0:
						r.Status, r.Error = ledger.MsgFailed, "agent down"
					case 1:
						r.Status, r.Error = ledger.MsgFailed, ledger.NotRunPrefix+" old"
					case 2:
						r.Status, r.Error = ledger.MsgInterrupted, ledger.InterruptedByShutdown
						d := now
						settle = &ledger.Settle{Owner: a.owner, Attempt: a.b.Attempt, DueAt: &d}
					case 3:
						r.Status, r.Error = ledger.MsgInterrupted, ledger.InterruptedByMessage
					case 4:
						r.Status, r.Error = ledger.MsgInterrupted, ledger.InterruptedByUser
					case 5:
						tc := ledger.Message{ConversationID: conv.ID, Role: agent.RoleAssistant, ToolCalls: `[{"id":"c","name":"x"}]`, ReplyTo: lead, Status: ledger.MsgOK, CreatedAt: now}
						msgs = append(msgs, tc, ledger.Message{ConversationID: conv.ID, Role: agent.RoleTool, ToolCallID: "c", Content: "r", ReplyTo: lead, Status: ledger.MsgOK, CreatedAt: now})
					}
					msgs = append(msgs, r)
					for j := range msgs {
						msgs[j].Seq = conv.LastSeq + int64(j) + 1
					}
					err := db.Append(ctx, ledger.Append{Conv: conv, ExpectSeq: conv.LastSeq, Messages: msgs, At: now, TurnSeq: lead, Answers: answers, Settle: settle})
					if err != nil && !errors.Is(err, ledger.ErrLostClaim) {
						t.Fatal(err)
					}
					if rng.Intn(5) == 0 {
						// An earlier version's reply: no mark.
						if err := db.Gorm().Exec("UPDATE messages SET turn_state = 'running' WHERE conversation_id = ? AND role = 'user' AND turn_state = 'answered'", conv.ID).Error; err != nil {
							t.Fatal(err)
						}
					}
				case len(batches) > 0: // release or deliver
					i := rng.Intn(len(batches))
					a := batches[i]
					batches = slices.Delete(batches, i, i+1)
					if rng.Intn(2) == 0 {
						_ = db.ReleaseTurn(ctx, conv.ID, a.b.Lead(), a.owner, a.b.Attempt, now.Add(time.Duration(rng.Intn(3))*time.Second), "x")
					} else if a.track {
						_ = db.MarkDelivered(ctx, conv.ID, a.b.Lead(), a.owner, a.b.Attempt, "ref", "", now)
					}
				}
				totalUnmarked += checkMarks(t, db, conv.ID, step)
			}
		}
		if claims == 0 || nonEmpty == 0 || totalUnmarked == 0 {
			t.Fatalf("the histories did not exercise the ledger: %d claims (%d took something), %d answered messages seen unmarked",
				claims, nonEmpty, totalUnmarked)
		}
		for _, stmt := range []string{"DROP INDEX " + openIndex, "UPDATE messages SET turn_state = 'running' WHERE role = 'user' AND turn_state = 'answered'"} {
			if err := db.Gorm().Exec(stmt).Error; err != nil {
				t.Fatal(err)
			}
		}
		if err := createOpenIndex(db.Gorm()); err != nil {
			t.Fatal(err)
		}
		var bad, marked, left int64
		db.Gorm().Raw("SELECT count(*) FROM messages AS u WHERE u.role = 'user' AND u.turn_state = 'answered' AND NOT " + ledger.AnsweredSQL("u")).Scan(&bad)
		db.Gorm().Raw("SELECT count(*) FROM messages AS u WHERE u.role = 'user' AND u.turn_state = 'answered'").Scan(&marked)
		db.Gorm().Raw("SELECT count(*) FROM messages AS u WHERE " + openSQL("u.") + " AND NOT u.turn_track AND " + ledger.AnsweredSQL("u")).Scan(&left)
		if bad != 0 || left != 0 || marked == 0 {
			t.Fatalf("the upgrade marked %d, %d of them without a final reply, and left %d answered open", marked, bad, left)
		}
	})
}
