package ledger

import (
	"cmp"
	"slices"
	"strings"
	"time"
)

// Usage is what the model calls of one append spent: its replies' tokens
// and cost, tallied for its user, day and model (UsageDay) in the
// transaction that stores them, so that the tallies are always the sum of
// the stored messages.
type Usage struct {
	User    string // UsageUser of the conversation's session key
	Day     string // UsageDayKey in the budget's time zone
	Model   string
	Channel string

	PromptTokens, CompletionTokens int64
	Cost                           float64
	// EstimatedTokens are the tokens of PromptTokens and CompletionTokens
	// that are the gateway's estimate, not the model server's count (a
	// reply stopped or cut before the server reported its usage).
	EstimatedTokens int64
	// Turns counts the turns the append answers: 1 for a final reply, 0
	// for a tool round or a summary.
	Turns int64
	// Schedule, for what a fire's turn spent, is the fire's subject
	// (schedules.OperatorKey, schedules.ReminderKey): the spend is tallied
	// a second time under it as the user key, so that the usage view
	// tells scheduled spend from conversation and a schedule's own budget
	// reads its row. The user's own row counts it too: budgets hold.
	Schedule string
}

// UsageDay is one row of the tallies: a user's spend with one model on
// one day.
type UsageDay struct {
	UserKey          string  `gorm:"primaryKey;size:255" json:"user"`
	Day              string  `gorm:"primaryKey;size:10;index:ix_usage_days_day" json:"day"`
	Model            string  `gorm:"primaryKey;size:128" json:"model"`
	Channel          string  `gorm:"size:32;not null" json:"channel"`
	PromptTokens     int64   `gorm:"not null;default:0" json:"prompt_tokens"`
	CompletionTokens int64   `gorm:"not null;default:0" json:"completion_tokens"`
	Cost             float64 `gorm:"not null;default:0" json:"cost"`
	Turns            int64   `gorm:"not null;default:0" json:"turns"`
	EstimatedTokens  int64   `gorm:"not null;default:0" json:"estimated_tokens"`
}

// UsageTotals is a sum of tallies.
type UsageTotals struct {
	PromptTokens     int64   `json:"prompt_tokens"`
	CompletionTokens int64   `json:"completion_tokens"`
	Cost             float64 `json:"cost"`
	Turns            int64   `json:"turns"`
	// EstimatedTokens are the tokens of the two above that are the
	// gateway's estimate (Usage.EstimatedTokens); the cost of those
	// tokens is estimated with them.
	EstimatedTokens int64 `json:"estimated_tokens"`
}

// Tokens is the prompt and completion tokens together.
func (t UsageTotals) Tokens() int64 { return t.PromptTokens + t.CompletionTokens }

// Add adds u's spend to t.
func (t *UsageTotals) Add(u UsageTotals) {
	t.PromptTokens += u.PromptTokens
	t.CompletionTokens += u.CompletionTokens
	t.Cost += u.Cost
	t.Turns += u.Turns
	t.EstimatedTokens += u.EstimatedTokens
}

// UsageUser is the user a session key's spend is tallied for: the key
// itself, without a Telegram topic (a user's topics share their budget).
func UsageUser(sessionKey string) string {
	if i := strings.Index(sessionKey, ":topic:"); i >= 0 {
		return sessionKey[:i]
	}
	return sessionKey
}

// UsageDayKey is the day of t in loc as the tallies name it, YYYY-MM-DD.
func UsageDayKey(t time.Time, loc *time.Location) string { return t.In(loc).Format(time.DateOnly) }

// UsageMonthStart is the first day of the month of day (UsageDayKey).
func UsageMonthStart(day string) string {
	if len(day) < 7 {
		return day
	}
	return day[:7] + "-01"
}

// UsageRows sums the usages of one transaction by user, day and model, in
// key order: the order in which every writer takes the rows' locks, so
// that two transactions tallying the same users wait for each other
// rather than deadlock.
func UsageRows(us []*Usage) []UsageDay {
	if len(us) == 1 && us[0].Schedule == "" { // one reply's batch: nothing to add up or order
		u := us[0]
		return []UsageDay{{UserKey: u.User, Day: u.Day, Model: u.Model, Channel: u.Channel,
			PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, Cost: u.Cost, Turns: u.Turns, EstimatedTokens: u.EstimatedTokens}}
	}
	type key struct{ user, day, model string }
	idx := map[key]int{}
	var rows []UsageDay
	add := func(user string, u *Usage) {
		k := key{user, u.Day, u.Model}
		i, ok := idx[k]
		if !ok {
			i = len(rows)
			idx[k] = i
			rows = append(rows, UsageDay{UserKey: user, Day: u.Day, Model: u.Model, Channel: u.Channel})
		}
		r := &rows[i]
		r.PromptTokens += u.PromptTokens
		r.CompletionTokens += u.CompletionTokens
		r.Cost += u.Cost
		r.Turns += u.Turns
		r.EstimatedTokens += u.EstimatedTokens
	}
	for _, u := range us {
		add(u.User, u)
		if u.Schedule != "" {
			add(u.Schedule, u)
		}
	}
	slices.SortFunc(rows, func(a, b UsageDay) int {
		return cmp.Or(cmp.Compare(a.UserKey, b.UserKey), cmp.Compare(a.Day, b.Day), cmp.Compare(a.Model, b.Model))
	})
	return rows
}
