package telegram

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/time/rate"

	"github.com/chatgate/chatgate/sessions"
)

// Reset notices at once (channels.telegram.notify_resets). A sweep may
// archive a hundred thousand conversations in one run; it hands each
// archive to the bot's route (Route.Reset) on its own goroutine, so the
// listener only queues a notice — never blocks, never allocates past the
// queue's bound — and one sender sends them at a steady pace, through the
// bot's normal send path (429 retry_after waited out), leaving the rest of
// Telegram's global budget (about 30 messages a second) to replies.
//
// Only the replica whose sweep archived a conversation queues its notice
// (forwarded resets of other replicas are skipped), and only for private
// chats. A notice that could not be sent — the queue was full, the send
// failed, the gateway stopped first — is not lost for good: a notice sent
// is recorded per session key, and the user's next message is told why
// unless the record names that archive.

// Defaults of the notice sender.
const (
	DefaultNoticesPerSecond = 20
	DefaultNoticeQueue      = 10000
)

// notifier sends the reset notices of sweeps, one at a time.
type notifier struct {
	queue   chan sweptNotice
	limiter *rate.Limiter
	done    chan struct{} // closed when the sender has stopped

	sent, dropped, failed atomic.Int64
	unlogged              atomic.Int64 // dropped since the last log line
	// handled, when set (tests), is called after each notice is done with.
	handled func()
}

// sweptNotice is one notice to send.
type sweptNotice struct {
	to     place
	key    string
	conv   string // the archived conversation
	reason string
}

// NoticeStats counts the sweep notices sent, dropped because the queue was
// full, and failed to send.
type NoticeStats struct {
	Sent, Dropped, Failed int64
}

// NoticeStats returns the counts of sweep notices (zero without
// NotifyResets).
func (b *Bot) NoticeStats() NoticeStats {
	if b.notices == nil {
		return NoticeStats{}
	}
	return NoticeStats{Sent: b.notices.sent.Load(), Dropped: b.notices.dropped.Load(), Failed: b.notices.failed.Load()}
}

// startNotices starts the sender; the bot's route hands it the resets
// (Bot.onSweep).
func (b *Bot) startNotices() {
	perSecond, size := b.opts.NoticesPerSecond, b.opts.NoticeQueue
	if perSecond <= 0 {
		perSecond = DefaultNoticesPerSecond
	}
	if size <= 0 {
		size = DefaultNoticeQueue
	}
	b.notices = &notifier{
		queue:   make(chan sweptNotice, size),
		limiter: rate.NewLimiter(rate.Limit(perSecond), 1),
		done:    make(chan struct{}),
	}
	go b.sendNotices()
}

// onSweep queues the notice of a conversation a sweep here archived, in a
// private chat, that held messages. It runs on the sweep's goroutine.
func (b *Bot) onSweep(ev sessions.ResetEvent) {
	if ev.Remote || ev.NewConversation != "" || ev.OldMessages == 0 ||
		(ev.Reason != sessions.ReasonIdle && ev.Reason != sessions.ReasonDaily) {
		return
	}
	to, ok := privateChat(ev.SessionKey)
	if !ok {
		return // groups are never told
	}
	n := b.notices
	select {
	case n.queue <- sweptNotice{to: to, key: ev.SessionKey, conv: ev.OldConversation, reason: ev.Reason}:
	default:
		n.dropped.Add(1)
		n.unlogged.Add(1)
	}
}

// dmKeyPrefix starts the session keys of private chats (sessions.TelegramDMKey).
const dmKeyPrefix = "telegram:dm:"

// privateChat returns the chat, and topic, of a private chat's session
// key (sessions.TelegramTopicKey); in a private chat the chat id is the
// user's id, always positive.
func privateChat(key string) (place, bool) {
	rest, ok := strings.CutPrefix(key, dmKeyPrefix)
	if !ok {
		return place{}, false
	}
	id, topic, hasTopic := strings.Cut(rest, ":topic:")
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil || n <= 0 {
		return place{}, false
	}
	p := place{chat: n}
	if hasTopic {
		if p.thread, err = strconv.Atoi(topic); err != nil || p.thread <= 0 {
			return place{}, false
		}
	}
	return p, true
}

// sendNotices sends queued notices at the notifier's pace until the bot
// stops taking updates; what is still queued then is counted in the log
// (those users are told when they next write).
func (b *Bot) sendNotices() {
	n := b.notices
	defer close(n.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-b.stopping
		cancel()
	}()
	select {
	case <-b.connected:
	case <-ctx.Done():
	}
	left := 0 // taken from the queue but not sent
	for ctx.Err() == nil {
		var nt sweptNotice
		select {
		case nt = <-n.queue:
		case <-ctx.Done():
			continue
		}
		if d := n.limiter.ReserveN(b.opts.Now(), 1).DelayFrom(b.opts.Now()); d > 0 && b.opts.Sleep(ctx, d) != nil {
			left++
			continue
		}
		if _, err := b.sendResetNotice(ctx, nt.to, b.resetNotice(nt.reason, true), nt.conv); err != nil {
			n.failed.Add(1)
		} else {
			n.sent.Add(1)
			if err := b.sess.SetChannelState(context.WithoutCancel(ctx), b.noticeKey(nt.key), nt.conv); err != nil {
				b.log.Warn("telegram: recording a reset notice failed; the user may be told again", slog.String("session_key", nt.key), slog.String("error", err.Error()))
			}
		}
		if n.handled != nil {
			n.handled()
		}
		if d := n.unlogged.Swap(0); d > 0 {
			b.log.Warn("telegram: reset notices dropped, the queue was full; those users are told when they next write",
				slog.Int64("notices", d), slog.Int("queue", cap(n.queue)))
		}
	}
	if left += len(n.queue) + int(n.unlogged.Swap(0)); left > 0 {
		b.log.Warn("telegram: reset notices not sent before the stop; those users are told when they next write", slog.Int("notices", left))
	}
}

// noticeKey names the stored record of the last notice sent at once to a
// session key: the id of the conversation it told of.
func (b *Bot) noticeKey(key string) string { return b.stateKey("reset_notice:" + key) }

// noticeSent reports whether the sweep notice of archived conversation
// conv was sent to the key at once. Without NotifyResets nothing is sent
// at once; a failed read counts as not sent (a second notice is better
// than none).
func (b *Bot) noticeSent(ctx context.Context, key, conv string) bool {
	if !b.opts.NotifyResets {
		return false
	}
	got, err := b.sess.ChannelState(ctx, b.noticeKey(key))
	return err == nil && got == conv
}
