package telegram

// /reminders: the chat's reminders (sessions.Reminders) in one message,
// each with its next time on its zone's clock and an inline Cancel
// button. A tap is a callback query (Bot.callback) with data
// "rem:<id>": it cancels for the tapper's own session key — never one the
// button names, so a crafted or forwarded button cancels nobody else's
// reminder — is answered with what it did (also when the reminder is
// gone, or not the tapper's), and after a cancel the message is edited to
// the list as it is then. Reminders are made by asking the bot (the
// model's reminder tools, where session.schedules.enabled allows).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"

	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/ledger"
)

// remindData prefixes the callback data of /reminders' Cancel buttons.
const remindData = "rem"

// Reminders is the door of /reminders (sessions.Reminders).
type Reminders interface {
	Enabled(channel string) bool
	List(ctx context.Context, sessionKey string) ([]ledger.Reminder, error)
	Cancel(ctx context.Context, sessionKey string, id int64) error
}

// Answers of /reminders and its buttons.
const (
	remindersHead      = "Your reminders:"
	remindersNone      = "You have no reminders."
	remindersAsk       = " Ask me to remind you of something, such as: remind me at 6 pm to call Ann."
	remindersOff       = "I don't keep reminders here."
	remindersFailed    = "I couldn't read your reminders just now; please try again."
	tapCancelledText   = "Reminder cancelled"
	tapNoReminderText  = "That reminder is not yours, or it is cancelled or done already"
	tapRemindersOffTxt = "Reminders are off here"
	remindersMore      = "… and %d more not shown: cancel some to see them."
	// maxListed bounds the reminders one message lists (and buttons it
	// carries); max_per_user is at most 1000, Telegram's messages are
	// not that long. Fewer fit when their texts are long: the list is
	// cut to one message's MaxMessageUnits, as /memory's is.
	maxListed = 50
	// reminderTextRunes of a reminder's text are listed.
	reminderTextRunes = 300
)

// remindersText is the list as the message shows it, and the reminders
// it shows: the first, as many as fit in one message's text and
// maxListed, the others counted.
func remindersText(list []ledger.Reminder, enabled bool) (string, []ledger.Reminder) {
	if len(list) == 0 {
		if enabled {
			return remindersNone + remindersAsk, nil
		}
		return remindersNone, nil
	}
	text, shown := fitList(remindersHead, len(list), maxListed,
		func(i int) string { return reminderEntry(i+1, list[i]) },
		func(left int) string { return fmt.Sprintf(remindersMore, left) })
	return text, list[:shown]
}

// reminderEntry is reminder r of the list, numbered n: its text, its
// next time on its zone's clock, and how it repeats.
func reminderEntry(n int, r ledger.Reminder) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n\n%d. %s", n, cut(r.Text, reminderTextRunes))
	next := sessions.ReminderNext(r)
	if !next.IsZero() {
		fmt.Fprintf(&sb, "\n   next: %s", next.Format("Mon 2 Jan 2006 15:04 MST"))
		if r.Timezone != "" && r.Timezone != "UTC" {
			fmt.Fprintf(&sb, " (%s)", r.Timezone)
		}
	}
	if rep := sessions.ReminderRepeats(r); rep != "" {
		fmt.Fprintf(&sb, "\n   repeats: %s", rep)
	}
	return sb.String()
}

// remindersKeyboard is a Cancel button per shown reminder, numbered as
// the text numbers them.
func remindersKeyboard(shown []ledger.Reminder) *tgbotapi.InlineKeyboardMarkup {
	if len(shown) == 0 {
		return nil
	}
	var rows [][]tgbotapi.InlineKeyboardButton
	for i, r := range shown {
		label := fmt.Sprintf("Cancel %d: %s", i+1, cut(r.Text, 24))
		rows = append(rows, tgbotapi.NewInlineKeyboardRow(tgbotapi.NewInlineKeyboardButtonData(label, remindData+":"+strconv.FormatInt(r.ID, 10))))
	}
	kb := tgbotapi.NewInlineKeyboardMarkup(rows...)
	return &kb
}

// reminders runs /reminders: its answer goes out on the key's reply
// queue, after the replies to the messages before it.
func (b *Bot) reminders(ctx context.Context, m *message, in sessions.Inbound) {
	ctx = context.WithoutCancel(ctx)
	b.later(in.SessionKey, func() { b.sendReminders(ctx, m, in) })
}

func (b *Bot) sendReminders(ctx context.Context, m *message, in sessions.Inbound) {
	r := b.sess.Reminders
	if r == nil {
		b.sendPlain(ctx, m.to(), remindersOff, m.MessageID)
		return
	}
	list, err := r.List(ctx, in.SessionKey)
	if err != nil {
		b.log.Warn("telegram: /reminders failed", slog.String("session_key", in.SessionKey), slog.String("error", err.Error()))
		b.sendPlain(ctx, m.to(), remindersFailed, m.MessageID)
		return
	}
	text, shown := remindersText(list, r.Enabled(Channel))
	var kb any
	if k := remindersKeyboard(shown); k != nil {
		kb = k
	}
	b.sendWithButtons(ctx, m, text, kb, "send the reminders")
}

// reminderTap handles a tap on a Cancel button of /reminders (rest: the
// data after "rem:") and returns the tap's answer, and what to do once it
// is answered: edit the message to the list after the cancel.
func (b *Bot) reminderTap(ctx context.Context, q *tgbotapi.CallbackQuery, thread int, rest string) (string, func()) {
	id, err := strconv.ParseInt(rest, 10, 64)
	if err != nil || id <= 0 || q.Message == nil || q.Message.Chat == nil {
		return unknownButtonText, nil
	}
	r := b.sess.Reminders
	if r == nil {
		return tapRemindersOffTxt, nil
	}
	// The tapper's own session: in a group whose sessions are per user,
	// a button of someone else's list cancels nothing.
	key := b.sessionKey(&message{Message: &tgbotapi.Message{Chat: q.Message.Chat, From: q.From}, thread: thread})
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	switch err := r.Cancel(cctx, key, id); {
	case errors.Is(err, sessions.ErrNoSuchReminder):
		return tapNoReminderText, nil
	case err != nil:
		b.log.Warn("telegram: cancelling a reminder failed", slog.String("session_key", key), slog.String("error", err.Error()))
		return tapTryAgainText, nil
	}
	chat, msg := q.Message.Chat.ID, q.Message.MessageID
	return tapCancelledText, func() { b.editReminders(ctx, chat, msg, key) }
}

// editReminders shows the key's reminders on /reminders' message msg of
// chat, as they are now.
func (b *Bot) editReminders(ctx context.Context, chat int64, msg int, key string) {
	ctx = context.WithoutCancel(ctx)
	r := b.sess.Reminders
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	list, err := r.List(cctx, key)
	cancel()
	if err != nil {
		b.log.Warn("telegram: reading the reminders failed", slog.String("session_key", key), slog.String("error", err.Error()))
		return
	}
	text, shown := remindersText(list, r.Enabled(Channel))
	params := tgbotapi.Params{"chat_id": strconv.FormatInt(chat, 10), "text": text}
	params.AddNonZero("message_id", msg)
	// Without reply_markup the edit takes the buttons away: none are
	// left to cancel.
	if kb := remindersKeyboard(shown); kb != nil {
		if err := params.AddInterface("reply_markup", kb); err != nil {
			return
		}
	}
	b.editMessage(ctx, methodEdit, params, "edit the reminders", nil)
}
