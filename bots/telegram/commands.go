package telegram

// The commands (/start, /help, /new, /reset, /resume, /history, /compact,
// /status, /model, /reminders, /schedules, /remember, /memory, /forget,
// /stop): what each does and answers. /resume and /history are
// Bot.resume's and Bot.history's, /status Bot.status's, /model
// Bot.model's, /reminders Bot.reminders', /schedules Bot.sendSchedules',
// /remember Bot.remember's, /memory Bot.memory's, /forget Bot.forget's.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"

	"github.com/chatgate/chatgate/sessions"
)

// Answers to commands.
const (
	helpText = "Send me a message and I'll answer. I remember our conversation until it is reset.\n\n" +
		"/new or /reset — start a new conversation\n/resume — go back to the previous conversation\n" +
		"/history — the last messages of this conversation\n/compact — sum up our conversation so far, to go on from the summary\n" +
		"/status — this conversation, the model, your usage and the next reset\n" +
		"/reminders — your reminders, to cancel them\n" +
		"/remember — keep a note about you across conversations\n/memory — your notes, to forget them\n" +
		"/stop — stop the answer being written\n/help — this message"
	// modelHelp is help's line for /model, when models are offered.
	modelHelp    = "/model — choose the model that answers\n"
	startText    = "Hello! " + helpText
	resetText    = "Started a new conversation."
	stoppedText  = "Stopped."
	idleStopText = "Nothing is running."
	// Answers to /compact.
	compactedText     = "Done: I summed up the %d earlier messages of our conversation and will go on from that summary."
	compactNothing    = "There is nothing to sum up yet."
	compactOffText    = "Summaries are off here: I go on from the last messages of our conversation."
	compactFailedText = "I couldn't sum up our conversation just now; please try again later."
	compactBudgetText = "You have reached your usage limit, so I can't sum up our conversation now. /status shows when it resets."
)

// commandMenu is the list Telegram offers a user typing "/"; Start sets it
// at every start, so a change here reaches the chats with the next one
// (and a reload that turns agent.models on or off sets it again). /model
// is in it only when models are offered.
func commandMenu(models bool) tgbotapi.SetMyCommandsConfig {
	cmds := []tgbotapi.BotCommand{
		{Command: "new", Description: "Start a new conversation"},
		{Command: "reset", Description: "Start a new conversation"},
		{Command: "resume", Description: "Go back to the previous conversation"},
		{Command: "history", Description: "Show the last messages of this conversation"},
		{Command: "compact", Description: "Sum up the conversation so far"},
		{Command: "status", Description: "This conversation, the model, usage and the next reset"},
		{Command: "reminders", Description: "Your reminders, to cancel them"},
		{Command: "remember", Description: "Keep a note about you across conversations"},
		{Command: "memory", Description: "Your notes, to forget them"},
		{Command: "forget", Description: "Forget a note (/forget 12), or list them to forget"},
	}
	if models {
		cmds = append(cmds, tgbotapi.BotCommand{Command: "model", Description: "Choose the model that answers"})
	}
	cmds = append(cmds,
		tgbotapi.BotCommand{Command: "stop", Description: "Stop the answer being written"},
		tgbotapi.BotCommand{Command: "help", Description: "How to use this bot"},
		tgbotapi.BotCommand{Command: "start", Description: "Say hello"},
	)
	return tgbotapi.NewSetMyCommands(cmds...)
}

// help is the answer to /help: helpText, with /model when models are
// offered.
func (b *Bot) help() string {
	if !b.sess.OffersModels() {
		return helpText
	}
	return strings.Replace(helpText, "/status", modelHelp+"/status", 1)
}

// command runs a command; its answer goes out on the key's reply queue,
// after the replies to the messages before it. A /new or /reset archives
// the conversation at once: messages before it are answered in the old
// conversation, those after it in the new one.
func (b *Bot) command(ctx context.Context, m *message, in sessions.Inbound, first bool) error {
	text := b.help() // help, and unknown commands
	switch m.Command() {
	case "start":
		text = "Hello! " + text
	case "new", "reset":
		if _, err := b.sess.Reset(ctx, in); err != nil {
			if !errors.Is(err, sessions.ErrShuttingDown) {
				b.failed(first, "telegram: reset failed; retrying", in.SessionKey, err)
			}
			return err
		}
		text = resetText
	case "resume":
		t, err := b.resume(ctx, in, first)
		if err != nil {
			return err
		}
		text = t
	case "compact":
		// After the replies before it; the summary is a model call, made
		// on the reply queue so that the key's next messages are stored
		// meanwhile.
		b.later(in.SessionKey, func() { b.sendPlain(ctx, m.to(), b.compact(ctx, in), m.MessageID) })
		return nil
	case "history":
		b.later(in.SessionKey, func() {
			b.sendParts(ctx, m.to(), b.history(ctx, in), b.opts.Format != FormatPlain, m.MessageID)
		})
		return nil
	case "status":
		b.later(in.SessionKey, func() { b.sendPlain(ctx, m.to(), b.status(ctx, in), m.MessageID) })
		return nil
	case "schedules":
		b.later(in.SessionKey, func() { b.sendSchedules(ctx, m, in) })
		return nil
	case "model":
		if !b.sess.OffersModels() {
			break // an unknown command: help
		}
		b.model(ctx, m, in)
		return nil
	case "reminders":
		b.reminders(ctx, m, in)
		return nil
	case "remember":
		return b.remember(ctx, m, in, first)
	case "memory":
		b.memory(ctx, m, in)
		return nil
	case "forget":
		return b.forget(ctx, m, in, first)
	}
	b.later(in.SessionKey, func() { b.sendPlain(ctx, m.to(), text, m.MessageID) })
	return nil
}

// compact answers /compact: the conversation summed up now, as far as
// there is anything to sum up.
func (b *Bot) compact(ctx context.Context, in sessions.Inbound) string {
	n, err := b.sess.Compact(context.WithoutCancel(ctx), in)
	switch {
	case errors.Is(err, sessions.ErrCompactionOff):
		return compactOffText
	case errors.Is(err, sessions.ErrOverBudget):
		return compactBudgetText
	case err != nil:
		b.log.Warn("telegram: /compact failed", slog.String("session_key", in.SessionKey), slog.String("error", err.Error()))
		return compactFailedText
	case n == 0:
		return compactNothing
	}
	return fmt.Sprintf(compactedText, n)
}

// stop stops the key's running turn, or the turn its waiting messages
// would start once their debounce has passed, and answers at once.
func (b *Bot) stop(m *message, key string) {
	text := idleStopText
	if b.sess.Stop(key) {
		text = stoppedText
	}
	b.inflight.Add(1)
	go func() {
		defer b.inflight.Done()
		b.sendPlain(context.Background(), m.to(), text, m.MessageID)
	}()
}
