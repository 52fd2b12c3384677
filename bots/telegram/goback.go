package telegram

// The "Go back" button. A reset notice — the conversation was idle, or a
// new day began, so a new one starts — has an inline button that does
// what /resume does: the key goes back to the conversation the notice told
// of. A tap is a callback query (Bot.callback), answered once whatever
// becomes of it. The button works while that conversation is the one
// /resume would reopen; a tap after the key has moved on (it went back
// already, or reset again since), or one on another member's notice in a
// group, is answered with a short note and changes nothing. Once the
// button can do nothing more — it went back, or it is out of date — it is
// removed from the notice.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"

	"github.com/chatgate/chatgate/bots/telegram/tgformat"
	"github.com/chatgate/chatgate/sessions"
)

// backData starts the data of a Go back button: "back:<archived
// conversation id>" (41 bytes for a UUID; Telegram allows 64).
const backData = "back"

// The Go back button and what a tap on it is answered with.
const (
	backButtonText   = "↩️ Go back"
	backDoneText     = "Back to your previous conversation"
	backActiveText   = "You are back in that conversation already."
	backStaleText    = "This button is out of date: the conversation has moved on since. Send /resume to go back to the last one."
	backNotYoursText = "This button is for the person whose conversation it was."
)

// backKeyboard is a reset notice's button, which goes back to archived
// conversation conv; none when its data would be too long for Telegram.
func backKeyboard(conv string) (tgbotapi.InlineKeyboardMarkup, bool) {
	data := backData + ":" + conv
	if conv == "" || len(data) > 64 {
		return tgbotapi.InlineKeyboardMarkup{}, false
	}
	return tgbotapi.NewInlineKeyboardMarkup(tgbotapi.NewInlineKeyboardRow(
		tgbotapi.NewInlineKeyboardButtonData(backButtonText, data))), true
}

// sendResetNotice sends a reset notice (text, plain) to the chat, with the
// Go back button to archived conversation conv.
func (b *Bot) sendResetNotice(ctx context.Context, to place, text, conv string) (string, error) {
	extra := tgbotapi.Params{}
	if kb, ok := backKeyboard(conv); ok {
		if err := extra.AddInterface("reply_markup", kb); err != nil {
			return "", err
		}
	}
	sent, to, err := b.sendPart(context.WithoutCancel(ctx), to, tgformat.Part{Plain: text}, false, 0, extra)
	if err != nil {
		b.log.Warn("telegram: sending a reset notice failed", slog.Int64("chat", to.chat), slog.String("error", b.redact(err)))
		return "", errors.New(b.redact(err))
	}
	return strconv.Itoa(sent.MessageID), nil
}

// backTap handles a tap on a Go back button (conv: the data after
// "back:") and returns the tap's answer, and what to do once it is
// answered: say so in the chat, and take the button away.
func (b *Bot) backTap(ctx context.Context, q *tgbotapi.CallbackQuery, thread int, conv string) (string, func()) {
	if conv == "" || q.Message == nil || q.Message.Chat == nil {
		return unknownButtonText, nil
	}
	m := &message{Message: &tgbotapi.Message{Chat: q.Message.Chat, From: q.From}, thread: thread}
	to, key := m.to(), b.sessionKey(m)
	in := sessions.Inbound{Channel: Channel, SessionKey: key, UserID: strconv.FormatInt(q.From.ID, 10), ChatID: to.String()}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	res, err := b.sess.ResumeConversation(rctx, in, conv)
	notice := q.Message.MessageID
	unbutton := func() { b.removeButtons(ctx, to.chat, notice) }
	switch {
	case err == nil:
		text := fmt.Sprintf(resumedText, plural(res.Conversation.LastSeq, "message"))
		return backDoneText, func() {
			unbutton()
			// After the replies of the messages before the tap, as
			// /resume's answer.
			b.later(key, func() { b.sendPlain(ctx, to, text, 0) })
		}
	case errors.Is(err, sessions.ErrAlreadyActive):
		return backActiveText, unbutton
	case errors.Is(err, sessions.ErrNotPrevious), errors.Is(err, sessions.ErrNothingToResume):
		return backStaleText, unbutton
	case errors.Is(err, sessions.ErrNotYours):
		return backNotYoursText, nil
	}
	b.log.Warn("telegram: going back to a conversation failed", slog.String("session_key", key), slog.String("error", err.Error()))
	return tapTryAgainText, nil
}

// removeButtons takes the inline keyboard off message msg of chat. 429s
// are waited out; "message is not modified" (it had none left) is done;
// other failures are logged once, and the button stays, answered as
// stale when tapped.
func (b *Bot) removeButtons(ctx context.Context, chat int64, msg int) {
	ctx = context.WithoutCancel(ctx)
	params := tgbotapi.Params{"chat_id": strconv.FormatInt(chat, 10)}
	params.AddNonZero("message_id", msg)
	b.editMessage(ctx, "editMessageReplyMarkup", params, "remove a button", nil)
}
