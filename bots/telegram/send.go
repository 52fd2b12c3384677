package telegram

// Sending messages (sendMessage): a reply, or one of the bot's own texts,
// in parts, with the fallbacks and retries each part needs. Previews and
// their edits are stream's.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"

	"github.com/chatgate/chatgate/bots/telegram/tgformat"
	"github.com/chatgate/chatgate/sessions"
)

// send delivers a reply the model wrote, split to Telegram's limit, and
// returns the ids of the messages sent, comma-separated. With format html
// the Markdown goes as Telegram HTML, each part valid on its own; a part
// Telegram still refuses ("can't parse entities") goes again as its plain
// text. 429 answers are waited out as retry_after says; other failures are
// retried with backoff, then logged and returned — the reply stays stored
// either way. A 4xx other than 429 will not get better and wraps
// sessions.ErrUndeliverable.
func (b *Bot) send(ctx context.Context, to place, text string, replyTo int) (string, error) {
	if b.opts.Format == FormatPlain {
		return b.sendPlain(ctx, to, text, replyTo)
	}
	return b.sendParts(ctx, to, tgformat.Split(text, MaxMessageUnits), true, replyTo)
}

// sendPlain delivers text as written, without a parse mode: the bot's own
// texts (help, notices), which are not Markdown, and replies with format
// plain.
func (b *Bot) sendPlain(ctx context.Context, to place, text string, replyTo int) (string, error) {
	return b.sendParts(ctx, to, plainParts(text), false, replyTo)
}

// plainParts are text's messages without markup, split at Telegram's
// limit.
func plainParts(text string) []tgformat.Part {
	var parts []tgformat.Part
	for _, p := range Split(text, MaxMessageUnits) {
		parts = append(parts, tgformat.Part{Plain: p})
	}
	return parts
}

// sendParts sends parts in order, each as HTML when html is set, else as
// its plain text; the first answers replyTo. They go to to's topic; if
// Telegram says it was closed or deleted, to the General topic.
func (b *Bot) sendParts(ctx context.Context, to place, parts []tgformat.Part, html bool, replyTo int) (string, error) {
	ctx = context.WithoutCancel(ctx) // a reply is delivered even while stopping
	var ids []string
	for i, part := range parts {
		answers := 0
		if i == 0 {
			answers = replyTo
		}
		var sent tgbotapi.Message
		var err error
		sent, to, err = b.sendPart(ctx, to, part, html, answers, nil)
		if err != nil {
			b.log.ErrorContext(ctx, "telegram: sending a reply failed; it stays stored", slog.Int64("chat", to.chat), slog.String("error", b.redact(err)))
			if !errors.Is(err, sessions.ErrUndeliverable) {
				err = errors.New(b.redact(err))
			}
			return strings.Join(ids, ","), err
		}
		ids = append(ids, strconv.Itoa(sent.MessageID))
	}
	return strings.Join(ids, ","), nil
}

// sendPart sends one part of sendParts, answering replyTo unless it is 0,
// with its fallbacks and retries; extra are further parameters (such as
// a reply_markup). It returns the place the parts after it go to: to, or
// General once to's topic is gone.
func (b *Bot) sendPart(ctx context.Context, to place, part tgformat.Part, html bool, replyTo int, extra tgbotapi.Params) (tgbotapi.Message, place, error) {
	text, parseMode := part.Plain, ""
	if html {
		text, parseMode = part.HTML, tgbotapi.ModeHTML
	}
	var err error
	var sent tgbotapi.Message
	for attempt := 0; attempt < 6; attempt++ {
		params := to.params()
		for k, v := range extra {
			params[k] = v
		}
		params["text"] = text
		params.AddNonEmpty("parse_mode", parseMode)
		if replyTo != 0 {
			params.AddNonZero("reply_to_message_id", replyTo)
			params.AddBool("allow_sending_without_reply", true)
		}
		var resp *tgbotapi.APIResponse
		if resp, err = b.api.MakeRequest("sendMessage", params); err == nil {
			// Sent: the answer only gives its id, for the delivery's
			// record; never sent again for an answer it cannot read.
			_ = json.Unmarshal(resp.Result, &sent)
			break
		}
		var apiErr *tgbotapi.Error
		wait := time.Duration(1<<attempt) * 500 * time.Millisecond
		if errors.As(err, &apiErr) {
			if parseMode != "" && refusedEntities(apiErr) {
				// The markup will not get better: the same words go
				// without it, at once.
				b.warnParse(to.chat, err)
				text, parseMode = part.Plain, ""
				attempt--
				continue
			}
			if to.thread != 0 && topicGone(err) {
				// The reply is not lost with its topic: this part and
				// the ones after it go to General, at once.
				to = b.toGeneral(to, "the reply", err)
				attempt--
				continue
			}
			if apiErr.RetryAfter > 0 {
				wait = time.Duration(apiErr.RetryAfter) * time.Second
			} else if apiErr.Code >= 400 && apiErr.Code < 500 && apiErr.Code != http.StatusTooManyRequests {
				// A 4xx other than 429 will not get better. Telegram's
				// error stays in the chain (redacted), for callers that
				// tell refusals apart (cannotMessage).
				err = fmt.Errorf("%w: %w", sessions.ErrUndeliverable,
					&tgbotapi.Error{Code: apiErr.Code, Message: b.redact(err), ResponseParameters: apiErr.ResponseParameters})
				break
			}
		}
		if b.opts.Sleep(ctx, wait) != nil {
			break
		}
	}
	return sent, to, err
}

// refusedEntities reports whether Telegram refused a message's markup.
func refusedEntities(e *tgbotapi.Error) bool {
	return e.Code == http.StatusBadRequest && strings.Contains(e.Message, "can't parse entities")
}

// warnParse logs, once, that Telegram refused the HTML of a reply, which
// was then sent as plain text: a fault of the conversion worth a report,
// not worth a line per message.
func (b *Bot) warnParse(chatID int64, err error) {
	b.mu.Lock()
	seen := b.warned["parse entities"]
	b.warned["parse entities"] = true
	b.mu.Unlock()
	if !seen {
		b.log.Warn("telegram: a reply's HTML was refused; it was sent as plain text (logged once)",
			slog.Int64("chat", chatID), slog.String("error", b.redact(err)))
	}
}
