// Package sessions is the BotSessionManager: it owns conversation state for
// every channel — session keys, conversations and their append-only
// messages, history trimming, reset policies (lazy on arrival and swept by
// cron), and the drain on shutdown. Channels hand it normalised Inbound
// messages and never touch the database themselves.
package sessions

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/locks"
	"github.com/chatgate/chatgate/sessions/ledger"
)

// Errors returned by Handle.
var (
	ErrShuttingDown = errors.New("gateway is shutting down")
	ErrEmptyMessage = errors.New("message text is empty")
	ErrBadInbound   = errors.New("inbound message lacks a channel or session key")
	ErrFireID       = errors.New("client message ids starting with " + ledger.FireMsgPrefix + " are the gateway's own")
	ErrTooLong      = errors.New("message text is over the size limit")
	ErrBadText      = errors.New("message text is not valid UTF-8")
)

var (
	errStoppedByUser = errors.New(ledger.InterruptedByUser)
	errShutdown      = errors.New(ledger.InterruptedByShutdown)
)

// DefaultFailureText is what a user is told when the agent cannot answer.
const DefaultFailureText = "Sorry, I couldn't reach the assistant just now. Your message is saved — please try again in a moment."

// Inbound is one user message, normalised by its channel.
type Inbound struct {
	Channel     string // "telegram", "websocket"
	SessionKey  string // who the conversation belongs to, see TelegramDMKey, WebSocketKey
	UserID      string
	ChatID      string
	ClientMsgID string // optional; a repeated id is answered from storage
	Text        string
	// Attachments are stored as metadata with the message (never an
	// image's bytes, which the channel's Fetcher gives when a turn needs
	// them). A message with attachments may have an empty text.
	Attachments []agent.Attachment
	// Quote is the text the message replies to or quotes (a Telegram
	// reply or quote, a WebSocket reply_to), stored with it (cut to
	// MaxQuoteRunes) and given to the model before it, marked as quoted.
	Quote string
	// Scheduled marks a fire's message (the Scheduler's): its ClientMsgID
	// is the fire's (ledger.FireMsgID), its text the schedule's prompt,
	// framed as scheduled. Its turn is one of its own, in the key's line
	// like any message but interrupting none, and it is not the user's
	// activity: an idle reset counts from the user's last message. Only
	// scheduled messages may carry a fire's client id.
	Scheduled bool
	// OnBehalf marks a message sent on behalf of a chat, not by a person
	// (Telegram's anonymous group admins, a channel's posts in its
	// discussion group): its UserID is shared by whoever sends so, and
	// its turn reads and writes no notes.
	OnBehalf bool
	// anySender: the turn may answer another sender than UserID — a batch
	// of several members' messages, a turn taken up without its
	// messages' senders (rescued), a fire. In a group chat its members
	// share, such a turn reads and writes no notes (memoryUserOf).
	anySender bool
}

// Policy is one channel's conversation policy.
type Policy struct {
	MaxHistory int
	// MaxHistoryTokens, when > 0, bounds the history a turn sends too:
	// the newest messages that fit this many estimated tokens.
	MaxHistoryTokens int
	Reset            ResetPolicy
	Busy             BusyPolicy
	Compaction       CompactionPolicy
	// Budget is what each user may spend with the model.
	Budget BudgetPolicy
	// Reminders is what its users may schedule in the chat.
	Reminders ReminderPolicy
	// Memory is what the bot keeps about its users across conversations.
	Memory MemoryPolicy
}

// ResetEvent tells that a conversation was archived and why.
type ResetEvent struct {
	Channel         string
	SessionKey      string
	OldConversation string
	NewConversation string // empty for sweeps: the next message opens one
	Reason          string // manual, idle, daily, or resume (ResumePrevious)
	// Remote is true for a reset another replica made, forwarded here:
	// a listener acting once per reset rather than per client skips it.
	Remote bool
	// OldMessages is how many messages the archived conversation holds
	// (its last seq); 0 when it was empty, and in forwarded events.
	OldMessages int64
	// Earlier is set on the OnReset hook of the first message after a
	// sweep archived the key's conversation: the archive happened then
	// (and was published then); this message opened the next one.
	Earlier bool
}

// Ack tells that the user message is durably stored.
type Ack struct {
	ConversationID string
	Seq            int64
}

// Hooks are called during a turn, in this order: OnReset (if the message
// triggered a reset), OnAck, OnDelta (zero or more, one at a time, never
// before OnAck: a model call may start while the message is being stored,
// but what it streams is shown only once the message is stored).
type Hooks struct {
	OnReset func(ResetEvent)
	OnAck   func(Ack)
	OnDelta func(text string)
	// OnDelay is called at most once, when the message is stored and its
	// turn has waited on the database longer than Options.DelayNotice
	// (it is kept, and answered once storage is back): the channel tells
	// the user so (DelayText).
	OnDelay func(Delay)
	// OnTool is called as each tool call of the turn moves: asking,
	// started, and its outcome.
	OnTool func(ToolEvent)
}

// Reply is the stored answer to a user message.
type Reply struct {
	Seq    int64
	Text   string
	Status string // ok | failed | interrupted
	Error  string // why, for failed and interrupted
	// Covers are the client message ids of the user messages the reply
	// answers, oldest first: several when a burst was merged into one
	// turn. The reply answers the last of them (its reply_to).
	Covers []string
	// Media are the pictures, audio clips and files the turn's tool calls
	// returned, delivered with the reply.
	Media []Media
	// MediaUnread: the turn's media could not be read (storage failed).
	// A channel that marks delivery fails the delivery, so that it is
	// done again — with them — rather than marked done without them.
	MediaUnread bool
}

// Outcome is the result of one turn.
type Outcome struct {
	ConversationID string
	UserSeq        int64
	Reply          Reply
	// Duplicate is true when the client message id was already stored and
	// the outcome comes from storage.
	Duplicate bool
	// Pending is true when another runner (another replica, or the rescuer)
	// holds the turn: Reply is empty, and that runner delivers it.
	Pending bool
	// Merged is true when the message was answered together with later
	// ones of its burst: Reply is theirs, and the outcome of the newest
	// (Reply.Covers' last) carries it to the user; send nothing for this one.
	Merged bool
	Reset  *ResetEvent
	// Turn names the turn in the ledger. Turn.Claim is set when the caller
	// holds its delivery: a channel that confirms delivery sends the reply
	// and then calls Delivered with it.
	Turn ledger.TurnRef
	// Trace is the span of the turn that produced Reply (invalid when
	// tracing is off, or the reply came from storage): a channel sending
	// the reply makes its span "delivery" a child of it.
	Trace trace.SpanContext
}

// Observer is told about finished turns and resets, for metrics.
type Observer interface {
	// TurnDone: status is ok, failed, interrupted, duplicate or error (no
	// reply: refused, shutting down, storage failure).
	TurnDone(channel, status string, d time.Duration)
	ResetDone(channel, reason string, n int)
	// RecoveryPass: one pass of the rescuer ended, having run and expired
	// that many turns.
	RecoveryPass(ran, expired int)
	// TurnStarted: a live turn started with that many user messages,
	// having waited that long (debounce, and the turn before it) since
	// the first of them was stored.
	TurnStarted(channel string, messages int, wait time.Duration)
	// Spent: an append that stored what model calls spent landed (its
	// tally with it: Standing.usageFor).
	Spent(channel, model string, promptTokens, completionTokens int64, cost float64)
	// BudgetRefused: a turn was answered with BudgetText, its user over
	// budget (tokens_per_day, cost_per_day or cost_per_month).
	BudgetRefused(channel, budget string)
	// FireClaimed: a fire of a schedule (kind schedule) or a reminder
	// (kind reminder) was claimed to run, lag after its due time.
	FireClaimed(kind string, lag time.Duration)
	// FireEnded: a fire settled with outcome (ledger.FireSent, FireQuiet,
	// FireSkippedLate, FireSkippedBudget, FireFailed).
	FireEnded(kind, outcome string)
	// NotesWritten: n notes were kept, by author (ledger.NoteByModel,
	// NoteByUser, NoteByOperator, NoteByReset); NotesForgotten: n were
	// deleted.
	NotesWritten(author string, n int)
	NotesForgotten(n int)
	// ExtractionEnded: an extraction at reset settled in state
	// (ledger.ExtractDone, ExtractSkipped, ExtractRefused, ExtractFailed),
	// or went back to due for a retry (ledger.ExtractDue).
	ExtractionEnded(state string)
}

type noObserver struct{}

func (noObserver) TurnDone(string, string, time.Duration)      {}
func (noObserver) ResetDone(string, string, int)               {}
func (noObserver) RecoveryPass(int, int)                       {}
func (noObserver) TurnStarted(string, int, time.Duration)      {}
func (noObserver) Spent(string, string, int64, int64, float64) {}
func (noObserver) BudgetRefused(string, string)                {}
func (noObserver) FireClaimed(string, time.Duration)           {}
func (noObserver) FireEnded(string, string)                    {}
func (noObserver) NotesWritten(string, int)                    {}
func (noObserver) NotesForgotten(int)                          {}
func (noObserver) ExtractionEnded(string)                      {}

// Options configures a Manager.
type Options struct {
	// Policies by channel name; a channel without one gets DefaultPolicy.
	Policies      map[string]Policy
	DefaultPolicy Policy
	// Instructions is the system prompt, sent on every call, never stored.
	Instructions string
	// Compactor writes compaction's summaries (nil: the agent does).
	Compactor agent.Agent
	// Events carries events between replicas sharing the database: the
	// store's (store.DB.Events). Nil: no other replica to tell.
	Events Events
	Locks  *locks.Cache
	Now    func() time.Time
	// After is the debounce's timer, on the clock of Now (default
	// time.After).
	After  func(time.Duration) <-chan time.Time
	Logger *slog.Logger
	// HotConversations bounds the in-memory cache of active conversations
	// (default 1024), and CacheBytes their estimated size (default
	// DefaultCacheBytes); the least recently used go first.
	HotConversations int
	CacheBytes       int64
	// MaxInputBytes refuses longer messages (default 64 KiB).
	MaxInputBytes int
	FailureText   string
	// RetentionDays purges archived conversations older than this, and
	// guests' conversations idle this long (0 keeps).
	RetentionDays int
	// ResumeTTL is how long a resume token is valid after it was issued
	// (0: no expiry). Expired tokens are purged hourly.
	ResumeTTL time.Duration
	Observer  Observer
	// ReplicaID names this gateway in the ledger's claims and leases
	// (default: a random id per process).
	ReplicaID string
	// LeaseTTL is how long this replica holds its turns and session leases
	// after its last heartbeat (default 30s; it beats every third of
	// that), and how long a reply that cannot be stored is retried.
	LeaseTTL time.Duration
	// RecoveryMaxAge: a turn found claimable longer than this after its
	// message arrived is not run; the user is asked to send it again
	// (default 1h).
	RecoveryMaxAge time.Duration
	// RecoveryConcurrency bounds how many claimed turns the rescuer runs at
	// once (default 16).
	RecoveryConcurrency int
	// NoRerun stores a turn a shutdown interrupted as answered (with its
	// partial reply) instead of running it again.
	NoRerun bool
	// RescueEvery is how often the rescuer looks for claimable turns
	// (default 5s); Rescuer.Wake makes it look at once.
	RescueEvery time.Duration
	// InterruptGrace is how long Shutdown waits, once its deadline has
	// passed and it has cancelled what still runs, for interrupted turns to
	// store their partial replies and sweeps to stop at their next chunk
	// (default 3s). A turn still storing after it stays claimed until its
	// lease ends, and is run again then.
	InterruptGrace time.Duration
	// RetryPause is the first pause before a storage step that failed
	// is tried again (default 250ms); each later one doubles, up to 8
	// times it for starting a turn and 20 times for looking at owed
	// conversations and settling claims.
	RetryPause time.Duration
	// DelayNotice: a stored message whose turn has waited on the
	// database this long gets Hooks.OnDelay, once (0: never). A
	// channel that could not store a message yet tells its user after
	// as long (StorageHealth.DelayNotice); StorageHealth.SetDelayNotice
	// changes it.
	DelayNotice time.Duration
	// TracerProvider makes the turn spans; unset, tracing is
	// off and costs a nil check.
	TracerProvider trace.TracerProvider
	// Tools are the tools turns offer the model (nil: none; see toolTurn).
	Tools Toolbox
	// Media bounds the media a tool call's result keeps (keepMedia).
	Media MediaLimits
	// MemoryTools: Tools has the gateway's own memory tools, under
	// MemoryToolServer; they are offered, and run, only in the turns of a
	// user whose memory is on. (Without it, a server of that name is the
	// operator's, offered as any other.)
	MemoryTools bool
	// MaxToolRounds bounds a turn's tool rounds; then the model is told to
	// answer without tools (default DefaultMaxToolRounds).
	MaxToolRounds int
	// ApproveTimeout: an asked call nobody decides within it counts as
	// denied (default DefaultApproveTimeout).
	ApproveTimeout time.Duration
	// Models are the models a session key may choose (agent.models; none:
	// no choice; Standing.ChooseModel); ContextTokens is the context
	// window of the agent's own model, for Status (0: unknown).
	Models        []Model
	ContextTokens int
}

// DefaultInterruptGrace is Options.InterruptGrace's default.
const DefaultInterruptGrace = 3 * time.Second

// Manager is the BotSessionManager.
type Manager struct {
	store Store // every ledger call watched (by watcher)
	opts  Options
	locks *locks.Cache
	now   func() time.Time
	log   *slog.Logger
	tr    *tracing // the spans of messages and turns
	hot   *hotCache
	live  atomic.Pointer[liveSettings] // policies, instructions, agent (Reconfigure)
	life  *lifecycle                   // the drain: the work under way, and the contexts Shutdown ends
	// rescue runs what nobody runs: owed conversations, due turns, the
	// settles storage refused (started by the gateway's wiring).
	rescue *Rescuer
	hb     *heartbeat     // this replica's lease keeper
	relay  relay          // events of other replicas
	health *StorageHealth // the database's health, and what waits on it

	// earlySendWait bounds a message's commit's wait for its early call's
	// request (earlyCall.wrote); tests lengthen it.
	earlySendWait time.Duration

	mu     sync.Mutex
	routes *Routes            // how work finds its way back to each channel
	claims map[string][]int64 // conversation → seqs a run of this replica holds now (a set: few, where a map a conversation allocated twice a turn)
	bursts map[string]*burst
	// compaction makes the summaries of conversations that outgrow
	// their history window.
	compaction *compaction
	// turnLocks: one turn at a time per key on this replica (the live
	// runner and the rescuer); the lease does it across replicas.
	turnLocks *locks.Cache
	// asks: the users' decisions on tool calls, and the turns waiting
	// for them.
	asks *Approvals
	// convs: what channels read and change of conversations outside a
	// turn (Manager.Conversations).
	convs *Conversations
	// standing: status, usage and budgets, models, the replica's load.
	standing *Standing
	// reminders: the reminders users make in the chat.
	reminders *Reminders
	// memory: the notes kept about users across conversations.
	memory *Memory
	// media: what tools returned, read for replies and for the model.
	media *toolMedia
}

// New returns a Manager, with its Rescuer not yet started. Call Start to
// write its heartbeat, and Shutdown to drain.
func New(st Store, ag agent.Agent, opts Options) *Manager {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.After == nil {
		opts.After = time.After
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Locks == nil {
		opts.Locks = locks.New(locks.Options{Now: opts.Now})
	}
	if opts.HotConversations <= 0 {
		opts.HotConversations = 1024
	}
	if opts.MaxInputBytes <= 0 {
		opts.MaxInputBytes = 64 << 10
	}
	if opts.FailureText == "" {
		opts.FailureText = DefaultFailureText
	}
	if opts.Observer == nil {
		opts.Observer = noObserver{}
	}
	if opts.ReplicaID == "" {
		// Every user message row carries its owner's id: 64 random bits
		// tell replicas apart and keep the rows narrow.
		var b [8]byte
		rand.Read(b[:])
		opts.ReplicaID = hex.EncodeToString(b[:])
	}
	if opts.LeaseTTL <= 0 {
		opts.LeaseTTL = ledger.LeaseTTL
	}
	if opts.RecoveryMaxAge <= 0 {
		opts.RecoveryMaxAge = time.Hour
	}
	if opts.RecoveryConcurrency <= 0 {
		opts.RecoveryConcurrency = 16
	}
	if opts.RescueEvery <= 0 {
		opts.RescueEvery = 5 * time.Second
	}
	if opts.RetryPause <= 0 {
		opts.RetryPause = 250 * time.Millisecond
	}
	if opts.InterruptGrace <= 0 {
		opts.InterruptGrace = DefaultInterruptGrace
	}
	if opts.DefaultPolicy.MaxHistory == 0 && opts.DefaultPolicy.Reset.Mode == "" {
		opts.DefaultPolicy = Policy{MaxHistory: 100, Reset: ResetPolicy{Mode: ResetNone}}
	}
	if opts.CacheBytes <= 0 {
		opts.CacheBytes = DefaultCacheBytes
	}
	hot := newHotCache(opts.HotConversations, opts.CacheBytes)
	live := &liveSettings{policies: opts.Policies, def: opts.DefaultPolicy, instructions: opts.Instructions, agent: ag, compactor: opts.Compactor,
		models: slices.Clone(opts.Models), contextTokens: opts.ContextTokens}
	m := &Manager{
		store: st, opts: opts, locks: opts.Locks,
		now: func() time.Time { return opts.Now().UTC() }, log: opts.Logger, hot: hot, earlySendWait: earlySendWait,
		life:   newLifecycle(),
		claims: map[string][]int64{}, bursts: map[string]*burst{},
		turnLocks: locks.New(locks.Options{Now: opts.Now}),
		tr:        &tracing{tracer: newTracer(opts.TracerProvider), log: opts.Logger, observer: opts.Observer},
	}
	m.asks = newApprovals(st, m.now, m.relay.announce)
	m.standing = newStanding(st, m, managerLoad{m}, hot, m.relay.announce,
		standingConfig{ReplicaID: opts.ReplicaID, LeaseTTL: opts.LeaseTTL, Now: m.now, Logger: opts.Logger})
	m.compaction = newCompaction(st, hot, m.tr, opts.Logger, m.now, m.life.base, m, m.standing,
		drainCount{enter: m.life.enterSweep, leave: m.life.leaveSweep, closing: m.life.closed})
	m.hb = newHeartbeat(st, opts.ReplicaID, opts.LeaseTTL, opts.Logger)
	m.health = newStorageHealth(st, opts.ReplicaID, opts.LeaseTTL, opts.DelayNotice)
	m.relay.m, m.relay.events = m, opts.Events
	m.routes = newRoutes(m.tr, opts.Logger, m.Delivered, func() { m.rescue.rescan() })
	m.rescue = newRescuer(st, m, m.routes, m.life, m.hb, &m.relay, m.health, m.tr, opts.Observer, m.now, rescuerConfig{
		replica: opts.ReplicaID, every: opts.RescueEvery, maxAge: opts.RecoveryMaxAge, concurrency: opts.RecoveryConcurrency,
		pause: opts.RetryPause, log: opts.Logger})
	m.convs = newConversations(st, m, m.relay.publish, hot, m.now, opts.Logger, opts.ResumeTTL)
	m.reminders = NewReminders(st, m.Policy, m.now)
	m.memory = NewMemory(st, m.Policy, m.now, opts.Logger, opts.Observer)
	m.media = &toolMedia{store: st, tools: opts.Tools != nil, log: m.log}
	m.memory.tools = opts.MemoryTools
	m.live.Store(live)
	m.life.unwatch = st.Observe(watcher{m})
	return m
}

// Start writes this replica's heartbeat and keeps it: the heartbeat is
// the lease of every turn this replica takes, written before the first
// one. (The sweeps run on the Sweeper's schedules, the recovery passes on
// the Rescuer's.)
func (m *Manager) Start() error {
	if err := m.hb.ensure(); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	return nil
}

// Rescuer is the manager's Rescuer: the gateway's wiring subscribes it to
// the other replicas' events and starts it once the channels registered.
func (m *Manager) Rescuer() *Rescuer { return m.rescue }

// ReplicaID is the id this gateway claims turns and leases under.
func (m *Manager) ReplicaID() string { return m.opts.ReplicaID }

// Routes are the channels' routes: how a turn's work finds its way back
// to each channel. A channel registers its own when it is built.
func (m *Manager) Routes() *Routes { return m.routes }

// Approvals are the users' decisions on the tool calls they are asked
// about.
func (m *Manager) Approvals() *Approvals { return m.asks }

// Policy returns the policy applied to a channel.
func (m *Manager) Policy(channel string) Policy {
	s := m.settings()
	if p, ok := s.policies[channel]; ok {
		return p
	}
	return s.def
}

// maxUnstored bounds how many replies that could not be stored yet are
// kept in memory at once.
const maxUnstored = 1024

// ErrReplyNotStored means the agent answered but its reply could not be
// stored while this replica held the turn (storage unreachable): nothing
// was delivered, and the turn is run again by whoever claims it next.
var ErrReplyNotStored = errors.New("the reply could not be stored; the turn will be run again")

// ToolCallsText is what a user is told when the model asked for tools,
// which the gateway does not offer.
const ToolCallsText = "Sorry, the assistant tried to use a tool, which this service does not offer, and could not answer. Please rephrase your message."

// Shutdown stops taking turns, sweeps and recovery, lets running turns and
// sweeps (and purges) finish until ctx ends — one deadline for all of them
// — then cancels the rest (their partial replies are stored as
// interrupted, a sweep stops at its next chunk) and waits up to
// Options.InterruptGrace for them to be stored. So it returns at most
// InterruptGrace after ctx ends; an error says something still ran then.
func (m *Manager) Shutdown(ctx context.Context) error {
	m.life.close()
	done := make(chan struct{})
	go func() {
		m.life.wait()
		m.rescue.endLoops()
		m.hb.end()
		m.life.unwatch()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	n := m.life.interrupt()
	msg := "drain deadline passed: interrupted the running turns and sweeps"
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		msg = "drain cut short: interrupted the running turns and sweeps"
	}
	m.log.Warn(msg, slog.Int("turns", n))
	t := time.NewTimer(m.opts.InterruptGrace)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
		return fmt.Errorf("turns or sweeps still running %s after the drain: their turns stay claimed until the lease ends and run again then", m.opts.InterruptGrace)
	}
}
