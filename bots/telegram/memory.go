package telegram

// Memory: the notes the bot keeps about a user across conversations
// (sessions.Memory), as the user sees and keeps them in Telegram.
// /remember <text> keeps a note; /memory (and /forget alone) lists the
// sender's notes, newest first, each with a Forget button, and a Forget
// everything button that asks Yes or Cancel first; /forget <id> forgets
// one. Whose notes is always sessions.MemoryUser of the sender's — or the
// tapper's — own session key and id, never what a button's data says: a
// forwarded or crafted button forgets nothing of anyone else's. Listing
// and forgetting work where memory is off (what was kept stays the
// user's to see and forget); only /remember then refuses. The notes go
// out as plain text, without a parse mode: a note is user or model text,
// and whatever it holds (Markdown, HTML) shows as written.
//
// A list is only ever shown in its owner's private chat with the bot: a
// group member's notes must not be read by the other members. /memory in
// a group sends the sender's notes of that group to their private chat
// and says so in the group (or, when Telegram refuses the private
// message, that they must start a chat with the bot first); the list
// names the group, and its buttons name the group's chat, so that a tap
// acts on the tapper's notes of that group. /forget <id> and /remember
// answer in the group, without any note's text.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"

	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/ledger"
)

// Memory is the door of /remember, /memory and /forget (sessions.Memory).
type Memory interface {
	Enabled(channel, user string) bool
	Remember(ctx context.Context, req sessions.NoteRequest) (ledger.Note, error)
	List(ctx context.Context, user string) ([]ledger.Note, error)
	Forget(ctx context.Context, user string, id int64) error
	ForgetAll(ctx context.Context, user string) (int64, error)
}

// memData prefixes the callback data of the notes' buttons:
// "mem:f:<chat>:<id>" forgets note id, "mem:all:<chat>" asks to forget
// everything, "mem:yes:<chat>" forgets everything, "mem:no:<chat>" shows
// the list again. chat is the chat whose notes the list shows: the
// owner's private chat (their own id), or the group /memory was sent in.
// The notes acted on are the tapper's own in that chat (memoryTap): the
// data names a chat, never a user. No owner is needed besides: the list
// is in its owner's private chat, where no one else can tap; and the
// longest data, "mem:f:" with two int64s, takes 46 of Telegram's 64 bytes
// (an owner besides would take 66).
const memData = "mem"

// The buttons' operations (memData).
const (
	memForget    = "f"
	memAskAll    = "all"
	memForgetAll = "yes"
	memCancel    = "no"
)

// Answers of the memory commands and their buttons.
const (
	memoryHead      = "Your notes, newest first — I keep them across conversations:"
	memoryGroupLine = "For the group: " // the first line of a group's list, and its label
	memoryNoneGroup = " Send /remember in the group and what I should keep there, such as: /remember I prefer metric units."
	memorySentAside = "I sent your notes to you in a private chat."
	memoryNoPrivate = "I can't message you privately yet: open a chat with me and send /start, then /memory here again."
	memoryNotSent   = "I couldn't send you your notes just now; please try again."
	memoryOffHead   = "Memory is off here: I keep no new notes, but these stay yours to see and forget."
	memoryNone      = "You have no notes."
	memoryNoneAsk   = " Send /remember and what I should keep, such as: /remember I prefer metric units."
	memoryMore      = "… and %d more not shown: forget some to see them."
	memoryFailed    = "I couldn't read your notes just now; please try again."
	memoryNoDoor    = "I don't keep notes here."
	rememberUsage   = "Send /remember and what I should keep across our conversations, such as: /remember I prefer metric units.\n/memory lists your notes, to forget them."
	rememberOffNote = "\n\nMemory is off here for you, though: I keep no new notes."
	rememberOff     = "I can't keep notes here: memory is off for you. /memory still lists what was kept, to forget it."
	memoryOnBehalf  = "I keep notes for a person, and this message was sent on behalf of the chat: send it as yourself."
	rememberedText  = "Noted (#%d). /memory lists your notes; /forget %d forgets this one."
	rememberBad     = "I can't keep that note: %s."
	rememberFull    = "You have as many notes as I keep; forget some first (/memory lists them)."
	forgetUsage     = "Send /forget and the number of a note, such as /forget 12; /memory lists your notes with their numbers."
	forgotText      = "Forgot note #%d."
	forgetNoNote    = "#%d is not one of your notes (forgotten already?). /memory lists them."
	confirmAllText  = "Forget all %d of your notes? This cannot be undone."
	confirmOneText  = "Forget your one note? This cannot be undone."
	forgotAllText   = "Forgot all your notes (%d)."

	tapForgotText      = "Note #%d forgotten"
	tapNoNoteText      = "That note is not yours, or it is forgotten already"
	tapListElsewhere   = "I list your notes in our private chat now: send /memory for them"
	tapMemoryOffText   = "I don't keep notes here"
	tapNoNotesText     = "You have no notes"
	tapConfirmText     = "Sure? Tap Yes to forget them all"
	tapForgotAllText   = "Forgot all your notes (%d)"
	tapKeptNotesText   = "Your notes are kept"
	buttonForgetAll    = "Forget everything"
	buttonForgetAllYes = "Yes, forget them all"
	buttonCancel       = "Cancel"
)

// Bounds of a list: maxNotesListed notes, each with its Forget button
// (plus Forget everything) — well inside Telegram's 100 inline buttons
// and the 10 KB its reply markup may take with the longest labels —
// within MaxMessageUnits of text; noteLabelRunes of a note in its
// button's label; groupLabelRunes of a group's title (Telegram's longest).
const (
	maxNotesListed  = 25
	noteLabelRunes  = 20
	groupLabelRunes = 128
)

// memoryUserOf is whose notes Telegram user from reads and writes in
// chat: MemoryUser of their own session key there. Its General topic's
// key will do: a chat's topics share its notes.
func (b *Bot) memoryUserOf(chat *tgbotapi.Chat, from *tgbotapi.User) string {
	key := b.sessionKey(&message{Message: &tgbotapi.Message{Chat: chat, From: from}})
	return sessions.MemoryUser(key, strconv.FormatInt(from.ID, 10))
}

// noteAuthor says who wrote a note, for the list.
func noteAuthor(author string) string {
	switch author {
	case ledger.NoteByUser:
		return "by you"
	case ledger.NoteByModel:
		return "by me"
	case ledger.NoteByReset:
		return "by me, from a past conversation"
	case ledger.NoteByOperator:
		return "by the operator"
	}
	return ""
}

// noteEntry is one note of the list: its number (the note's id, which
// /forget takes), its day (UTC) and who wrote it, then its text.
func noteEntry(n ledger.Note) string {
	head := fmt.Sprintf("#%d · %s", n.ID, n.CreatedAt.UTC().Format("2 Jan 2006"))
	if by := noteAuthor(n.Author); by != "" {
		head += " · " + by
	}
	return "\n\n" + head + "\n" + n.Text
}

// memoryText is the list as its message shows it — after group's line
// when it is a group's (group: its label, "" for the private chat's own
// notes) and lead (what a tap just did, "" for none) — and the notes it
// shows: the newest, as many as fit in one message's text and
// maxNotesListed, the others counted.
func memoryText(list []ledger.Note, enabled bool, group, lead string) (string, []ledger.Note) {
	head := groupLine(group)
	if lead != "" {
		head += lead + "\n\n"
	}
	if len(list) == 0 {
		head += memoryNone
		switch {
		case !enabled:
		case group != "":
			head += memoryNoneGroup
		default:
			head += memoryNoneAsk
		}
		return head, nil
	}
	if !enabled {
		head += memoryOffHead + "\n\n"
	}
	text, shown := fitList(head+memoryHead, len(list), maxNotesListed,
		func(i int) string { return noteEntry(list[i]) },
		func(left int) string { return fmt.Sprintf(memoryMore, left) })
	return text, list[:shown]
}

// groupLine is the first line of a message about a group's notes (group:
// its label), with the blank line after it; "" for no group.
func groupLine(group string) string {
	if group == "" {
		return ""
	}
	return memoryGroupLine + group + "\n\n"
}

// groupLabel names a group in its notes' private list: its title, on
// one line, else its id.
func groupLabel(chat *tgbotapi.Chat) string {
	title := strings.Join(strings.Fields(chat.Title), " ")
	if title == "" {
		return strconv.FormatInt(chat.ID, 10)
	}
	return cut(title, groupLabelRunes)
}

// listedGroup is the label of group chat on a tapped list's message msg:
// a tap's update has no group title, the list it was on does, on its
// first line. Only a message whose buttons are chat's lists chat's notes
// (data naming another chat is not a button of it); for any other, or a
// message Telegram sends without its text (one too old), chat's id. It
// only names the group: what a tap acts on is the data's chat.
func listedGroup(msg *tgbotapi.Message, chat int64) string {
	id := strconv.FormatInt(chat, 10)
	if msg.ReplyMarkup == nil || !slices.ContainsFunc(msg.ReplyMarkup.InlineKeyboard, func(row []tgbotapi.InlineKeyboardButton) bool {
		return slices.ContainsFunc(row, func(b tgbotapi.InlineKeyboardButton) bool {
			if b.CallbackData == nil {
				return false
			}
			parts := strings.Split(*b.CallbackData, ":")
			return len(parts) >= 3 && parts[0] == memData && parts[2] == id
		})
	}) {
		return id
	}
	line, _, _ := strings.Cut(msg.Text, "\n")
	if label, ok := strings.CutPrefix(line, memoryGroupLine); ok && label != "" {
		return label
	}
	return id
}

// memButton is a button of the notes of chat with operation op (and arg,
// the note's id, when not 0).
func memButton(label, op string, chat, arg int64) tgbotapi.InlineKeyboardButton {
	data := memData + ":" + op + ":" + strconv.FormatInt(chat, 10)
	if arg != 0 {
		data += ":" + strconv.FormatInt(arg, 10)
	}
	return tgbotapi.NewInlineKeyboardButtonData(label, data)
}

// memoryKeyboard is a Forget button per shown note of chat, numbered as
// the text numbers them, and Forget everything; nil for no notes.
func memoryKeyboard(shown []ledger.Note, chat int64) *tgbotapi.InlineKeyboardMarkup {
	if len(shown) == 0 {
		return nil
	}
	var rows [][]tgbotapi.InlineKeyboardButton
	for _, n := range shown {
		label := fmt.Sprintf("Forget #%d: %s", n.ID, cut(n.Text, noteLabelRunes))
		rows = append(rows, tgbotapi.NewInlineKeyboardRow(memButton(label, memForget, chat, n.ID)))
	}
	rows = append(rows, tgbotapi.NewInlineKeyboardRow(memButton(buttonForgetAll, memAskAll, chat, 0)))
	kb := tgbotapi.NewInlineKeyboardMarkup(rows...)
	return &kb
}

// confirmKeyboard asks whether to forget all the tapper's notes of chat.
func confirmKeyboard(chat int64) *tgbotapi.InlineKeyboardMarkup {
	kb := tgbotapi.NewInlineKeyboardMarkup(tgbotapi.NewInlineKeyboardRow(
		memButton(buttonForgetAllYes, memForgetAll, chat, 0), memButton(buttonCancel, memCancel, chat, 0)))
	return &kb
}

// remember runs /remember <text>: the note is kept at once, in the order
// of the key's updates, and the answer goes out on the key's reply queue.
// Its call key is the message's, so that an update Telegram sends again
// (or a retry after a storage failure, which returns the error as /new
// does) keeps one note.
func (b *Bot) remember(ctx context.Context, m *message, in sessions.Inbound, first bool) error {
	text := strings.TrimSpace(m.CommandArguments())
	mem := b.sess.Memory
	user := sessions.MemoryUser(in.SessionKey, in.UserID)
	reply := ""
	switch {
	case mem == nil:
		reply = memoryNoDoor
	case in.OnBehalf:
		reply = memoryOnBehalf
	case text == "":
		reply = rememberUsage
		if !mem.Enabled(Channel, user) {
			reply += rememberOffNote
		}
	default:
		// The conversation it came from is not known here without a read
		// of its own: a note by command names none.
		n, err := mem.Remember(ctx, sessions.NoteRequest{Channel: Channel, User: user, Text: text,
			Author: ledger.NoteByUser, CallKey: "telegram:remember:" + in.ClientMsgID})
		switch {
		case errors.Is(err, sessions.ErrMemoryOff), errors.Is(err, sessions.ErrNoMemoryOwner):
			reply = rememberOff
		case errors.Is(err, sessions.ErrBadNote):
			reply = fmt.Sprintf(rememberBad, strings.TrimPrefix(err.Error(), sessions.ErrBadNote.Error()+": "))
		case errors.Is(err, sessions.ErrTooManyNotes):
			reply = rememberFull
		case err != nil:
			b.failed(first, "telegram: /remember failed; retrying", in.SessionKey, err)
			return err
		default:
			reply = fmt.Sprintf(rememberedText, n.ID, n.ID)
		}
	}
	b.later(in.SessionKey, func() { b.sendPlain(ctx, m.to(), reply, m.MessageID) })
	return nil
}

// forget runs /forget: alone, the list (as /memory); with a note's
// number, forgets that note of the sender at once, in the order of the
// key's updates (a storage failure is retried, as /remember's).
func (b *Bot) forget(ctx context.Context, m *message, in sessions.Inbound, first bool) error {
	arg := strings.TrimSpace(m.CommandArguments())
	if arg == "" {
		b.memory(ctx, m, in)
		return nil
	}
	mem := b.sess.Memory
	reply := ""
	id, err := strconv.ParseInt(strings.TrimPrefix(arg, "#"), 10, 64)
	switch {
	case mem == nil:
		reply = memoryNoDoor
	case in.OnBehalf:
		reply = memoryOnBehalf
	case err != nil || id <= 0:
		reply = forgetUsage
	default:
		switch err := mem.Forget(ctx, sessions.MemoryUser(in.SessionKey, in.UserID), id); {
		case errors.Is(err, sessions.ErrNoSuchNote), errors.Is(err, sessions.ErrNoMemoryOwner):
			reply = fmt.Sprintf(forgetNoNote, id)
		case err != nil:
			b.failed(first, "telegram: /forget failed; retrying", in.SessionKey, err)
			return err
		default:
			reply = fmt.Sprintf(forgotText, id)
		}
	}
	b.later(in.SessionKey, func() { b.sendPlain(ctx, m.to(), reply, m.MessageID) })
	return nil
}

// memory runs /memory: the sender's notes go out on the key's reply
// queue, after the replies to the messages before it.
func (b *Bot) memory(ctx context.Context, m *message, in sessions.Inbound) {
	ctx = context.WithoutCancel(ctx)
	b.later(in.SessionKey, func() { b.sendMemory(ctx, m, in) })
}

// sendMemory sends the sender's notes of m's chat: in a private chat as
// the answer to m; from a group to the sender's private chat, the group
// told only that they went there — or, when Telegram refuses to write
// to the sender first, that they must start a chat with the bot.
func (b *Bot) sendMemory(ctx context.Context, m *message, in sessions.Inbound) {
	mem := b.sess.Memory
	if mem == nil {
		b.sendPlain(ctx, m.to(), memoryNoDoor, m.MessageID)
		return
	}
	if in.OnBehalf {
		b.sendPlain(ctx, m.to(), memoryOnBehalf, m.MessageID)
		return
	}
	user := sessions.MemoryUser(in.SessionKey, in.UserID)
	list, err := mem.List(ctx, user)
	if err != nil {
		b.log.Warn("telegram: /memory failed", slog.String("session_key", in.SessionKey), slog.String("error", err.Error()))
		b.sendPlain(ctx, m.to(), memoryFailed, m.MessageID)
		return
	}
	group := ""
	if !m.Chat.IsPrivate() {
		group = groupLabel(m.Chat)
	}
	text, shown := memoryText(list, mem.Enabled(Channel, user), group, "")
	var kb any
	if k := memoryKeyboard(shown, m.Chat.ID); k != nil {
		kb = k
	}
	if group == "" {
		b.sendWithButtons(ctx, m, text, kb, "send the notes")
		return
	}
	// The sender's private chat with the bot is the chat whose id is
	// theirs; no topic, no reply (m is in the group).
	reply := memorySentAside
	switch err := b.sendButtons(ctx, place{chat: m.From.ID}, text, kb, 0); {
	case cannotMessage(err):
		reply = memoryNoPrivate
	case err != nil:
		b.warnOnce("send the notes privately", errors.New(b.redact(err)))
		reply = memoryNotSent
	}
	b.sendPlain(ctx, m.to(), reply, m.MessageID)
}

// memoryTap handles a tap on a button of the notes (rest: the data after
// "mem:") and returns the tap's answer, and what to do once it is
// answered: edit the message to show what the tap did. The thread the
// tap came from does not matter: a chat's topics share its notes.
func (b *Bot) memoryTap(ctx context.Context, q *tgbotapi.CallbackQuery, _ int, rest string) (string, func()) {
	op, rest, _ := strings.Cut(rest, ":")
	chatText, idText, hasID := strings.Cut(rest, ":")
	listChat, err := strconv.ParseInt(chatText, 10, 64)
	if err != nil || q.Message == nil || q.Message.Chat == nil {
		return unknownButtonText, nil
	}
	var id int64
	switch op {
	case memForget:
		if id, err = strconv.ParseInt(idText, 10, 64); err != nil || id <= 0 {
			return unknownButtonText, nil
		}
	case memAskAll, memForgetAll, memCancel:
		if hasID {
			return unknownButtonText, nil
		}
	default:
		return unknownButtonText, nil
	}
	// Whose notes: the TAPPER's own in the chat the data names, computed
	// from the tapper's id as their own message there would be (in its
	// General topic: a chat's topics share its notes) — never anyone the
	// data names. So data naming another chat, forged or not, reaches only
	// the tapper's own notes of that chat, never another member's; and a
	// note id of someone else's is not the tapper's and is not forgotten.
	// A positive id other than the tapper's names someone else's private
	// chat, which no list of the tapper's is for.
	var named *tgbotapi.Chat
	group := false
	switch {
	case listChat == q.From.ID:
		named = &tgbotapi.Chat{ID: listChat, Type: "private"}
	case listChat < 0:
		named, group = &tgbotapi.Chat{ID: listChat, Type: "supergroup"}, true
	default:
		return unknownButtonText, nil
	}
	mem := b.sess.Memory
	if mem == nil {
		return tapMemoryOffText, nil
	}
	// A list is only ever in its owner's private chat. A tap elsewhere is
	// on a list a group got before lists went to private chats: redrawn
	// there, it would show the tapper's notes to the whole group.
	if !q.Message.Chat.IsPrivate() || q.Message.Chat.ID != q.From.ID {
		return tapListElsewhere, nil
	}
	user := b.memoryUserOf(named, q.From)
	label := ""
	if group {
		label = listedGroup(q.Message, listChat)
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	chat, msg := q.Message.Chat.ID, q.Message.MessageID
	list := func(lead string) func() {
		return func() { b.editMemoryList(ctx, chat, msg, user, listChat, label, lead) }
	}
	switch op {
	case memForget:
		switch err := mem.Forget(cctx, user, id); {
		case errors.Is(err, sessions.ErrNoSuchNote):
			return tapNoNoteText, nil
		case err != nil:
			b.log.Warn("telegram: forgetting a note failed", slog.String("user", user), slog.String("error", err.Error()))
			return tapTryAgainText, nil
		}
		return fmt.Sprintf(tapForgotText, id), list(fmt.Sprintf(forgotText, id))
	case memAskAll:
		notes, err := mem.List(cctx, user)
		switch {
		case err != nil:
			b.log.Warn("telegram: reading the notes failed", slog.String("user", user), slog.String("error", err.Error()))
			return tapTryAgainText, nil
		case len(notes) == 0:
			return tapNoNotesText, list("")
		}
		text := fmt.Sprintf(confirmAllText, len(notes))
		if len(notes) == 1 {
			text = confirmOneText
		}
		text = groupLine(label) + text
		return tapConfirmText, func() { b.editMemory(ctx, chat, msg, text, confirmKeyboard(listChat)) }
	case memForgetAll:
		n, err := mem.ForgetAll(cctx, user)
		if err != nil {
			b.log.Warn("telegram: forgetting the notes failed", slog.String("user", user), slog.String("error", err.Error()))
			return tapTryAgainText, nil
		}
		return fmt.Sprintf(tapForgotAllText, n), list(fmt.Sprintf(forgotAllText, n))
	default: // memCancel
		return tapKeptNotesText, list("")
	}
}

// editMemoryList shows user's notes of listChat (a group labelled group,
// or the private chat for ""), as they are now, after lead on the notes'
// message msg of chat, with their buttons.
func (b *Bot) editMemoryList(ctx context.Context, chat int64, msg int, user string, listChat int64, group, lead string) {
	ctx = context.WithoutCancel(ctx)
	mem := b.sess.Memory
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	list, err := mem.List(cctx, user)
	cancel()
	if err != nil {
		b.log.Warn("telegram: reading the notes failed", slog.String("user", user), slog.String("error", err.Error()))
		return
	}
	text, shown := memoryText(list, mem.Enabled(Channel, user), group, lead)
	b.editMemory(ctx, chat, msg, text, memoryKeyboard(shown, listChat))
}

// editMemory edits the notes' message msg of chat to text (plain) and
// kb; without kb the edit takes the buttons away.
func (b *Bot) editMemory(ctx context.Context, chat int64, msg int, text string, kb *tgbotapi.InlineKeyboardMarkup) {
	params := tgbotapi.Params{"chat_id": strconv.FormatInt(chat, 10), "text": text}
	params.AddNonZero("message_id", msg)
	if kb != nil {
		if err := params.AddInterface("reply_markup", kb); err != nil {
			return
		}
	}
	b.editMessage(ctx, methodEdit, params, "edit the notes", nil)
}
