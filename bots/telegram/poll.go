package telegram

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"
)

// soleElector is the Elector of a bot that is its token's only poller.
type soleElector struct{}

func (soleElector) Lead(context.Context, string, time.Duration) (bool, error) { return true, nil }
func (soleElector) Resign(context.Context, string) error                      { return nil }

// pollWhileLeading polls while this replica holds the bot's poller role
// (Telegram allows one getUpdates consumer per token): it asks for the role
// every leadRetry, renews it every leadEvery for leadTTL, stops polling at
// once when a renewal says another replica has it, and gives it up when
// ctx ends so that a successor starts at once. With SQLite the role is
// always this replica's.
func (b *Bot) pollWhileLeading(ctx context.Context) {
	role := b.stateKey("poller")
	defer func() {
		if b.skipResign {
			return
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := b.opts.Elector.Resign(rctx, role); err != nil {
			b.log.Warn("telegram: giving up the poller role failed; another replica takes it when it expires", slog.String("error", err.Error()))
		}
	}()
	waiting := false
	for ctx.Err() == nil {
		ok, err := b.opts.Elector.Lead(ctx, role, b.leadTTL)
		if err != nil && ctx.Err() == nil {
			b.log.Warn("telegram: asking for the poller role failed", slog.String("error", err.Error()))
		}
		if !ok || err != nil {
			if !waiting && err == nil {
				b.log.Info("telegram: another replica polls this bot; standing by", slog.String("bot", "@"+b.Username()))
			}
			waiting = true
			if sleep(ctx, b.leadRetry) != nil {
				return
			}
			continue
		}
		waiting = false
		if err := b.term(ctx, role); err != nil && ctx.Err() == nil {
			b.log.Error(err.Error())
			if sleep(ctx, b.leadRetry) != nil {
				return
			}
		}
	}
}

// term polls for as long as the role stays this replica's. A term that
// ends by losing the role retires its offsets: the new poller stores them.
func (b *Bot) term(ctx context.Context, role string) error {
	termCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		t := time.NewTicker(b.leadEvery)
		defer t.Stop()
		last := time.Now()
		for {
			select {
			case <-termCtx.Done():
				return
			case <-t.C:
			}
			ok, err := b.opts.Elector.Lead(termCtx, role, b.leadTTL)
			switch {
			case termCtx.Err() != nil:
				return
			case err == nil && ok:
				last = time.Now()
			case err == nil:
				b.log.Warn("telegram: another replica took the poller role; polling stops here")
				cancel()
				return
			case time.Since(last) >= b.leadTTL-b.leadEvery:
				// The role may lapse before the next renewal could land:
				// stop before another replica may start.
				b.log.Warn("telegram: cannot renew the poller role; polling stops here", slog.String("error", err.Error()))
				cancel()
				return
			}
		}
	}()
	defer func() { cancel(); <-renewed }()
	b.ctx.setPoll(termCtx)
	// Polling and a webhook exclude each other on Telegram's side.
	if _, err := b.api.MakeRequest("deleteWebhook", tgbotapi.Params{}); err != nil && termCtx.Err() == nil {
		b.warnOnce("deleteWebhook", err)
	}
	offsets, err := b.poll(termCtx)
	if offsets != nil && ctx.Err() == nil {
		offsets.retire()
	}
	return err
}

// poll is the update loop: read the stored offset (another replica may
// have moved it), getUpdates from it, hand each update to its chat's
// queue, and store the offset once every update before it is processed or
// held. Held updates from the stored state are retried first. A long poll
// that ran its full timeout empty is followed by the next one at once (a
// message arriving then is fetched without delay); one that came back
// empty early, or failed, backs off, so the loop never spins.
func (b *Bot) poll(ctx context.Context) (*offsetTracker, error) {
	st, err := b.loadOffset(ctx)
	if err != nil {
		return nil, err
	}
	offsets := newOffsetTracker(st)
	b.log.Info("telegram polling", slog.String("bot", "@"+b.Username()), slog.Int("offset", st.Offset), slog.Int("held", len(st.Held)))
	for _, h := range offsets.heldUpdates() {
		b.dispatch(ctx, h.Update, offsets, nil, h.Since)
	}
	backoff := time.Duration(0)
	for ctx.Err() == nil {
		if backoff > 0 {
			if b.opts.Sleep(ctx, backoff) != nil {
				break
			}
		}
		asked := b.opts.Now()
		updates, err := b.getUpdates(offsets.offset())
		if ctx.Err() != nil {
			break
		}
		if err != nil {
			var apiErr *tgbotapi.Error
			switch {
			case errors.As(err, &apiErr) && apiErr.Code == http.StatusConflict:
				b.log.Error("telegram: another process is polling this bot's token, or a webhook is set; retrying", slog.String("error", apiErr.Message))
				backoff = grow(backoff, 5*time.Second, time.Minute)
			case errors.As(err, &apiErr) && apiErr.RetryAfter > 0:
				backoff = time.Duration(apiErr.RetryAfter) * time.Second
			default:
				b.log.Warn("telegram: getUpdates failed", slog.String("error", b.redact(err)))
				backoff = grow(backoff, time.Second, 30*time.Second)
			}
			continue
		}
		if len(updates) == 0 {
			if b.opts.Now().Sub(asked) >= b.opts.PollTimeout {
				backoff = 0 // the long poll ran its course: nothing to wait for
			} else {
				backoff = grow(backoff, 200*time.Millisecond, 2*time.Second)
			}
			continue
		}
		backoff = 0
		fresh := 0
		for _, u := range updates {
			if offsets.known(u.UpdateID) {
				continue // running, held, or processed before a restart
			}
			fresh++
			b.dispatch(ctx, u, offsets, nil, time.Time{})
		}
		if fresh == 0 {
			// Only updates already taken came back: the offset is held by
			// updates not stored yet — being stored now, failing, or
			// queued in their chat behind one that fails. Hold them all in
			// the stored state, so that the offset moves past them and
			// polling hears the other chats; each leaves the held set once
			// its message is stored (and a restart takes them up again).
			// Then wait for progress instead of asking again at once.
			if ids, st := offsets.holdWaiting(); len(ids) > 0 && b.persist(ctx, offsets, st) {
				offsets.holdStored(ids...)
				continue
			}
			offsets.waitProgress(ctx, b.opts.PollTimeout)
		}
	}
	return offsets, nil
}

// getUpdates asks for the updates from offset on, read with their topics
// (the library's GetUpdates would drop them).
func (b *Bot) getUpdates(offset int) ([]update, error) {
	params := tgbotapi.Params{}
	params.AddNonZero("offset", offset)
	params.AddNonZero("timeout", int(b.opts.PollTimeout/time.Second))
	if err := params.AddInterface("allowed_updates", b.allowedUpdates()); err != nil {
		return nil, err
	}
	resp, err := b.api.MakeRequest("getUpdates", params)
	if err != nil {
		return nil, err
	}
	var updates []update
	if err := json.Unmarshal(resp.Result, &updates); err != nil {
		return nil, fmt.Errorf("getUpdates: %w", err)
	}
	return updates, nil
}

func grow(d, first, limit time.Duration) time.Duration {
	if d < first {
		return first
	}
	return min(d*2, limit)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func (b *Bot) loadOffset(ctx context.Context) (offsetState, error) {
	var st offsetState
	v, err := b.sess.ChannelState(ctx, b.stateKey("offset"))
	if err != nil {
		return st, fmt.Errorf("telegram: read offset: %w", err)
	}
	if v == "" {
		return st, nil
	}
	if err := json.Unmarshal([]byte(v), &st); err != nil {
		return st, fmt.Errorf("telegram: stored offset %q: %w", v, err)
	}
	return st, nil
}

// persist stores an offset state of the tracker's term and reports
// whether it, or a newer state holding what it holds, landed. One writer
// at a time, and a state built before one already stored is not written:
// the states are built under the tracker's lock but written here, in
// whatever order their goroutines get here, and an older one stored last
// would undo the newer one's holds (the poller, having stored a state
// that holds the updates waiting in their chats, asks Telegram for the
// updates after them, which confirms them; a finished update's older
// state, written after that, dropped them from the stored state, and a
// replica killed then lost them). A retired term writes nothing.
func (b *Bot) persist(ctx context.Context, offsets *offsetTracker, st offsetState) bool {
	b.persistMu.Lock()
	defer b.persistMu.Unlock()
	if offsets.isRetired() {
		return false
	}
	if offsets.superseded(st) {
		return true
	}
	v, err := json.Marshal(st)
	if err == nil {
		err = b.sess.SetChannelState(context.WithoutCancel(ctx), b.stateKey("offset"), string(v))
	}
	if err != nil {
		// Once per failing spell: every retry of every held update
		// stores the state again.
		if b.offsetFailing.CompareAndSwap(false, true) {
			b.log.Error("telegram: storing offset failed; retried with each update", slog.String("error", err.Error()))
		}
		return false
	}
	offsets.stored(st)
	if b.offsetFailing.CompareAndSwap(true, false) {
		b.log.Info("telegram: storing offset works again")
	}
	return true
}
