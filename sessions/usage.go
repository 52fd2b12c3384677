package sessions

// Usage and budgets. Every append that stores what a model call spent
// carries a ledger.Usage — its user, day, model and spend — which the
// store adds to the user's tally in the append's own transaction. A
// turn of a user with a budget reads their tally before the model is
// called; a user over budget gets BudgetText for an answer, stored like
// any reply, and no model call. Days and months are those of the
// channel's reset time zone.
//
// The check reads the tallies as stored: replicas sharing a database see
// each other's spend, and a user can overshoot a budget by at most the
// turns already running when they reached it — one, since a user's
// turns run one at a time (their topics' aside). Every other model call
// a user causes checks it too (a summary: Manager.compact; a voice
// message's transcription, which the channels ask Standing.Usage about
// before they make it), and a turn refused for the budget starts none.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/chatgate/chatgate/sessions/ledger"
)

// ErrOverBudget is what a model call the user would cause answers while
// they are over their budget (an OverBudgetError says which and until
// when).
var ErrOverBudget = errors.New("over budget")

// OverBudgetError is the refusal of a model call for a user over their
// budget: where they stand.
type OverBudgetError struct{ Standing UsageStanding }

func (e *OverBudgetError) Error() string {
	return fmt.Sprintf("over budget (%s) until %s", e.Standing.Over(), e.Standing.ResetsAt().Format(time.RFC3339))
}

// Is makes errors.Is(err, ErrOverBudget) true.
func (e *OverBudgetError) Is(target error) bool { return target == ErrOverBudget }

// Budget is what one user may spend with the model; 0 is no limit.
type Budget struct {
	TokensPerDay int64   `json:"tokens_per_day,omitempty"`
	CostPerDay   float64 `json:"cost_per_day,omitempty"`
	CostPerMonth float64 `json:"cost_per_month,omitempty"`
}

// Any reports whether b limits anything.
func (b Budget) Any() bool { return b.TokensPerDay > 0 || b.CostPerDay > 0 || b.CostPerMonth > 0 }

// BudgetPolicy is a channel's budgets: Default for every user, Users for
// those with budgets of their own (by ledger.UsageUser).
type BudgetPolicy struct {
	Default Budget
	Users   map[string]Budget
}

// For is the budget of user.
func (p BudgetPolicy) For(user string) Budget {
	if b, ok := p.Users[user]; ok {
		return b
	}
	return p.Default
}

// UsageTotals is a sum of a user's tallies.
type UsageTotals = ledger.UsageTotals

// UsageStanding is where a user stands: today's and this month's spend
// against their budget, and when each period ends.
type UsageStanding struct {
	User      string
	Day       UsageTotals
	Month     UsageTotals
	Budget    Budget
	DayEnds   time.Time
	MonthEnds time.Time
	Location  *time.Location
}

// Over is the budget the user has used up ("tokens_per_day",
// "cost_per_day", "cost_per_month"), the one that resets last when
// several are; "" while they may go on.
func (s UsageStanding) Over() string {
	switch b := s.Budget; {
	case b.CostPerMonth > 0 && s.Month.Cost >= b.CostPerMonth:
		return "cost_per_month"
	case b.CostPerDay > 0 && s.Day.Cost >= b.CostPerDay:
		return "cost_per_day"
	case b.TokensPerDay > 0 && s.Day.Tokens() >= b.TokensPerDay:
		return "tokens_per_day"
	}
	return ""
}

// ResetsAt is when the budget Over names frees up again.
func (s UsageStanding) ResetsAt() time.Time {
	if s.Over() == "cost_per_month" {
		return s.MonthEnds
	}
	return s.DayEnds
}

// BudgetText is the answer to a message from a user over their budget.
func BudgetText(s UsageStanding, now time.Time) string {
	what, when, in := budgetParts(s, now)
	return fmt.Sprintf("You have reached %s, so this message was not answered (it is kept). You can write again from %s (in %s).", what, when, in)
}

// BudgetAudioText is the answer to audio from a user over their budget,
// which a channel does not transcribe (transcription is a model call) and
// so cannot keep; noun names what was sent ("voice message").
func BudgetAudioText(s UsageStanding, now time.Time, noun string) string {
	what, when, in := budgetParts(s, now)
	return fmt.Sprintf("You have reached %s, so I did not listen to that %s (it is not kept). You can send it again from %s (in %s).", what, noun, when, in)
}

// budgetParts are the budget the user has used up, when it frees up, and
// how long that is from now, as the budget texts say them.
func budgetParts(s UsageStanding, now time.Time) (what, when, in string) {
	switch s.Over() {
	case "cost_per_month":
		what = "this month's spending limit"
	case "cost_per_day":
		what = "today's spending limit"
	default:
		what = fmt.Sprintf("today's limit of %d tokens", s.Budget.TokensPerDay)
	}
	at := s.ResetsAt()
	loc := s.Location
	if loc == nil {
		loc = time.UTC
	}
	return what, at.In(loc).Format("Mon 2 Jan 15:04 MST"), roughly(at.Sub(now))
}

// roughly is d for a person: "3 h 20 min", "12 min", "under a minute".
func roughly(d time.Duration) string {
	switch {
	case d < time.Minute:
		return "under a minute"
	case d < time.Hour:
		return fmt.Sprintf("%d min", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%d h %d min", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	return fmt.Sprintf("%d days", int(d/(24*time.Hour)))
}

// budgetLocation is the zone of a channel's days and months.
func budgetLocation(p Policy) *time.Location {
	if p.Reset.Location != nil {
		return p.Reset.Location
	}
	return time.UTC
}

// usageFor is what msgs spent, for the append that stores them on
// conversation conv at at: nil when it spent nothing and answers no turn.
// estimated says their tokens are the gateway's estimate (agent.Usage's
// Estimated): the tally keeps them as such.
func (s *Standing) usageFor(conv *ledger.Conversation, msgs []ledger.Message, model string, at time.Time, turns int64, estimated bool) *ledger.Usage {
	u := ledger.Usage{Turns: turns}
	for i := range msgs {
		u.PromptTokens += msgs[i].PromptTokens
		u.CompletionTokens += msgs[i].CompletionTkns
		u.Cost += msgs[i].Cost
	}
	if estimated {
		u.EstimatedTokens = u.PromptTokens + u.CompletionTokens
	}
	if u.Turns == 0 && u.PromptTokens == 0 && u.CompletionTokens == 0 && u.Cost == 0 {
		return nil
	}
	if model == "" {
		model = conv.Model
	}
	u.User, u.Channel, u.Model = ledger.UsageUser(conv.SessionKey), conv.Channel, model
	u.Day = s.days.key(at, budgetLocation(s.turns.Policy(conv.Channel)))
	return &u
}

// Usage is where the user of a channel's session key stands.
func (s *Standing) Usage(ctx context.Context, channel, sessionKey string) (UsageStanding, error) {
	return s.standing(ctx, s.turns.Policy(channel), sessionKey)
}

// standing is where the user of sessionKey stands under policy p.
func (s *Standing) standing(ctx context.Context, p Policy, sessionKey string) (UsageStanding, error) {
	user := ledger.UsageUser(sessionKey)
	loc := budgetLocation(p)
	now := s.now().In(loc)
	day := ledger.UsageDayKey(now, loc)
	us := UsageStanding{User: user, Budget: p.Budget.For(user), Location: loc,
		DayEnds:   time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, loc),
		MonthEnds: time.Date(now.Year(), now.Month()+1, 1, 0, 0, 0, 0, loc)}
	var err error
	us.Day, us.Month, err = s.store.UserUsage(ctx, user, day, ledger.UsageMonthStart(day))
	return us, err
}

// overBudget is the standing of the turn's user when they are over their
// budget, nil when they may go on (or have no budget). A tally that
// cannot be read lets the turn go on: the message is answered, and the
// failure is logged.
func (s *Standing) overBudget(ctx context.Context, in Inbound, p Policy) *UsageStanding {
	if !p.Budget.For(ledger.UsageUser(in.SessionKey)).Any() {
		return nil
	}
	us, err := s.standing(ctx, p, in.SessionKey)
	if err != nil {
		s.log.WarnContext(ctx, "reading the user's usage failed; the turn runs without its budget check",
			slog.String("session_key", in.SessionKey), slog.String("error", err.Error()))
		return nil
	}
	if us.Over() == "" {
		return nil
	}
	return &us
}

// dayKeys keeps the last day key made, so that a turn formats no date.
type dayKeys struct{ last atomic.Pointer[dayKey] }

type dayKey struct {
	loc        *time.Location
	start, end time.Time
	key        string
}

func (d *dayKeys) key(t time.Time, loc *time.Location) string {
	if l := d.last.Load(); l != nil && l.loc == loc && !t.Before(l.start) && t.Before(l.end) {
		return l.key
	}
	lt := t.In(loc)
	l := &dayKey{loc: loc, start: time.Date(lt.Year(), lt.Month(), lt.Day(), 0, 0, 0, 0, loc),
		end: time.Date(lt.Year(), lt.Month(), lt.Day()+1, 0, 0, 0, 0, loc), key: lt.Format(time.DateOnly)}
	d.last.Store(l)
	return l.key
}
