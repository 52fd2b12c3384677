package telegram

// Tool approvals (approve: ask). When the model wants to run a tool that
// needs the user's yes, the bot sends the chat (and topic) of the turn a
// message naming the tool and its arguments, with [Allow] [Deny] buttons.
// A tap is a callback query (Bot.callback): only the user whose turn it
// is may decide — anyone else's tap is answered with who may, and changes
// nothing. Once the call is decided (here, on another replica) or expired
// (which counts as denied), the message is edited to say so, which also
// removes its buttons; a tap after the expiry edits it too (tapRefusals).
// A turn run again after a restart asks again in a new message, and the
// earlier one loses its buttons.
//
// The tool's name and arguments come from the model and are untrusted:
// they are escaped into the message's HTML and cut short, never taken as
// markup.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"time"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"
	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/chatgate/chatgate/bots/telegram/tgformat"
	"github.com/chatgate/chatgate/sessions"
)

// ToolApprovals is what the bot needs of the session manager to take
// its users' decisions on tool calls. A bot built without it asks
// nothing (its route has no Ask, and its calls wait for their expiry).
type ToolApprovals interface {
	DecideTool(ctx context.Context, d sessions.ToolDecision) (sessions.ToolEvent, error)
}

// The callback data of an ask's buttons: "tool:<call id>:allow" and
// "tool:<call id>:deny" (at most 30 bytes; Telegram allows 64).
const (
	toolData  = "tool"
	toolAllow = "allow"
	toolDeny  = "deny"
)

// How an ask ended, as its message and a stale tap tell it.
const (
	askAllowed   = "allowed"
	askDenied    = "denied"
	askExpired   = "expired"
	askCancelled = "cancelled" // /stop, or a newer message, cut the turn first
)

// What a tap on an ask's button is answered with.
const (
	tapAllowedText  = "Allowed"
	tapDeniedText   = "Denied"
	tapDecidedText  = "Already decided"
	tapExpiredText  = "This request has expired"
	tapStoppedText  = "This request was cancelled"
	tapGoneText     = "This request is no longer open"
	tapTryAgainText = "Something went wrong — try again"
)

// Limits on what an ask shows of the model's call.
const (
	askNameRunes = 64
	askArgsRunes = 300
)

// toolAsks is what this process remembers of its asks: how each ended
// (for a stale tap, and to tell an expiry from a denial), whom it asked,
// and the names of the users who wrote, to say who may decide. It is a
// courtesy: across replicas the texts are plainer. After a restart an
// ask asked again names its user from the earlier ask's reference
// (askRef), which the ledger keeps.
type toolAsks struct {
	outcomes *lru.Cache[int64, string] // call id → askAllowed, askDenied, askExpired, askCancelled
	askedOf  *lru.Cache[int64, int64]  // call id → the user asked
	names    *lru.Cache[int64, string] // user id → how to call them
}

func newToolAsks() toolAsks {
	return toolAsks{outcomes: must(lru.New[int64, string](maxTracked)), askedOf: must(lru.New[int64, int64](maxTracked)),
		names: must(lru.New[int64, string](maxTracked))}
}

// noteName remembers how to call a user who wrote, for "Only Ann can
// decide this".
func (b *Bot) noteName(u *tgbotapi.User) {
	if u == nil {
		return
	}
	name := strings.TrimSpace(u.FirstName)
	if name == "" && u.UserName != "" {
		name = "@" + u.UserName
	}
	if name != "" {
		b.asks.names.Add(u.ID, cut(name, askNameRunes))
	}
}

// askTool sends the ask for call a.Call to the chat and topic of its
// turn, and returns its reference (askRef) for the ask's settling. An ask
// asked again (a turn run again after a restart) takes the buttons off
// the earlier ask's message once the new one is sent, and names the
// user as the earlier one did. Another replica's ask (a.Remote) sends
// nothing: the replica running the turn asked in the chat.
func (b *Bot) askTool(ctx context.Context, a sessions.ToolAsk) (string, error) {
	if a.Remote {
		return "", nil
	}
	select {
	case <-b.connected:
	case <-ctx.Done():
		return "", context.Cause(ctx)
	}
	to, err := parsePlace(a.ChatID)
	if err != nil {
		return "", fmt.Errorf("telegram: ask for a tool call: %w", err)
	}
	earlier, hadEarlier := parseAskRef(a.Ref)
	user, _ := strconv.ParseInt(a.UserID, 10, 64)
	if user != 0 {
		b.asks.askedOf.Add(a.Call.ID, user)
		if _, known := b.asks.names.Get(user); !known && earlier.name != "" {
			b.asks.names.Add(user, earlier.name) // as the first ask, before a restart, named them
		}
	}
	foot := expiresIn(a.Call.ExpiresAt.Sub(b.opts.Now()))
	if to.chat < 0 { // a group: say who decides
		foot += "\n" + "Only " + b.askedName(a.Call.ID) + " can decide."
	}
	part := tgformat.Part{HTML: askText(a.Call, htmlEscaper.Replace(foot), true), Plain: askText(a.Call, foot, false)}
	extra := tgbotapi.Params{}
	if err := extra.AddInterface("reply_markup", askKeyboard(a.Call.ID)); err != nil {
		return "", err
	}
	sent, _, err := b.sendPart(context.WithoutCancel(ctx), to, part, true, 0, extra)
	if err != nil {
		return "", errors.New(b.redact(err))
	}
	if hadEarlier && (earlier.chat != to.chat || earlier.msg != sent.MessageID) {
		// Only the new ask is settled by the turn; a tap on the old
		// buttons meanwhile still decides the same call.
		b.removeButtons(ctx, earlier.chat, earlier.msg)
	}
	return askRef{chat: to.chat, msg: sent.MessageID, name: b.knownName(user)}.String(), nil
}

// askRef is what the ledger keeps of an ask sent (ToolAsk.Ref): its chat
// and message, to settle it, and the name of the user it asked, for the
// ask that a turn run again after a restart sends — this process's
// memory of names is gone by then. "chat:message" or
// "chat:message:name"; the name is cut to askNameRunes.
type askRef struct {
	chat int64
	msg  int
	name string
}

func (r askRef) String() string {
	s := strconv.FormatInt(r.chat, 10) + ":" + strconv.Itoa(r.msg)
	if r.name != "" {
		s += ":" + r.name
	}
	return s
}

// parseAskRef reads an askRef; false for "" or one it cannot read.
func parseAskRef(ref string) (askRef, bool) {
	chatText, rest, ok := strings.Cut(ref, ":")
	msgText, name, _ := strings.Cut(rest, ":")
	chat, err1 := strconv.ParseInt(chatText, 10, 64)
	msg, err2 := strconv.Atoi(msgText)
	if !ok || err1 != nil || err2 != nil || msg <= 0 {
		return askRef{}, false
	}
	return askRef{chat: chat, msg: msg, name: cut(name, askNameRunes)}, true
}

// knownName is how this process knows to call user; "" when it does not.
func (b *Bot) knownName(user int64) string {
	if user == 0 {
		return ""
	}
	name, _ := b.asks.names.Get(user)
	return name
}

// toolSettled edits the ask of a call decided or expired (ref: askTool's)
// to say how it ended; the edit removes its buttons. A tap here edited it
// already: the edit again changes nothing. Another replica's ask
// (a.Remote) is that replica's to settle.
func (b *Bot) toolSettled(ctx context.Context, a sessions.ToolAsk, ref string) {
	r, ok := parseAskRef(ref)
	if a.Remote || !ok {
		return
	}
	b.closeAsk(ctx, r.chat, r.msg, a.Call, b.outcomeOf(a.Call))
}

// outcomeOf is how an ask ended: as this process saw it end, else as the
// call's status says — a denial at or after the expiry is the expiry.
func (b *Bot) outcomeOf(ev sessions.ToolEvent) string {
	if v, ok := b.asks.outcomes.Get(ev.ID); ok {
		return v
	}
	out := askAllowed
	switch ev.Status {
	case sessions.ToolExpired:
		out = askExpired
	case sessions.ToolCancelled:
		out = askCancelled
	case sessions.ToolDenied:
		out = askDenied
		if !ev.ExpiresAt.IsZero() && !b.opts.Now().Before(ev.ExpiresAt) {
			out = askExpired
		}
	}
	b.asks.outcomes.Add(ev.ID, out)
	return out
}

// toolTap handles a tap on an ask's button (rest: the data after
// "tool:") and returns the tap's answer, and what to do once it is
// answered.
func (b *Bot) toolTap(ctx context.Context, q *tgbotapi.CallbackQuery, thread int, rest string) (string, func()) {
	idText, verb, _ := strings.Cut(rest, ":")
	id, err := strconv.ParseInt(idText, 10, 64)
	if err != nil || (verb != toolAllow && verb != toolDeny) || b.tools == nil {
		return unknownButtonText, nil
	}
	d := sessions.ToolDecision{UserID: strconv.FormatInt(q.From.ID, 10), ID: id, Allow: verb == toolAllow}
	if q.Message != nil && q.Message.Chat != nil {
		d.SessionKey = b.sessionKey(&message{Message: &tgbotapi.Message{Chat: q.Message.Chat, From: q.From}, thread: thread})
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	ev, err := b.tools.DecideTool(dctx, d)
	if err == nil {
		out, answer := askDenied, tapDeniedText
		if d.Allow {
			out, answer = askAllowed, tapAllowedText
		}
		b.asks.outcomes.Add(id, out)
		if q.Message == nil || q.Message.Chat == nil {
			return answer, nil // the turn's settling edits it
		}
		chat, msg := q.Message.Chat.ID, q.Message.MessageID
		return answer, func() { b.closeAsk(ctx, chat, msg, ev, out) }
	}
	for _, r := range tapRefusals {
		if !errors.Is(err, r.err) {
			continue
		}
		answer := r.answer(b, id)
		if r.ends == "" {
			return answer, nil
		}
		b.asks.outcomes.Add(id, r.ends)
		if q.Message == nil || q.Message.Chat == nil {
			return answer, nil
		}
		chat, msg := q.Message.Chat.ID, q.Message.MessageID
		return answer, func() { b.closeAsk(ctx, chat, msg, ev, r.ends) }
	}
	b.log.Warn("telegram: storing a tool decision failed", slog.Int64("call", id), slog.String("error", err.Error()))
	return tapTryAgainText, nil
}

// tapRefusal is how a tap that DecideTool refused with err is answered,
// and, when the refusal means the ask is over, how its message then says
// it ended (the edit removes its buttons; "": the ask is left as it is).
type tapRefusal struct {
	err    error
	answer func(b *Bot, id int64) string
	ends   string
}

// tapRefusals answer every error DecideTool names (a test walks them
// all); any other error is a decision that could not be stored ("try
// again").
var tapRefusals = []tapRefusal{
	{err: sessions.ErrToolNotYours, answer: func(b *Bot, id int64) string { return "Only " + b.askedName(id) + " can decide this" }},
	// The turn that waited for the decision ends the ask too, when it
	// runs here and its edit goes through; the tap does not count on it.
	{err: sessions.ErrToolExpired, ends: askExpired, answer: func(*Bot, int64) string { return tapExpiredText }},
	{err: sessions.ErrToolDecided, answer: func(b *Bot, id int64) string {
		switch v, _ := b.asks.outcomes.Get(id); v {
		case askExpired:
			return tapExpiredText
		case askCancelled:
			return tapStoppedText
		}
		return tapDecidedText
	}},
	{err: sessions.ErrToolNotFound, answer: func(*Bot, int64) string { return tapGoneText }},
}

// askedName is how the user an ask is for is called, as far as this
// process knows.
func (b *Bot) askedName(id int64) string {
	if user, ok := b.asks.askedOf.Get(id); ok {
		if name, ok := b.asks.names.Get(user); ok {
			return name
		}
	}
	return "the person who asked"
}

// closeAsk edits ask message msg of chat to say how it ended: editing the
// text without a reply_markup removes the buttons. 429s are waited out;
// other failures are logged once (the buttons then stay, and a tap on
// them is answered as stale).
func (b *Bot) closeAsk(ctx context.Context, chat int64, msg int, ev sessions.ToolEvent, outcome string) {
	ctx = context.WithoutCancel(ctx)
	foot := map[string]string{askAllowed: "✅ Allowed", askDenied: "❌ Denied", askExpired: "⌛ Expired — not run",
		askCancelled: "⏹ Cancelled — not run"}[outcome]
	params := tgbotapi.Params{"chat_id": strconv.FormatInt(chat, 10), "text": askText(ev, htmlEscaper.Replace(foot), true),
		"parse_mode": tgbotapi.ModeHTML}
	params.AddNonZero("message_id", msg)
	b.editMessage(ctx, methodEdit, params, "close a tool ask", func(p tgbotapi.Params) {
		p["text"] = askText(ev, foot, false)
		delete(p, "parse_mode")
	})
}

// askText is an ask's text: the tool and its arguments (escaped and
// wrapped in HTML when asHTML is set, else plain), and foot below them
// (already in the same form).
func askText(ev sessions.ToolEvent, foot string, asHTML bool) string {
	name, args := cut(ev.Name, askNameRunes), askArgs(ev.Arguments)
	var s strings.Builder
	if asHTML {
		s.WriteString("🔧 The bot wants to run <b>" + htmlEscaper.Replace(name) + "</b>")
		if args != "" {
			s.WriteString(" with <code>" + htmlEscaper.Replace(args) + "</code>")
		}
	} else {
		s.WriteString("🔧 The bot wants to run " + name)
		if args != "" {
			s.WriteString(" with " + args)
		}
	}
	if foot != "" {
		s.WriteString("\n\n" + foot)
	}
	return s.String()
}

// askArgs is what an ask shows of a call's arguments: compacted JSON
// (or the text as written, when it is not JSON), cut short; nothing for
// none.
func askArgs(args string) string {
	args = strings.TrimSpace(args)
	var compact bytes.Buffer
	if json.Compact(&compact, []byte(args)) == nil {
		args = compact.String()
	}
	if args == "" || args == "{}" || args == "null" {
		return ""
	}
	return cut(args, askArgsRunes)
}

// expiresIn says when an ask expires, d from now.
func expiresIn(d time.Duration) string {
	switch mins := int(math.Ceil(d.Minutes())); {
	case mins <= 1:
		return "Expires in a minute."
	case mins < 120:
		return "Expires in " + strconv.Itoa(mins) + " min."
	default:
		return "Expires in " + strconv.Itoa(int(math.Round(d.Hours()))) + " h."
	}
}

// askKeyboard is an ask's buttons.
func askKeyboard(id int64) tgbotapi.InlineKeyboardMarkup {
	data := func(verb string) string { return toolData + ":" + strconv.FormatInt(id, 10) + ":" + verb }
	return tgbotapi.NewInlineKeyboardMarkup(tgbotapi.NewInlineKeyboardRow(
		tgbotapi.NewInlineKeyboardButtonData("✅ Allow", data(toolAllow)),
		tgbotapi.NewInlineKeyboardButtonData("❌ Deny", data(toolDeny))))
}
