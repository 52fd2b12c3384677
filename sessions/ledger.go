package sessions

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"
)

// The turn ledger: every user message belongs to a turn, stored with its
// state. A turn is a small state machine whose every transition is a
// conditional update, so that exactly one runner wins whichever path it
// comes from — the live message, a resend, a Telegram redelivery, the
// rescuer after a restart, or another replica:
//
//	pending ─┐
//	         ├─ claim ─> running(claim, owner, due_at = lease end) ─> answered ─> delivered
//	interrupted ┘                 │                                  failed    ─┘
//	                              └─ shutdown ─> interrupted         expired   ─┘
//
// due_at says when somebody may take a turn: for pending and interrupted
// turns when they may start, for running ones (and answered ones whose
// channel confirms delivery) when the holder's lease ends. It is NULL once
// nobody needs to act, so the rescuer's scan reads only open turns.

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

// ErrLostClaim means a turn's claim was taken over (its lease ran out and
// another runner claimed it): the write that needed the claim was not made.
var ErrLostClaim = errors.New("turn claimed by another runner")

// Turn is one user message's turn in the ledger.
type Turn struct {
	ConversationID string `gorm:"primaryKey;size:36"`
	// Seq is the user message's seq.
	Seq        int64  `gorm:"primaryKey;autoIncrement:false"`
	SessionKey string `gorm:"size:255;not null;uniqueIndex:uq_turns_client,priority:1,where:client_msg_id IS NOT NULL"`
	// ClientMsgID is unique per session key across its conversations, so a
	// resend after a reset or a sweep is still recognised.
	ClientMsgID *string `gorm:"size:128;uniqueIndex:uq_turns_client,priority:2,where:client_msg_id IS NOT NULL"`
	Channel     string  `gorm:"size:32;not null"`
	State       string  `gorm:"size:16;not null"`
	// Claim identifies the current claim ("" when none); every write that
	// needs the claim is conditional on it.
	Claim string `gorm:"size:36;not null;default:''"`
	// Owner is the replica that holds or last held the claim.
	Owner    string     `gorm:"size:64;not null;default:''"`
	DueAt    *time.Time `gorm:"index:ix_turns_due,where:due_at IS NOT NULL"`
	Attempts int        `gorm:"not null;default:0"`
	// Track is set when the channel confirms delivery (Telegram): the turn
	// then stays open until delivered.
	Track       bool   `gorm:"not null;default:false"`
	ReplySeq    int64  `gorm:"not null;default:0"`
	DeliveryRef string `gorm:"size:255;not null;default:''"`
	DeliveredAt *time.Time
	Error       string    `gorm:"type:text;not null;default:''"`
	CreatedAt   time.Time `gorm:"not null"`
}

// settled reports whether the turn has its reply stored.
func (t *Turn) settled() bool {
	switch t.State {
	case TurnAnswered, TurnFailed, TurnExpired, TurnDelivered:
		return true
	}
	return false
}

// Settle is the claim-guarded transition that stores a turn's outcome,
// written in the same transaction as its reply.
type Settle struct {
	Claim    string
	State    string // answered | failed | expired | interrupted
	ReplySeq int64
	DueAt    *time.Time // the delivery lease, the rerun time, or nil
	Error    string
}

// DueTurn is a turn somebody may claim now, with what running and
// delivering it need.
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
}

// Claimed is a turn this runner won.
type Claimed struct {
	DueTurn
	Claim    string
	Attempts int
}

// turnColumns lists the columns of a turn insert, in insertTurns' order.
const turnColumns = `(conversation_id, seq, session_key, client_msg_id, channel, state, claim, owner, due_at, attempts,
	track, reply_seq, delivery_ref, error, created_at)`

// insertTurns builds one multi-row INSERT of turns.
func insertTurns(rows []*Turn) (string, []any) {
	var q strings.Builder
	q.WriteString("INSERT INTO turns " + turnColumns + " VALUES ")
	args := make([]any, 0, 15*len(rows))
	for i, t := range rows {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
		args = append(args, t.ConversationID, t.Seq, t.SessionKey, t.ClientMsgID, t.Channel, t.State, t.Claim, t.Owner,
			t.DueAt, t.Attempts, t.Track, t.ReplySeq, t.DeliveryRef, t.Error, t.CreatedAt)
	}
	return q.String(), args
}

// settleTurns builds the claim-guarded UPDATE of the appends' turns.
func settleTurns(driver string, ops []*writeOp) (string, []any) {
	if len(ops) == 1 {
		a := ops[0].app
		s := a.Settle
		return `UPDATE turns SET state = ?, reply_seq = ?, due_at = ?, error = ? WHERE conversation_id = ? AND seq = ? AND claim = ? AND state = 'running'`,
			[]any{s.State, s.ReplySeq, s.DueAt, s.Error, a.Conv.ID, a.TurnSeq, s.Claim}
	}
	row := "(?, ?, ?, ?, ?, ?, ?)"
	first := row
	if driver == DriverPostgres {
		first = "(CAST(? AS VARCHAR), CAST(? AS BIGINT), CAST(? AS VARCHAR), CAST(? AS VARCHAR), CAST(? AS BIGINT), CAST(? AS TIMESTAMPTZ), CAST(? AS TEXT))"
	}
	var q strings.Builder
	q.WriteString("WITH v(v_conv, v_seq, v_claim, v_state, v_reply, v_due, v_error) AS (VALUES ")
	args := make([]any, 0, 7*len(ops))
	for i, op := range ops {
		a := op.app
		if i == 0 {
			q.WriteString(first)
		} else {
			q.WriteString(", ")
			q.WriteString(row)
		}
		args = append(args, a.Conv.ID, a.TurnSeq, a.Settle.Claim, a.Settle.State, a.Settle.ReplySeq, a.Settle.DueAt, a.Settle.Error)
	}
	q.WriteString(`) UPDATE turns SET state = v.v_state, reply_seq = v.v_reply, due_at = v.v_due, error = v.v_error
		FROM v WHERE turns.conversation_id = v.v_conv AND turns.seq = v.v_seq AND turns.claim = v.v_claim AND turns.state = 'running'`)
	return q.String(), args
}

// TurnAt returns the turn of a user message, or nil.
func (s *DB) TurnAt(ctx context.Context, convID string, seq int64) (*Turn, error) {
	var t Turn
	err := s.read.WithContext(ctx).Where("conversation_id = ? AND seq = ?", convID, seq).Take(&t).Error
	if notFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load turn %s/%d: %w", convID, seq, err)
	}
	return &t, nil
}

// TurnByClientID returns the turn of the session key's message with that
// client id, in whichever of the key's conversations it is, or nil.
func (s *DB) TurnByClientID(ctx context.Context, key, clientID string) (*Turn, error) {
	var t Turn
	err := s.read.WithContext(ctx).Where("session_key = ? AND client_msg_id = ?", key, clientID).Take(&t).Error
	if notFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("look up turn of client message %s: %w", clientID, err)
	}
	return &t, nil
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

// DueTurns returns up to limit turns somebody may claim at now, the
// longest due first.
func (s *DB) DueTurns(ctx context.Context, now time.Time, limit int) ([]DueTurn, error) {
	rows, err := s.read.WithContext(ctx).Raw(`SELECT t.conversation_id, t.seq, t.session_key, t.channel, t.state,
		COALESCE(t.client_msg_id, ''), t.created_at, c.user_id, c.chat_id
		FROM turns AS t JOIN conversations AS c ON c.id = t.conversation_id
		WHERE t.due_at <= ? ORDER BY t.due_at, t.conversation_id, t.seq LIMIT ?`, now, limit).Rows()
	if err != nil {
		return nil, fmt.Errorf("find due turns: %w", err)
	}
	defer rows.Close()
	var out []DueTurn
	for rows.Next() {
		var d DueTurn
		var userID, chatID *string
		if err := rows.Scan(&d.ConversationID, &d.Seq, &d.SessionKey, &d.Channel, &d.State, &d.ClientMsgID, &d.CreatedAt, &userID, &chatID); err != nil {
			return nil, fmt.Errorf("find due turns: %w", err)
		}
		if userID != nil {
			d.UserID = *userID
		}
		if chatID != nil {
			d.ChatID = *chatID
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("find due turns: %w", err)
	}
	return out, nil
}

// ClaimTurn claims a due turn for owner until leaseEnd, in one conditional
// statement: of any number of runners trying at once, one wins. A turn
// not yet answered becomes running (its attempts counted); an answered one
// waiting for delivery keeps its state and is claimed for delivering. It
// returns nil when the turn was not due (someone else holds it, or it is
// done).
func (s *DB) ClaimTurn(ctx context.Context, convID string, seq int64, claim, owner string, now, leaseEnd time.Time) (*Claimed, error) {
	var got *Claimed
	err := s.commit.do(ctx, func(tx *gorm.DB) error {
		got = nil
		rows, err := tx.Raw(`UPDATE turns SET claim = ?, owner = ?, due_at = ?,
			attempts = attempts + CASE WHEN state IN ('pending', 'interrupted', 'running') THEN 1 ELSE 0 END,
			state = CASE WHEN state IN ('pending', 'interrupted', 'running') THEN 'running' ELSE state END
			WHERE conversation_id = ? AND seq = ? AND due_at <= ?
			RETURNING session_key, channel, state, COALESCE(client_msg_id, ''), created_at, attempts`,
			claim, owner, leaseEnd, convID, seq, now).Rows()
		if err != nil {
			return err
		}
		defer rows.Close()
		if rows.Next() {
			c := &Claimed{DueTurn: DueTurn{ConversationID: convID, Seq: seq}, Claim: claim}
			if err := rows.Scan(&c.SessionKey, &c.Channel, &c.State, &c.ClientMsgID, &c.CreatedAt, &c.Attempts); err != nil {
				return err
			}
			got = c
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("claim turn %s/%d: %w", convID, seq, err)
	}
	return got, nil
}

// RenewClaims moves the lease of the given claims to leaseEnd, in one
// statement.
func (s *DB) RenewClaims(ctx context.Context, claims []string, leaseEnd time.Time) error {
	if len(claims) == 0 {
		return nil
	}
	err := s.commit.do(ctx, func(tx *gorm.DB) error {
		return tx.Exec("UPDATE turns SET due_at = ? WHERE claim IN ? AND due_at IS NOT NULL", leaseEnd, claims).Error
	})
	if err != nil {
		return fmt.Errorf("renew turn claims: %w", err)
	}
	return nil
}

// ReleaseTurn gives a claim back without an outcome: a running turn
// becomes pending, an answered one stays answered; either is due again at
// dueAt. It fails with ErrLostClaim when the claim is no longer held.
func (s *DB) ReleaseTurn(ctx context.Context, convID string, seq int64, claim string, dueAt time.Time, why string) error {
	return s.claimed(ctx, "release", convID, seq, claim, `UPDATE turns SET claim = '',
		state = CASE WHEN state = 'running' THEN 'pending' ELSE state END, due_at = ?, error = ?
		WHERE conversation_id = ? AND seq = ? AND claim = ?`, dueAt, why, convID, seq, claim)
}

// MarkDelivered records that the turn's reply reached the user (ref: the
// channel's message ids), or, with a non-empty failure, that the channel
// refused it for good. The turn is closed either way.
func (s *DB) MarkDelivered(ctx context.Context, convID string, seq int64, claim, ref, failure string, at time.Time) error {
	return s.claimed(ctx, "mark delivered", convID, seq, claim, `UPDATE turns SET state = 'delivered', due_at = NULL,
		delivery_ref = ?, delivered_at = ?, error = CASE WHEN ? = '' THEN error ELSE ? END
		WHERE conversation_id = ? AND seq = ? AND claim = ?`, ref, at, failure, failure, convID, seq, claim)
}

// claimed runs a claim-guarded update of one turn.
func (s *DB) claimed(ctx context.Context, what, convID string, seq int64, claim, query string, args ...any) error {
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

// recoveryHorizon bounds how far back the upgrade to the ledger looks for
// unanswered messages to recover: older ones are marked expired untold.
const recoveryHorizon = 7 * 24 * time.Hour

// backfillTurns gives the user messages stored before the ledger existed
// their turns, once, when the turns table is created: answered ones as
// delivered, unanswered ones of the recovery horizon as interrupted (the
// rescuer answers them), older unanswered ones as expired. A client id
// that repeats within a key keeps the first turn.
func backfillTurns(tx *gorm.DB, now time.Time) error {
	return tx.Exec(`INSERT INTO turns `+turnColumns+`
		SELECT u.conversation_id, u.seq, c.session_key, u.client_msg_id, c.channel,
			CASE WHEN r.seq IS NOT NULL THEN 'delivered' WHEN u.created_at >= ? THEN 'interrupted' ELSE 'expired' END,
			'', '', CASE WHEN r.seq IS NULL AND u.created_at >= ? THEN u.created_at END, 0,
			false, COALESCE(r.seq, 0), '', '', u.created_at
		FROM messages AS u JOIN conversations AS c ON c.id = u.conversation_id
		LEFT JOIN messages AS r ON r.conversation_id = u.conversation_id AND r.seq = (
			SELECT MAX(x.seq) FROM messages AS x WHERE x.conversation_id = u.conversation_id AND x.seq > u.seq AND x.reply_to = u.seq
			AND x.role = 'assistant' AND (x.tool_calls IS NULL OR x.tool_calls = '') AND NOT (x.status = ? AND x.error = ?))
		WHERE u.role = 'user'
		ORDER BY u.created_at, u.conversation_id, u.seq
		ON CONFLICT DO NOTHING`, now.Add(-recoveryHorizon), now.Add(-recoveryHorizon), MsgInterrupted, InterruptedByShutdown).Error
}
