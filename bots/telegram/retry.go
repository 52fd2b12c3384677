package telegram

// A message that could not be stored (the database down): in polling mode
// its update is retried with backoff on its chat's queue, held in the
// stored offset state so that polling moves past it, and let go after
// giveUpAfter with a word to its user; a webhook's is answered 503 for
// Telegram to send again. The delay notice, told once while the database
// keeps a message or its turn waiting, is here too.

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/chatgate/chatgate/sessions"
)

// Retrying an update whose message could not be stored: the first wait,
// the longest, and when the user is told and the update let go.
const (
	retryFirst  = 500 * time.Millisecond
	retryMax    = 30 * time.Second
	giveUpAfter = 10 * time.Minute
)

// unstoredText tells a user their message was let go after giveUpAfter,
// so that they send it again rather than wait for an answer.
const unstoredText = "Sorry, I could not save your message because of a problem on my side, so it was not answered. Please send it again."

// work is what one run stores: a message, and the updates it came in
// (one; an album's parts). since is when storing it first
// failed, zero if it never did.
type work struct {
	m       *message
	updates []update
	since   time.Time
}

// run processes a message on its chat's queue. In polling mode, a message
// that could not be stored is retried with backoff, from memory, on the
// same queue (so the chat's later messages stay behind it and other chats
// go on); its updates are held in the stored offset state meanwhile, so
// that polling moves past them. After giveUpAfter the user is told and the
// updates are let go. While draining, or once this replica stops polling,
// they are left unconfirmed: Telegram, or the stored state, brings them
// back.
func (b *Bot) run(ctx context.Context, w work, key string, offsets *offsetTracker, done func(bool)) {
	m, since := w.m, w.since
	wait := time.Duration(0)
	watching := false
	for attempt := 0; ; attempt++ {
		stored := false
		err := b.process(ctx, m, key, attempt == 0, func() { stored = true; done(true) })
		if err == nil || stored {
			done(true)
			return
		}
		if offsets == nil || b.isDraining() || ctx.Err() != nil || errors.Is(err, sessions.ErrShuttingDown) {
			if offsets != nil && ctx.Err() != nil && !b.isDraining() && !errors.Is(err, sessions.ErrShuttingDown) {
				// Polling stopped (its role could not be renewed: the
				// database is down for the role too). The update is not
				// confirmed and comes again once polling resumes; its user
				// is still told of the wait when it lasts.
				if since.IsZero() {
					since = b.opts.Now()
				}
				if !watching {
					b.watchDelay(key, m, since)
				}
			}
			done(false) // webhook: Telegram retries on the 503
			return
		}
		now := b.opts.Now()
		if since.IsZero() {
			since = now
		}
		if !watching {
			// The user is told when the notice falls due, not at the
			// first failed try after it: the tries' backoff may put that
			// try past the database's return, and the user would have
			// waited untold.
			watching = true
			b.watchDelay(key, m, since)
		}
		if !offsets.isDurable(w.updates...) {
			st := offsets.hold(since, w.updates...)
			if b.persist(ctx, offsets, st) {
				offsets.holdStored(updateIDs(w.updates)...)
			}
		}
		if d := b.sess.DelayNotice(); d > 0 && now.Sub(since) >= d {
			b.tellDelay(ctx, key, m)
		}
		if now.Sub(since) >= giveUpAfter {
			b.log.Error("telegram: giving up on a message that could not be stored", slog.String("session_key", key),
				slog.Any("update_ids", updateIDs(w.updates)), slog.Duration("failing_for", now.Sub(since)))
			b.later(key, func() { b.sendPlain(ctx, m.to(), unstoredText, m.MessageID) })
			done(true)
			return
		}
		wait = grow(wait, retryFirst, retryMax)
		if b.pause(ctx, wait) != nil {
			done(false)
			return
		}
	}
}

// updateIDs are the ids of us.
func updateIDs(us []update) []int {
	ids := make([]int, len(us))
	for i, u := range us {
		ids[i] = u.UpdateID
	}
	return ids
}

// pause waits d, or less when ctx ends or the bot stops taking updates.
func (b *Bot) pause(ctx context.Context, d time.Duration) error {
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-b.stopping:
			cancel()
		case <-pctx.Done():
		}
	}()
	return b.opts.Sleep(pctx, d)
}

// failed logs a failure to store: loudly the first time, quietly on the
// retries that follow.
func (b *Bot) failed(first bool, msg, key string, err error) {
	level := slog.LevelError
	if !first {
		level = slog.LevelDebug
	}
	b.log.Log(context.Background(), level, msg, slog.String("session_key", key), slog.String("error", err.Error()))
}

// watchDelay tells m's sender of the wait, as tellDelay does, if the
// database is still unreachable when the delay notice falls due (since
// the first failure to store m): for an update whose retries ended with
// polling, before its notice was due.
func (b *Bot) watchDelay(key string, m *message, since time.Time) {
	d := b.sess.DelayNotice()
	if d <= 0 {
		return
	}
	b.inflight.Add(1)
	go func() {
		defer b.inflight.Done()
		if wait := since.Add(d).Sub(b.opts.Now()); wait > 0 && b.pause(context.Background(), wait) != nil {
			return // the bot stops
		}
		if _, down := b.sess.StorageDown(); down {
			b.tellDelay(context.Background(), key, m)
		}
	}()
}

// tellDelay tells m's sender that their message is kept while the
// database is unreachable and will be answered: once per session key,
// until a reply of the key is sent — whether the message could not be
// stored yet or its turn waits.
func (b *Bot) tellDelay(ctx context.Context, key string, m *message) {
	if told, _ := b.delayTold.ContainsOrAdd(key, struct{}{}); told {
		return
	}
	go func() {
		if _, err := b.sendPlain(ctx, m.to(), sessions.DelayText, m.MessageID); err != nil {
			b.log.Warn("telegram: sending the delay notice failed", slog.Int64("chat_id", m.Chat.ID), slog.String("error", err.Error()))
		}
	}()
}
