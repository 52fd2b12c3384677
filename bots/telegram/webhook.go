package telegram

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"
)

// setWebhook registers the webhook with its secret, retrying with backoff
// until it succeeds or ctx ends.
func (b *Bot) setWebhook(ctx context.Context) {
	params := tgbotapi.Params{"url": b.opts.WebhookURL, "secret_token": b.opts.WebhookSecret}
	if err := params.AddInterface("allowed_updates", b.allowedUpdates()); err != nil {
		b.log.Error("telegram: setWebhook: " + err.Error())
		return
	}
	wait := time.Duration(0)
	for {
		_, err := b.api.MakeRequest("setWebhook", params)
		if err == nil {
			b.log.Info("telegram webhook registered", slog.String("bot", "@"+b.Username()))
			return
		}
		if ctx.Err() != nil {
			return
		}
		err = fmt.Errorf("telegram: setWebhook: %s", b.redact(err))
		b.setErr(err)
		b.log.Error(err.Error() + "; retrying")
		wait = grow(wait, time.Second, time.Minute)
		if b.opts.Sleep(ctx, wait) != nil {
			return
		}
	}
}

// WebhookHandler serves Telegram's webhook POSTs. A request without the
// secret header gets 401, a malformed body 400, and a request while draining
// or before the bot has connected 503 (Telegram retries later). The answer
// is sent once the message is stored, so Telegram does not retry a message
// the gateway already has. A repeated delivery of an update this process
// took is answered 200 without running anything again; one that reaches
// another replica, or this one after a restart, is recognised by the
// ledger and sends nothing twice.
func (b *Bot) WebhookHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := r.Header.Get("X-Telegram-Bot-Api-Secret-Token")
		if subtle.ConstantTimeCompare([]byte(got), []byte(b.opts.WebhookSecret)) != 1 {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		if b.isDraining() {
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
		if !b.Ready() {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		var u update
		dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
		if err := dec.Decode(&u); err != nil || u.UpdateID == 0 {
			http.Error(w, "malformed update", http.StatusBadRequest)
			return
		}
		entry, first := b.seen.begin(u.UpdateID)
		if first {
			// Dispatched like a polled update; the answer waits until the
			// message is stored, and the turn runs on after it.
			b.dispatch(context.WithoutCancel(r.Context()), u, nil, func(ok bool) { b.seen.end(u.UpdateID, entry, ok) }, time.Time{})
		}
		select {
		case <-entry.settled:
			if !entry.ok {
				http.Error(w, "not taken; send again", http.StatusServiceUnavailable)
				return
			}
			w.WriteHeader(http.StatusOK)
		case <-r.Context().Done():
		}
	})
}

// recentUpdates remembers the webhook updates taken recently, so that a
// delivery Telegram repeats (its first answer was lost or late) neither
// runs a command again nor waits for the ledger. It keeps at most max
// settled ids; updates still being taken are all kept (there are at most
// as many as requests in flight).
type recentUpdates struct {
	mu      sync.Mutex
	max     int
	entries map[int]*takenUpdate
	order   []int // settled ids, oldest first
}

// takenUpdate is one update's fate: settled closes once it is stored (ok)
// or not taken.
type takenUpdate struct {
	settled chan struct{}
	ok      bool
}

func newRecentUpdates(max int) *recentUpdates {
	return &recentUpdates{max: max, entries: map[int]*takenUpdate{}}
}

// begin returns the update's entry, and whether this delivery is the
// first, which takes it.
func (r *recentUpdates) begin(id int) (*takenUpdate, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.entries[id]; ok {
		return e, false
	}
	e := &takenUpdate{settled: make(chan struct{})}
	r.entries[id] = e
	return e, true
}

// end settles the update. One not taken is forgotten, so that Telegram's
// next delivery takes it afresh.
func (r *recentUpdates) end(id int, e *takenUpdate, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e.ok = ok
	close(e.settled)
	if !ok {
		delete(r.entries, id)
		return
	}
	r.order = append(r.order, id)
	if len(r.order) > r.max {
		delete(r.entries, r.order[0])
		r.order = r.order[1:]
	}
}
