package telegram

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"github.com/chatgate/chatgate/sessions"
)

// Edits (Options.Edits).
const (
	EditsAnswer = "answer"
	EditsIgnore = "ignore"
)

// allowedUpdates are the update kinds the bot asks Telegram for:
// messages, taps on its buttons (Bot.callback), and edits when it
// answers them.
func (b *Bot) allowedUpdates() []string {
	if b.opts.Edits == EditsAnswer {
		return []string{"message", "edited_message", "callback_query"}
	}
	return []string{"message", "callback_query"}
}

// editClientID is an edit's client id: the edited message's, and the
// time of the edit, so that a repeated update of one edit is answered
// once and each later edit of the message is an edit of its own.
func editClientID(chatID int64, messageID, editDate int) string {
	return clientMsgID(chatID, messageID) + ":e" + strconv.Itoa(editDate)
}

// edit applies an edited_message: while the message's turn has not
// started (it waits out its debounce, or behind a running turn) its
// stored text is replaced and that turn answers the edited text; once it
// started, the edit is answered as a new message that quotes it, the
// reply answering the edited message. An edit of a message the bot never
// stored (not addressed to it, or a command), or one with no text left,
// is ignored.
func (b *Bot) edit(ctx context.Context, m *message, key string, in sessions.Inbound, first bool, stored func()) error {
	if m.IsCommand() {
		return nil
	}
	text := strings.TrimSpace(b.stripMention(m))
	if text == "" {
		return nil
	}
	in.Text = text
	in.ClientMsgID = editClientID(m.Chat.ID, m.MessageID, m.EditDate)
	stopTyping := b.typing(m.to())
	st := b.newStream(m, key)
	ed, err := b.sess.Edit(ctx, in, clientMsgID(m.Chat.ID, m.MessageID), b.hooks(ctx, m, key, st, stored))
	if err == nil && ed.Ticket == nil || errors.Is(err, sessions.ErrEditNotFound) {
		// Replaced: the original's turn answers, and its update sends the
		// reply. Or nothing to edit.
		stopTyping()
		st.end()
		st.release()
		stored()
		return nil
	}
	return b.awaitTurn(ctx, m, key, first, ed.Ticket, err, stopTyping, st, "")
}
