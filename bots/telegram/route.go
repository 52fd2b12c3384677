package telegram

// What an update is and where it goes: a message, an edited one (Bot.edit),
// a command (Bot.command), or a /stop, which skips its chat's queue; which
// group messages are for the bot (mentions, replies, group_policy); and the
// session key a message belongs to (group_scope, forum topics).

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"

	"github.com/chatgate/chatgate/sessions"
)

// dispatch queues an update behind the earlier ones of the same session
// key, so one user's messages are stored in order while different chats
// run side by side; a /stop is not queued, so it is never stuck behind a
// message its chat is still storing, and a part of an album is gathered
// with the album's other parts first (Bot.gather). settled, if given, is
// called once: with true as soon as the update's message is stored (or
// needs no storing), with false if it was not taken. held is set for an
// update that already failed to be stored (since then).
func (b *Bot) dispatch(ctx context.Context, u update, offsets *offsetTracker, settled func(bool), held time.Time) {
	if offsets != nil {
		offsets.start(u)
	}
	ctx, endUpdate := b.traceUpdate(ctx, u)
	var settleOnce sync.Once
	end := func(ok bool) {
		endUpdate(ok)
		if settled != nil {
			settleOnce.Do(func() { settled(ok) })
		}
	}
	done := b.confirmer(ctx, offsets, []int{u.UpdateID}, []func(bool){end})
	if u.CallbackQuery != nil {
		// A tap on a button: answered at once, beside the chat's queue
		// (it stores no message, and must not wait behind one).
		b.inflight.Add(1)
		go func() {
			defer b.inflight.Done()
			b.callback(ctx, u)
			done(true)
		}()
		return
	}
	m := u.message()
	if m == nil || m.From == nil || (m.edit && b.opts.Edits != EditsAnswer) {
		done(true) // channel posts and the like are ignored; edits unless asked for
		return
	}
	key := b.sessionKey(m)
	if cmd := m.Command(); cmd == "stop" && !m.edit && b.addressed(m) && b.allowed(m) {
		b.stop(m, key)
		done(true)
		return
	}
	if m.MediaGroupID != "" && !m.edit {
		b.gather(ctx, albumPart{u: u, m: m, end: end, held: held}, key, offsets)
		return
	}
	b.inflight.Add(1)
	b.queue.submit(key, func() {
		defer b.inflight.Done()
		b.run(ctx, work{m: m, updates: []update{u}, since: held}, key, offsets, done)
	})
}

// confirmer returns the done func of the updates ids, which make one
// message (one update; an album's parts): called with true once the
// message is stored or needs no storing, with false when it was not
// taken. Each call ends the updates (their spans, a webhook's answer);
// the first with true confirms them all in one offset state — the
// ledger owns the turn from there, so a slow or failed turn never holds
// the offset, and a restart finds all of them confirmed or none. A false
// leaves the offset where it is: Telegram, or the stored state, sends
// them again.
func (b *Bot) confirmer(ctx context.Context, offsets *offsetTracker, ids []int, ends []func(bool)) func(bool) {
	var once sync.Once
	return func(processed bool) {
		for _, end := range ends {
			end(processed)
		}
		if offsets == nil || !processed {
			return
		}
		once.Do(func() {
			st := offsets.finish(ids...)
			b.persist(ctx, offsets, st)
		})
	}
}

// process handles one message. It returns nil when done with it, and an
// error when the message could not be stored: the gateway is shutting down
// (sessions.ErrShuttingDown, or ctx ended), or storage failed. stored is
// called as soon as the message is stored. first is false on a retry,
// whose failure is logged quietly.
//
// process returns once the message is stored, so that the chat's next
// update is taken at once — a burst of messages is merged into one turn
// only if each is stored while the one before it waits. What process
// sends goes out on the key's reply queue (later): the reply is sent when
// the turn that answers the message has ended, in the order the key's
// messages came.
func (b *Bot) process(ctx context.Context, m *message, key string, first bool, stored func()) error {
	if !b.addressed(m) {
		return nil
	}
	if !b.allowed(m) {
		b.refuse(ctx, m, key)
		return nil
	}
	b.noteName(m.From)
	if first && b.overLimit(ctx, m, key) {
		return nil
	}
	in := sessions.Inbound{
		Channel: Channel, SessionKey: key,
		UserID: strconv.FormatInt(m.From.ID, 10), ChatID: m.to().String(),
		ClientMsgID: clientMsgID(m.Chat.ID, m.MessageID),
		Quote:       m.quoted(),
		// An anonymous admin's message, or a channel's post in its
		// discussion group: From is Telegram's stand-in, shared by all.
		OnBehalf: m.SenderChat != nil,
	}
	if m.edit {
		return b.edit(ctx, m, key, in, first, stored)
	}
	if m.IsCommand() {
		return b.command(ctx, m, in, first)
	}
	return b.submitMessage(ctx, m, key, in, first, stored)
}

func (b *Bot) sessionKey(m *message) string {
	// Each topic is a conversation of its own, with group_scope applied
	// inside it; the General topic keeps the chat's key.
	if m.Chat.IsPrivate() {
		return sessions.TelegramTopicKey(sessions.TelegramDMKey(m.From.ID), m.thread)
	}
	return sessions.TelegramTopicKey(sessions.TelegramGroupKey(m.Chat.ID, m.From.ID, b.opts.GroupScope != "chat"), m.thread)
}

// addressed reports whether the bot should answer: always in a private
// chat; in a group when mentioned, replied to, or commanded (or always with
// group_policy all).
func (b *Bot) addressed(m *message) bool {
	if m.Chat.IsPrivate() || b.cur.Load().groupPolicy == "all" {
		return true
	}
	if m.album != nil {
		// An album is for the bot when one of its parts is: the caption
		// that mentions it, or a reply to it.
		return slices.ContainsFunc(m.album, b.addressed)
	}
	if m.IsCommand() {
		at := m.CommandWithAt()
		_, target, found := strings.Cut(at, "@")
		return !found || strings.EqualFold(target, b.Username())
	}
	if m.ReplyToMessage != nil && m.ReplyToMessage.From != nil && m.ReplyToMessage.From.ID == b.me().ID {
		return true
	}
	return b.mentioned(m)
}

func (b *Bot) mentioned(m *message) bool {
	text, entities := m.Text, m.Entities
	if text == "" {
		text, entities = m.Caption, m.CaptionEntities // a media message's caption
	}
	for _, e := range entities {
		switch e.Type {
		case "mention":
			if strings.EqualFold(entityText(text, e), "@"+b.Username()) {
				return true
			}
		case "text_mention":
			if e.User != nil && e.User.ID == b.me().ID {
				return true
			}
		}
	}
	return false
}

// entityText cuts an entity out of text; offsets count UTF-16 code units.
func entityText(text string, e tgbotapi.MessageEntity) string {
	units := 0
	start, end := -1, len(text)
	for i, r := range text {
		if units == e.Offset {
			start = i
		}
		if units == e.Offset+e.Length {
			end = i
			break
		}
		units += utf16Units(r)
	}
	if start < 0 {
		return ""
	}
	return text[start:end]
}

// stripMention removes the bot's @mention from a group message.
func (b *Bot) stripMention(m *message) string {
	if m.Chat.IsPrivate() {
		return messageText(m)
	}
	return strings.ReplaceAll(messageText(m), "@"+b.Username(), "")
}

// clientMsgID is a message's client id in the ledger: chat and message id.
func clientMsgID(chatID int64, messageID int) string {
	return strconv.FormatInt(chatID, 10) + ":" + strconv.Itoa(messageID)
}

// messageIn returns the message id of a client id of chat chatID (of
// an edit's client id too: the edited message's).
func messageIn(clientID string, chatID int64) (int, bool) {
	chat, msg, ok := strings.Cut(clientID, ":")
	if !ok || chat != strconv.FormatInt(chatID, 10) {
		return 0, false
	}
	msg, _, _ = strings.Cut(msg, ":")
	id, err := strconv.Atoi(msg)
	return id, err == nil
}
