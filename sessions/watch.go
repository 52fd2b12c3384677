package sessions

import (
	"context"
	"errors"
	"time"
)

// How a turn survives a storage failure. The invariant the ledger keeps:
// a turn that is not settled is either held by a runner alive in this
// process now, or due — claimable by anyone after its backoff. Every
// storage call a turn makes may fail, and a failed call may even have
// landed (a commit whose answer was lost): a claim taken, a reply stored,
// a message stored that its sender was told was not. So no path trusts
// itself to leave the turn in order. Instead, every failed call on a
// conversation marks the conversation owed (watched, below): this
// replica may own turns there that none of its runners holds. The
// rescuer looks at each owed conversation once storage answers again,
// reads the turns this replica owns there (OwnTurns) and claims again,
// through the same conditional update as every other claim, each one no
// runner here holds (heldSeqs). A runner that is still retrying keeps its
// turn; one that gave up has handed it back (due), or left it owed.

// definite reports whether err is the database's answer to a write it
// judged — the conversation moved on, the id is stored, the claim is
// another's — rather than a failure to reach it.
func definite(err error) bool {
	return errors.Is(err, ErrStale) || errors.Is(err, ErrDuplicate) || errors.Is(err, ErrLostClaim)
}

// watched is the manager's view of its store: every ledger call's outcome
// feeds the storage health, and a failed call on a conversation makes it
// owed.
type watched struct {
	Store
	m *Manager
}

// seen records a call's outcome; conv is the conversation it was about
// ("" when none).
func (w watched) seen(ctx context.Context, conv string, err error) {
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return // the caller gave up; the database said nothing
	}
	w.m.health.observe(err, time.Now())
	if err != nil && conv != "" && !definite(err) {
		w.m.owe(conv)
	}
}

func (w watched) ActiveConversation(ctx context.Context, key string) (*Conversation, error) {
	c, err := w.Store.ActiveConversation(ctx, key)
	w.seen(ctx, "", err)
	return c, err
}

func (w watched) Conversation(ctx context.Context, id string) (*Conversation, error) {
	c, err := w.Store.Conversation(ctx, id)
	w.seen(ctx, id, err)
	return c, err
}

func (w watched) CreateConversation(ctx context.Context, c *Conversation) error {
	err := w.Store.CreateConversation(ctx, c)
	w.seen(ctx, "", err)
	return err
}

func (w watched) RecentMessages(ctx context.Context, convID string, limit int) ([]Message, error) {
	out, err := w.Store.RecentMessages(ctx, convID, limit)
	w.seen(ctx, convID, err)
	return out, err
}

func (w watched) MessageByClientID(ctx context.Context, convID, clientID string) (*Message, error) {
	out, err := w.Store.MessageByClientID(ctx, convID, clientID)
	w.seen(ctx, convID, err)
	return out, err
}

func (w watched) Message(ctx context.Context, convID string, seq int64) (*Message, error) {
	out, err := w.Store.Message(ctx, convID, seq)
	w.seen(ctx, convID, err)
	return out, err
}

func (w watched) FinalReply(ctx context.Context, convID string, userSeq int64) (*Message, error) {
	out, err := w.Store.FinalReply(ctx, convID, userSeq)
	w.seen(ctx, convID, err)
	return out, err
}

func (w watched) Append(ctx context.Context, a Append) error {
	err := w.Store.Append(ctx, a)
	w.seen(ctx, a.Conv.ID, err)
	return err
}

func (w watched) Archive(ctx context.Context, convID, reason string, at time.Time, expectSeq int64) (bool, error) {
	ok, err := w.Store.Archive(ctx, convID, reason, at, expectSeq)
	w.seen(ctx, convID, err)
	return ok, err
}

func (w watched) TurnAt(ctx context.Context, convID string, seq int64) (*Turn, error) {
	t, err := w.Store.TurnAt(ctx, convID, seq)
	w.seen(ctx, convID, err)
	return t, err
}

func (w watched) TurnByClientID(ctx context.Context, key, clientID string) (*Turn, error) {
	t, err := w.Store.TurnByClientID(ctx, key, clientID)
	w.seen(ctx, "", err)
	return t, err
}

func (w watched) DueTurns(ctx context.Context, now time.Time, limit int) ([]DueTurn, error) {
	out, err := w.Store.DueTurns(ctx, now, limit)
	w.seen(ctx, "", err)
	return out, err
}

func (w watched) OrphanTurns(ctx context.Context, since time.Time, alive []string, limit int) ([]DueTurn, error) {
	out, err := w.Store.OrphanTurns(ctx, since, alive, limit)
	w.seen(ctx, "", err)
	return out, err
}

func (w watched) OwnTurns(ctx context.Context, convID, owner string) ([]DueTurn, error) {
	out, err := w.Store.OwnTurns(ctx, convID, owner)
	w.seen(ctx, convID, err)
	return out, err
}

func (w watched) ClaimTurn(ctx context.Context, convID string, seq int64, seenOwner string, seenAttempt int, owner string, now time.Time) (*Claimed, error) {
	c, err := w.Store.ClaimTurn(ctx, convID, seq, seenOwner, seenAttempt, owner, now)
	w.seen(ctx, convID, err)
	return c, err
}

func (w watched) ClaimBatch(ctx context.Context, c Claim) (*Batch, error) {
	b, err := w.Store.ClaimBatch(ctx, c)
	w.seen(ctx, c.ConversationID, err)
	return b, err
}

func (w watched) Covers(ctx context.Context, convID string, lead int64) ([]BatchRow, error) {
	out, err := w.Store.Covers(ctx, convID, lead)
	w.seen(ctx, convID, err)
	return out, err
}

func (w watched) ReleaseTurn(ctx context.Context, convID string, seq int64, owner string, attempt int, dueAt time.Time, why string) error {
	err := w.Store.ReleaseTurn(ctx, convID, seq, owner, attempt, dueAt, why)
	w.seen(ctx, convID, err)
	return err
}

func (w watched) MarkDelivered(ctx context.Context, convID string, seq int64, owner string, attempt int, ref, failure string, at time.Time) error {
	err := w.Store.MarkDelivered(ctx, convID, seq, owner, attempt, ref, failure, at)
	w.seen(ctx, convID, err)
	return err
}

func (w watched) Heartbeat(ctx context.Context, replica string, started time.Time) error {
	err := w.Store.Heartbeat(ctx, replica, started)
	w.seen(ctx, "", err)
	return err
}

func (w watched) Replicas(ctx context.Context, self string, ttl time.Duration) ([]Replica, []string, error) {
	gone, alive, err := w.Store.Replicas(ctx, self, ttl)
	w.seen(ctx, "", err)
	return gone, alive, err
}

func (w watched) Lease(ctx context.Context, key, replica string, ttl time.Duration) (func(), error) {
	release, err := w.Store.Lease(ctx, key, replica, ttl)
	w.seen(ctx, "", err)
	return release, err
}
