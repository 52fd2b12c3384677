package sessions

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"
)

// The turn ledger: every user message is a turn, and its row carries the
// turn's owner and claim. A turn is a small state machine whose every
// transition is conditional, so that exactly one runner wins whichever
// path it comes from — the live message, a resend, a Telegram
// redelivery, the rescuer after a restart, or another replica:
//
//	pending ─┐                                         ┌─ answered ─┐
//	         ├─ claim ─> running(owner, attempt) ──────┼─ failed   ─┼─> delivered
//	interrupted ┘               │                      └─ expired  ─┘   (channels that confirm)
//	                            └─ shutdown ─> interrupted
//
// A claim is (owner, attempt): the replica holding the turn and the number
// of the claim. A claim lasts as long as its owner's lease: replicas
// heartbeat a row of their own, and the turns of a replica whose
// heartbeat stopped are claimable by the others (the rescuer finds them by
// a scan of recent user messages when it sees a replica die, and once at
// start). Claiming a turn also moves its conversation's epoch, which every
// append checks beside the last seq: the runner the turn was taken from
// finds its reply's append refused. A turn is answered when its final
// reply is stored after it — the reply's own append is the transition, so
// a live turn writes nothing but its message and its reply, the rows it
// needs anyway; the rare paths (a resend, a claim, the rescuer's scans)
// look the reply up in the primary key's range after the message.
// turn_due marks the turns nobody owns that somebody may claim — turns a
// shutdown interrupted, deliveries handed back for a retry — and only
// those are indexed.

// Turn states.
const (
	TurnPending     = "pending"     // stored, waiting to be claimed
	TurnRunning     = "running"     // claimed: the agent runs for it
	TurnInterrupted = "interrupted" // a shutdown cut it; claimable at once
	TurnAnswered    = "answered"    // its reply is stored
	TurnFailed      = "failed"      // its reply is a stored failure notice
	TurnExpired     = "expired"     // too old to run when found; told so
	TurnDelivered   = "delivered"   // the channel confirmed the reply reached the user
)

// ErrLostClaim means a turn's claim was taken over (its owner was taken
// for dead and another runner claimed it): the write that needed the claim
// was not made.
var ErrLostClaim = errors.New("turn claimed by another runner")

// Turn is the ledger state of one user message's turn. State is derived:
// answered, failed or expired once a final reply is stored (ReplySeq),
// delivered once the channel marked it.
type Turn struct {
	ConversationID string
	Seq            int64
	ClientMsgID    *string
	State          string
	Owner          string
	Attempts       int // claims so far
	DueAt          *time.Time
	Track          bool
	ReplySeq       int64
	DeliveryRef    string
	DeliveredAt    *time.Time
	Error          string
	CreatedAt      time.Time
	// Lead is the message whose seq the turn's reply answers: the newest
	// of the burst it was merged into, or Seq itself.
	Lead int64
}

func turnOf(m *Message) *Turn {
	t := &Turn{ConversationID: m.ConversationID, Seq: m.Seq, ClientMsgID: m.ClientMsgID, State: m.TurnState, Owner: m.TurnOwner,
		Attempts: m.TurnAttempt, DueAt: m.TurnDue, Track: m.TurnTrack, DeliveryRef: m.DeliveryRef,
		DeliveredAt: m.DeliveredAt, Error: m.Error, CreatedAt: m.CreatedAt, Lead: m.TurnLead}
	if t.Lead == 0 {
		t.Lead = m.Seq
	}
	return t
}

// answered applies a stored final reply to the turn's state.
func (t *Turn) answered(reply *Message) {
	t.ReplySeq = reply.Seq
	switch {
	case t.State == TurnDelivered:
	case reply.Status == MsgFailed && strings.HasPrefix(reply.Error, notRunPrefix):
		t.State = TurnExpired
	case reply.Status == MsgFailed:
		t.State = TurnFailed
	default:
		t.State = TurnAnswered
	}
}

// notRunPrefix starts the error of the reply stored for a turn too old to
// run.
const notRunPrefix = "not run:"

// finalReplyOf is the condition, on a user message row u, that its final
// reply is stored: an assistant message without tool calls after it that
// answers it and is not the partial reply of a shutdown.
const finalReplyOf = `EXISTS (SELECT 1 FROM messages AS r WHERE r.conversation_id = %[1]s.conversation_id AND r.seq > %[1]s.seq
	AND r.reply_to = (CASE WHEN %[1]s.turn_lead > 0 THEN %[1]s.turn_lead ELSE %[1]s.seq END)
	AND r.role = 'assistant' AND (r.tool_calls IS NULL OR r.tool_calls = '')
	AND NOT (r.status = 'interrupted' AND r.error IN ('shutdown', 'new message')))`

func answeredSQL(row string) string { return fmt.Sprintf(finalReplyOf, row) }

// settled reports whether the turn has its reply stored.
func (t *Turn) settled() bool {
	switch t.State {
	case TurnAnswered, TurnFailed, TurnExpired, TurnDelivered:
		return true
	}
	return false
}

// owned reports whether the turn is held by its owner (not due for
// anyone): running, or answered and waiting for its delivery mark.
func (t *Turn) owned() bool {
	return t.Owner != "" && t.DueAt == nil && (t.State == TurnRunning || (t.Track && t.settled() && t.State != TurnDelivered))
}

// Settle hands a turn back with the partial reply of a shutdown, in the
// same transaction, guarded by the claim: the turn becomes interrupted,
// owned by nobody and due again at DueAt.
type Settle struct {
	Owner   string
	Attempt int
	DueAt   *time.Time
}

// DueTurn is a turn somebody may claim, with what running and delivering
// it need, and the claim it was seen under (compared when claiming).
type DueTurn struct {
	ConversationID string
	Seq            int64
	SessionKey     string
	Channel        string
	State          string
	ClientMsgID    string
	CreatedAt      time.Time
	UserID         string
	ChatID         string
	Owner          string
	Attempt        int
}

// Claimed is a turn this runner won.
type Claimed struct {
	DueTurn
	Track bool
	// Answered: its reply is stored; the claim is for delivering it.
	Answered bool
}

// Ref names the claim.
func (c *Claimed) Ref() TurnRef {
	return TurnRef{ConversationID: c.ConversationID, Seq: c.Seq, Claim: strconv.Itoa(c.Attempt)}
}

// Replica is a gateway sharing the database, known by its heartbeat.
type Replica struct {
	ID          string    `gorm:"primaryKey;size:64"`
	StartedAt   time.Time `gorm:"not null"`
	HeartbeatAt time.Time `gorm:"not null"`
}

// settleTurns builds the claim-guarded UPDATE that hands the appends'
// turns back, interrupted. It is rare (a shutdown), so one statement per
// turn.
func settleTurns(a *Append) (string, []any) {
	st := a.Settle
	return `UPDATE messages SET turn_state = 'interrupted', turn_owner = '', turn_due = ?
		WHERE conversation_id = ? AND (seq = ? OR turn_lead = ?) AND role = 'user' AND turn_owner = ? AND turn_attempt = ?`,
		[]any{st.DueAt, a.Conv.ID, a.TurnSeq, a.TurnSeq, st.Owner, st.Attempt}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TurnAt returns the turn of a user message, or nil.
func (s *DB) TurnAt(ctx context.Context, convID string, seq int64) (*Turn, error) {
	m, err := s.Message(ctx, convID, seq)
	if err != nil || m == nil || m.Role != "user" {
		return nil, err
	}
	return s.withReply(ctx, turnOf(m))
}

// withReply derives the turn's state from its stored final reply.
func (s *DB) withReply(ctx context.Context, t *Turn) (*Turn, error) {
	reply, err := s.FinalReply(ctx, t.ConversationID, t.Lead)
	if err != nil {
		return nil, err
	}
	if reply != nil {
		t.answered(reply)
	}
	return t, nil
}

// TurnByClientID returns the turn of the session key's message with that
// client id, in whichever of the key's conversations it is, or nil.
func (s *DB) TurnByClientID(ctx context.Context, key, clientID string) (*Turn, error) {
	var m Message
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
	return s.withReply(ctx, turnOf(&m))
}

// Message returns one message by its conversation and seq, or nil.
func (s *DB) Message(ctx context.Context, convID string, seq int64) (*Message, error) {
	var m Message
	err := s.read.WithContext(ctx).Where("conversation_id = ? AND seq = ?", convID, seq).Take(&m).Error
	if notFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load message %s/%d: %w", convID, seq, err)
	}
	return &m, nil
}

// dueColumns are what DueTurns and OrphanTurns return, in scanDue's order.
const dueColumns = `SELECT u.conversation_id, u.seq, c.session_key, c.channel, u.turn_state, COALESCE(u.client_msg_id, ''),
	u.created_at, c.user_id, c.chat_id, u.turn_owner, u.turn_attempt
	FROM messages AS u JOIN conversations AS c ON c.id = u.conversation_id `

func (s *DB) scanDue(ctx context.Context, query string, args ...any) ([]DueTurn, error) {
	rows, err := s.read.WithContext(ctx).Raw(dueColumns+query, args...).Rows()
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []DueTurn
	for rows.Next() {
		var d DueTurn
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
// first: pending and interrupted ones, and deliveries handed back.
func (s *DB) DueTurns(ctx context.Context, now time.Time, limit int) ([]DueTurn, error) {
	out, err := s.scanDue(ctx, "WHERE u.turn_due <= ? ORDER BY u.turn_due, u.conversation_id, u.seq LIMIT ?", now, limit)
	if err != nil {
		return nil, fmt.Errorf("find due turns: %w", err)
	}
	return out, nil
}

// OrphanTurns returns up to limit turns of messages stored since the given
// time that are held by an owner not among alive: running, or answered and
// not yet marked delivered on a channel that confirms delivery. It reads
// the recent user messages (by time), so the rescuer calls it only when a
// replica died, and once at start.
func (s *DB) OrphanTurns(ctx context.Context, since time.Time, alive []string, limit int) ([]DueTurn, error) {
	out, err := s.scanDue(ctx, `WHERE u.role = 'user' AND u.created_at >= ? AND u.turn_due IS NULL AND u.turn_owner <> ''
		AND u.turn_owner NOT IN ? AND u.turn_state IN ('running', 'pending') AND (u.turn_track OR NOT `+answeredSQL("u")+`)
		ORDER BY u.created_at, u.conversation_id, u.seq LIMIT ?`, since, alive, limit)
	if err != nil {
		return nil, fmt.Errorf("find turns of gone replicas: %w", err)
	}
	return out, nil
}

// OwnTurns returns the turns of a conversation that owner holds in the
// ledger and that are not settled: not yet answered, or answered and not
// yet marked delivered on a channel that confirms delivery. The caller
// compares them with what its runners hold: the others it claims again.
func (s *DB) OwnTurns(ctx context.Context, convID, owner string) ([]DueTurn, error) {
	out, err := s.scanDue(ctx, `WHERE u.conversation_id = ? AND u.role = 'user' AND u.turn_owner = ? AND u.turn_due IS NULL
		AND u.turn_state IN ('running', 'pending') AND (u.turn_track OR NOT `+answeredSQL("u")+`)
		ORDER BY u.seq`, convID, owner)
	if err != nil {
		return nil, fmt.Errorf("find own turns of %s: %w", convID, err)
	}
	return out, nil
}

// ClaimTurn claims a turn for owner, so that of any number of runners
// trying at once one wins: the turn must still be as seen (seenOwner,
// seenAttempt), and either due at now, or held by seenOwner, whom the
// caller knows to be gone — and not answered, unless its channel confirms
// delivery (the claim is then for delivering it). A won claim moves the
// conversation's epoch, so the runner the turn was taken from can store
// nothing more. It returns nil when the turn had moved on.
func (s *DB) ClaimTurn(ctx context.Context, convID string, seq int64, seenOwner string, seenAttempt int, owner string, now time.Time) (*Claimed, error) {
	var got *Claimed
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
			AND (turn_track OR NOT `+answeredSQL("messages")+`)
			RETURNING COALESCE(client_msg_id, ''), created_at, turn_attempt, turn_track`,
			owner, convID, seq, seenOwner, seenAttempt, now).Rows()
		if err != nil {
			return err
		}
		if rows.Next() {
			c := &Claimed{DueTurn: DueTurn{ConversationID: convID, Seq: seq, Owner: owner, State: TurnRunning}}
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
		if err := tx.Raw("SELECT "+answeredSQL("u")+" FROM messages AS u WHERE u.conversation_id = ? AND u.seq = ?", convID, seq).
			Scan(&got.Answered).Error; err != nil {
			return err
		}
		return tx.Exec("UPDATE conversations SET epoch = epoch + 1 WHERE id = ?", convID).Error
	})
	if err != nil {
		return nil, fmt.Errorf("claim turn %s/%d: %w", convID, seq, err)
	}
	return got, nil
}

// ReleaseTurn gives a claim back without an outcome: the turn (still to
// run, or answered and still to deliver) is due again at dueAt. It fails with ErrLostClaim when the claim is no longer held.
func (s *DB) ReleaseTurn(ctx context.Context, convID string, seq int64, owner string, attempt int, dueAt time.Time, why string) error {
	return s.claimed(ctx, "release", convID, seq, `UPDATE messages SET turn_owner = '', turn_due = ?, error = ?
		WHERE conversation_id = ? AND (seq = ? OR turn_lead = ?) AND role = 'user' AND turn_owner = ? AND turn_attempt = ?`,
		dueAt, why, convID, seq, seq, owner, attempt)
}

// MarkDelivered records that the turn's reply reached the user (ref: the
// channel's message ids), or, with a non-empty failure, that the channel
// refused it for good. The turn is closed either way.
func (s *DB) MarkDelivered(ctx context.Context, convID string, seq int64, owner string, attempt int, ref, failure string, at time.Time) error {
	return s.claimed(ctx, "mark delivered", convID, seq, `UPDATE messages SET turn_state = 'delivered', turn_due = NULL,
		delivery_ref = ?, delivered_at = ?, error = ?
		WHERE conversation_id = ? AND (seq = ? OR turn_lead = ?) AND role = 'user' AND turn_owner = ? AND turn_attempt = ?`,
		ref, at, failure, convID, seq, seq, owner, attempt)
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
		return fmt.Errorf("%s turn %s/%d: %w", what, convID, seq, ErrLostClaim)
	}
	return nil
}

// recoveryHorizon bounds how far back the rescuer looks for turns of gone
// replicas at start, and the upgrade for unanswered messages: older ones
// are left alone.
const recoveryHorizon = 7 * 24 * time.Hour

// backfillTurns gives the user messages stored before the ledger existed
// their turns' states, once, when the columns are added: answered ones
// delivered, unanswered ones of the recovery horizon interrupted (the
// rescuer answers them), older unanswered ones expired.
func backfillTurns(tx *gorm.DB, now time.Time) error {
	horizon := now.Add(-recoveryHorizon)
	answered := answeredSQL("messages")
	return tx.Exec(`UPDATE messages SET
		turn_state = CASE WHEN `+answered+` THEN 'delivered' WHEN created_at >= ? THEN 'interrupted' ELSE 'expired' END,
		turn_due = CASE WHEN NOT `+answered+` AND created_at >= ? THEN created_at END
		WHERE role = 'user' AND turn_state = ''`, horizon, horizon).Error
}

// Batch is a burst of user messages one claim took as one turn: its
// rows oldest first, the newest the lead (the reply's reply_to), all
// under one claim (owner, Attempt).
type Batch struct {
	ConversationID string
	Attempt        int
	Rows           []BatchRow
	// Took is true when a row was taken from another runner (a gone
	// replica's, or one handed back): the claim moved the conversation's
	// epoch. LastSeq and Epoch are the conversation's after the claim.
	Took    bool
	LastSeq int64
	Epoch   int64
	// Foreign is true when a message came to another replica: its
	// clients there learn of the reply through this replica's events.
	Foreign bool
}

// BatchRow is one message of a batch.
type BatchRow struct {
	Seq         int64
	ClientMsgID string
	Content     string
	Attachments string // stored JSON, see Message.Attachments
	CreatedAt   time.Time
}

// Lead is the newest message's seq.
func (b *Batch) Lead() int64 { return b.Rows[len(b.Rows)-1].Seq }

// Ref names the batch's claim, for delivering its reply.
func (b *Batch) Ref() TurnRef {
	return TurnRef{ConversationID: b.ConversationID, Seq: b.Lead(), Claim: strconv.Itoa(b.Attempt)}
}

// Claim asks ClaimBatch for the claimable turns of a conversation.
type Claim struct {
	ConversationID string
	Owner          string
	// Held are the seqs of the conversation's messages a runner of Owner
	// holds now (in memory): Owner's other turns in the conversation are
	// its own to claim again — a turn nobody runs, whose earlier claim
	// failed or whose answer was lost.
	Held []int64
	// TakeOver takes the turns of owners not in Alive (replicas that
	// stopped heartbeating).
	TakeOver bool
	Alive    []string
	Now      time.Time
	Limit    int
	// Track: the channel confirms delivery (the lead's turn stays open
	// until it is marked delivered).
	Track bool
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
func (s *DB) ClaimBatch(ctx context.Context, c Claim) (*Batch, error) {
	convID, owner, now, limit, track := c.ConversationID, c.Owner, c.Now, c.Limit, c.Track
	alive := c.Alive
	if !slices.Contains(alive, owner) {
		alive = append(slices.Clone(alive), owner)
	}
	held := c.Held
	if len(held) == 0 {
		held = []int64{-1} // NOT IN needs a list; no seq is negative
	}
	var got *Batch
	err := s.commit.do(ctx, func(tx *gorm.DB) error {
		got = nil
		// The conversation's row first (on PostgreSQL locked, so that an
		// append committing now is waited for): its last seq and epoch tell
		// the caller whether its cached copy is still the conversation.
		head := "SELECT last_seq, epoch FROM conversations WHERE id = ?"
		if s.driver == DriverPostgres {
			head += " FOR UPDATE"
		}
		b := &Batch{ConversationID: convID}
		if err := tx.Raw(head, convID).Row().Scan(&b.LastSeq, &b.Epoch); err != nil {
			return err
		}
		rows, err := tx.Raw(`SELECT u.seq, COALESCE(u.client_msg_id, ''), u.content, u.attachments, u.created_at, u.turn_state, u.turn_attempt, u.turn_owner
			FROM messages AS u WHERE u.conversation_id = ? AND u.role = 'user' AND u.turn_state IN ('pending', 'interrupted', 'running')
			AND (u.turn_state IN ('pending', 'interrupted') OR u.turn_owner = ''
				OR (u.turn_owner = ? AND u.seq NOT IN ?) OR (? AND u.turn_owner NOT IN ?))
			AND (u.turn_due IS NULL OR u.turn_due <= ?)
			AND NOT `+answeredSQL("u")+`
			ORDER BY u.seq LIMIT ?`, convID, owner, held, c.TakeOver, alive, now, limit).Rows()
		if err != nil {
			return err
		}
		attempt := 0
		for rows.Next() {
			var r BatchRow
			var state, by string
			var n int
			if err := rows.Scan(&r.Seq, &r.ClientMsgID, &r.Content, &r.Attachments, &r.CreatedAt, &state, &n, &by); err != nil {
				rows.Close()
				return err
			}
			b.Rows = append(b.Rows, r)
			attempt = max(attempt, n)
			b.Took = b.Took || state == TurnRunning
			b.Foreign = b.Foreign || (by != owner && by != "")
		}
		rows.Close()
		if err := rows.Err(); err != nil || len(b.Rows) == 0 {
			return err
		}
		b.Attempt = attempt + 1
		seqs := make([]int64, len(b.Rows))
		for i, r := range b.Rows {
			seqs[i] = r.Seq
		}
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
}

// Covers returns the user messages a turn answers — the messages merged
// into the burst whose lead is lead, oldest first — as their seqs and
// client message ids.
func (s *DB) Covers(ctx context.Context, convID string, lead int64) ([]BatchRow, error) {
	var out []BatchRow
	rows, err := s.read.WithContext(ctx).Raw(`SELECT seq, COALESCE(client_msg_id, '') FROM messages
		WHERE conversation_id = ? AND role = 'user' AND (seq = ? OR turn_lead = ?) AND seq <= ? ORDER BY seq`, convID, lead, lead, lead).Rows()
	if err != nil {
		return nil, fmt.Errorf("read the messages of turn %s/%d: %w", convID, lead, err)
	}
	defer rows.Close()
	for rows.Next() {
		var r BatchRow
		if err := rows.Scan(&r.Seq, &r.ClientMsgID); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}
