package store

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"gorm.io/gorm"

	"github.com/chatgate/chatgate/sessions/ledger"
)

// The turn ledger's SQL. Its states and transitions are described in
// package ledger (ledger.Turn); its settle rule is ledger.SettlesTurn.

// The open turns. A user message enters ix_messages_open when it is
// stored and leaves it when its turn is settled: answered (the final
// reply's own transaction marks its messages, answerTurnsSQL), or marked
// delivered on a channel that confirms delivery. The queries for turns to
// claim or to rescue read that index, so they cost what is still open,
// never the conversation's length. The mark narrows, it does not decide:
// a claim still reads the stored replies of what it found, so a message
// answered without the mark (by a replica of an earlier version, during a
// rolling deploy) is never run twice; the claim that finds it answered
// marks it.
const openIndex = "ix_messages_open"

// openWhere is the index's condition. Every query that reads the index
// repeats it word for word: SQLite uses a partial index only for a query
// that has its terms.
var openWhere = "%[1]srole = 'user' AND %[1]sturn_state IN (" + ledger.SQLList(ledger.OpenStates) + ")"

// openSQL is openWhere on a row: "" for the table itself, or "u." for an
// alias.
func openSQL(prefix string) string { return fmt.Sprintf(openWhere, prefix) }

// answerTurnsSQL marks answered, in the transaction of final replies, the
// user messages they answer, each found by its primary key. It marks a
// message only while it is open and only if the reply answers it (the
// condition of finalReplyOf, from the reply's side: the reply's lead is
// the message, or the lead of the burst the message was merged into, and
// the reply comes after it), so a wrong seq given marks nothing. The lead
// of a turn whose channel confirms delivery stays open until it is marked
// delivered. (PostgreSQL's appends run pgAnswerTurns.)
func answerTurnsSQL(rows []ledger.AnswerRow) (string, []any) {
	if len(rows) == 1 {
		r := &rows[0]
		return answerTurnSQL, []any{&r.Conv, &r.Seq, &r.Lead, &r.Lead, &r.Reply}
	}
	args := make([]any, 0, 4*len(rows))
	for i := range rows {
		r := &rows[i]
		args = append(args, &r.Conv, &r.Seq, &r.Lead, &r.Reply)
	}
	return answerTurnsSQLTexts.text(len(rows)), args
}

var (
	answerTurnSQL = `UPDATE messages SET turn_state = 'answered' WHERE ` +
		ledger.AnswerWhere("?", "?", "?", "?", openSQL(""))
	answerTurnsSQLTexts = newRowTexts("WITH v(v_conv, v_seq, v_lead, v_reply) AS (VALUES ", "(?, ?, ?, ?)",
		`) UPDATE messages SET turn_state = 'answered' FROM v WHERE `+
			ledger.AnswerWhere("v.v_conv", "v.v_seq", "v.v_lead", "v.v_reply", openSQL("")))
)

// createOpenIndex adds ix_messages_open. A database of an earlier version
// first has its answered turns marked, by one join of its user messages
// with their final replies (a probe per message would read each
// conversation once per message).
func createOpenIndex(tx *gorm.DB) error {
	if tx.Migrator().HasIndex(&ledger.Message{}, openIndex) {
		return nil
	}
	if err := tx.Exec(`UPDATE messages AS u SET turn_state = 'answered'
		FROM (SELECT conversation_id, reply_to, max(seq) AS last FROM messages AS r WHERE ` + ledger.FinalReplySQL("r") + `
			GROUP BY conversation_id, reply_to) AS r
		WHERE ` + openSQL("u.") + ` AND NOT u.turn_track AND r.conversation_id = u.conversation_id
		AND r.reply_to = (CASE WHEN u.turn_lead > 0 THEN u.turn_lead ELSE u.seq END) AND r.last > u.seq`).Error; err != nil {
		return fmt.Errorf("mark the answered turns: %w", err)
	}
	// An earlier version handed a Telegram turn's merged messages back
	// with its lead, and they stayed due once it was delivered.
	if err := tx.Exec(`UPDATE messages SET turn_due = NULL WHERE turn_due IS NOT NULL AND NOT (` + openSQL("") + `)`).Error; err != nil {
		return fmt.Errorf("clear settled turns that were left due: %w", err)
	}
	return tx.Exec("CREATE INDEX IF NOT EXISTS " + openIndex + " ON messages (conversation_id, seq) WHERE " + openSQL("")).Error
}

// settleTurns builds the claim-guarded UPDATE that hands the appends'
// turns back, interrupted. It is rare (a shutdown), so one statement per
// turn.
func settleTurns(a *ledger.Append) (string, []any) {
	st := a.Settle
	return `UPDATE messages SET turn_state = 'interrupted', turn_owner = '', turn_due = ?
		WHERE conversation_id = ? AND (seq = ? OR turn_lead = ?) AND role = 'user' AND turn_owner = ? AND turn_attempt = ?`,
		[]any{st.DueAt, a.Conv.ID, a.TurnSeq, a.TurnSeq, st.Owner, st.Attempt}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TurnAt returns the turn of a user message, or nil.
func (s *DB) TurnAt(ctx context.Context, convID string, seq int64) (*ledger.Turn, error) {
	return observe(ctx, s, ledger.Call{Op: "TurnAt", Conv: convID}, func() (*ledger.Turn, error) {
		m, err := s.message(ctx, convID, seq)
		if err != nil || m == nil || m.Role != "user" {
			return nil, err
		}
		if s.afterTurnRead != nil {
			s.afterTurnRead()
		}
		return s.withReply(ctx, ledger.TurnOf(m))
	})
}

// withReply derives the turn's state from its stored final reply. The
// user message was read before the reply, in a statement of its own: a
// turn claimed, run and answered between the two reads would pair the
// reply with the message as it was before its claim (not yet tracked,
// its lead not set). So once a reply is found the message is read again,
// as new as the reply at least, and its lead's reply taken.
func (s *DB) withReply(ctx context.Context, t *ledger.Turn) (*ledger.Turn, error) {
	reply, err := s.finalReply(ctx, t.ConversationID, t.Lead)
	if err != nil {
		return nil, err
	}
	if reply == nil {
		return t, nil
	}
	m, err := s.message(ctx, t.ConversationID, t.Seq)
	if err != nil || m == nil {
		return nil, err
	}
	again := ledger.TurnOf(m)
	if again.Lead != t.Lead {
		if reply, err = s.finalReply(ctx, again.ConversationID, again.Lead); err != nil {
			return nil, err
		}
	}
	t = again
	if reply != nil {
		t.ApplyReply(reply)
	}
	return t, nil
}

// TurnByClientID returns the turn of the session key's message with that
// client id, in whichever of the key's conversations it is, or nil.
func (s *DB) TurnByClientID(ctx context.Context, key, clientID string) (*ledger.Turn, error) {
	return observe(ctx, s, ledger.Call{Op: "TurnByClientID", Conv: ""}, func() (*ledger.Turn, error) {
		var m ledger.Message
		err := s.read.WithContext(ctx).Table("messages").Select("messages.*").
			Joins("JOIN conversations AS c ON c.id = messages.conversation_id").
			Where("c.session_key = ? AND messages.client_msg_id = ?", key, clientID).
			Order("messages.created_at DESC").Take(&m).Error
		if notFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("look up client message %s of %s: %w", clientID, key, err)
		}
		return s.withReply(ctx, ledger.TurnOf(&m))
	})
}

// Message returns one message by its conversation and seq, or nil.
func (s *DB) Message(ctx context.Context, convID string, seq int64) (*ledger.Message, error) {
	return observe(ctx, s, ledger.Call{Op: "Message", Conv: convID}, func() (*ledger.Message, error) {
		return s.message(ctx, convID, seq)
	})
}

func (s *DB) message(ctx context.Context, convID string, seq int64) (*ledger.Message, error) {
	var m ledger.Message
	err := s.read.WithContext(ctx).Where("conversation_id = ? AND seq = ?", convID, seq).Take(&m).Error
	if notFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load message %s/%d: %w", convID, seq, err)
	}
	return &m, nil
}

// dueColumns are what DueTurns, OrphanTurns and OwnTurns return, in
// scanDue's order, from messages (u) and their conversations (c).
const dueColumns = `SELECT u.conversation_id, u.seq, c.session_key, c.channel, u.turn_state, COALESCE(u.client_msg_id, ''),
	u.created_at, c.user_id, c.chat_id, u.turn_owner, u.turn_attempt FROM `

func dueSQL(from, where string) string {
	return dueColumns + from + " JOIN conversations AS c ON c.id = u.conversation_id " + where
}

func (s *DB) scanDue(ctx context.Context, from, where string, args ...any) ([]ledger.DueTurn, error) {
	rows, err := s.read.WithContext(ctx).Raw(dueSQL(from, where), args...).Rows()
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []ledger.DueTurn
	for rows.Next() {
		var d ledger.DueTurn
		var userID, chatID *string
		if err := rows.Scan(&d.ConversationID, &d.Seq, &d.SessionKey, &d.Channel, &d.State, &d.ClientMsgID, &d.CreatedAt,
			&userID, &chatID, &d.Owner, &d.Attempt); err != nil {
			return nil, err
		}
		if userID != nil {
			d.UserID = *userID
		}
		if chatID != nil {
			d.ChatID = *chatID
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// DueTurns returns up to limit unowned turns due at now, the longest due
// first: pending and interrupted ones, and deliveries handed back. A
// settled turn is never due (ReleaseTurn hands back open turns only); one
// an earlier version left due is not returned.
func (s *DB) DueTurns(ctx context.Context, now time.Time, limit int) ([]ledger.DueTurn, error) {
	return observe(ctx, s, ledger.Call{Op: "DueTurns", Conv: ""}, func() ([]ledger.DueTurn, error) {
		out, err := s.scanDue(ctx, "messages AS u", dueWhere, now, limit)
		if err != nil {
			return nil, fmt.Errorf("find due turns: %w", err)
		}
		return out, nil
	})
}

var dueWhere = "WHERE u.turn_due <= ? AND " + openSQL("u.") + " ORDER BY u.turn_due, u.conversation_id, u.seq LIMIT ?"

// OrphanTurns returns up to limit turns of messages stored since the given
// time that are held by an owner not among alive: running, or answered and
// not yet marked delivered on a channel that confirms delivery. It reads
// the open turns (ix_messages_open); the rescuer calls it when a replica
// died, and once at start.
func (s *DB) OrphanTurns(ctx context.Context, since time.Time, alive []string, limit int) ([]ledger.DueTurn, error) {
	return observe(ctx, s, ledger.Call{Op: "OrphanTurns", Conv: ""}, func() ([]ledger.DueTurn, error) {
		out, err := s.scanDue(ctx, s.openFrom(), orphanWhere, since, alive, limit)
		if err != nil {
			return nil, fmt.Errorf("find turns of gone replicas: %w", err)
		}
		return out, nil
	})
}

var orphanWhere = `WHERE ` + openSQL("u.") + ` AND u.created_at >= ? AND u.turn_due IS NULL AND u.turn_owner <> ''
	AND u.turn_owner NOT IN ? AND u.turn_state IN ('running', 'pending') AND (u.turn_track OR NOT ` + ledger.AnsweredSQL("u") + `)
	ORDER BY u.created_at, u.conversation_id, u.seq LIMIT ?`

// OwnTurns returns the turns of a conversation that owner holds in the
// ledger and that are not settled: not yet answered, or answered and not
// yet marked delivered on a channel that confirms delivery. The caller
// compares them with what its runners hold: the others it claims again.
func (s *DB) OwnTurns(ctx context.Context, convID, owner string) ([]ledger.DueTurn, error) {
	return observe(ctx, s, ledger.Call{Op: "OwnTurns", Conv: convID}, func() ([]ledger.DueTurn, error) {
		out, err := s.scanDue(ctx, s.openFrom(), ownWhere, convID, owner)
		if err != nil {
			return nil, fmt.Errorf("find own turns of %s: %w", convID, err)
		}
		return out, nil
	})
}

var ownWhere = `WHERE u.conversation_id = ? AND ` + openSQL("u.") + ` AND u.turn_owner = ? AND u.turn_due IS NULL
	AND u.turn_state IN ('running', 'pending') AND (u.turn_track OR NOT ` + ledger.AnsweredSQL("u") + `)
	ORDER BY u.seq`

// ClaimTurn claims a turn for owner, so that of any number of runners
// trying at once one wins: the turn must still be as seen (seenOwner,
// seenAttempt), and either due at now, or held by seenOwner, whom the
// caller knows to be gone — and not answered, unless its channel confirms
// delivery (the claim is then for delivering it). A won claim moves the
// conversation's epoch, so the runner the turn was taken from can store
// nothing more. It returns nil when the turn had moved on.
func (s *DB) ClaimTurn(ctx context.Context, convID string, seq int64, seenOwner string, seenAttempt int, owner string, now time.Time) (*ledger.Claimed, error) {
	return observe(ctx, s, ledger.Call{Op: "ClaimTurn", Conv: convID}, func() (*ledger.Claimed, error) {
		var got *ledger.Claimed
		err := s.commit.do(ctx, func(tx *gorm.DB) error {
			got = nil
			if s.driver == DriverPostgres {
				// The conversation's row first: a reply being appended to it
				// now is waited for, so the check below sees it. (SQLite's one
				// writer runs this transaction alone.)
				if err := tx.Exec("SELECT 1 FROM conversations WHERE id = ? FOR UPDATE", convID).Error; err != nil {
					return err
				}
			}
			rows, err := tx.Raw(`UPDATE messages SET turn_owner = ?, turn_attempt = turn_attempt + 1, turn_due = NULL,
			turn_state = CASE WHEN turn_state IN ('pending', 'interrupted') THEN 'running' ELSE turn_state END
			WHERE conversation_id = ? AND seq = ? AND role = 'user' AND turn_owner = ? AND turn_attempt = ?
			AND turn_state IN ('pending', 'interrupted', 'running')
			AND (turn_due <= ? OR (turn_due IS NULL AND turn_owner <> ''))
			AND (turn_track OR NOT `+ledger.AnsweredSQL("messages")+`)
			RETURNING COALESCE(client_msg_id, ''), created_at, turn_attempt, turn_track`,
				owner, convID, seq, seenOwner, seenAttempt, now).Rows()
			if err != nil {
				return err
			}
			if rows.Next() {
				c := &ledger.Claimed{DueTurn: ledger.DueTurn{ConversationID: convID, Seq: seq, Owner: owner, State: ledger.TurnRunning}}
				if err := rows.Scan(&c.ClientMsgID, &c.CreatedAt, &c.Attempt, &c.Track); err != nil {
					rows.Close()
					return err
				}
				got = c
			}
			rows.Close()
			if err := rows.Err(); err != nil || got == nil {
				got = nil
				return err
			}
			if err := tx.Raw("SELECT "+ledger.AnsweredSQL("u")+" FROM messages AS u WHERE u.conversation_id = ? AND u.seq = ?", convID, seq).
				Scan(&got.Answered).Error; err != nil {
				return err
			}
			return tx.Exec("UPDATE conversations SET epoch = epoch + 1 WHERE id = ?", convID).Error
		})
		if err != nil {
			return nil, fmt.Errorf("claim turn %s/%d: %w", convID, seq, err)
		}
		return got, nil
	})
}

// ReleaseTurn gives a claim back without an outcome: the turn (still to
// run, or answered and still to deliver) is due again at dueAt. Only its
// open messages are handed back: the messages merged into a Telegram
// turn's lead are settled by its reply, and only the lead waits for the
// delivery. It fails with ErrLostClaim when the claim is no longer held.
func (s *DB) ReleaseTurn(ctx context.Context, convID string, seq int64, owner string, attempt int, dueAt time.Time, why string) error {
	return observe0(ctx, s, ledger.Call{Op: "ReleaseTurn", Conv: convID}, func() error {
		return s.claimed(ctx, "release", convID, seq, `UPDATE messages SET turn_owner = '', turn_due = ?, error = ?
		WHERE conversation_id = ? AND (seq = ? OR turn_lead = ?) AND `+openSQL("")+` AND turn_owner = ? AND turn_attempt = ?`,
			dueAt, why, convID, seq, seq, owner, attempt)
	})
}

// MarkDelivered records that the turn's reply reached the user (ref: the
// channel's message ids), or, with a non-empty failure, that the channel
// refused it for good. The turn is closed either way.
func (s *DB) MarkDelivered(ctx context.Context, convID string, seq int64, owner string, attempt int, ref, failure string, at time.Time) error {
	return observe0(ctx, s, ledger.Call{Op: "MarkDelivered", Conv: convID}, func() error {
		return s.claimed(ctx, "mark delivered", convID, seq, `UPDATE messages SET turn_state = 'delivered', turn_due = NULL,
		delivery_ref = ?, delivered_at = ?, error = ?
		WHERE conversation_id = ? AND (seq = ? OR turn_lead = ?) AND role = 'user' AND turn_owner = ? AND turn_attempt = ?`,
			ref, at, failure, convID, seq, seq, owner, attempt)
	})
}

// claimed runs a claim-guarded update of one turn.
func (s *DB) claimed(ctx context.Context, what, convID string, seq int64, query string, args ...any) error {
	var n int64
	err := s.commit.do(ctx, func(tx *gorm.DB) error {
		res := tx.Exec(query, args...)
		n = res.RowsAffected
		return res.Error
	})
	if err != nil {
		return fmt.Errorf("%s turn %s/%d: %w", what, convID, seq, err)
	}
	if n == 0 {
		return fmt.Errorf("%s turn %s/%d: %w", what, convID, seq, ledger.ErrLostClaim)
	}
	return nil
}

// backfillTurns gives the user messages stored before the ledger existed
// their turns' states, once, when the columns are added: answered ones
// delivered, unanswered ones of the recovery horizon interrupted (the
// rescuer answers them), older unanswered ones expired.
func backfillTurns(tx *gorm.DB, now time.Time) error {
	horizon := now.Add(-ledger.RecoveryHorizon)
	answered := ledger.AnsweredSQL("messages")
	return tx.Exec(`UPDATE messages SET
		turn_state = CASE WHEN `+answered+` THEN 'delivered' WHEN created_at >= ? THEN 'interrupted' ELSE 'expired' END,
		turn_due = CASE WHEN NOT `+answered+` AND created_at >= ? THEN created_at END
		WHERE role = 'user' AND turn_state = ''`, horizon, horizon).Error
}

// ClaimBatch claims, for c.Owner, the oldest unanswered turns of a
// conversation as one turn: every message stored and not yet run
// (pending), turns handed back (interrupted, or released) that are due,
// Owner's own turns that no runner of it holds (not in c.Held), and, with
// TakeOver, turns held by an owner not among c.Alive — at most c.Limit.
// A turn Owner's runner holds is never taken: a message stored already
// claimed is run by its own runner. All get one claim, one lead (the
// newest), and the delivery tracking on the lead alone. It returns nil
// when nothing is claimable. Callers hold the session key's lease, so
// that on several replicas one runs a user's turns at a time; the claim
// itself is conditional all the same (PostgreSQL locks the
// conversation's row first, SQLite has one writer).
func (s *DB) ClaimBatch(ctx context.Context, c ledger.Claim) (*ledger.Batch, error) {
	return observe(ctx, s, ledger.Call{Op: "ClaimBatch", Conv: c.ConversationID}, func() (*ledger.Batch, error) {
		convID, owner, now, limit, track := c.ConversationID, c.Owner, c.Now, c.Limit, c.Track
		alive := c.Alive
		if !slices.Contains(alive, owner) {
			alive = append(slices.Clone(alive), owner)
		}
		held := c.Held
		if len(held) == 0 {
			held = []int64{-1} // NOT IN needs a list; no seq is negative
		}
		var got *ledger.Batch
		err := s.commit.do(ctx, func(tx *gorm.DB) error {
			got = nil
			// The conversation's row first (on PostgreSQL locked, so that an
			// append committing now is waited for): its last seq and epoch tell
			// the caller whether its cached copy is still the conversation.
			head := "SELECT last_seq, epoch FROM conversations WHERE id = ?"
			if s.driver == DriverPostgres {
				head += " FOR UPDATE"
			}
			b := &ledger.Batch{ConversationID: convID}
			if err := tx.Raw(head, convID).Row().Scan(&b.LastSeq, &b.Epoch); err != nil {
				return err
			}
			// The open turns that are claimable, oldest first (the index of
			// open turns: what is still open, whatever the conversation's
			// length)...
			rows, err := tx.Raw(claimableSQL(s.openFrom()), convID, owner, held, c.TakeOver, alive, now).Rows()
			if err != nil {
				return err
			}
			type open struct {
				seq, lead    int64
				track        bool
				state, owner string
				attempt      int
				fire         bool // a fire's message (ledger.IsFireMsgID)
			}
			var found []open
			for rows.Next() {
				var o open
				var cid string
				if err := rows.Scan(&o.seq, &o.lead, &o.track, &o.state, &o.attempt, &o.owner, &cid); err != nil {
					rows.Close()
					return err
				}
				if o.lead == 0 {
					o.lead = o.seq
				}
				o.fire = ledger.IsFireMsgID(cid)
				found = append(found, o)
			}
			rows.Close()
			if err := rows.Err(); err != nil || len(found) == 0 {
				return err
			}
			// ...less those answered: the final replies stored after the
			// oldest of them, read in the primary key's range.
			replies, err := finalRepliesAfter(tx, convID, found[0].seq)
			if err != nil {
				return err
			}
			attempt := 0
			var unmarked, seqs []int64
			closed := false // the batch takes no more
			for _, o := range found {
				if replies[o.lead] > o.seq {
					if !o.track {
						unmarked = append(unmarked, o.seq) // answered by a replica that did not mark it
					}
					continue
				}
				// A fire's message is a turn of its own: it is never merged
				// with the user's messages, before or after it (its reply is
				// the schedule's, quiet or not, and its spend the schedule's).
				if len(seqs) == limit || closed || (o.fire && len(seqs) > 0) {
					closed = true
					continue
				}
				closed = o.fire
				seqs = append(seqs, o.seq)
				attempt = max(attempt, o.attempt)
				b.Took = b.Took || o.state == ledger.TurnRunning
				b.Foreign = b.Foreign || (o.owner != owner && o.owner != "")
			}
			if len(unmarked) > 0 {
				if err := tx.Exec(`UPDATE messages SET turn_state = 'answered' WHERE conversation_id = ? AND seq IN ? AND `+openSQL("")+` AND NOT turn_track`,
					convID, unmarked).Error; err != nil {
					return err
				}
			}
			if len(seqs) == 0 {
				return nil
			}
			// The messages taken, with what running them needs.
			if b.Rows, err = batchRows(tx, convID, seqs); err != nil {
				return err
			}
			b.Attempt = attempt + 1
			lead := b.Lead()
			if err := tx.Exec(`UPDATE messages SET turn_state = 'running', turn_owner = ?, turn_attempt = ?, turn_due = NULL,
			turn_lead = ?, turn_track = (seq = ? AND ?) WHERE conversation_id = ? AND seq IN ?`,
				owner, b.Attempt, lead, lead, track, convID, seqs).Error; err != nil {
				return err
			}
			if b.Took {
				// Whoever ran these before can store nothing more.
				if err := tx.Exec("UPDATE conversations SET epoch = epoch + 1 WHERE id = ?", convID).Error; err != nil {
					return err
				}
				b.Epoch++
			}
			got = b
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("claim turns of %s: %w", convID, err)
		}
		return got, nil
	})
}

// batchRows reads the messages of a conversation a claim took, by seq.
func batchRows(tx *gorm.DB, convID string, seqs []int64) ([]ledger.BatchRow, error) {
	rows, err := tx.Raw(`SELECT seq, COALESCE(client_msg_id, ''), content, attachments, quote, created_at FROM messages
		WHERE conversation_id = ? AND seq IN ? ORDER BY seq`, convID, seqs).Rows()
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make([]ledger.BatchRow, 0, len(seqs))
	for rows.Next() {
		var r ledger.BatchRow
		if err := rows.Scan(&r.Seq, &r.ClientMsgID, &r.Content, &r.Attachments, &r.Quote, &r.CreatedAt); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(out) != len(seqs) {
		return nil, fmt.Errorf("read %d of the %d messages claimed", len(out), len(seqs))
	}
	return out, nil
}

// claimableSQL reads the claimable open turns of a conversation
// (ClaimBatch): what deciding which to take needs, not their text.
func claimableSQL(from string) string {
	return `SELECT u.seq, u.turn_lead, u.turn_track, u.turn_state, u.turn_attempt, u.turn_owner, COALESCE(u.client_msg_id, '')
		FROM ` + from + ` WHERE u.conversation_id = ? AND ` + openSQL("u.") + `
		AND (u.turn_state IN ('pending', 'interrupted') OR u.turn_owner = ''
			OR (u.turn_owner = ? AND u.seq NOT IN ?) OR (? AND u.turn_owner NOT IN ?))
		AND (u.turn_due IS NULL OR u.turn_due <= ?)
		ORDER BY u.seq`
}

// finalRepliesSQL reads the final replies of a conversation after a seq.
var finalRepliesSQL = `SELECT r.reply_to, max(r.seq) FROM messages AS r WHERE r.conversation_id = ? AND r.seq > ? AND ` +
	ledger.FinalReplySQL("r") + ` GROUP BY r.reply_to`

// finalRepliesAfter returns, by the message each answers (reply_to), the
// seq of the newest final reply stored after seq after in a conversation.
func finalRepliesAfter(tx *gorm.DB, convID string, after int64) (map[int64]int64, error) {
	rows, err := tx.Raw(finalRepliesSQL, convID, after).Rows()
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int64]int64{}
	for rows.Next() {
		var to, seq int64
		if err := rows.Scan(&to, &seq); err != nil {
			return nil, err
		}
		out[to] = seq
	}
	return out, rows.Err()
}

// openFrom is the FROM of a query over the open turns, as u: SQLite is
// told the index, so that no statistics can make it walk a conversation.
func (s *DB) openFrom() string {
	if s.driver == DriverPostgres {
		return "messages AS u"
	}
	return "messages AS u INDEXED BY " + openIndex
}

// Covers returns the user messages a turn answers — the messages merged
// into the burst whose lead is lead, oldest first — as their seqs and
// client message ids.
func (s *DB) Covers(ctx context.Context, convID string, lead int64) ([]ledger.BatchRow, error) {
	return observe(ctx, s, ledger.Call{Op: "Covers", Conv: convID}, func() ([]ledger.BatchRow, error) {
		var out []ledger.BatchRow
		rows, err := s.read.WithContext(ctx).Raw(`SELECT seq, COALESCE(client_msg_id, '') FROM messages
		WHERE conversation_id = ? AND role = 'user' AND (seq = ? OR turn_lead = ?) AND seq <= ? ORDER BY seq`, convID, lead, lead, lead).Rows()
		if err != nil {
			return nil, fmt.Errorf("read the messages of turn %s/%d: %w", convID, lead, err)
		}
		defer rows.Close()
		for rows.Next() {
			var r ledger.BatchRow
			if err := rows.Scan(&r.Seq, &r.ClientMsgID); err != nil {
				return nil, err
			}
			out = append(out, r)
		}
		return out, rows.Err()
	})
}
