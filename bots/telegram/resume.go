package telegram

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/chatgate/chatgate/bots/telegram/tgformat"
	"github.com/chatgate/chatgate/sessions"
)

// Texts of going back and of reset notices. Every notice says why the
// conversation is new and how to go back.
const (
	resumedText     = "Back to your previous conversation (%s)."
	noResumeText    = "There is no earlier conversation to go back to."
	emptyHistory    = "This conversation has no messages yet."
	historyHeader   = "The last messages of this conversation:"
	idleNotice      = "(A new conversation started: the last one was idle for %s. Send /resume to go back to it.)"
	dailyNotice     = "(A new conversation started for the new day. Send /resume to go back to the last one.)"
	idleSweepNotice = "Your conversation was idle for %s, so I closed it: your next message starts a new one. Send /resume to go back to it."
	dailySweepText  = "A new day: your next message starts a new conversation. Send /resume to go back to the last one."
)

// /history shows at most historyLines lines (the last few exchanges), each
// cut to historyLineRunes, read from at most historyRead messages.
const (
	historyLines      = 10
	historyLineRunes  = 300
	historyQuoteRunes = 60
	historyRead       = 60
)

// resume answers /resume: the key goes back to its previous conversation.
func (b *Bot) resume(ctx context.Context, in sessions.Inbound, first bool) (string, error) {
	res, err := b.sess.ResumePrevious(ctx, in)
	switch {
	case errors.Is(err, sessions.ErrNothingToResume):
		return noResumeText, nil
	case err != nil:
		if !errors.Is(err, sessions.ErrShuttingDown) {
			b.failed(first, "telegram: resume failed; retrying", in.SessionKey, err)
		}
		return "", err
	}
	return fmt.Sprintf(resumedText, plural(res.Conversation.LastSeq, "message")), nil
}

// history is the answer to /history: the last exchanges of the active
// conversation, each line cut short, as messages to send. With format html
// each line's Markdown is converted on its own, so that what one line
// leaves open (a code block cut short) never takes in the lines after it.
func (b *Bot) history(ctx context.Context, in sessions.Inbound) []tgformat.Part {
	t, err := b.sess.Open(ctx, in, -1, historyRead)
	if err != nil {
		return textParts("Sorry, I could not read this conversation just now. Please try again.")
	}
	entries := t.Entries
	if len(entries) > historyLines {
		entries = entries[len(entries)-historyLines:]
	}
	// Start at a user message, so the first exchange is whole.
	for len(entries) > 1 && entries[0].Role != "user" {
		entries = entries[1:]
	}
	if len(entries) == 0 {
		return textParts(emptyHistory)
	}
	if b.opts.Format == FormatPlain {
		var sb strings.Builder
		sb.WriteString(historyHeader)
		for _, e := range entries {
			sb.WriteString("\n\n" + historyLabel(e) + cut(e.Text, historyLineRunes))
		}
		return plainParts(sb.String())
	}
	// Lines are packed into messages within Telegram's limit; a line
	// goes whole into one message (a line too long for one alone is
	// split as a reply is).
	var out []tgformat.Part
	cur := tgformat.Part{HTML: htmlEscaper.Replace(historyHeader), Plain: historyHeader}
	for _, e := range entries {
		label := historyLabel(e)
		line := tgformat.Part{HTML: htmlEscaper.Replace(label), Plain: label}
		for _, p := range tgformat.Split(cut(e.Text, historyLineRunes), MaxMessageUnits) {
			line.HTML += p.HTML
			line.Plain += p.Plain
		}
		if tgformat.Units(cur.Plain)+2+tgformat.Units(line.Plain) <= MaxMessageUnits {
			cur.HTML += "\n\n" + line.HTML
			cur.Plain += "\n\n" + line.Plain
			continue
		}
		out = append(out, cur)
		if tgformat.Units(line.Plain) <= MaxMessageUnits {
			cur = line
			continue
		}
		parts := tgformat.Split(label+cut(e.Text, historyLineRunes), MaxMessageUnits)
		out = append(out, parts[:len(parts)-1]...)
		cur = parts[len(parts)-1]
	}
	return append(out, cur)
}

// textParts are text's messages as written, in both forms: their HTML
// is the text escaped, so they go with either parse mode.
func textParts(text string) []tgformat.Part {
	parts := plainParts(text)
	for i := range parts {
		parts[i].HTML = htmlEscaper.Replace(parts[i].Plain)
	}
	return parts
}

var htmlEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

// historyLabel starts a /history line: who wrote it, and what a message
// replied to, on one line, cut short — `You, replying to "the red…": `.
func historyLabel(e sessions.Entry) string {
	if quote := strings.Join(strings.Fields(e.Quote), " "); quote != "" {
		return historyWho(e.Role) + ", replying to \u201c" + cut(quote, historyQuoteRunes) + "\u201d: "
	}
	return historyWho(e.Role) + ": "
}

func historyWho(role string) string {
	if role == "user" {
		return "You"
	}
	return "Bot"
}

// cut shortens text to at most n runes, ending it with "…" when cut.
func cut(text string, n int) string {
	text = strings.TrimSpace(text)
	if utf8.RuneCountInString(text) <= n {
		return text
	}
	r := []rune(text)
	return strings.TrimSpace(string(r[:n-1])) + "…"
}

func plural(n int64, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// tellReset tells the chat, before the answer to the message that found
// it, that a policy reset started a new conversation, why, and how to go
// back. A reset a sweep made earlier is told only if its notice was not
// sent at once (Bot.onSweep). A user's own /new is answered by /new.
func (b *Bot) tellReset(ctx context.Context, to place, key string, ev sessions.ResetEvent) {
	if ev.Reason != sessions.ReasonIdle && ev.Reason != sessions.ReasonDaily {
		return
	}
	b.later(key, func() {
		if ev.Earlier && b.noticeSent(ctx, key, ev.OldConversation) {
			return
		}
		b.sendResetNotice(ctx, to, b.resetNotice(ev.Reason, false), ev.OldConversation)
	})
}

// resetNotice is the text telling why a conversation was archived: for the
// next message (the new conversation has started) or, swept, at once.
func (b *Bot) resetNotice(reason string, swept bool) string {
	if reason == sessions.ReasonDaily {
		if swept {
			return dailySweepText
		}
		return dailyNotice
	}
	idle := idleFor(b.sess.Policy(Channel).Reset.IdleFor)
	if swept {
		return fmt.Sprintf(idleSweepNotice, idle)
	}
	return fmt.Sprintf(idleNotice, idle)
}

// idleFor says a duration of whole minutes as people do: "30 minutes",
// "1 hour", "1 hour 30 minutes".
func idleFor(d time.Duration) string {
	mins := int64(d / time.Minute)
	if mins <= 0 {
		return "a while"
	}
	h, m := mins/60, mins%60
	switch {
	case h == 0:
		return plural(m, "minute")
	case m == 0:
		return plural(h, "hour")
	default:
		return plural(h, "hour") + " " + plural(m, "minute")
	}
}
