package sessions

// Edits: a user changes a message they sent. While the message's turn
// has not started its stored text is replaced, so the turn answers the
// edited text; once it started (or was answered) the edit is a message
// of its own that says it is one.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"unicode/utf8"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions/ledger"
)

// ErrEditNotFound means the message an edit names is not stored for the
// session key.
var ErrEditNotFound = errors.New("no message with that id to edit")

// EditOutcome is what an edit did.
type EditOutcome struct {
	// Replaced is true when the original message's turn had not started:
	// its stored text is now the edit's and that turn answers it (or the
	// edit changed nothing). ConversationID and Seq name the original.
	Replaced       bool
	ConversationID string
	Seq            int64
	// Ticket is set otherwise: the edit was stored as a new user message,
	// its text EditedText(original, text), answered like any message
	// (acknowledged through the hooks' OnAck, per the busy mode).
	Ticket *Ticket
}

// editQuoteRunes bounds how much of the original text an edit's new
// message quotes.
const editQuoteRunes = 80

// EditedText is how an edit answered as a new message is stored, so that
// the model and the transcript see it is an edit of an earlier message.
func EditedText(original, text string) string {
	if utf8.RuneCountInString(original) > editQuoteRunes {
		r := []rune(original)
		original = string(r[:editQuoteRunes]) + "…"
	}
	return fmt.Sprintf("(edited my earlier message %q) %s", original, text)
}

// Edit applies an edit of the user message whose client id is
// originalID: in.Text is the new text, in.ClientMsgID the edit's own id
// (stable for one edit, so a repeated edit is answered once). The
// original's text is replaced when its turn has not started — stored
// pending and never claimed, decided by one conditional update, so an
// edit never races a claim: the claim sees either text, whole. Otherwise
// the edit is submitted as a new message quoting it, with its own id, h
// its hooks. An edit to the text already stored changes nothing.
func (m *Manager) Edit(ctx context.Context, in Inbound, originalID string, h Hooks) (EditOutcome, error) {
	if originalID == "" {
		return EditOutcome{}, ErrEditNotFound
	}
	if ledger.IsFireMsgID(originalID) {
		// A fire's message is the schedule's, not the user's to change.
		return EditOutcome{}, ErrFireID
	}
	if err := m.check(in); err != nil {
		return EditOutcome{}, err
	}
	orig, done, err := m.editInPlace(ctx, in, originalID)
	if err != nil || done.Replaced {
		return done, err
	}
	quoted := in
	quoted.Text = EditedText(orig, in.Text)
	quoted.Attachments = nil
	t, err := m.Submit(ctx, quoted, h)
	if err != nil {
		return EditOutcome{}, err
	}
	return EditOutcome{ConversationID: t.ConversationID(), Seq: t.Seq(), Ticket: t}, nil
}

// editInPlace replaces the original's text under the key's state lock
// when its turn has not started, and otherwise returns its stored text.
func (m *Manager) editInPlace(ctx context.Context, in Inbound, originalID string) (string, EditOutcome, error) {
	if !m.life.enter() {
		return "", EditOutcome{}, ErrShuttingDown
	}
	defer m.life.leave()
	release, err := m.lockState(ctx, in.SessionKey, true)
	if err != nil {
		return "", EditOutcome{}, err
	}
	defer release()
	hc, err := m.load(ctx, in, m.Policy(in.Channel), m.now())
	if err != nil {
		return "", EditOutcome{}, err
	}
	um := hc.byClientID(originalID)
	if um == nil {
		stored, err := m.store.MessageByClientID(ctx, hc.conv.ID, originalID)
		if err != nil {
			return "", EditOutcome{}, err
		}
		if stored == nil {
			// Of an earlier conversation: answered there.
			old, err := m.store.TurnByClientID(ctx, in.SessionKey, originalID)
			if err != nil {
				return "", EditOutcome{}, err
			}
			if old == nil {
				return "", EditOutcome{}, fmt.Errorf("%w: %s", ErrEditNotFound, originalID)
			}
			msg, err := m.store.Message(ctx, old.ConversationID, old.Seq)
			if err != nil || msg == nil {
				return "", EditOutcome{}, errors.Join(fmt.Errorf("%w: %s", ErrEditNotFound, originalID), err)
			}
			stored = msg
		}
		um = stored
	}
	if um.Role != agent.RoleUser {
		return "", EditOutcome{}, fmt.Errorf("%w: %s", ErrEditNotFound, originalID)
	}
	same := EditOutcome{Replaced: true, ConversationID: um.ConversationID, Seq: um.Seq}
	if um.Content == in.Text {
		return um.Content, same, nil
	}
	if um.ConversationID != hc.conv.ID || um.TurnState != ledger.TurnPending || um.TurnAttempt != 0 {
		return um.Content, EditOutcome{}, nil
	}
	replaced, err := m.store.EditPending(ctx, um.ConversationID, um.Seq, in.Text)
	if err != nil {
		// It may have landed: the edit sent again reads the message
		// afresh, finds its text already the edit's and replaces nothing
		// more — never answers it a second time as a new message.
		m.hot.Remove(in.SessionKey)
		return "", EditOutcome{}, err
	}
	if !replaced {
		// Its turn was claimed meanwhile.
		return um.Content, EditOutcome{}, nil
	}
	if w := hc.byClientID(originalID); w != nil {
		w.Content = in.Text
		m.hot.Update(in.SessionKey, hc)
	}
	m.log.Info("message edited before its turn", slog.String("session_key", in.SessionKey),
		slog.String("conversation", um.ConversationID), slog.Int64("seq", um.Seq))
	return in.Text, same, nil
}
