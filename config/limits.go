package config

import (
	"fmt"
	"io"
	"sort"
	"strconv"
)

// Limits are a user's budgets: what their turns may spend with the model
// per day and per month, in the time zone of the channel's reset policy
// (session.reset.timezone). Each key on its own overrides the level
// above; 0 or unset is no limit. Users gives single users (by the user
// key of their usage, a session key without a topic) budgets of their
// own, field by field over the channel's.
type Limits struct {
	TokensPerDay *int64                `yaml:"tokens_per_day"`
	CostPerDay   *float64              `yaml:"cost_per_day"`
	CostPerMonth *float64              `yaml:"cost_per_month"`
	Users        map[string]UserLimits `yaml:"users"`
}

// UserLimits are one user's budgets; unset fields keep the channel's.
type UserLimits struct {
	TokensPerDay *int64   `yaml:"tokens_per_day"`
	CostPerDay   *float64 `yaml:"cost_per_day"`
	CostPerMonth *float64 `yaml:"cost_per_month"`
}

// Budget is one set of effective budgets with their provenance.
type Budget struct {
	TokensPerDay Value[int64]
	CostPerDay   Value[float64]
	CostPerMonth Value[float64]
}

// Any reports whether any budget is set.
func (b Budget) Any() bool { return b.TokensPerDay.V > 0 || b.CostPerDay.V > 0 || b.CostPerMonth.V > 0 }

// budget resolves a channel's budgets: channels.<c>.session.limits.<key>
// → session.limits.<key> → none.
func (c *Config) budget(base string, s Session) Budget {
	top := c.Session.Limits
	return Budget{
		TokensPerDay: pick(c, 0,
			cand[int64]{base + ".session.limits.tokens_per_day", s.Limits.TokensPerDay},
			cand[int64]{"session.limits.tokens_per_day", top.TokensPerDay}),
		CostPerDay: pick(c, 0,
			cand[float64]{base + ".session.limits.cost_per_day", s.Limits.CostPerDay},
			cand[float64]{"session.limits.cost_per_day", top.CostPerDay}),
		CostPerMonth: pick(c, 0,
			cand[float64]{base + ".session.limits.cost_per_month", s.Limits.CostPerMonth},
			cand[float64]{"session.limits.cost_per_month", top.CostPerMonth}),
	}
}

// userBudgets resolves the budgets of the users named under either
// level's limits.users: channels.<c>.session.limits.users.<u>.<key> →
// session.limits.users.<u>.<key> → the channel's budget.
func (c *Config) userBudgets(base string, s Session, channel Budget) map[string]Budget {
	names := map[string]bool{}
	for u := range c.Session.Limits.Users {
		names[u] = true
	}
	for u := range s.Limits.Users {
		names[u] = true
	}
	if len(names) == 0 {
		return nil
	}
	out := make(map[string]Budget, len(names))
	for u := range names {
		mine, top := s.Limits.Users[u], c.Session.Limits.Users[u]
		cp, tp := base+".session.limits.users."+u, "session.limits.users."+u
		b := Budget{
			TokensPerDay: pick(c, channel.TokensPerDay.V, cand[int64]{cp + ".tokens_per_day", mine.TokensPerDay}, cand[int64]{tp + ".tokens_per_day", top.TokensPerDay}),
			CostPerDay:   pick(c, channel.CostPerDay.V, cand[float64]{cp + ".cost_per_day", mine.CostPerDay}, cand[float64]{tp + ".cost_per_day", top.CostPerDay}),
			CostPerMonth: pick(c, channel.CostPerMonth.V, cand[float64]{cp + ".cost_per_month", mine.CostPerMonth}, cand[float64]{tp + ".cost_per_month", top.CostPerMonth}),
		}
		if b.TokensPerDay.From == "default" {
			b.TokensPerDay.From = channel.TokensPerDay.From
		}
		if b.CostPerDay.From == "default" {
			b.CostPerDay.From = channel.CostPerDay.From
		}
		if b.CostPerMonth.From == "default" {
			b.CostPerMonth.From = channel.CostPerMonth.From
		}
		out[u] = b
	}
	return out
}

// validateLimits checks one level's limits.
func (c *Config) validateLimits(path string, l Limits) Errors {
	var errs Errors
	check := func(p string, tokens *int64, perDay, perMonth *float64) {
		if tokens != nil && *tokens < 0 {
			errs = append(errs, c.errAt(p+".tokens_per_day", "must be 0 or more (0: no limit), got %d", *tokens))
		}
		if perDay != nil && *perDay < 0 {
			errs = append(errs, c.errAt(p+".cost_per_day", "must be 0 or more (0: no limit), got %g", *perDay))
		}
		if perMonth != nil && *perMonth < 0 {
			errs = append(errs, c.errAt(p+".cost_per_month", "must be 0 or more (0: no limit), got %g", *perMonth))
		}
	}
	check(path, l.TokensPerDay, l.CostPerDay, l.CostPerMonth)
	for u, ul := range l.Users {
		if u == "" {
			errs = append(errs, c.errAt(path+".users", "a user key must not be empty"))
			continue
		}
		check(path+".users."+u, ul.TokensPerDay, ul.CostPerDay, ul.CostPerMonth)
	}
	return errs
}

// describeBudget prints a channel's budgets and its users' for `gateway
// check`; nothing when none is set anywhere.
func describeBudget(w io.Writer, p Policy) {
	if !p.Budget.Any() && len(p.UserBudgets) == 0 {
		return
	}
	line := func(prefix string, b Budget) {
		fmt.Fprintf(w, "  %slimits.tokens_per_day\t%s\t%s\n", prefix, limitText(float64(b.TokensPerDay.V), false), b.TokensPerDay.From)
		fmt.Fprintf(w, "  %slimits.cost_per_day\t%s\t%s\n", prefix, limitText(b.CostPerDay.V, true), b.CostPerDay.From)
		fmt.Fprintf(w, "  %slimits.cost_per_month\t%s\t%s\n", prefix, limitText(b.CostPerMonth.V, true), b.CostPerMonth.From)
	}
	line("", p.Budget)
	users := make([]string, 0, len(p.UserBudgets))
	for u := range p.UserBudgets {
		users = append(users, u)
	}
	sort.Strings(users)
	for _, u := range users {
		line("user "+u+" ", p.UserBudgets[u])
	}
}

func limitText(v float64, money bool) string {
	switch {
	case v <= 0:
		return "none"
	case money:
		return strconv.FormatFloat(v, 'f', -1, 64)
	default:
		return strconv.FormatInt(int64(v), 10)
	}
}
