// Package sessions is the BotSessionManager: it owns conversation state for
// every channel — session keys, conversations and their append-only
// messages, history trimming, reset policies (lazy on arrival and swept by
// cron), and the drain on shutdown. Channels hand it normalised Inbound
// messages and never touch the database themselves.
package sessions

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/robfig/cron/v3"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/locks"
)

// Errors returned by Handle.
var (
	ErrShuttingDown = errors.New("gateway is shutting down")
	ErrEmptyMessage = errors.New("message text is empty")
	ErrBadInbound   = errors.New("inbound message lacks a channel or session key")
	ErrTooLong      = errors.New("message text is over the size limit")
	ErrBadText      = errors.New("message text is not valid UTF-8")
)

var (
	errStoppedByUser = errors.New(InterruptedByUser)
	errShutdown      = errors.New(InterruptedByShutdown)
)

// DefaultFailureText is what a user is told when the agent cannot answer.
const DefaultFailureText = "Sorry, I couldn't reach the assistant just now. Your message is saved — please try again in a moment."

// Inbound is one user message, normalised by its channel.
type Inbound struct {
	Channel     string // "telegram", "websocket"
	SessionKey  string // who the conversation belongs to, see keys.go
	UserID      string
	ChatID      string
	ClientMsgID string // optional; a repeated id is answered from storage
	Text        string
}

// Policy is one channel's conversation policy.
type Policy struct {
	MaxHistory int
	Reset      ResetPolicy
}

// ResetEvent tells that a conversation was archived and why.
type ResetEvent struct {
	Channel         string
	SessionKey      string
	OldConversation string
	NewConversation string // empty for sweeps: the next message opens one
	Reason          string
}

// Ack tells that the user message is durably stored.
type Ack struct {
	ConversationID string
	Seq            int64
}

// Hooks are called during a turn, on the turn's goroutine, in this order:
// OnReset (if the message triggered a reset), OnAck, OnDelta (zero or more).
type Hooks struct {
	OnReset func(ResetEvent)
	OnAck   func(Ack)
	OnDelta func(text string)
}

// Reply is the stored answer to a user message.
type Reply struct {
	Seq    int64
	Text   string
	Status string // ok | failed | interrupted
	Error  string // why, for failed and interrupted
}

// Outcome is the result of one turn.
type Outcome struct {
	ConversationID string
	UserSeq        int64
	Reply          Reply
	// Duplicate is true when the client message id was already stored and
	// the outcome comes from storage.
	Duplicate bool
	Reset     *ResetEvent
}

// Observer is told about finished turns and resets, for metrics.
type Observer interface {
	// TurnDone: status is ok, failed, interrupted, duplicate or error (no
	// reply: refused, shutting down, storage failure).
	TurnDone(channel, status string, d time.Duration)
	ResetDone(channel, reason string, n int)
}

type noObserver struct{}

func (noObserver) TurnDone(string, string, time.Duration) {}
func (noObserver) ResetDone(string, string, int)          {}

// Options configures a Manager.
type Options struct {
	// Policies by channel name; a channel without one gets DefaultPolicy.
	Policies      map[string]Policy
	DefaultPolicy Policy
	// Instructions is the system prompt, sent on every call, never stored.
	Instructions string
	Locks        *locks.Cache
	Now          func() time.Time
	Logger       *slog.Logger
	// HotConversations bounds the in-memory cache of active conversations
	// (default 1024).
	HotConversations int
	// MaxInputBytes refuses longer messages (default 64 KiB).
	MaxInputBytes int
	FailureText   string
	// RetentionDays purges archived conversations older than this (0 keeps).
	RetentionDays int
	Observer      Observer
}

// Manager is the BotSessionManager.
type Manager struct {
	store   Store
	agent   agent.Agent
	opts    Options
	locks   *locks.Cache
	now     func() time.Time
	log     *slog.Logger
	hot     *lru.Cache[string, *hotConv]
	cron    *cron.Cron
	cronIDs map[string]cron.EntryID
	base    context.Context // parent of every turn; cancelled at the end of a drain
	cancel  context.CancelCauseFunc

	mu        sync.Mutex
	closing   bool
	draining  context.Context // done when Shutdown starts: lock waits end
	drain     context.CancelFunc
	turns     sync.WaitGroup
	running   map[string]context.CancelCauseFunc
	listeners []func(ResetEvent)
	recovered []func(Recovered)
}

// hotConv is an active conversation with the tail of its messages. It is
// read and changed only by the holder of its session key's lock.
type hotConv struct {
	conv   Conversation
	window []Message
	cap    int
}

// push adds messages to the window. The window grows to twice its cap
// before the newest cap messages move to the front, so a turn copies and
// allocates nothing in the steady state. The window is only read under the
// session key's lock, never kept past it.
func (h *hotConv) push(msgs ...Message) {
	if len(h.window)+len(msgs) > 2*h.cap && len(h.window) > 0 {
		keep := max(h.cap-len(msgs), 0)
		n := copy(h.window, h.window[max(len(h.window)-keep, 0):])
		clear(h.window[n:])
		h.window = h.window[:n]
	}
	if h.window == nil {
		h.window = make([]Message, 0, 2*h.cap)
	}
	h.window = append(h.window, msgs...)
}

func (h *hotConv) byClientID(id string) *Message {
	for i := len(h.window) - 1; i >= 0; i-- {
		if m := &h.window[i]; m.ClientMsgID != nil && *m.ClientMsgID == id {
			return m
		}
	}
	return nil
}

// New returns a Manager. Call Start to run the reset sweeps, and Shutdown
// to drain.
func New(store Store, ag agent.Agent, opts Options) *Manager {
	if opts.Now == nil {
		opts.Now = time.Now
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
	if opts.DefaultPolicy.MaxHistory == 0 && opts.DefaultPolicy.Reset.Mode == "" {
		opts.DefaultPolicy = Policy{MaxHistory: 100, Reset: ResetPolicy{Mode: ResetNone}}
	}
	hot, _ := lru.New[string, *hotConv](opts.HotConversations)
	base, cancel := context.WithCancelCause(context.Background())
	draining, drain := context.WithCancel(context.Background())
	return &Manager{
		store: store, agent: ag, opts: opts, locks: opts.Locks,
		now: func() time.Time { return opts.Now().UTC() }, log: opts.Logger, hot: hot,
		base: base, cancel: cancel,
		draining: draining, drain: drain,
		running: map[string]context.CancelCauseFunc{},
	}
}

// Policy returns the policy applied to a channel.
func (m *Manager) Policy(channel string) Policy {
	if p, ok := m.opts.Policies[channel]; ok {
		return p
	}
	return m.opts.DefaultPolicy
}

// OnReset registers a listener for every archive: manual, lazy and swept.
// Listeners run synchronously and must be quick.
func (m *Manager) OnReset(fn func(ResetEvent)) {
	m.mu.Lock()
	m.listeners = append(m.listeners, fn)
	m.mu.Unlock()
}

func (m *Manager) publish(ev ResetEvent) {
	m.opts.Observer.ResetDone(ev.Channel, ev.Reason, 1)
	m.mu.Lock()
	ls := m.listeners
	m.mu.Unlock()
	for _, fn := range ls {
		fn(ev)
	}
}

// enter counts a turn for the drain; false once Shutdown has begun.
func (m *Manager) enter() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closing {
		return false
	}
	m.turns.Add(1)
	return true
}

// acquire counts a turn for the drain and takes the session key's lock;
// the returned func gives both back.
func (m *Manager) acquire(ctx context.Context, key string) (func(), error) {
	if !m.enter() {
		return nil, ErrShuttingDown
	}
	release, err := m.lock(ctx, key)
	if err != nil {
		m.turns.Done()
		return nil, err
	}
	return func() { release(); m.turns.Done() }, nil
}

// startTurn returns the context of a running turn, which Stop and Shutdown
// cancel, and the func that ends it.
func (m *Manager) startTurn(key string) (context.Context, func()) {
	turnCtx, cancel := context.WithCancelCause(m.base)
	m.mu.Lock()
	m.running[key] = cancel
	m.mu.Unlock()
	return turnCtx, func() {
		m.mu.Lock()
		delete(m.running, key)
		m.mu.Unlock()
		cancel(nil)
	}
}

// lock takes the session key's lock; waiting ends when ctx does or a
// shutdown starts.
func (m *Manager) lock(ctx context.Context, key string) (func(), error) {
	waitCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(m.draining, cancel)
	defer stop()
	release, err := m.locks.Acquire(waitCtx, key)
	if err != nil {
		if ctx.Err() == nil {
			return nil, ErrShuttingDown
		}
		return nil, err
	}
	// Then the replicas' lease, so that one user's turns never overlap
	// across gateways sharing a database.
	releaseLease, err := m.store.Lease(waitCtx, key)
	if err != nil {
		release()
		if ctx.Err() == nil && m.draining.Err() != nil {
			return nil, ErrShuttingDown
		}
		return nil, err
	}
	return func() { releaseLease(); release() }, nil
}

// Handle runs one turn: lock the session key, load the conversation, apply
// the reset policy, deduplicate, store the user message (OnAck), call the
// agent with the trimmed history (OnDelta) and store its reply.
//
// ctx bounds only the wait for the lock and the storing of the user
// message; once stored, the turn runs to its end even if the caller goes
// away (a WebSocket client that disconnects gets the reply on resume). Stop
// and Shutdown cancel a running turn; its partial reply is stored as
// interrupted. An agent failure is not an error: the outcome's reply has
// status failed and a plain text for the user, and the user message stays.
func (m *Manager) Handle(ctx context.Context, in Inbound, h Hooks) (Outcome, error) {
	start := time.Now()
	out, err := m.handle(ctx, in, h)
	status := out.Reply.Status
	switch {
	case err != nil:
		status = "error"
	case out.Duplicate && out.Reply.Seq != 0:
		status = "duplicate"
	}
	m.opts.Observer.TurnDone(in.Channel, status, time.Since(start))
	return out, err
}

func (m *Manager) handle(ctx context.Context, in Inbound, h Hooks) (Outcome, error) {
	if in.Channel == "" || in.SessionKey == "" {
		return Outcome{}, ErrBadInbound
	}
	if strings.TrimSpace(in.Text) == "" {
		return Outcome{}, ErrEmptyMessage
	}
	if len(in.Text) > m.opts.MaxInputBytes {
		return Outcome{}, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLong, len(in.Text), m.opts.MaxInputBytes)
	}
	if !utf8.ValidString(in.Text) {
		return Outcome{}, ErrBadText
	}
	release, err := m.acquire(ctx, in.SessionKey)
	if err != nil {
		return Outcome{}, err
	}
	defer release()
	turnCtx, endTurn := m.startTurn(in.SessionKey)
	defer endTurn()

	for attempt := 0; ; attempt++ {
		out, err := m.turn(ctx, turnCtx, in, h)
		if errors.Is(err, ErrStale) && attempt < 3 {
			// The conversation changed underneath (a sweep archived it, a
			// CLI reset, another replica): reload and start over.
			m.hot.Remove(in.SessionKey)
			continue
		}
		return out, err
	}
}

func (m *Manager) turn(ctx, turnCtx context.Context, in Inbound, h Hooks) (Outcome, error) {
	policy := m.Policy(in.Channel)
	now := m.now()
	hc, err := m.load(ctx, in, policy, now)
	if err != nil {
		return Outcome{}, err
	}
	if in.ClientMsgID != "" {
		if um := hc.byClientID(in.ClientMsgID); um != nil {
			return m.answerStored(ctx, turnCtx, hc, *um, policy, in, h)
		}
	}

	var reset *ResetEvent
	if reason, expired := policy.Reset.Expired(&hc.conv, now); expired {
		if in.ClientMsgID != "" {
			// A resend of a message already answered before the reset
			// belongs to the old conversation, not to a new one.
			um, err := m.store.MessageByClientID(ctx, hc.conv.ID, in.ClientMsgID)
			if err != nil {
				return Outcome{}, err
			}
			if um != nil {
				return m.answerStored(ctx, turnCtx, hc, *um, policy, in, h)
			}
		}
		old := hc.conv.ID
		if _, err := m.store.Archive(ctx, old, reason, now); err != nil {
			return Outcome{}, err
		}
		m.hot.Remove(in.SessionKey)
		if hc, err = m.create(ctx, in, policy, now); err != nil {
			return Outcome{}, err
		}
		reset = &ResetEvent{Channel: in.Channel, SessionKey: in.SessionKey, OldConversation: old, NewConversation: hc.conv.ID, Reason: reason}
		m.log.Info("conversation reset", slog.String("session_key", in.SessionKey), slog.String("reason", reason),
			slog.String("archived", old), slog.String("conversation", hc.conv.ID))
		if h.OnReset != nil {
			h.OnReset(*reset)
		}
		m.publish(*reset)
	}

	um := Message{
		ConversationID: hc.conv.ID, Seq: hc.conv.LastSeq + 1, Role: agent.RoleUser,
		Content: in.Text, Status: MsgOK, CreatedAt: now,
	}
	if in.ClientMsgID != "" {
		id := in.ClientMsgID
		um.ClientMsgID = &id
	}
	batch := []Message{um}
	err = m.store.Append(ctx, Append{Conv: &hc.conv, ExpectSeq: hc.conv.LastSeq, RequireActive: true, Messages: batch, At: now})
	if errors.Is(err, ErrDuplicate) {
		stored, lerr := m.store.MessageByClientID(ctx, hc.conv.ID, in.ClientMsgID)
		if lerr != nil || stored == nil {
			return Outcome{}, errors.Join(err, lerr)
		}
		return m.answerStored(ctx, turnCtx, hc, *stored, policy, in, h)
	}
	if err != nil {
		return Outcome{}, err
	}
	um = batch[0]
	hc.push(um)
	if h.OnAck != nil {
		h.OnAck(Ack{ConversationID: hc.conv.ID, Seq: um.Seq})
	}
	out := m.runAgent(turnCtx, hc, um, policy, in, h)
	out.Reset = reset
	return out, nil
}

// answerStored answers a repeated client message id from storage. A stored
// message without a reply (the process died before answering) is answered
// now, once: that is a first run, not a second.
func (m *Manager) answerStored(ctx, turnCtx context.Context, hc *hotConv, um Message, policy Policy, in Inbound, h Hooks) (Outcome, error) {
	reply, err := m.store.FinalReply(ctx, um.ConversationID, um.Seq)
	if err != nil {
		return Outcome{}, err
	}
	if reply != nil {
		return Outcome{ConversationID: um.ConversationID, UserSeq: um.Seq, Duplicate: true, Reply: toReply(reply)}, nil
	}
	if h.OnAck != nil {
		h.OnAck(Ack{ConversationID: um.ConversationID, Seq: um.Seq})
	}
	if um.ConversationID != hc.conv.ID {
		return Outcome{}, fmt.Errorf("message %s belongs to conversation %s: %w", in.ClientMsgID, um.ConversationID, ErrStale)
	}
	out := m.runAgent(turnCtx, hc, um, policy, in, h)
	out.Duplicate = true
	return out, nil
}

func toReply(msg *Message) Reply {
	return Reply{Seq: msg.Seq, Text: msg.Content, Status: msg.Status, Error: msg.Error}
}

// runAgent calls the agent for the stored user message um and stores what
// it produced: the reply, a failure notice, or the partial reply of an
// interrupted turn. Storing uses a context that outlives turnCtx.
func (m *Manager) runAgent(turnCtx context.Context, hc *hotConv, um Message, policy Policy, in Inbound, h Hooks) Outcome {
	prior := hc.window
	for i := range prior {
		if prior[i].Seq >= um.Seq {
			prior = prior[:i]
			break
		}
	}
	req := agent.Request{
		SessionKey:   in.SessionKey,
		Instructions: m.opts.Instructions,
		History:      History(prior, policy.MaxHistory),
		Input:        um.Content,
	}
	var partial strings.Builder
	reply, err := m.callAgent(turnCtx, req, func(d string) {
		partial.WriteString(d)
		if h.OnDelta != nil {
			h.OnDelta(d)
		}
	})
	now := m.now()
	var msgs []Message
	var tokens int64
	var cost float64
	switch {
	case err == nil && len(reply.Messages) > 0:
		for _, am := range reply.Messages {
			msgs = append(msgs, Message{
				ConversationID: hc.conv.ID, Role: am.Role, Content: am.Content,
				ToolCalls: encodeToolCalls(am.ToolCalls), ToolCallID: am.ToolCallID,
				ReplyTo: um.Seq, Status: MsgOK, CreatedAt: now,
			})
		}
		last := &msgs[len(msgs)-1]
		last.PromptTokens, last.CompletionTkns, last.Cost = reply.Usage.PromptTokens, reply.Usage.CompletionTokens, reply.Cost
		tokens, cost = reply.Usage.TotalTokens, reply.Cost
	case turnCtx.Err() != nil:
		why := InterruptedByShutdown
		if errors.Is(context.Cause(turnCtx), errStoppedByUser) {
			why = InterruptedByUser
		}
		msgs = []Message{{ConversationID: hc.conv.ID, Role: agent.RoleAssistant, Content: partial.String(),
			ReplyTo: um.Seq, Status: MsgInterrupted, Error: why, CreatedAt: now}}
	default:
		if err == nil {
			err = errors.New("agent returned no message")
		}
		m.log.Warn("agent call failed", slog.String("session_key", in.SessionKey), slog.String("conversation", hc.conv.ID),
			slog.Int64("seq", um.Seq), slog.String("error", err.Error()))
		msgs = []Message{{ConversationID: hc.conv.ID, Role: agent.RoleAssistant, Content: m.opts.FailureText,
			ReplyTo: um.Seq, Status: MsgFailed, Error: err.Error(), CreatedAt: now}}
	}
	storeCtx, cancel := context.WithTimeout(context.WithoutCancel(turnCtx), 30*time.Second)
	defer cancel()
	if err := m.appendReply(storeCtx, hc, msgs, now, tokens, cost, reply.Model); err != nil {
		m.log.Error("storing reply failed", slog.String("session_key", in.SessionKey), slog.String("conversation", hc.conv.ID), slog.String("error", err.Error()))
		m.hot.Remove(in.SessionKey)
		final := msgs[len(msgs)-1]
		return Outcome{ConversationID: hc.conv.ID, UserSeq: um.Seq, Reply: Reply{Text: final.Content, Status: MsgFailed, Error: err.Error()}}
	}
	return Outcome{ConversationID: hc.conv.ID, UserSeq: um.Seq, Reply: toReply(&msgs[len(msgs)-1])}
}

// callAgent calls the agent; a panicking backend fails the turn (the user
// message stays, the user is told) instead of taking the gateway down.
func (m *Manager) callAgent(ctx context.Context, req agent.Request, onDelta func(string)) (reply agent.Reply, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("agent %s panicked: %v", m.agent.Name(), p)
		}
	}()
	return m.agent.Reply(ctx, req, onDelta)
}

// appendReply stores agent output after the conversation's last message. It
// does not require the conversation to be active: a sweep may archive it
// while the agent works, and the reply still belongs there.
func (m *Manager) appendReply(ctx context.Context, hc *hotConv, msgs []Message, now time.Time, tokens int64, cost float64, model string) error {
	for attempt := 0; ; attempt++ {
		for i := range msgs {
			msgs[i].Seq = hc.conv.LastSeq + int64(i) + 1
		}
		err := m.store.Append(ctx, Append{Conv: &hc.conv, ExpectSeq: hc.conv.LastSeq, Messages: msgs, At: now, Tokens: tokens, Cost: cost, Model: model})
		if err == nil {
			hc.push(msgs...)
			return nil
		}
		if !errors.Is(err, ErrStale) || attempt >= 3 {
			return err
		}
		fresh, lerr := m.store.Conversation(ctx, hc.conv.ID)
		if lerr != nil || fresh == nil {
			return errors.Join(err, lerr)
		}
		hc.conv = *fresh
		// The tail moved: the window follows, so the next turn's history
		// has what was stored meanwhile.
		if hc.window, lerr = m.store.RecentMessages(ctx, fresh.ID, hc.cap); lerr != nil {
			return errors.Join(err, lerr)
		}
	}
}

// load returns the session key's active conversation, creating one if none.
func (m *Manager) load(ctx context.Context, in Inbound, policy Policy, now time.Time) (*hotConv, error) {
	if hc, ok := m.hot.Get(in.SessionKey); ok && hc.conv.Status == StatusActive {
		return hc, nil
	}
	conv, err := m.store.ActiveConversation(ctx, in.SessionKey)
	if err != nil {
		return nil, err
	}
	if conv == nil {
		return m.create(ctx, in, policy, now)
	}
	hc := &hotConv{conv: *conv, cap: windowCap(policy)}
	if hc.window, err = m.store.RecentMessages(ctx, conv.ID, hc.cap); err != nil {
		return nil, err
	}
	m.hot.Add(in.SessionKey, hc)
	return hc, nil
}

// windowCap is how many recent messages a hot conversation keeps: the
// history window plus room for messages History leaves out.
func windowCap(p Policy) int { return p.MaxHistory + 16 }

func (m *Manager) create(ctx context.Context, in Inbound, policy Policy, now time.Time) (*hotConv, error) {
	conv := Conversation{
		ID: uuid.NewString(), SessionKey: in.SessionKey, Channel: in.Channel, Status: StatusActive,
		StartedAt: now, LastActivityAt: now, AgentName: m.agent.Name(), Model: m.agent.Model(),
		UserID: in.UserID, ChatID: in.ChatID,
	}
	if err := m.store.CreateConversation(ctx, &conv); err != nil {
		if errors.Is(err, ErrStale) {
			// Another process opened one first: use theirs.
			m.hot.Remove(in.SessionKey)
			existing, lerr := m.store.ActiveConversation(ctx, in.SessionKey)
			if lerr != nil || existing == nil {
				return nil, errors.Join(err, lerr)
			}
			hc := &hotConv{conv: *existing, cap: windowCap(policy)}
			hc.window, lerr = m.store.RecentMessages(ctx, existing.ID, hc.cap)
			if lerr != nil {
				return nil, lerr
			}
			m.hot.Add(in.SessionKey, hc)
			return hc, nil
		}
		return nil, err
	}
	hc := &hotConv{conv: conv, cap: windowCap(policy)}
	m.hot.Add(in.SessionKey, hc)
	return hc, nil
}

// Reset archives the session key's conversation (reason manual) and opens a
// new one, which it returns. It waits for a running turn of the key to end.
func (m *Manager) Reset(ctx context.Context, in Inbound) (ResetEvent, error) {
	if in.Channel == "" || in.SessionKey == "" {
		return ResetEvent{}, ErrBadInbound
	}
	release, err := m.acquire(ctx, in.SessionKey)
	if err != nil {
		return ResetEvent{}, err
	}
	defer release()
	now := m.now()
	ev := ResetEvent{Channel: in.Channel, SessionKey: in.SessionKey, Reason: ReasonManual}
	if conv, err := m.store.ActiveConversation(ctx, in.SessionKey); err != nil {
		return ResetEvent{}, err
	} else if conv != nil {
		if _, err := m.store.Archive(ctx, conv.ID, ReasonManual, now); err != nil {
			return ResetEvent{}, err
		}
		ev.OldConversation = conv.ID
	}
	m.hot.Remove(in.SessionKey)
	hc, err := m.create(ctx, in, m.Policy(in.Channel), now)
	if err != nil {
		return ResetEvent{}, err
	}
	ev.NewConversation = hc.conv.ID
	m.log.Info("conversation reset", slog.String("session_key", in.SessionKey), slog.String("reason", ReasonManual),
		slog.String("archived", ev.OldConversation), slog.String("conversation", ev.NewConversation))
	m.publish(ev)
	return ev, nil
}

// Stop cancels the running turn of a session key, if any. Its partial reply
// is stored as interrupted (stopped) and is not run again on restart.
func (m *Manager) Stop(key string) bool {
	m.mu.Lock()
	cancel, ok := m.running[key]
	m.mu.Unlock()
	if ok {
		cancel(errStoppedByUser)
	}
	return ok
}

// Shutdown stops taking turns and sweeps, lets running turns finish until
// ctx ends, then cancels the rest (their partial replies are stored as
// interrupted) and waits for them to be stored.
func (m *Manager) Shutdown(ctx context.Context) error {
	m.mu.Lock()
	m.closing = true
	m.mu.Unlock()
	m.drain()
	if m.cron != nil {
		<-m.cron.Stop().Done()
	}
	done := make(chan struct{})
	go func() {
		m.turns.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	m.mu.Lock()
	n := len(m.running)
	m.mu.Unlock()
	m.log.Warn("drain timeout: interrupting running turns", slog.Int("turns", n))
	m.cancel(errShutdown)
	select {
	case <-done:
		return nil
	case <-time.After(35 * time.Second): // bounded by appendReply's own timeout
		return errors.New("turns still running after the drain: their replies may be lost")
	}
}
