// Package telegram is the Telegram channel: a bot on the Bot API, polling
// with its own update loop or receiving webhooks, that hands text messages to
// the session manager and sends the replies back.
package telegram

import (
	"context"
	"errors"
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

// Sessions is what the bot uses of the session manager, one door per
// role, each a small interface: what the bot can do is said by the doors
// it is built with. SessionsOf opens every door on one session manager;
// ToolApprovals may stay nil, and the bot then asks nothing (its calls
// wait for their expiry).
type Sessions struct {
	Turns
	Transcripts
	Policies
	Deliveries
	ChannelStates
	Standing
	Storage
	Registry
	ToolApprovals
	// Reminders serves /reminders (nil: it answers that the bot keeps
	// none).
	Reminders Reminders
	// Schedules serves /schedules (nil: it answers that none is
	// offered).
	Schedules Schedules
	// Memory serves /remember, /memory and /forget (nil: they answer
	// that the bot keeps no notes).
	Memory Memory
	// Media sends what the turns' tools returned (nil: nothing is sent
	// but the reply's text).
	Media MediaDeliveries
}

// SessionsOf is every door of the bot on m; Transcripts and
// ChannelStates open on its conversations (Manager.Conversations).
// Schedules stays nil: the gateway's wiring opens it on its timetable.
func SessionsOf(m *sessions.Manager) Sessions {
	c := m.Conversations()
	return Sessions{Turns: m, Transcripts: c, Policies: m, Deliveries: m, ChannelStates: c, Standing: m.Standing(), Storage: m.Health(), Registry: m.Routes(),
		ToolApprovals: m.Approvals(), Reminders: m.Reminders(), Memory: m.Memory(), Media: c}
}

// Turns are the messages and commands that start, change or stop a turn.
type Turns interface {
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
	// Compact sums the conversation up now (/compact).
	Compact(ctx context.Context, in sessions.Inbound) (int, error)
}

// Transcripts serve /resume, /history and the reset notices
// (Bot.tellReset).
type Transcripts interface {
	ResumePrevious(ctx context.Context, in sessions.Inbound) (sessions.Resumed, error)
	// ResumeConversation is ResumePrevious for a "Go back" button, which
	// names the conversation it goes back to (Bot.backTap).
	ResumeConversation(ctx context.Context, in sessions.Inbound, conv string) (sessions.Resumed, error)
	Open(ctx context.Context, in sessions.Inbound, afterSeq int64, limit int) (sessions.Transcript, error)
}

// Policies are the channel's conversation policy: a reset notice tells
// how long a conversation idles before it is reset (Bot.resetNotice).
type Policies interface {
	Policy(channel string) sessions.Policy
}

// Deliveries are how the bot says it sent a reply delivered outside a
// live turn (its route's Deliver, Bot.deliverStored).
type Deliveries interface {
	Delivered(ctx context.Context, t sessions.TurnRef, ref string, err error) error
}

// ChannelStates keep the bot's own state (its update offset) in the
// database.
type ChannelStates interface {
	ChannelState(ctx context.Context, key string) (string, error)
	SetChannelState(ctx context.Context, key, value string) error
}

// Standing serves /status and /model with its buttons (Bot.model,
// Bot.modelTap), and where a user stands against their budget: voice is
// not transcribed for a user over it (Bot.audio).
type Standing interface {
	Status(ctx context.Context, in sessions.Inbound) (sessions.Status, error)
	OffersModels() bool
	Models(ctx context.Context, in sessions.Inbound) (sessions.ModelState, error)
	ChooseModel(ctx context.Context, in sessions.Inbound, name string) (sessions.ModelState, error)
	Usage(ctx context.Context, channel, sessionKey string) (sessions.UsageStanding, error)
}

// Storage is how the database is doing: DelayNotice is how long a
// message waits on it before its user is told, once, that it is kept (0:
// never); StorageDown tells since when it has failed every call.
type Storage interface {
	DelayNotice() time.Duration
	StorageDown() (time.Time, bool)
}

// Registry is how the session manager's work finds its way back to the
// bot: its one route (sessions.Route, Bot.route), registered when it is
// built and again, with the delivery of replies, once it is connected.
type Registry interface {
	Register(channel string, r sessions.Route)
}

// Elector hands out the bot's poller role (sessions.Elector): Lead
// takes or renews it for this replica for ttl, Resign gives it up.
// Polling runs only while this replica holds it.
type Elector interface {
	Lead(ctx context.Context, name string, ttl time.Duration) (bool, error)
	Resign(ctx context.Context, name string) error
}

// Options configures the bot.
type Options struct {
	// Elector gives the poller role among replicas sharing a database;
	// nil: this gateway is the bot's only poller.
	Elector       Elector
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
	// RequestIdle is how long a request to the Bot API may move no byte —
	// of its body, of its answer, waiting for the answer — before it
	// fails (default PollTimeout + 30 s). A request that keeps moving
	// (a large file on a slow link) has no bound on its whole time.
	RequestIdle time.Duration
	// Sleep waits between retries and between a chat's previews; tests
	// pass one that records instead.
	Sleep func(ctx context.Context, d time.Duration) error
	// Now tells how long an update has failed to be stored, which decides
	// when the bot gives up on it, and paces previews (default time.Now).
	Now func() time.Time
	// AlbumWait is how long after an album's latest part the bot waits
	// for another before it stores the album (default DefaultAlbumWait;
	// Bot.gather). After waits on the bot's clock (default time.After): the
	// album waits, which tests run on a fake clock.
	AlbumWait time.Duration
	After     func(d time.Duration) <-chan time.Time
	// TypingEvery is how often the typing action is repeated while the
	// agent works (Telegram shows it for about 5 s).
	TypingEvery time.Duration
	// Format is how replies are sent: FormatHTML (the default) converts
	// the model's Markdown to Telegram's HTML; FormatPlain sends the text
	// as written.
	Format string
	// Vision: the agent reads images (Bot.readMedia); without it a caption is
	// answered and the chat told once that images are not read.
	Vision bool
	// MaxImageBytes: the largest image fetched for the model (default
	// DefaultMaxImageBytes); MaxTextBytes: the session manager's limit on
	// a message's text, which a text document must fit in (default
	// DefaultMaxTextBytes).
	MaxImageBytes int64
	MaxTextBytes  int
	// Transcriber, when set, turns voice notes and audio files into the
	// text of their message (Bot.audio); without it they get a reply
	// saying they are not listened to. MaxAudioBytes bounds the audio
	// downloaded for it (default DefaultMaxAudioBytes).
	Transcriber   agent.Transcriber
	MaxAudioBytes int64
	// Streaming is how a reply shows while the model writes it: auto
	// (default), draft, edits or off (see stream).
	Streaming string
	// Edits is what an edited message does: EditsAnswer (default) asks
	// Telegram for edited_message updates and applies them (Bot.edit);
	// EditsIgnore does not ask for them.
	Edits string
	// NotifyResets tells a private chat's user at once when a sweep
	// archived their conversation (Bot.onSweep); NoticesPerSecond (default
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
	refused       *lru.Cache[int64, struct{}]  // chats that got the private-bot refusal (Bot.refuse)
	delayTold     *lru.Cache[string, struct{}] // keys told of a delay, until a reply of theirs is sent
	limits        *limits
	cur           atomic.Pointer[tgLive] // what a reload changes (Reconfigure)
	warned        map[string]bool
	typers        map[place]*typer // chats (and topics) shown "typing…"
	media         mediaState
	albums        albums // albums being gathered (Bot.gather)
	persistMu     sync.Mutex
	offsetFailing atomic.Bool // the last store of the offset state failed
	inflight      sync.WaitGroup
	registerOnce  sync.Once // the route with its delivery, once connected
	// draftsRefused is set once the Bot API answered that it has no
	// sendMessageDraft: previews are edits from then on.
	draftsRefused atomic.Bool
	pacers        map[int64]*pacer // per chat with a reply streaming; guarded by mu
	previewMu     sync.Mutex       // a key's stored preview record: read and written one at a time
	connected     chan struct{}    // closed once connected
	notices       *notifier        // sweep notices (NotifyResets), or nil
	tools         ToolApprovals    // tool asks and decisions (Bot.askTool), or nil
	asks          toolAsks
	// menuModels is whether the command menu set holds /model (nil:
	// not set yet; Bot.setMenu).
	menuModels atomic.Pointer[bool]
}

// New returns the bot without touching the network: Start connects
// (getMe), retrying in the background, so an unreachable or refusing Bot
// API never delays or stops the rest of the gateway.
func New(sess Sessions, opts Options) (*Bot, error) {
	if opts.Token == "" {
		return nil, errors.New("telegram: no token")
	}
	opts = opts.withDefaults()
	b := &Bot{
		opts: opts, sess: sess, log: opts.Logger.With(slog.String("channel", Channel)),
		ctx:       &ctxClient{client: opts.HTTPClient, idle: opts.RequestIdle, poll: context.Background()},
		queue:     newKeyQueues(),
		replies:   newKeyQueues(),
		seen:      newRecentUpdates(4096),
		delayTold: must(lru.New[string, struct{}](4096)),
		refused:   newRefused(), warned: map[string]bool{}, typers: map[place]*typer{},
		stopping: make(chan struct{}),
		leadTTL:  15 * time.Second, leadEvery: 5 * time.Second, leadRetry: 3 * time.Second,
	}
	b.connected = make(chan struct{})
	b.asks = newToolAsks()
	b.limits = newLimits(opts)
	b.cur.Store(&tgLive{allowedUsers: slices.Clone(opts.AllowedUsers), groupPolicy: opts.GroupPolicy})
	// The library's constructor calls getMe; the bot is built without it.
	b.api = &tgbotapi.BotAPI{Token: opts.Token, Client: b.ctx, Buffer: 100}
	b.api.SetAPIEndpoint(strings.TrimRight(opts.APIURL, "/") + "/bot%s/%s")
	b.tools = sess.ToolApprovals
	if opts.NotifyResets {
		b.startNotices()
	}
	sess.Register(Channel, b.route(false))
	return b, nil
}

// route is how the session manager's work reaches the bot: the fetch of
// stored images, again for every turn that needs them; its tool asks,
// when it can take the decisions (ToolApprovals); the notices of
// conversations sweeps archived (NotifyResets); and, once connected, the
// delivery of replies outside a live turn, which it confirms (Delivered).
func (b *Bot) route(connected bool) sessions.Route {
	r := sessions.Route{Fetch: b.fetch}
	if b.tools != nil {
		r.Ask, r.AskSettled = b.askTool, b.toolSettled
	}
	if b.notices != nil {
		r.Reset = b.onSweep
	}
	if connected {
		r.Deliver, r.Track = b.deliverStored, true
	}
	return r
}

// withDefaults fills in what o leaves unset, so that only the token is
// required.
func (o Options) withDefaults() Options {
	if o.Elector == nil {
		o.Elector = soleElector{}
	}
	if o.APIURL == "" {
		o.APIURL = "https://api.telegram.org"
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.PollTimeout <= 0 {
		o.PollTimeout = 30 * time.Second
	}
	if o.RequestIdle <= 0 {
		o.RequestIdle = o.PollTimeout + 30*time.Second
	}
	if o.HTTPClient == nil {
		// No bound on a request's whole time: ctxClient bounds each by
		// its progress (RequestIdle).
		o.HTTPClient = &http.Client{}
	}
	if o.Sleep == nil {
		o.Sleep = sleep
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.AlbumWait <= 0 {
		o.AlbumWait = DefaultAlbumWait
	}
	if o.After == nil {
		o.After = time.After
	}
	if o.TypingEvery <= 0 {
		o.TypingEvery = 4 * time.Second
	}
	if o.Format == "" {
		o.Format = FormatHTML
	}
	if o.MaxImageBytes <= 0 {
		o.MaxImageBytes = DefaultMaxImageBytes
	}
	if o.MaxTextBytes <= 0 {
		o.MaxTextBytes = DefaultMaxTextBytes
	}
	if o.MaxAudioBytes <= 0 {
		o.MaxAudioBytes = DefaultMaxAudioBytes
	}
	if o.Streaming == "" {
		o.Streaming = StreamAuto
	}
	if o.Edits == "" {
		o.Edits = EditsAnswer
	}
	return o
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

// must returns v, for constructors that fail only on arguments known good.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
