package telegram

// /status: what the session manager knows of the chat's session, as
// plain lines — the conversation, how much of the model's context its
// history takes, the summary, the model, the user's usage against their
// budget, the busy mode and the next reset.

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/chatgate/chatgate/sessions"
)

// statusFailedText answers a /status the session manager could not serve.
const statusFailedText = "I couldn't read the status just now; please try again."

// statusSummaryRunes bounds the summary /status shows.
const statusSummaryRunes = 1500

// busyTexts say what each busy mode does.
var busyTexts = map[sessions.BusyMode]string{
	sessions.BusyQueue:     "queue — each message gets its own answer, one after the other",
	sessions.BusyCollect:   "collect — messages sent while I answer are answered together, next",
	sessions.BusyInterrupt: "interrupt — a new message stops the answer being written and is answered with it",
}

// status answers /status.
func (b *Bot) status(ctx context.Context, in sessions.Inbound) string {
	st, err := b.sess.Status(context.WithoutCancel(ctx), in)
	if err != nil {
		b.log.Warn("telegram: /status failed", slog.String("session_key", in.SessionKey), slog.String("error", err.Error()))
		return statusFailedText
	}
	return statusText(st, b.sess.OffersModels(), b.opts.Now())
}

// statusText is /status's answer for st at now.
func statusText(st sessions.Status, models bool, now time.Time) string {
	var s strings.Builder
	line := func(format string, args ...any) { fmt.Fprintf(&s, format+"\n", args...) }
	zone := st.Reset.TimeZone()
	when := func(t time.Time) string { return t.In(zone).Format("Mon 2 Jan 15:04 MST") }

	if st.Conversation == "" {
		line("Conversation: none yet — your next message starts one.")
	} else {
		line("Conversation: %s since %s.", plural(st.Messages, "message"), when(st.StartedAt))
		hist := fmt.Sprintf("History I read: %s, about %s", plural(int64(st.HistoryMessages), "message"), plural(int64(st.HistoryTokens), "token"))
		if st.Summary != nil {
			hist += " with the summary"
		}
		if pct, ok := st.ContextPercent(); ok {
			line("%s — %.1f%% of the model's %d-token context.", hist, pct, st.Model.Current.ContextTokens)
		} else {
			line("%s — the model's context size is unknown.", hist)
		}
		if st.Summary != nil {
			line("Summary of messages 1–%d (%s):\n%s", st.Summary.Through, when(st.Summary.At), cut(st.Summary.Text, statusSummaryRunes))
		}
	}

	model := "Model: " + modelLabel(st.Model.Current)
	if st.Model.Gone {
		model += fmt.Sprintf(" (%s, which you chose, is no longer offered)", st.Model.Chosen)
	}
	if models {
		model += " — /model to change it"
	}
	line("%s.", model)

	u := st.Usage
	uzone := u.Location
	if uzone == nil {
		uzone = time.UTC
	}
	line("Today: %s; the day ends %s.", spend(u.Day, u.Budget.TokensPerDay, u.Budget.CostPerDay), u.DayEnds.In(uzone).Format("Mon 2 Jan 15:04 MST"))
	line("This month: %s.", spend(u.Month, 0, u.Budget.CostPerMonth))
	if over := u.Over(); over != "" {
		line("You have reached your limit: I answer again from %s (in %s).", u.ResetsAt().In(uzone).Format("Mon 2 Jan 15:04 MST"), about(u.ResetsAt().Sub(now)))
	}

	if sc := scheduledText(st.Scheduled); sc != "" {
		line("%s", sc)
	}

	busy := busyTexts[st.Busy]
	if busy == "" {
		busy = string(st.Busy)
	}
	line("Busy mode: %s.", busy)

	switch {
	case st.Reset.Mode == sessions.ResetNone || st.Reset.Mode == "":
		line("Resets: only when you send /new.")
	case st.Conversation == "":
		line("Resets: %s.", resetRule(st.Reset))
	case !st.NextReset.After(now):
		line("Next reset: due now — your next message starts a new conversation (%s).", resetRule(st.Reset))
	default:
		line("Next reset: %s (%s), in %s.", when(st.NextReset), st.NextResetReason, about(st.NextReset.Sub(now)))
	}
	return strings.TrimRight(s.String(), "\n")
}

// spend is one period's usage: answers, tokens and cost, each against
// its limit when it has one.
func spend(t sessions.UsageTotals, tokenLimit int64, costLimit float64) string {
	out := plural(t.Turns, "answer") + ", " + plural(t.Tokens(), "token")
	if tokenLimit > 0 {
		out += fmt.Sprintf(" of %d", tokenLimit)
	}
	if t.EstimatedTokens > 0 {
		out += fmt.Sprintf(" (%d estimated: answers stopped before the model counted them)", t.EstimatedTokens)
	}
	if t.Cost > 0 || costLimit > 0 {
		out += fmt.Sprintf(", cost %.4f", t.Cost)
		if costLimit > 0 {
			out += fmt.Sprintf(" of %.2f", costLimit)
		}
	}
	return out
}

// resetRule says when conversations reset by themselves.
func resetRule(p sessions.ResetPolicy) string {
	idle := fmt.Sprintf("after %s without a message", about(p.IdleFor))
	daily := fmt.Sprintf("every day at %02d:00 %s", p.AtHour, p.TimeZone())
	switch p.Mode {
	case sessions.ResetIdle:
		return idle
	case sessions.ResetDaily:
		return daily
	}
	return idle + ", and " + daily
}

// about is d for a person: "3 h 20 min", "12 min", "under a minute".
func about(d time.Duration) string {
	switch {
	case d < time.Minute:
		return "under a minute"
	case d < time.Hour:
		return fmt.Sprintf("%d min", int(d/time.Minute))
	case d < 48*time.Hour:
		if d%time.Hour < time.Minute {
			return fmt.Sprintf("%d h", int(d/time.Hour))
		}
		return fmt.Sprintf("%d h %d min", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	return fmt.Sprintf("%d days", int(d/(24*time.Hour)))
}
