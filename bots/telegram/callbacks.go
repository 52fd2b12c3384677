package telegram

// Callback queries: taps on the bot's inline buttons. The button's data
// says what it is for by its prefix, up to the first ":" — "tool" for a
// tool call's ask (Bot.toolTap), "back" for a reset notice's Go back
// (Bot.backTap), "model" for /model's buttons (Bot.modelTap), "rem" for
// /reminders' Cancel buttons (Bot.reminderTap), "sched" for /schedules'
// (Bot.scheduleTap), "mem" for the notes' Forget buttons (Bot.memoryTap);
// other kinds
// add a case to callback. Every query is answered with
// answerCallbackQuery exactly once, whatever becomes of it (refused,
// stale, unknown, a storage failure), so that the user's client stops
// waiting; a tap from a user outside allowed_users is answered and
// ignored.

import (
	"context"
	"errors"
	"strings"
	"time"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"
)

// unknownButtonText answers a tap on a button the bot does not know
// (any more): an older version's, or crafted data.
const unknownButtonText = "This button no longer works"

// callback handles the callback query of u and answers it; then it does
// what the handler left for after the answer (such as editing the
// message), so that the user's client stops waiting first.
func (b *Bot) callback(ctx context.Context, u update) {
	q := u.CallbackQuery
	answer := ""
	var after func()
	if q.From != nil && b.allowedID(q.From.ID) {
		kind, rest, _ := strings.Cut(q.Data, ":")
		switch kind {
		case toolData:
			answer, after = b.toolTap(ctx, q, u.callbackThread, rest)
		case backData:
			answer, after = b.backTap(ctx, q, u.callbackThread, rest)
		case modelData:
			answer, after = b.modelTap(ctx, q, u.callbackThread, rest)
		case remindData:
			answer, after = b.reminderTap(ctx, q, u.callbackThread, rest)
		case schedData:
			answer, after = b.scheduleTap(ctx, q, u.callbackThread, rest)
		case memData:
			answer, after = b.memoryTap(ctx, q, u.callbackThread, rest)
		default:
			answer = unknownButtonText
		}
	}
	b.answerCallback(ctx, q.ID, answer)
	if after != nil {
		after()
	}
}

// answerCallback answers callback query id with text (shown briefly by
// the user's client; "" shows nothing). 429s and failures that may pass
// are retried a few times; Telegram refuses a second answer, so a retry
// after an answer that landed unseen changes nothing.
func (b *Bot) answerCallback(ctx context.Context, id, text string) {
	ctx = context.WithoutCancel(ctx)
	for attempt := 0; attempt < 3; attempt++ {
		_, err := b.api.Request(tgbotapi.NewCallback(id, text))
		if err == nil {
			return
		}
		if isClientError(err) {
			b.warnOnce("answerCallbackQuery", err)
			return
		}
		wait := time.Duration(1<<attempt) * 200 * time.Millisecond
		var apiErr *tgbotapi.Error
		if errors.As(err, &apiErr) && apiErr.RetryAfter > 0 {
			wait = time.Duration(apiErr.RetryAfter) * time.Second
		}
		if b.opts.Sleep(ctx, wait) != nil {
			return
		}
	}
}

// editMessage runs method (an edit of a message the bot sent) with
// params, for what (named in the log). 429s are waited out, other
// failures that may pass are retried a few times; "message is not
// modified" is done. plain, when set, is called once when Telegram cannot
// parse the text's entities, to turn params into plain text. Other client
// errors are logged once: the message then stays as it was, and a tap on
// its buttons is answered as stale.
func (b *Bot) editMessage(ctx context.Context, method string, params tgbotapi.Params, what string, plain func(tgbotapi.Params)) {
	ctx = context.WithoutCancel(ctx)
	for attempt := 0; attempt < 4; attempt++ {
		_, err := b.api.MakeRequest(method, params)
		if err == nil || notModified(err) {
			return
		}
		var apiErr *tgbotapi.Error
		switch {
		case errors.As(err, &apiErr) && apiErr.RetryAfter > 0:
			if b.opts.Sleep(ctx, time.Duration(apiErr.RetryAfter)*time.Second) != nil {
				return
			}
		case plain != nil && errors.As(err, &apiErr) && refusedEntities(apiErr):
			plain(params)
			plain = nil
		case isClientError(err):
			b.warnOnce(what, err)
			return
		default:
			if b.opts.Sleep(ctx, time.Duration(1<<attempt)*500*time.Millisecond) != nil {
				return
			}
		}
	}
}
