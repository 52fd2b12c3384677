// Package telegram is the Telegram channel: a bot on the Bot API, polling
// with its own update loop or receiving webhooks, that hands text messages to
// the session manager and sends the replies back.
package telegram

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"

	"github.com/chatgate/chatgate/sessions"
)

// Channel is the Telegram channel's name in session keys and policies.
const Channel = "telegram"

// Sessions is what the bot needs from the session manager.
type Sessions interface {
	Handle(ctx context.Context, in sessions.Inbound, h sessions.Hooks) (sessions.Outcome, error)
	Reset(ctx context.Context, in sessions.Inbound) (sessions.ResetEvent, error)
	Stop(key string) bool
	OnDeliver(channel string, track bool, fn sessions.DeliverFunc)
	Delivered(ctx context.Context, t sessions.TurnRef, ref string, err error) error
	ChannelState(ctx context.Context, key string) (string, error)
	SetChannelState(ctx context.Context, key, value string) error
}

// Options configures the bot.
type Options struct {
	Token         string
	APIURL        string // Bot API server, default https://api.telegram.org
	Mode          string // polling | webhook
	PollTimeout   time.Duration
	WebhookURL    string
	WebhookSecret string
	AllowedUsers  []int64
	GroupPolicy   string // mention | all
	GroupScope    string // user | chat
	Logger        *slog.Logger
	HTTPClient    *http.Client
	// Sleep waits between retries; tests pass one that records instead.
	Sleep func(ctx context.Context, d time.Duration) error
	// TypingEvery is how often the typing action is repeated while the
	// agent works (Telegram shows it for about 5 s).
	TypingEvery time.Duration
}

// Texts the bot sends.
const (
	helpText = "Send me a message and I'll answer. I remember our conversation until it is reset.\n\n" +
		"/new or /reset — start a new conversation\n/stop — stop the answer being written\n/help — this message"
	startText    = "Hello! " + helpText
	resetText    = "Started a new conversation."
	stoppedText  = "Stopped."
	idleStopText = "Nothing is running."
	refusalText  = "Sorry, this bot is private."
	nonTextText  = "I can only read text messages."
	resetNotice  = "(A new conversation started: the last one %s.)"
)

// Bot is the Telegram channel.
type Bot struct {
	opts  Options
	sess  Sessions
	api   *tgbotapi.BotAPI
	log   *slog.Logger
	ctx   *ctxClient
	queue *keyQueues

	mu        sync.Mutex
	draining  bool
	refused   map[int64]bool // chats that got the private-bot refusal
	warned    map[string]bool
	offsets   *offsetTracker
	offsetKey string
	persistMu sync.Mutex
	inflight  sync.WaitGroup
}

// ctxClient is the HTTP client given to the library, whose requests carry
// no context: getUpdates gets the polling context, so stopping cancels a
// long poll at once, while replies still go out during the drain.
type ctxClient struct {
	client *http.Client
	mu     sync.Mutex
	poll   context.Context
}

func (c *ctxClient) Do(req *http.Request) (*http.Response, error) {
	if strings.HasSuffix(req.URL.Path, "/getUpdates") {
		c.mu.Lock()
		ctx := c.poll
		c.mu.Unlock()
		req = req.WithContext(ctx)
	}
	return c.client.Do(req)
}

func (c *ctxClient) setPoll(ctx context.Context) {
	c.mu.Lock()
	c.poll = ctx
	c.mu.Unlock()
}

// New connects to the Bot API (getMe) and returns the bot. A rejected token
// is a one-line error naming the channel; the token never appears in it.
func New(ctx context.Context, sess Sessions, opts Options) (*Bot, error) {
	if opts.APIURL == "" {
		opts.APIURL = "https://api.telegram.org"
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{Timeout: opts.PollTimeout + 30*time.Second}
	}
	if opts.Sleep == nil {
		opts.Sleep = sleep
	}
	if opts.TypingEvery <= 0 {
		opts.TypingEvery = 4 * time.Second
	}
	if opts.PollTimeout <= 0 {
		opts.PollTimeout = 30 * time.Second
	}
	b := &Bot{
		opts: opts, sess: sess, log: opts.Logger.With(slog.String("channel", Channel)),
		ctx:     &ctxClient{client: opts.HTTPClient, poll: ctx},
		queue:   newKeyQueues(),
		refused: map[int64]bool{}, warned: map[string]bool{},
	}
	endpoint := strings.TrimRight(opts.APIURL, "/") + "/bot%s/%s"
	api, err := tgbotapi.NewBotAPIWithClient(opts.Token, endpoint, b.ctx)
	if err != nil {
		return nil, fmt.Errorf("telegram: cannot start the bot: %s", b.redact(err))
	}
	b.api = api
	b.offsetKey = "telegram:" + strconv.FormatInt(api.Self.ID, 10) + ":offset"
	sess.OnDeliver(Channel, true, b.deliverStored)
	return b, nil
}

// Username is the bot's @username.
func (b *Bot) Username() string { return b.api.Self.UserName }

// redact removes the token from an error's text (the library's transport
// errors carry the request URL, which contains it).
func (b *Bot) redact(err error) string {
	if err == nil {
		return ""
	}
	return strings.ReplaceAll(err.Error(), b.opts.Token, "<token>")
}

// warnOnce logs a failure of a side call (typing, setMyCommands) once per
// kind, so a broken side call never floods the log or blocks a reply.
func (b *Bot) warnOnce(kind string, err error) {
	b.mu.Lock()
	seen := b.warned[kind]
	b.warned[kind] = true
	b.mu.Unlock()
	if !seen {
		b.log.Warn("telegram call failed (logged once)", slog.String("call", kind), slog.String("error", b.redact(err)))
	}
}

// Start registers the commands and, in webhook mode, the webhook. In
// polling mode it then polls until ctx ends; in webhook mode it returns.
func (b *Bot) Start(ctx context.Context) error {
	cmds := tgbotapi.NewSetMyCommands(
		tgbotapi.BotCommand{Command: "new", Description: "Start a new conversation"},
		tgbotapi.BotCommand{Command: "reset", Description: "Start a new conversation"},
		tgbotapi.BotCommand{Command: "stop", Description: "Stop the answer being written"},
		tgbotapi.BotCommand{Command: "help", Description: "How to use this bot"},
		tgbotapi.BotCommand{Command: "start", Description: "Say hello"},
	)
	if _, err := b.api.Request(cmds); err != nil {
		b.warnOnce("setMyCommands", err)
	}
	if b.opts.Mode == "webhook" {
		params := tgbotapi.Params{"url": b.opts.WebhookURL, "secret_token": b.opts.WebhookSecret}
		params.AddNonEmpty("allowed_updates", `["message"]`)
		if _, err := b.api.MakeRequest("setWebhook", params); err != nil {
			return fmt.Errorf("telegram: setWebhook: %s", b.redact(err))
		}
		b.log.Info("telegram webhook registered", slog.String("bot", "@"+b.Username()))
		return nil
	}
	// Polling and a webhook exclude each other on Telegram's side.
	if _, err := b.api.MakeRequest("deleteWebhook", tgbotapi.Params{}); err != nil {
		b.warnOnce("deleteWebhook", err)
	}
	return b.poll(ctx)
}

// poll is the update loop: getUpdates from the stored offset, hand each
// update to its chat's queue, and store the offset once every update before
// it is processed. An empty or failed poll backs off; it never spins.
func (b *Bot) poll(ctx context.Context) error {
	b.ctx.setPoll(ctx)
	st, err := b.loadOffset(ctx)
	if err != nil {
		return err
	}
	b.mu.Lock()
	b.offsets = newOffsetTracker(st)
	b.mu.Unlock()
	b.log.Info("telegram polling", slog.String("bot", "@"+b.Username()), slog.Int("offset", st.Offset))
	backoff := time.Duration(0)
	for ctx.Err() == nil {
		if backoff > 0 {
			if b.opts.Sleep(ctx, backoff) != nil {
				break
			}
		}
		updates, err := b.api.GetUpdates(tgbotapi.UpdateConfig{
			Offset: b.offsets.offset(), Timeout: int(b.opts.PollTimeout / time.Second), AllowedUpdates: []string{"message"},
		})
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
			backoff = grow(backoff, 200*time.Millisecond, 2*time.Second)
			continue
		}
		backoff = 0
		fresh := 0
		for _, u := range updates {
			if b.offsets.known(u.UpdateID) {
				continue // running, or processed before a restart
			}
			fresh++
			b.dispatch(ctx, u, b.offsets, nil)
		}
		if fresh == 0 {
			// Only updates still being processed came back: wait for one
			// to finish instead of asking again at once.
			b.offsets.waitProgress(ctx, b.opts.PollTimeout)
		}
	}
	return nil
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
	v, err := b.sess.ChannelState(ctx, b.offsetKey)
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

// dispatch queues an update behind the earlier ones of the same chat, so
// one user's messages run in order while different chats run side by side,
// and a /stop is never stuck behind the turn it should stop. settled, if
// given, is called once: with true as soon as the update's message is
// stored (or needs no storing), with false if it was not taken.
func (b *Bot) dispatch(ctx context.Context, u tgbotapi.Update, offsets *offsetTracker, settled func(bool)) {
	if offsets != nil {
		offsets.start(u.UpdateID)
	}
	var settleOnce sync.Once
	settle := func(ok bool) {
		if settled != nil {
			settleOnce.Do(func() { settled(ok) })
		}
	}
	// The update is confirmed once — as soon as its message is stored
	// (the ledger owns the turn from there, so a slow or failed turn never
	// holds the offset), or when it needed no storing.
	var doneOnce sync.Once
	done := func(processed bool) {
		settle(processed)
		if offsets == nil || !processed {
			return // not processed: the offset stays, Telegram sends it again
		}
		doneOnce.Do(func() {
			// One writer at a time, so that an older snapshot never lands
			// after a newer one.
			b.persistMu.Lock()
			defer b.persistMu.Unlock()
			st, _ := json.Marshal(offsets.finish(u.UpdateID))
			if err := b.sess.SetChannelState(context.WithoutCancel(ctx), b.offsetKey, string(st)); err != nil {
				b.log.Error("telegram: storing offset failed", slog.String("error", err.Error()))
			}
		})
	}
	m := u.Message
	if m == nil || m.From == nil {
		done(true) // edits, channel posts and the like are ignored
		return
	}
	key := b.sessionKey(m)
	if cmd := m.Command(); cmd == "stop" && b.addressed(m) && b.allowed(m) {
		b.stop(m, key)
		done(true)
		return
	}
	b.inflight.Add(1)
	b.queue.submit(key, func() {
		defer b.inflight.Done()
		done(b.process(ctx, m, key, func() { done(true) }))
	})
}

func (b *Bot) sessionKey(m *tgbotapi.Message) string {
	if m.Chat.IsPrivate() {
		return sessions.TelegramDMKey(m.From.ID)
	}
	return sessions.TelegramGroupKey(m.Chat.ID, m.From.ID, b.opts.GroupScope != "chat")
}

func (b *Bot) allowed(m *tgbotapi.Message) bool {
	return len(b.opts.AllowedUsers) == 0 || slices.Contains(b.opts.AllowedUsers, m.From.ID)
}

// addressed reports whether the bot should answer: always in a private
// chat; in a group when mentioned, replied to, or commanded (or always with
// group_policy all).
func (b *Bot) addressed(m *tgbotapi.Message) bool {
	if m.Chat.IsPrivate() || b.opts.GroupPolicy == "all" {
		return true
	}
	if m.IsCommand() {
		at := m.CommandWithAt()
		_, target, found := strings.Cut(at, "@")
		return !found || strings.EqualFold(target, b.Username())
	}
	if m.ReplyToMessage != nil && m.ReplyToMessage.From != nil && m.ReplyToMessage.From.ID == b.api.Self.ID {
		return true
	}
	return b.mentioned(m)
}

func (b *Bot) mentioned(m *tgbotapi.Message) bool {
	for _, e := range m.Entities {
		switch e.Type {
		case "mention":
			if strings.EqualFold(entityText(m.Text, e), "@"+b.Username()) {
				return true
			}
		case "text_mention":
			if e.User != nil && e.User.ID == b.api.Self.ID {
				return true
			}
		}
	}
	return false
}

// entityText cuts an entity out of text; offsets count UTF-16 code units.
func entityText(text string, e tgbotapi.MessageEntity) string {
	units := 0
	start, end := -1, len(text)
	for i, r := range text {
		if units == e.Offset {
			start = i
		}
		if units == e.Offset+e.Length {
			end = i
			break
		}
		units += utf16Units(r)
	}
	if start < 0 {
		return ""
	}
	return text[start:end]
}

// process handles one message and reports whether it is done with (false
// when it could not be stored: the gateway is shutting down, or storage
// failed). stored is called as soon as the message is stored.
func (b *Bot) process(ctx context.Context, m *tgbotapi.Message, key string, stored func()) bool {
	if !b.addressed(m) {
		return true
	}
	if !b.allowed(m) {
		b.refuse(ctx, m)
		return true
	}
	in := sessions.Inbound{
		Channel: Channel, SessionKey: key,
		UserID: strconv.FormatInt(m.From.ID, 10), ChatID: strconv.FormatInt(m.Chat.ID, 10),
		ClientMsgID: strconv.FormatInt(m.Chat.ID, 10) + ":" + strconv.Itoa(m.MessageID),
	}
	if m.IsCommand() {
		return b.command(ctx, m, in)
	}
	text := strings.TrimSpace(b.stripMention(m))
	if text == "" {
		if m.Chat.IsPrivate() && m.Text == "" {
			b.send(ctx, m.Chat.ID, nonTextText, m.MessageID)
		}
		return true
	}
	in.Text = text
	stopTyping := b.typing(m.Chat.ID)
	out, err := b.sess.Handle(ctx, in, sessions.Hooks{
		OnAck: func(sessions.Ack) { stored() },
		OnReset: func(ev sessions.ResetEvent) {
			if ev.Reason != sessions.ReasonManual {
				why := map[string]string{sessions.ReasonIdle: "was idle", sessions.ReasonDaily: "ended for the day"}[ev.Reason]
				b.send(ctx, m.Chat.ID, fmt.Sprintf(resetNotice, why), 0)
			}
		},
	})
	stopTyping()
	switch {
	case errors.Is(err, sessions.ErrShuttingDown):
		return false
	case errors.Is(err, sessions.ErrTooLong):
		b.send(ctx, m.Chat.ID, "That message is too long for me; please send a shorter one.", m.MessageID)
		return true
	case errors.Is(err, sessions.ErrReplyNotStored):
		// Stored, but the reply was not: the ledger runs the turn again
		// and delivers that reply.
		return true
	case err != nil:
		b.log.Error("telegram: turn failed", slog.String("session_key", key), slog.String("error", err.Error()))
		return false
	}
	if out.Turn.Claim == "" {
		// Nothing for this update to send: a shutdown interrupted the turn
		// (whoever runs it again sends that reply), another runner holds
		// it, or its reply was delivered already (a repeated update).
		return true
	}
	text = out.Reply.Text
	if out.Reply.Status == sessions.MsgInterrupted && text == "" {
		text = stoppedText
	}
	ref, serr := b.send(ctx, m.Chat.ID, text, m.MessageID)
	if err := b.sess.Delivered(ctx, out.Turn, ref, serr); err != nil {
		b.log.Warn("telegram: recording a delivery failed", slog.String("session_key", key), slog.String("error", err.Error()))
	}
	return true
}

// stripMention removes the bot's @mention from a group message.
func (b *Bot) stripMention(m *tgbotapi.Message) string {
	if m.Chat.IsPrivate() {
		return m.Text
	}
	return strings.ReplaceAll(m.Text, "@"+b.Username(), "")
}

func (b *Bot) command(ctx context.Context, m *tgbotapi.Message, in sessions.Inbound) bool {
	switch m.Command() {
	case "start":
		b.send(ctx, m.Chat.ID, startText, m.MessageID)
	case "new", "reset":
		if _, err := b.sess.Reset(ctx, in); err != nil {
			if errors.Is(err, sessions.ErrShuttingDown) {
				return false
			}
			b.log.Error("telegram: reset failed", slog.String("session_key", in.SessionKey), slog.String("error", err.Error()))
			return false
		}
		b.send(ctx, m.Chat.ID, resetText, m.MessageID)
	default: // help, and unknown commands
		b.send(ctx, m.Chat.ID, helpText, m.MessageID)
	}
	return true
}

func (b *Bot) stop(m *tgbotapi.Message, key string) {
	text := idleStopText
	if b.sess.Stop(key) {
		text = stoppedText
	}
	go b.send(context.Background(), m.Chat.ID, text, m.MessageID)
}

// refuse answers a user outside allowed_users once per chat; nothing of
// theirs is stored.
func (b *Bot) refuse(ctx context.Context, m *tgbotapi.Message) {
	b.mu.Lock()
	first := !b.refused[m.Chat.ID]
	b.refused[m.Chat.ID] = true
	b.mu.Unlock()
	if first {
		b.send(ctx, m.Chat.ID, refusalText, m.MessageID)
	}
}

// typing shows "typing…" until the returned func is called. A failing
// typing action is logged once and never delays the reply.
func (b *Bot) typing(chatID int64) func() {
	stop := make(chan struct{})
	var once sync.Once
	go func() {
		t := time.NewTicker(b.opts.TypingEvery)
		defer t.Stop()
		for {
			if _, err := b.api.Request(tgbotapi.NewChatAction(chatID, tgbotapi.ChatTyping)); err != nil {
				b.warnOnce("sendChatAction", err)
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	return func() { once.Do(func() { close(stop) }) }
}

// send delivers text, split to Telegram's limit, and returns the ids of
// the messages sent, comma-separated. 429 answers are waited out as
// retry_after says; other failures are retried with backoff, then logged
// and returned — the reply stays stored either way. A 4xx other than 429
// will not get better and wraps sessions.ErrUndeliverable.
func (b *Bot) send(ctx context.Context, chatID int64, text string, replyTo int) (string, error) {
	ctx = context.WithoutCancel(ctx) // a reply is delivered even while stopping
	var ids []string
	for i, part := range Split(text, MaxMessageUnits) {
		msg := tgbotapi.NewMessage(chatID, part)
		if i == 0 && replyTo != 0 {
			msg.ReplyToMessageID = replyTo
			msg.AllowSendingWithoutReply = true
		}
		var err error
		var sent tgbotapi.Message
		for attempt := 0; attempt < 6; attempt++ {
			if sent, err = b.api.Send(msg); err == nil {
				break
			}
			var apiErr *tgbotapi.Error
			wait := time.Duration(1<<attempt) * 500 * time.Millisecond
			if errors.As(err, &apiErr) {
				if apiErr.RetryAfter > 0 {
					wait = time.Duration(apiErr.RetryAfter) * time.Second
				} else if apiErr.Code >= 400 && apiErr.Code < 500 && apiErr.Code != http.StatusTooManyRequests {
					// A 4xx other than 429 will not get better.
					err = fmt.Errorf("%w: %s", sessions.ErrUndeliverable, b.redact(err))
					break
				}
			}
			if b.opts.Sleep(ctx, wait) != nil {
				break
			}
		}
		if err != nil {
			b.log.Error("telegram: sending a reply failed; it stays stored", slog.Int64("chat", chatID), slog.String("error", b.redact(err)))
			if !errors.Is(err, sessions.ErrUndeliverable) {
				err = errors.New(b.redact(err))
			}
			return strings.Join(ids, ","), err
		}
		ids = append(ids, strconv.Itoa(sent.MessageID))
	}
	return strings.Join(ids, ","), nil
}

// deliverStored sends a reply produced outside a live turn (by the
// rescuer, after a restart or for a replica that died), or one whose
// earlier delivery did not complete.
func (b *Bot) deliverStored(ctx context.Context, d sessions.Delivery) (string, error) {
	chatID, err := strconv.ParseInt(d.ChatID, 10, 64)
	if err != nil {
		return "", fmt.Errorf("%w: chat id %q", sessions.ErrUndeliverable, d.ChatID)
	}
	replyTo := 0
	if _, id, ok := strings.Cut(d.ClientMsgID, ":"); ok {
		replyTo, _ = strconv.Atoi(id)
	}
	text := d.Reply.Text
	if d.Reply.Status == sessions.MsgInterrupted && text == "" {
		text = stoppedText
	}
	return b.send(ctx, chatID, text, replyTo)
}

// StopTaking stops taking updates: the webhook answers 503, and queued
// updates are left for Telegram to send again.
func (b *Bot) StopTaking() {
	b.mu.Lock()
	b.draining = true
	b.mu.Unlock()
}

// Wait waits until queued updates are processed or ctx ends.
func (b *Bot) Wait(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		b.inflight.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// WebhookHandler serves Telegram's webhook POSTs. A request without the
// secret header gets 401, a malformed body 400, and a request while draining
// 503 (Telegram retries later). The answer is sent once the message is
// stored, so Telegram does not retry a message the gateway already has.
func (b *Bot) WebhookHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := r.Header.Get("X-Telegram-Bot-Api-Secret-Token")
		if subtle.ConstantTimeCompare([]byte(got), []byte(b.opts.WebhookSecret)) != 1 {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		b.mu.Lock()
		draining := b.draining
		b.mu.Unlock()
		if draining {
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
		var u tgbotapi.Update
		dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
		if err := dec.Decode(&u); err != nil || u.UpdateID == 0 {
			http.Error(w, "malformed update", http.StatusBadRequest)
			return
		}
		// Dispatched like a polled update; the answer waits until the
		// message is stored, and the turn runs on after it.
		settled := make(chan bool, 1)
		b.dispatch(context.WithoutCancel(r.Context()), u, nil, func(ok bool) { settled <- ok })
		select {
		case ok := <-settled:
			if !ok {
				http.Error(w, "not taken; send again", http.StatusServiceUnavailable)
				return
			}
			w.WriteHeader(http.StatusOK)
		case <-r.Context().Done():
		}
	})
}
