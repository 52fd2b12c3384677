package telegram

import (
	"slices"

	"github.com/chatgate/chatgate/internal/ratelimit"
)

// tgLive is the part of Options a configuration reload changes, swapped
// whole; each update reads it when it is handled.
type tgLive struct {
	allowedUsers []int64
	groupPolicy  string
}

// Settings is what Reconfigure changes in a running bot.
type Settings struct {
	AllowedUsers []int64
	GroupPolicy  string
	// Rate limits per user and for the whole bot; RatePerSecond or
	// RateBurst 0 turns the limit off.
	RatePerSecond       float64
	RateBurst           int
	RateGlobalPerSecond float64
	RateGlobalBurst     int
}

// Settings are the settings in force: what the last Reconfigure gave, or
// the options of New.
func (b *Bot) Settings() Settings {
	cur := b.cur.Load()
	s := Settings{AllowedUsers: slices.Clone(cur.allowedUsers), GroupPolicy: cur.groupPolicy}
	if rl := b.limits.rate.Load(); rl != nil {
		s.RatePerSecond, s.RateBurst, s.RateGlobalPerSecond, s.RateGlobalBurst = rl.Rates()
	}
	return s
}

// Reconfigure applies a new allowlist, group policy and rate limits to the
// updates handled from now on, and sets the command menu again when the
// session manager's reload turned agent.models on or off. Polling (or the
// webhook) goes on as it was: no update is lost or fetched twice.
func (b *Bot) Reconfigure(s Settings) {
	b.cur.Store(&tgLive{allowedUsers: slices.Clone(s.AllowedUsers), groupPolicy: s.GroupPolicy})
	b.menuFollows()
	l := b.limits
	l.mu.Lock()
	defer l.mu.Unlock()
	if s.RatePerSecond <= 0 || s.RateBurst <= 0 {
		l.rate.Store(nil)
		return
	}
	if rl := l.rate.Load(); rl != nil {
		rl.Set(s.RatePerSecond, s.RateBurst, s.RateGlobalPerSecond, s.RateGlobalBurst)
		return
	}
	l.rate.Store(ratelimit.New(ratelimit.Options{
		PerSecond: s.RatePerSecond, Burst: s.RateBurst,
		GlobalPerSecond: s.RateGlobalPerSecond, GlobalBurst: s.RateGlobalBurst,
		KeyLimit: LimitUser, Now: l.opts.Now,
	}))
}
