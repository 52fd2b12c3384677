package telegram

// /model: the models a chat may choose (agent.models), as inline buttons
// — one per model, the current one ticked — or by name (/model Smart).
// A tap is a callback query (Bot.callback) with data "model:<name>"
// ("model:" alone: back to the default model when it is none of them);
// it chooses for the tapper's own session key, is answered with what it
// did — also when the model is no longer offered — and, in a private
// chat, the message is edited to tick the new choice. Without
// agent.models, /model is not in the command menu and is answered like
// any unknown command.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"

	"github.com/chatgate/chatgate/bots/telegram/tgformat"
	"github.com/chatgate/chatgate/sessions"
)

// modelData prefixes the callback data of /model's buttons.
const modelData = "model"

// Answers of /model and its buttons.
const (
	modelPickText    = "Model: %s. Tap another to answer your next messages with it:"
	modelSetText     = "Model: %s. Your next messages are answered with it."
	modelGoneNote    = " (%s, which you chose, is no longer offered.)"
	modelUnknownText = "There is no model called %q here. Send /model to see them."
	modelFailedText  = "I couldn't switch the model just now; please try again."
	tapModelText     = "Now answering with %s"
	tapModelGoneText = "%s is no longer offered; the list is updated"
	tapModelsOffText = "Choosing a model is off here"
)

// modelLabel names the model st.Current: "Smart (gpt-4o)", or "the
// default, m-1" for the agent's own model.
func modelLabel(md sessions.Model) string {
	if md.Name == "" {
		return "the default, " + md.ID
	}
	if md.ID == md.Name {
		return md.Name
	}
	return md.Name + " (" + md.ID + ")"
}

// modelText is the text above /model's buttons.
func modelText(st sessions.ModelState) string {
	text := fmt.Sprintf(modelPickText, modelLabel(st.Current))
	if st.Gone {
		text += fmt.Sprintf(modelGoneNote, st.Chosen)
	}
	return text
}

// modelKeyboard is a button per model, the current one ticked, and one
// for the default model when it is none of them.
func modelKeyboard(st sessions.ModelState) tgbotapi.InlineKeyboardMarkup {
	var rows [][]tgbotapi.InlineKeyboardButton
	button := func(label, name string, current bool) {
		if current {
			label = "✓ " + label
		}
		rows = append(rows, tgbotapi.NewInlineKeyboardRow(tgbotapi.NewInlineKeyboardButtonData(label, modelData+":"+name)))
	}
	for _, md := range st.Models {
		button(md.Name, md.Name, md.Name == st.Current.Name)
	}
	if st.Default.Name == "" {
		button("Default ("+cut(st.Default.ID, 40)+")", "", st.Current.Name == "")
	}
	return tgbotapi.NewInlineKeyboardMarkup(rows...)
}

// model runs /model. With a name it chooses at once, in the order of the
// key's updates — the messages after it are answered with the model it
// chose — and its answer, like the buttons without one, goes out on the
// key's reply queue, after the replies to the messages before it.
func (b *Bot) model(ctx context.Context, m *message, in sessions.Inbound) {
	ctx = context.WithoutCancel(ctx)
	name := strings.TrimSpace(m.CommandArguments())
	if name == "" {
		b.later(in.SessionKey, func() { b.sendModels(ctx, m, in) })
		return
	}
	st, err := b.sess.ChooseModel(ctx, in, name)
	text := ""
	switch {
	case errors.Is(err, sessions.ErrUnknownModel):
		text = fmt.Sprintf(modelUnknownText, cut(name, 64))
	case err != nil:
		b.log.Warn("telegram: /model failed", slog.String("session_key", in.SessionKey), slog.String("error", err.Error()))
		text = modelFailedText
	default:
		text = fmt.Sprintf(modelSetText, modelLabel(st.Current))
	}
	b.later(in.SessionKey, func() { b.sendPlain(ctx, m.to(), text, m.MessageID) })
}

// sendModels sends /model's buttons.
func (b *Bot) sendModels(ctx context.Context, m *message, in sessions.Inbound) {
	st, err := b.sess.Models(ctx, in)
	if err != nil {
		b.log.Warn("telegram: /model failed", slog.String("session_key", in.SessionKey), slog.String("error", err.Error()))
		b.sendPlain(ctx, m.to(), modelFailedText, m.MessageID)
		return
	}
	b.sendWithButtons(ctx, m, modelText(st), modelKeyboard(st), "send the models")
}

// sendWithButtons answers m with text and an inline keyboard (none when
// kb is nil), as the command replies with buttons do (/model, /reminders,
// /schedules); a failed send is warned of once, as what.
func (b *Bot) sendWithButtons(ctx context.Context, m *message, text string, kb any, what string) {
	if err := b.sendButtons(ctx, m.to(), text, kb, m.MessageID); err != nil {
		b.warnOnce(what, errors.New(b.redact(err)))
	}
}

// sendButtons sends text, plain, to to with the inline keyboard kb (nil
// for none), answering replyTo unless it is 0, and returns sendPart's
// error: a refusal keeps Telegram's *tgbotapi.Error in its chain.
func (b *Bot) sendButtons(ctx context.Context, to place, text string, kb any, replyTo int) error {
	extra := tgbotapi.Params{}
	if kb != nil {
		if err := extra.AddInterface("reply_markup", kb); err != nil {
			return err
		}
	}
	_, _, err := b.sendPart(ctx, to, tgformat.Part{Plain: text}, false, replyTo, extra)
	return err
}

// modelTap handles a tap on one of /model's buttons (name: the data
// after "model:") and returns the tap's answer, and what to do once it
// is answered: in a private chat, tick the choice on the message.
func (b *Bot) modelTap(ctx context.Context, q *tgbotapi.CallbackQuery, thread int, name string) (string, func()) {
	if q.Message == nil || q.Message.Chat == nil {
		return unknownButtonText, nil
	}
	if !b.sess.OffersModels() {
		return tapModelsOffText, nil
	}
	key := b.sessionKey(&message{Message: &tgbotapi.Message{Chat: q.Message.Chat, From: q.From}, thread: thread})
	to := place{chat: q.Message.Chat.ID, thread: thread}
	in := sessions.Inbound{Channel: Channel, SessionKey: key, UserID: strconv.FormatInt(q.From.ID, 10), ChatID: to.String()}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	st, err := b.sess.ChooseModel(cctx, in, name)
	answer := ""
	switch {
	case errors.Is(err, sessions.ErrNoModels):
		return tapModelsOffText, nil
	case errors.Is(err, sessions.ErrUnknownModel):
		// Taken out of agent.models since the buttons were sent: the
		// list shows what is offered now.
		answer = fmt.Sprintf(tapModelGoneText, cut(name, 64))
		if st, err = b.sess.Models(cctx, in); err != nil {
			return answer, nil
		}
	case err != nil:
		b.log.Warn("telegram: choosing a model failed", slog.String("session_key", key), slog.String("error", err.Error()))
		return tapTryAgainText, nil
	default:
		answer = fmt.Sprintf(tapModelText, modelLabel(st.Current))
	}
	if !q.Message.Chat.IsPrivate() {
		// A group's buttons serve everyone, each for their own session:
		// the message stays as it was, the answer tells the tapper.
		return answer, nil
	}
	chat, msg := q.Message.Chat.ID, q.Message.MessageID
	return answer, func() { b.editModels(ctx, chat, msg, st) }
}

// editModels shows st on /model's message msg of chat: its text and its
// buttons, the current model ticked.
func (b *Bot) editModels(ctx context.Context, chat int64, msg int, st sessions.ModelState) {
	ctx = context.WithoutCancel(ctx)
	params := tgbotapi.Params{"chat_id": strconv.FormatInt(chat, 10), "text": modelText(st)}
	params.AddNonZero("message_id", msg)
	if err := params.AddInterface("reply_markup", modelKeyboard(st)); err != nil {
		return
	}
	b.editMessage(ctx, methodEdit, params, "edit the models", nil)
}

// setMenu sets the command menu, with /model when models are offered, and
// remembers which it set.
func (b *Bot) setMenu(ctx context.Context) {
	models := b.sess.OffersModels()
	if _, err := b.api.Request(commandMenu(models)); err != nil {
		if ctx.Err() == nil {
			b.warnOnce("setMyCommands", err)
		}
		return
	}
	b.menuModels.Store(&models)
}

// menuFollows sets the command menu again when a reload turned
// agent.models on or off since it was set.
func (b *Bot) menuFollows() {
	set := b.menuModels.Load()
	if set == nil || *set == b.sess.OffersModels() {
		return // not connected yet (Start sets it), or as it should be
	}
	b.inflight.Add(1)
	go func() {
		defer b.inflight.Done()
		b.setMenu(context.Background())
	}()
}
