package telegram

// The "typing…" chat action, shown while the agent works on a chat's
// messages and repeated because Telegram drops it after about 5 s.

import (
	"sync"
	"time"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"
)

// typer shows "typing…" in one chat while any of its messages waits for
// a reply: one action every TypingEvery however many wait.
type typer struct {
	waiting int
	stop    chan struct{}
}

// typing shows "typing…" in the chat until the returned func is called
// (and no other message of the chat waits). A failing typing action is
// logged once and never delays the reply.
func (b *Bot) typing(to place) func() {
	b.mu.Lock()
	t := b.typers[to]
	if t == nil {
		t = &typer{stop: make(chan struct{})}
		b.typers[to] = t
		go b.showTyping(to, t.stop)
	}
	t.waiting++
	b.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			if t.waiting--; t.waiting == 0 {
				delete(b.typers, to)
				close(t.stop)
			}
		})
	}
}

func (b *Bot) showTyping(to place, stop <-chan struct{}) {
	t := time.NewTicker(b.opts.TypingEvery)
	defer t.Stop()
	for {
		params := to.params()
		params["action"] = tgbotapi.ChatTyping
		if _, err := b.api.MakeRequest("sendChatAction", params); err != nil {
			b.warnOnce("sendChatAction", err)
		}
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}
