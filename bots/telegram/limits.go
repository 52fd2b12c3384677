package telegram

// Who may use the bot and how fast: the allowlist (allowed_users) with its
// refusal, and the per-user and global rate limits with their reply. Each
// is told once (a refusal per chat, a slow-down per burst), so a refused
// user is not answered message by message.

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/chatgate/chatgate/internal/ratelimit"
)

// slowDownText answers the first message of a user over the rate limit;
// the rest of that burst get nothing.
const slowDownText = "You are sending messages faster than I can take them. Please wait a moment, then send that again."

// refusalText answers a user outside allowed_users, once per chat.
const refusalText = "Sorry, this bot is private."

// LimitUser is the per-user limit's name in RateLimited.
const LimitUser = "user"

// maxTracked bounds the chats remembered as refused and the users told to
// slow down: the least recently seen are forgotten first (and would be
// told once more).
const maxTracked = 10_000

// limits is the bot's rate limits and who has been told about them.
type limits struct {
	rate atomic.Pointer[ratelimit.Limiter] // nil: no limit
	opts Options                           // the clock and KeyLimit of a limiter created by a reload
	mu   sync.Mutex
	told *lru.Cache[int64, struct{}] // users told to slow down in this burst
}

func newLimits(opts Options) *limits {
	told, _ := lru.New[int64, struct{}](maxTracked)
	l := &limits{told: told, opts: opts}
	if opts.RatePerSecond > 0 && opts.RateBurst > 0 {
		l.rate.Store(ratelimit.New(ratelimit.Options{
			PerSecond: opts.RatePerSecond, Burst: opts.RateBurst,
			GlobalPerSecond: opts.RateGlobalPerSecond, GlobalBurst: opts.RateGlobalBurst,
			KeyLimit: LimitUser, Now: opts.Now,
		}))
	}
	return l
}

// newRefused is the bounded set of chats that got the private-bot refusal.
func newRefused() *lru.Cache[int64, struct{}] {
	c, _ := lru.New[int64, struct{}](maxTracked)
	return c
}

func (b *Bot) allowed(m *message) bool { return b.allowedID(m.From.ID) }

// allowedID reports whether allowed_users lets user in (everyone when it
// is empty).
func (b *Bot) allowedID(user int64) bool {
	users := b.cur.Load().allowedUsers
	return len(users) == 0 || slices.Contains(users, user)
}

// refuse answers a user outside allowed_users once per chat; nothing of
// theirs is stored.
func (b *Bot) refuse(ctx context.Context, m *message, key string) {
	b.mu.Lock()
	first := !b.refused.Contains(m.Chat.ID)
	b.refused.Add(m.Chat.ID, struct{}{})
	b.mu.Unlock()
	if first {
		b.later(key, func() { b.sendPlain(ctx, m.to(), refusalText, m.MessageID) })
	}
}

// overLimit reports whether m's sender is over a rate limit; the message
// is then not run. The first refused message of a burst gets a polite
// reply, the rest of it none; a message let through ends the burst.
func (b *Bot) overLimit(ctx context.Context, m *message, key string) bool {
	l := b.limits
	rl := l.rate.Load()
	if rl == nil {
		return false
	}
	limit := rl.Allow(strconv.FormatInt(m.From.ID, 10))
	l.mu.Lock()
	defer l.mu.Unlock()
	if limit == "" {
		l.told.Remove(m.From.ID)
		return false
	}
	if b.opts.RateLimited != nil {
		b.opts.RateLimited(limit)
	}
	if !l.told.Contains(m.From.ID) {
		l.told.Add(m.From.ID, struct{}{})
		b.later(key, func() { b.sendPlain(ctx, m.to(), slowDownText, m.MessageID) })
	}
	return true
}
