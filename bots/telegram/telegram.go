// Package telegram is the Telegram channel: a bot on the Bot API, polling
// with its own update loop or receiving webhooks, that hands text messages to
// the session manager and sends the replies back.
package telegram

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"
	lru "github.com/hashicorp/golang-lru/v2"
	"go.opentelemetry.io/otel/trace"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions"
)

// Channel is the Telegram channel's name in session keys and policies.
const Channel = "telegram"

// Sessions is what the bot needs from the session manager.
type Sessions interface {
	// Submit stores a message and calls OnAck, without waiting for a
	// turn; the ticket's Wait returns the outcome of the turn that
	// answers it.
	Submit(ctx context.Context, in sessions.Inbound, h sessions.Hooks) (*sessions.Ticket, error)
	// Edit applies an edit of the stored message originalID: its text is
	// replaced while its turn has not started, else the edit is a new
	// message (the outcome's Ticket).
	Edit(ctx context.Context, in sessions.Inbound, originalID string, h sessions.Hooks) (sessions.EditOutcome, error)
	Reset(ctx context.Context, in sessions.Inbound) (sessions.ResetEvent, error)
	Stop(key string) bool
	OnDeliver(channel string, track bool, fn sessions.DeliverFunc)
	Delivered(ctx context.Context, t sessions.TurnRef, ref string, err error) error
	ChannelState(ctx context.Context, key string) (string, error)
	SetChannelState(ctx context.Context, key, value string) error
	// Lead takes or renews a role for this replica for ttl; Resign gives
	// it up. Polling runs only while the bot's poller role is held.
	Lead(ctx context.Context, name string, ttl time.Duration) (bool, error)
	Resign(ctx context.Context, name string) error
	// ResumePrevious, Open and Policy serve /resume, /history and the
	// reset notices (resume.go); OnReset tells of sweeps (notices.go).
	ResumePrevious(ctx context.Context, in sessions.Inbound) (sessions.Resumed, error)
	Open(ctx context.Context, in sessions.Inbound, afterSeq int64, limit int) (sessions.Transcript, error)
	Policy(channel string) sessions.Policy
	OnReset(fn func(sessions.ResetEvent))
	// Compact sums the conversation up now (/compact).
	Compact(ctx context.Context, in sessions.Inbound) (int, error)
	// DelayNotice is how long a message waits on the database before
	// its user is told, once, that it is kept (0: never); StorageDown
	// tells since when the database has failed every call.
	DelayNotice() time.Duration
	StorageDown() (time.Time, bool)
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
	// Sleep waits between retries and between a chat's previews; tests
	// pass one that records instead.
	Sleep func(ctx context.Context, d time.Duration) error
	// Now tells how long an update has failed to be stored, which decides
	// when the bot gives up on it, and paces previews (default time.Now).
	Now func() time.Time
	// TypingEvery is how often the typing action is repeated while the
	// agent works (Telegram shows it for about 5 s).
	TypingEvery time.Duration
	// Format is how replies are sent: FormatHTML (the default) converts
	// the model's Markdown to Telegram's HTML; FormatPlain sends the text
	// as written.
	Format string
	// Vision: the agent reads images (media.go); without it a caption is
	// answered and the chat told once that images are not read.
	Vision bool
	// MaxImageBytes: the largest image fetched for the model (default
	// DefaultMaxImageBytes); MaxTextBytes: the session manager's limit on
	// a message's text, which a text document must fit in (default
	// DefaultMaxTextBytes).
	MaxImageBytes int64
	MaxTextBytes  int
	// Transcriber, when set, turns voice notes and audio files into the
	// text of their message (audio.go); without it they get a reply
	// saying they are not listened to. MaxAudioBytes bounds the audio
	// downloaded for it (default DefaultMaxAudioBytes).
	Transcriber   agent.Transcriber
	MaxAudioBytes int64
	// Streaming is how a reply shows while the model writes it: auto
	// (default), draft, edits or off (see stream.go).
	Streaming string
	// Edits is what an edited message does: EditsAnswer (default) asks
	// Telegram for edited_message updates and applies them (edit.go);
	// EditsIgnore does not ask for them.
	Edits string
	// NotifyResets tells a private chat's user at once when a sweep
	// archived their conversation (notices.go); NoticesPerSecond (default
	// 20) and NoticeQueue (default 10000) bound how fast and how many.
	NotifyResets     bool
	NoticesPerSecond float64
	NoticeQueue      int
	// RatePerSecond and RateBurst are each user's token bucket (0: no
	// limit); RateGlobalPerSecond and RateGlobalBurst the bot's (0: none).
	// Now is their clock. RateLimited is told which limit refused a
	// message (metrics).
	RatePerSecond       float64
	RateBurst           int
	RateGlobalPerSecond float64
	RateGlobalBurst     int
	RateLimited         func(limit string)
	// TracerProvider makes the spans "telegram update" and a reply's
	// "delivery" (nil: none).
	TracerProvider trace.TracerProvider
	// OnDeliveryFailed is called for a reply that could not be sent (it
	// stays stored and is sent again).
	OnDeliveryFailed func()
}

// Reply formats (Options.Format).
const (
	FormatHTML  = "html"
	FormatPlain = "plain"
)

// Texts the bot sends.
const (
	emptyReplyText = "(The answer was empty.)"
)

// Bot is the Telegram channel.
type Bot struct {
	opts  Options
	sess  Sessions
	api   *tgbotapi.BotAPI
	log   *slog.Logger
	ctx   *ctxClient
	queue *keyQueues // per session key: updates, until their message is stored
	// replies are sent per session key in the order the key's messages
	// came, each once the turn that answers its message has ended, while
	// the key's updates go on.
	replies *keyQueues
	seen    *recentUpdates // webhook update ids taken, bounded

	self    atomic.Pointer[tgbotapi.User] // set once getMe succeeded
	startMu sync.Mutex
	lastErr error

	// The poller role: renewed every leadEvery for leadTTL; a replica
	// without it asks again every leadRetry. skipResign makes a stop look
	// like a crash (tests).
	leadTTL, leadEvery, leadRetry time.Duration
	skipResign                    bool

	mu            sync.Mutex
	draining      bool
	stopping      chan struct{}                // closed by StopTaking
	refused       *lru.Cache[int64, struct{}]  // chats that got the private-bot refusal (limits.go)
	delayTold     *lru.Cache[string, struct{}] // keys told of a delay, until a reply of theirs is sent
	limits        *limits
	cur           atomic.Pointer[tgLive] // what a reload changes (reload.go)
	warned        map[string]bool
	typers        map[place]*typer // chats (and topics) shown "typing…"
	media         mediaState
	persistMu     sync.Mutex
	offsetFailing atomic.Bool // the last store of the offset state failed
	inflight      sync.WaitGroup
	registerOnce  sync.Once // the deliverer, once connected
	// draftsRefused is set once the Bot API answered that it has no
	// sendMessageDraft: previews are edits from then on.
	draftsRefused atomic.Bool
	pacers        map[int64]*pacer // per chat with a reply streaming; guarded by mu
	previewMu     sync.Mutex       // a key's stored preview record: read and written one at a time
	connected     chan struct{}    // closed once connected
	notices       *notifier        // sweep notices (NotifyResets), or nil
}

// New returns the bot without touching the network: Start connects
// (getMe), retrying in the background, so an unreachable or refusing Bot
// API never delays or stops the rest of the gateway.
func New(sess Sessions, opts Options) (*Bot, error) {
	if opts.Token == "" {
		return nil, errors.New("telegram: no token")
	}
	if opts.APIURL == "" {
		opts.APIURL = "https://api.telegram.org"
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.PollTimeout <= 0 {
		opts.PollTimeout = 30 * time.Second
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{Timeout: opts.PollTimeout + 30*time.Second}
	}
	if opts.Sleep == nil {
		opts.Sleep = sleep
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.TypingEvery <= 0 {
		opts.TypingEvery = 4 * time.Second
	}
	if opts.Format == "" {
		opts.Format = FormatHTML
	}
	if opts.MaxImageBytes <= 0 {
		opts.MaxImageBytes = DefaultMaxImageBytes
	}
	if opts.MaxTextBytes <= 0 {
		opts.MaxTextBytes = DefaultMaxTextBytes
	}
	if opts.MaxAudioBytes <= 0 {
		opts.MaxAudioBytes = DefaultMaxAudioBytes
	}
	if opts.Streaming == "" {
		opts.Streaming = StreamAuto
	}
	if opts.Edits == "" {
		opts.Edits = EditsAnswer
	}
	b := &Bot{
		opts: opts, sess: sess, log: opts.Logger.With(slog.String("channel", Channel)),
		ctx:       &ctxClient{client: opts.HTTPClient, poll: context.Background()},
		queue:     newKeyQueues(),
		replies:   newKeyQueues(),
		seen:      newRecentUpdates(4096),
		delayTold: must(lru.New[string, struct{}](4096)),
		refused:   newRefused(), warned: map[string]bool{}, typers: map[place]*typer{},
		stopping: make(chan struct{}),
		leadTTL:  15 * time.Second, leadEvery: 5 * time.Second, leadRetry: 3 * time.Second,
	}
	b.connected = make(chan struct{})
	b.limits = newLimits(opts)
	b.cur.Store(&tgLive{allowedUsers: slices.Clone(opts.AllowedUsers), groupPolicy: opts.GroupPolicy})
	// The library's constructor calls getMe; the bot is built without it.
	b.api = &tgbotapi.BotAPI{Token: opts.Token, Client: b.ctx, Buffer: 100}
	b.api.SetAPIEndpoint(strings.TrimRight(opts.APIURL, "/") + "/bot%s/%s")
	if f, ok := sess.(interface {
		OnFetch(channel string, f sessions.Fetcher)
	}); ok {
		// Stored images are fetched again through the bot for every turn
		// that needs them.
		f.OnFetch(Channel, b.fetch)
	}
	if opts.NotifyResets {
		b.startNotices()
	}
	return b, nil
}

// me is the bot's own user; the zero User before getMe succeeded.
func (b *Bot) me() tgbotapi.User {
	if u := b.self.Load(); u != nil {
		return *u
	}
	return tgbotapi.User{}
}

// Username is the bot's @username ("" until it has connected).
func (b *Bot) Username() string { return b.me().UserName }

// stateKey names one of the bot's stored values: per bot, so two bots on
// one database keep theirs apart.
func (b *Bot) stateKey(what string) string {
	return "telegram:" + strconv.FormatInt(b.me().ID, 10) + ":" + what
}

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

// dispatch queues an update behind the earlier ones of the same session
// key, so one user's messages are stored in order while different chats
// run side by side; a /stop is not queued, so it is never stuck behind a
// message its chat is still storing. settled, if
// given, is called once: with true as soon as the update's message is
// stored (or needs no storing), with false if it was not taken. held is
// set for an update that already failed to be stored (since then).
func (b *Bot) dispatch(ctx context.Context, u update, offsets *offsetTracker, settled func(bool), held time.Time) {
	if offsets != nil {
		offsets.start(u)
	}
	ctx, endUpdate := b.traceUpdate(ctx, u)
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
		endUpdate(processed)
		settle(processed)
		if offsets == nil || !processed {
			return // not processed: the offset stays, Telegram sends it again
		}
		doneOnce.Do(func() {
			st := offsets.finish(u.UpdateID)
			b.persist(ctx, offsets, st)
		})
	}
	m := u.message()
	if m == nil || m.From == nil || (m.edit && b.opts.Edits != EditsAnswer) {
		done(true) // channel posts and the like are ignored; edits unless asked for
		return
	}
	key := b.sessionKey(m)
	if cmd := m.Command(); cmd == "stop" && !m.edit && b.addressed(m) && b.allowed(m) {
		b.stop(m, key)
		done(true)
		return
	}
	b.inflight.Add(1)
	b.queue.submit(key, func() {
		defer b.inflight.Done()
		b.run(ctx, u, key, offsets, held, done)
	})
}

func (b *Bot) sessionKey(m *message) string {
	// Each topic is a conversation of its own, with group_scope applied
	// inside it; the General topic keeps the chat's key.
	if m.Chat.IsPrivate() {
		return sessions.TelegramTopicKey(sessions.TelegramDMKey(m.From.ID), m.thread)
	}
	return sessions.TelegramTopicKey(sessions.TelegramGroupKey(m.Chat.ID, m.From.ID, b.opts.GroupScope != "chat"), m.thread)
}

// addressed reports whether the bot should answer: always in a private
// chat; in a group when mentioned, replied to, or commanded (or always with
// group_policy all).
func (b *Bot) addressed(m *message) bool {
	if m.Chat.IsPrivate() || b.cur.Load().groupPolicy == "all" {
		return true
	}
	if m.IsCommand() {
		at := m.CommandWithAt()
		_, target, found := strings.Cut(at, "@")
		return !found || strings.EqualFold(target, b.Username())
	}
	if m.ReplyToMessage != nil && m.ReplyToMessage.From != nil && m.ReplyToMessage.From.ID == b.me().ID {
		return true
	}
	return b.mentioned(m)
}

func (b *Bot) mentioned(m *message) bool {
	text, entities := m.Text, m.Entities
	if text == "" {
		text, entities = m.Caption, m.CaptionEntities // a media message's caption
	}
	for _, e := range entities {
		switch e.Type {
		case "mention":
			if strings.EqualFold(entityText(text, e), "@"+b.Username()) {
				return true
			}
		case "text_mention":
			if e.User != nil && e.User.ID == b.me().ID {
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

// process handles one message. It returns nil when done with it, and an
// error when the message could not be stored: the gateway is shutting down
// (sessions.ErrShuttingDown, or ctx ended), or storage failed. stored is
// called as soon as the message is stored. first is false on a retry,
// whose failure is logged quietly.
//
// process returns once the message is stored, so that the chat's next
// update is taken at once — a burst of messages is merged into one turn
// only if each is stored while the one before it waits. What process
// sends goes out on the key's reply queue (later): the reply is sent when
// the turn that answers the message has ended, in the order the key's
// messages came.
func (b *Bot) process(ctx context.Context, m *message, key string, first bool, stored func()) error {
	if !b.addressed(m) {
		return nil
	}
	if !b.allowed(m) {
		b.refuse(ctx, m, key)
		return nil
	}
	if first && b.overLimit(ctx, m, key) {
		return nil
	}
	in := sessions.Inbound{
		Channel: Channel, SessionKey: key,
		UserID: strconv.FormatInt(m.From.ID, 10), ChatID: m.to().String(),
		ClientMsgID: clientMsgID(m.Chat.ID, m.MessageID),
	}
	if m.edit {
		return b.edit(ctx, m, key, in, first, stored)
	}
	if m.IsCommand() {
		return b.command(ctx, m, in, first)
	}
	media := m.media
	if media == nil {
		// Read once: a message retried because it could not be stored is
		// not downloaded, transcribed or told about again.
		read := b.readMedia(ctx, m, strings.TrimSpace(b.stripMention(m)))
		media, m.media = &read, &read
		for _, notice := range media.notices {
			b.later(key, func() { b.sendPlain(ctx, m.to(), notice, m.MessageID) })
		}
	}
	if strings.TrimSpace(media.text) == "" && len(media.atts) == 0 {
		return nil
	}
	in.Text, in.Attachments = media.text, media.atts
	quote := b.quoteOf(media.transcript)
	stopTyping := b.typing(m.to())
	// Deltas reach the hooks of the turn's lead message only: a burst
	// streams once, into the reply to its last message.
	st := b.newStream(m, key)
	var onDelta func(string)
	if st != nil {
		st.quote = quote
		onDelta = st.delta
	}
	t, err := b.sess.Submit(ctx, in, b.hooks(ctx, m, key, onDelta, stored))
	return b.awaitTurn(ctx, m, key, first, t, err, stopTyping, st, quote)
}

// hooks are the session hooks of message m's turn.
func (b *Bot) hooks(ctx context.Context, m *message, key string, onDelta func(string), stored func()) sessions.Hooks {
	return sessions.Hooks{
		OnDelta: onDelta,
		OnAck:   func(sessions.Ack) { stored() },
		OnReset: func(ev sessions.ResetEvent) { b.tellReset(ctx, m.to(), key, ev) },
		OnDelay: func(sessions.Delay) { b.tellDelay(ctx, key, m) },
	}
}

// awaitTurn queues the answer to m, stored as t (or not, err), on the
// key's reply queue; see process. quote goes above the reply (answer).
func (b *Bot) awaitTurn(ctx context.Context, m *message, key string, first bool, t *sessions.Ticket, err error,
	stopTyping func(), st *stream, quote string) error {
	if err != nil {
		stopTyping()
		st.end()
		st.release()
	}
	switch {
	case errors.Is(err, sessions.ErrShuttingDown):
		return err
	case errors.Is(err, sessions.ErrTooLong):
		b.later(key, func() {
			b.sendPlain(ctx, m.to(), "That message is too long for me; please send a shorter one.", m.MessageID)
		})
		return nil
	case err != nil:
		if ctx.Err() == nil { // else polling stopped: nothing failed
			b.failed(first, "telegram: storing a message failed; retrying", key, err)
		}
		return err
	}
	b.later(key, func() {
		// The turn runs to its end whatever happens to polling: its
		// reply is sent during a drain too.
		out, err := t.Wait(context.WithoutCancel(ctx))
		stopTyping()
		st.end()
		b.answer(ctx, m, key, out, err, st, quote)
		st.release()
	})
	return nil
}

// answer sends the reply of the turn that answered m, when m's outcome
// carries it — into the preview st made, if any — and records its
// delivery. quote, when m was a voice note, goes above the reply: the
// transcript the answer is to (the stored reply is the model's alone).
func (b *Bot) answer(ctx context.Context, m *message, key string, out sessions.Outcome, err error, st *stream, quote string) {
	switch {
	case errors.Is(err, sessions.ErrShuttingDown):
		// Stored but not run: the next start (or another replica) runs it
		// and sends the reply.
		return
	case errors.Is(err, sessions.ErrReplyNotStored):
		// The ledger runs the turn again and delivers that reply.
		return
	case err != nil:
		b.log.Warn("telegram: a turn ended without a reply to send", slog.String("session_key", key), slog.String("error", err.Error()))
		return
	case out.Turn.Claim == "":
		if out.Reply.Status == sessions.MsgInterrupted && out.Reply.Error == sessions.InterruptedByMessage {
			// The next turn answers in a message of its own: the half
			// reply this one's preview shows goes.
			b.dropPreview(st)
		}
		// Nothing for this message to send: a later message of its burst
		// carries the reply (Merged); another runner holds the turn and
		// delivers it (Pending); a newer message cut the turn (busy mode
		// interrupt: the next turn answers both) or a shutdown did
		// (whoever runs it again sends that reply); or its reply was
		// delivered already (a repeated update).
		return
	}
	// The reply answers the newest message of the burst: this one, or,
	// for a repeated update of an earlier one whose delivery never
	// completed, the newest it covers.
	replyTo := m.MessageID
	if n := len(out.Reply.Covers); n > 0 {
		if id, ok := messageIn(out.Reply.Covers[n-1], m.Chat.ID); ok {
			replyTo = id
		}
	}
	var ref string
	var serr error
	if text, ok := replyText(out.Reply); ok {
		dctx, endDelivery := b.traceDelivery(ctx, out)
		ref, serr = b.deliverReply(dctx, st, m.to(), quote+text, replyTo)
		endDelivery(serr)
		if serr == nil {
			b.delayTold.Remove(key) // a later delay is told again
		}
		b.deliveryFailed(serr)
	}
	if err := b.sess.Delivered(ctx, out.Turn, ref, serr); err != nil {
		b.log.Warn("telegram: recording a delivery failed", slog.String("session_key", key), slog.String("error", err.Error()))
	}
}

// replyText is what the chat is sent for a stored reply, and false when
// nothing is: a turn stopped by /stop before anything was written (the
// answer to /stop said so). A reply with nothing visible in it, which
// Telegram refuses to send, is told as empty.
func replyText(r sessions.Reply) (string, bool) {
	switch {
	case strings.TrimSpace(r.Text) != "":
		return r.Text, true
	case r.Status != sessions.MsgInterrupted:
		return emptyReplyText, true
	case r.Error == sessions.InterruptedByUser:
		return "", false
	}
	return stoppedText, true
}

// clientMsgID is a message's client id in the ledger: chat and message id.
func clientMsgID(chatID int64, messageID int) string {
	return strconv.FormatInt(chatID, 10) + ":" + strconv.Itoa(messageID)
}

// messageIn returns the message id of a client id of chat chatID (of
// an edit's client id too: the edited message's).
func messageIn(clientID string, chatID int64) (int, bool) {
	chat, msg, ok := strings.Cut(clientID, ":")
	if !ok || chat != strconv.FormatInt(chatID, 10) {
		return 0, false
	}
	msg, _, _ = strings.Cut(msg, ":")
	id, err := strconv.Atoi(msg)
	return id, err == nil
}

// later queues fn on the key's reply queue: a key's replies go out one at
// a time, in the order its messages came, while its updates go on. Wait
// waits for them.
func (b *Bot) later(key string, fn func()) {
	b.inflight.Add(1)
	b.replies.submit(key, func() {
		defer b.inflight.Done()
		fn()
	})
}

// stripMention removes the bot's @mention from a group message.
func (b *Bot) stripMention(m *message) string {
	if m.Chat.IsPrivate() {
		return messageText(m)
	}
	return strings.ReplaceAll(messageText(m), "@"+b.Username(), "")
}

// deliverStored sends a reply produced outside a live turn (by the
// rescuer, after a restart or for a replica that died), or one whose
// earlier delivery did not complete.
func (b *Bot) deliverStored(ctx context.Context, d sessions.Delivery) (string, error) {
	if !b.Ready() {
		// The rescuer may run before getMe succeeded; the turn is
		// delivered again later.
		return "", errors.New("telegram: the bot has not connected yet")
	}
	to, err := parsePlace(d.ChatID)
	if err != nil {
		return "", fmt.Errorf("%w: %v", sessions.ErrUndeliverable, err)
	}
	// The reply answers the newest message its turn covers.
	replyTo, _ := messageIn(d.ClientMsgID, to.chat)
	text, ok := replyText(d.Reply)
	if !ok {
		return "", nil
	}
	ref, err := b.deliverStoredText(ctx, d, to, text, replyTo)
	b.deliveryFailed(err)
	return ref, err
}

// must returns v, for constructors that fail only on arguments known good.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
