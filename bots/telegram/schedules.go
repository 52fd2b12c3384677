package telegram

// /schedules: the operator's schedules that go to every session of this
// channel that opted in (bot.yaml schedules with target all_sessions),
// each with a Subscribe or Unsubscribe button. A tap is a callback query
// (Bot.callback) with data "sched:+NAME" (subscribe) or "sched:-NAME"
// (unsubscribe) — NAME as "#" and a digest when the data would pass
// Telegram's 64 bytes — and chooses for the tapper's own session key. It
// is answered with what it did, also when the schedule is no longer
// offered (a reload took it out: the list is updated) or the data names
// no schedule offered here (made up: nothing changes); in a private chat
// the message is edited to show the choice.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"

	"github.com/chatgate/chatgate/sessions"
)

// schedData prefixes the callback data of /schedules' buttons.
const schedData = "sched"

// Answers of /schedules and its buttons.
const (
	schedulesNoneText   = "There are no schedules to subscribe to here."
	schedulesFailedText = "I couldn't read the schedules just now; please try again."
	schedulesHeadText   = "Schedules you can subscribe to — I write to you at their times:"
	tapSubscribedText   = "Subscribed to %s"
	tapUnsubscribedText = "Unsubscribed from %s"
	tapScheduleGoneText = "That schedule is no longer offered; the list is updated"
	tapSchedulesOffText = "There are no schedules to subscribe to here"
)

// Schedules are the operator's schedules a session may opt in to, and
// its choices (sessions.Timetable).
type Schedules interface {
	OptIns(ctx context.Context, channel, sessionKey string) ([]sessions.OptIn, error)
	SetOptIn(ctx context.Context, channel, sessionKey, name string, on bool) ([]sessions.OptIn, error)
}

// schedButtonData is the data of the button that subscribes to (on) or
// unsubscribes from the schedule called name.
func schedButtonData(name string, on bool) string {
	sign := "-"
	if on {
		sign = "+"
	}
	data := schedData + ":" + sign + name
	if len(data) > 64 {
		data = schedData + ":" + sign + nameDigest(name)
	}
	return data
}

// nameDigest stands for a name too long for a button's data.
func nameDigest(name string) string {
	sum := sha256.Sum256([]byte(name))
	return "#" + hex.EncodeToString(sum[:8])
}

// schedulesText is the text above /schedules' buttons.
func schedulesText(list []sessions.OptIn) string {
	var b strings.Builder
	b.WriteString(schedulesHeadText)
	for _, o := range list {
		state := "not subscribed"
		if o.On {
			state = "subscribed"
		}
		next := ""
		if !o.Next.IsZero() {
			zone := o.Location
			if zone == nil {
				zone = time.UTC
			}
			next = ", next " + o.Next.In(zone).Format("Mon 2 Jan 15:04 MST")
		}
		fmt.Fprintf(&b, "\n• %s — %s%s: %s", o.Name, o.When, next, state)
	}
	return b.String()
}

// schedulesKeyboard is a button per schedule: Unsubscribe from one the
// session opted in to, Subscribe to the others.
func schedulesKeyboard(list []sessions.OptIn) tgbotapi.InlineKeyboardMarkup {
	var rows [][]tgbotapi.InlineKeyboardButton
	for _, o := range list {
		label := "Subscribe to " + cut(o.Name, 40)
		if o.On {
			label = "✓ " + cut(o.Name, 40) + " — Unsubscribe"
		}
		rows = append(rows, tgbotapi.NewInlineKeyboardRow(tgbotapi.NewInlineKeyboardButtonData(label, schedButtonData(o.Name, !o.On))))
	}
	return tgbotapi.NewInlineKeyboardMarkup(rows...)
}

// sendSchedules answers /schedules: the list with its buttons, or why
// there is none.
func (b *Bot) sendSchedules(ctx context.Context, m *message, in sessions.Inbound) {
	ctx = context.WithoutCancel(ctx)
	if b.sess.Schedules == nil {
		b.sendPlain(ctx, m.to(), schedulesNoneText, m.MessageID)
		return
	}
	list, err := b.sess.Schedules.OptIns(ctx, Channel, in.SessionKey)
	if err != nil {
		b.log.Warn("telegram: /schedules failed", slog.String("session_key", in.SessionKey), slog.String("error", err.Error()))
		b.sendPlain(ctx, m.to(), schedulesFailedText, m.MessageID)
		return
	}
	if len(list) == 0 {
		b.sendPlain(ctx, m.to(), schedulesNoneText, m.MessageID)
		return
	}
	b.sendWithButtons(ctx, m, schedulesText(list), schedulesKeyboard(list), "send the schedules")
}

// scheduleTap handles a tap on one of /schedules' buttons (rest: the
// data after "sched:") and returns the tap's answer, and what to do once
// it is answered: in a private chat, show the choice on the message.
func (b *Bot) scheduleTap(ctx context.Context, q *tgbotapi.CallbackQuery, thread int, rest string) (string, func()) {
	if q.Message == nil || q.Message.Chat == nil || len(rest) < 2 || (rest[0] != '+' && rest[0] != '-') {
		return unknownButtonText, nil
	}
	if b.sess.Schedules == nil {
		return tapSchedulesOffText, nil
	}
	on, name := rest[0] == '+', rest[1:]
	key := b.sessionKey(&message{Message: &tgbotapi.Message{Chat: q.Message.Chat, From: q.From}, thread: thread})
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if strings.HasPrefix(name, "#") {
		// A long name, by its digest: among the schedules offered now.
		list, err := b.sess.Schedules.OptIns(cctx, Channel, key)
		if err != nil {
			b.log.Warn("telegram: reading the schedules failed", slog.String("session_key", key), slog.String("error", err.Error()))
			return tapTryAgainText, nil
		}
		for _, o := range list {
			if nameDigest(o.Name) == name {
				name = o.Name
			}
		}
	}
	list, err := b.sess.Schedules.SetOptIn(cctx, Channel, key, name, on)
	answer := ""
	switch {
	case errors.Is(err, sessions.ErrNoSchedule):
		answer = tapScheduleGoneText
		if list, err = b.sess.Schedules.OptIns(cctx, Channel, key); err != nil {
			return answer, nil
		}
	case err != nil:
		b.log.Warn("telegram: storing a schedule choice failed", slog.String("session_key", key), slog.String("error", err.Error()))
		return tapTryAgainText, nil
	case on:
		answer = fmt.Sprintf(tapSubscribedText, cut(name, 64))
	default:
		answer = fmt.Sprintf(tapUnsubscribedText, cut(name, 64))
	}
	if !q.Message.Chat.IsPrivate() {
		// A group's buttons serve everyone, each for their own session:
		// the message stays as it was, the answer tells the tapper.
		return answer, nil
	}
	chat, msg := q.Message.Chat.ID, q.Message.MessageID
	return answer, func() { b.editSchedules(ctx, chat, msg, list) }
}

// editSchedules shows list on /schedules' message msg of chat: its text
// and buttons, or that none is offered any more.
func (b *Bot) editSchedules(ctx context.Context, chat int64, msg int, list []sessions.OptIn) {
	ctx = context.WithoutCancel(ctx)
	text := schedulesText(list)
	if len(list) == 0 {
		text = schedulesNoneText
	}
	params := tgbotapi.Params{"chat_id": strconv.FormatInt(chat, 10), "text": text}
	params.AddNonZero("message_id", msg)
	if err := params.AddInterface("reply_markup", schedulesKeyboard(list)); err != nil {
		return
	}
	b.editMessage(ctx, methodEdit, params, "edit the schedules", nil)
}

// scheduledText is /status's line on what the session has on the clock,
// "" when there is nothing to say: "Scheduled: 2 reminders, next Mon 30
// Mar 08:00 CEST (Europe/Berlin); schedule brief, next Tue 31 Mar 08:00
// CEST (Europe/Berlin)."
func scheduledText(sc *sessions.Scheduled) string {
	if sc == nil {
		return ""
	}
	next := func(t time.Time, zone *time.Location) string {
		if t.IsZero() {
			return ""
		}
		if zone == nil {
			zone = time.UTC
		}
		return fmt.Sprintf(", next %s (%s)", t.In(zone).Format("Mon 2 Jan 15:04 MST"), zone)
	}
	var parts []string
	if sc.Reminders > 0 {
		parts = append(parts, plural(int64(sc.Reminders), "reminder")+next(sc.NextReminder, sc.NextReminderZone))
	}
	if n := len(sc.Schedules); n > 0 {
		label := "schedule "
		if n > 1 {
			label = "schedules "
		}
		parts = append(parts, label+strings.Join(sc.Schedules, ", ")+next(sc.NextSchedule, sc.NextScheduleZone))
	}
	switch {
	case len(parts) > 0 && sc.Offered > 0:
		return "Scheduled: " + strings.Join(parts, "; ") + ". /schedules to subscribe to more."
	case len(parts) > 0:
		return "Scheduled: " + strings.Join(parts, "; ") + "."
	case sc.Offered > 0:
		return "Scheduled: nothing yet — /schedules to subscribe."
	}
	return ""
}
