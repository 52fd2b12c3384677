package sessions

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/chatgate/chatgate/sessions/ledger"
)

// ReasonResume is the reason of the ResetEvent a ResumePrevious publishes:
// the key went back to an earlier conversation (NewConversation) and its
// current one (OldConversation, if any) was archived with reason manual.
const ReasonResume = "resume"

// ErrNothingToResume means the session key has no archived conversation
// with messages to go back to.
var ErrNothingToResume = errors.New("there is no earlier conversation to go back to")

// Why ResumeConversation did not reopen the conversation it was given.
var (
	// ErrAlreadyActive: it is the key's active conversation already (it
	// was resumed since).
	ErrAlreadyActive = errors.New("that conversation is the active one already")
	// ErrNotPrevious: it is not the one ResumePrevious would reopen now —
	// the key moved on since (another reset or resume), or it was purged.
	ErrNotPrevious = errors.New("that conversation is not the previous one any more")
	// ErrNotYours: it is another session key's conversation.
	ErrNotYours = errors.New("that conversation is another session's")
)

// Resumed is the result of ResumePrevious.
type Resumed struct {
	// Event is the reset it published: OldConversation the conversation
	// archived ("" when the key had none active), NewConversation the one
	// reopened, Reason ReasonResume.
	Event ResetEvent
	// Conversation is the reopened conversation as now stored; its
	// LastSeq is how many messages it holds.
	Conversation ledger.Conversation
}

// reopenAttempts bounds how often ResumePrevious starts over when another
// writer changed the key's conversations between its read and its write.
const reopenAttempts = 5

// ResumePrevious takes the session key back to its most recently archived
// conversation that holds messages: the active one, if any, is archived
// (reason manual) and the earlier one becomes active again, in one
// transaction; both stay stored. It returns ErrNothingToResume when there
// is none. Like Reset, it holds the key's state lock, so no message of the
// key is stored meanwhile on this replica; a turn already running answers
// in the conversation its message was stored in. On another replica a
// message stored meanwhile makes the conditional archive fail, and it
// starts over from storage.
//
// The reopened conversation's idle clock starts again now, so the idle
// sweep does not take it at once; with a daily reset its start moves to
// now too when it began before the latest boundary, for the same reason.
// The published ResetEvent (reason resume) reaches every listener here
// and, through the other replicas, their clients.
func (c *Conversations) ResumePrevious(ctx context.Context, in Inbound) (Resumed, error) {
	return c.resume(ctx, in, "")
}

// ResumeConversation is ResumePrevious for a caller that names the
// conversation it means to go back to, such as the "Go back" button under
// a reset notice, which may be tapped long after: it reopens conv only
// while conv is the one ResumePrevious would reopen (the key's most
// recently archived conversation with messages), and otherwise returns
// ErrAlreadyActive (conv is the key's active conversation), ErrNotYours
// (conv is another key's) or ErrNotPrevious, changing nothing.
func (c *Conversations) ResumeConversation(ctx context.Context, in Inbound, conv string) (Resumed, error) {
	if conv == "" {
		return Resumed{}, ErrBadInbound
	}
	return c.resume(ctx, in, conv)
}

// resume is ResumePrevious, and ResumeConversation when want is set.
func (c *Conversations) resume(ctx context.Context, in Inbound, want string) (Resumed, error) {
	if in.Channel == "" || in.SessionKey == "" {
		return Resumed{}, ErrBadInbound
	}
	release, err := c.turns.acquire(ctx, in.SessionKey)
	if err != nil {
		return Resumed{}, err
	}
	defer release()
	policy := c.turns.Policy(in.Channel)
	for attempt := 1; ; attempt++ {
		now := c.now()
		cur, err := c.store.ActiveConversation(ctx, in.SessionKey)
		if err != nil {
			return Resumed{}, err
		}
		prev, err := c.store.LastArchived(ctx, in.SessionKey)
		if err != nil {
			return Resumed{}, err
		}
		if want != "" && (prev == nil || prev.ID != want) {
			return Resumed{}, c.notPrevious(ctx, in.SessionKey, cur, want)
		}
		if prev == nil {
			return Resumed{}, ErrNothingToResume
		}
		r := ledger.Reopen{SessionKey: in.SessionKey, Previous: prev.ID, At: now}
		if cur != nil {
			r.Current, r.ExpectSeq = cur.ID, cur.LastSeq
		}
		if policy.Reset.daily() && prev.StartedAt.Before(policy.Reset.Boundary(now)) {
			r.StartedAt = &now
		}
		err = c.store.Reopen(ctx, r)
		if errors.Is(err, ledger.ErrStale) && attempt < reopenAttempts && ctx.Err() == nil {
			c.hot.Remove(in.SessionKey)
			continue
		}
		// Whatever happened, the cached copy may be the archived one.
		c.hot.Remove(in.SessionKey)
		if err != nil {
			return Resumed{}, fmt.Errorf("resume previous conversation of %s: %w", in.SessionKey, err)
		}
		conv := *prev
		conv.Status, conv.ArchivedAt, conv.ResetReason, conv.LastActivityAt = ledger.StatusActive, nil, "", now
		if r.StartedAt != nil {
			conv.StartedAt = now
		}
		ev := ResetEvent{Channel: in.Channel, SessionKey: in.SessionKey, OldConversation: r.Current,
			NewConversation: conv.ID, Reason: ReasonResume}
		if cur != nil {
			ev.OldMessages = cur.LastSeq
		}
		c.log.Info("conversation resumed", slog.String("session_key", in.SessionKey),
			slog.String("archived", ev.OldConversation), slog.String("conversation", conv.ID))
		c.publish(ev)
		return Resumed{Event: ev, Conversation: conv}, nil
	}
}

// notPrevious says why conversation want is not the key's to go back to:
// it is active already, another key's (or not stored), or passed over.
func (c *Conversations) notPrevious(ctx context.Context, key string, cur *ledger.Conversation, want string) error {
	if cur != nil && cur.ID == want {
		return ErrAlreadyActive
	}
	got, err := c.store.Conversation(ctx, want)
	switch {
	case err != nil:
		return err
	case got != nil && got.SessionKey != key:
		return ErrNotYours
	}
	return ErrNotPrevious
}

// tellEarlierReset gives the first message after a sweep archived the
// key's conversation the OnReset hook the sweep could not call: its
// channel tells the user why the conversation is new. It looks only when
// the message opens a conversation (the one it would be stored in is
// empty) in a channel that resets on its own, and the hook is set; the
// archive it reports is the key's latest of a conversation with messages,
// if a sweep made it (a user's own /new is not reported).
func (c *Conversations) tellEarlierReset(ctx context.Context, t *Ticket, hc *hotConv, policy Policy) error {
	if t.reset != nil || t.hooks.OnReset == nil || hc.conv.LastSeq != 0 || (!policy.Reset.idle() && !policy.Reset.daily()) {
		return nil
	}
	prev, err := c.store.LastArchived(ctx, t.in.SessionKey)
	if err != nil || prev == nil {
		return err
	}
	if prev.ResetReason != ledger.ReasonIdle && prev.ResetReason != ledger.ReasonDaily {
		return nil
	}
	t.reset = &ResetEvent{Channel: t.in.Channel, SessionKey: t.in.SessionKey, OldConversation: prev.ID,
		NewConversation: hc.conv.ID, Reason: prev.ResetReason, OldMessages: prev.LastSeq, Earlier: true}
	t.hooks.OnReset(*t.reset)
	return nil
}
