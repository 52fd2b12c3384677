package sessions

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/chatgate/chatgate/sessions/ledger"
)

// ReplyEvent tells that another replica stored a turn's reply. Load it
// with Conversations.StoredReply; the event itself carries no text.
type ReplyEvent struct {
	Channel        string
	SessionKey     string
	ConversationID string
	Seq            int64  // the user message's seq
	ReplySeq       int64  // the reply's seq
	State          string // the turn's state: answered, failed, expired, interrupted
	// Missed, when true, says that events of other replicas may have been
	// lost (the connection listening for them dropped and is back); the
	// other fields are empty. Look again at what you show.
	Missed bool
}

// ErrNoReply means the reply an event named is not stored (any more).
var ErrNoReply = errors.New("reply not stored")

// relay is the manager's side of cross-replica events: it subscribes to
// the other replicas' (listen), hands each to what it concerns (on: the
// Routes of the channels among others), and tells this replica's resets
// to the channel's route and, while another replica lives, to the others
// (publish, announce).
type relay struct {
	m      *Manager
	events Events // nil: no other replica to tell (Options.Events)

	// asksMu guards lastAsk: the end of the last ask event handed on, so
	// that the next waits for it (askInOrder).
	asksMu  sync.Mutex
	lastAsk chan struct{}
}

// Cross-replica events, the manager's side: replicas sharing a PostgreSQL
// database tell each other (Options.Events; package store/notifier) that
// a turn's reply was stored or that a conversation was reset, so that a
// client connected to another replica gets it live, and that a turn
// became claimable, so that another replica's rescuer looks at once. A
// notification only wakes others up: its receiver reads the rows, which
// stay the truth, so one that is lost costs latency, never a message.

// listen subscribes the manager to the other replicas' events, when
// it has them (Options.Events). It waits a few seconds at most for the listen
// connection; past that, listening starts when the database answers.
func (r *relay) listen() {
	m := r.m
	if r.events == nil {
		return
	}
	ctx, cancel := context.WithTimeout(m.life.base, 10*time.Second)
	defer cancel()
	if err := r.events.Listen(ctx, r.on); err != nil {
		m.log.Warn("not yet receiving events of other replicas: their replies reach clients here on resume", slog.String("error", err.Error()))
	}
	// Replicas publish only while another one lives (peers): this one
	// tells them it does, rather than wait for their next look.
	r.events.Publish(ledger.Event{Kind: ledger.EventHello, Origin: m.opts.ReplicaID})
}

// on handles an event of any replica.
func (r *relay) on(ev ledger.Event) {
	m := r.m
	if ev.Missed {
		// A turn may have become claimable meanwhile, and replies may
		// have been stored for clients connected here; a key may have
		// chosen another model.
		m.standing.forgetChoice("")
		m.rescue.Wake()
		m.routes.reply(ReplyEvent{Missed: true})
		return
	}
	if ev.Origin == m.opts.ReplicaID {
		return
	}
	m.hb.setPeers(true)
	if ev.Kind == ledger.EventHello || ev.Kind == ledger.EventWant {
		return // (a want is the store's, for its kept leases)
	}
	if ev.Kind == ledger.EventModel {
		m.standing.forgetChoice(ev.Key) // read again at the key's next turn
		return
	}
	if ev.Kind == ledger.EventAsk || ev.Kind == ledger.EventAskSettled {
		r.onAsk(ev)
		return
	}
	// Another replica changed the key's conversation: the cached copy
	// would fail its next append and be reloaded anyway.
	m.hot.Remove(ev.Key)
	switch ev.Kind {
	case ledger.EventReply:
		if ev.State == ledger.TurnInterrupted {
			m.rescue.Wake() // a shutdown left it claimable: run it here, now
		}
		m.routes.reply(ReplyEvent{Channel: ev.Channel, SessionKey: ev.Key, ConversationID: ev.Conv,
			Seq: ev.Seq, ReplySeq: ev.Reply, State: ev.State})
	case ledger.EventReset:
		m.routes.reset(ResetEvent{Channel: ev.Channel, SessionKey: ev.Key, OldConversation: ev.Old, NewConversation: ev.Conv,
			Reason: ev.Reason, Remote: true})
	}
}

// onAsk hands another replica's ask, or its end, to the route of its
// channel (ToolAsk.Remote), and wakes a turn here waiting for a decision
// stored elsewhere. The ask is read from the ledger (the event names the
// call only; its arguments are the model's, of any size), and it is not
// shown once it is over. Asks and ends are handed on in the order they
// came, so that an ask's end never overtakes the ask.
func (r *relay) onAsk(ev ledger.Event) {
	m := r.m
	if ev.Kind == ledger.EventAskSettled {
		m.asks.wake(ev.Call)
		if ev.Channel == "" || !askEnds[ev.State] {
			return // a decision only: the turn that waited for it tells its end
		}
		a := ToolAsk{Channel: ev.Channel, SessionKey: ev.Key, Remote: true,
			Call: ToolEvent{ConversationID: ev.Conv, Seq: ev.Seq, ID: ev.Call, Status: ev.State}}
		r.askInOrder(func(ctx context.Context) { m.routes.askSettled(ctx, a) })
		return
	}
	r.askInOrder(func(ctx context.Context) {
		// Read until storage answers, within askTimeout: a blip does not
		// drop the ask (its clients here would see it only at their next
		// hello).
		var c *ledger.ToolCall
		err := m.untilStored(ctx, "reading another replica's ask", func() (err error) {
			c, err = m.store.ToolCall(ctx, ev.Call)
			return err
		})
		if err != nil {
			m.log.Warn("showing another replica's ask failed; its clients here get it with their next hello",
				slog.Int64("call", ev.Call), slog.String("error", err.Error()))
			return
		}
		if c == nil || c.State != ledger.ToolAsking || c.SessionKey != ev.Key || c.ExpiresAt == nil || !m.now().Before(*c.ExpiresAt) {
			return // over already
		}
		m.routes.ask(ctx, ToolAsk{Channel: ev.Channel, SessionKey: c.SessionKey, UserID: c.UserID, Remote: true,
			Call: ToolEvent{ConversationID: c.ConversationID, Seq: c.TurnSeq, ID: c.ID, CallID: c.CallID, Name: c.Name,
				Arguments: c.Arguments, Status: ToolAsking, ExpiresAt: *c.ExpiresAt}})
	})
}

// askEnds are the ends of an ask a channel is told (ToolAsk.Call.Status).
var askEnds = map[string]bool{ToolStarted: true, ToolDenied: true, ToolExpired: true, ToolCancelled: true}

// askTimeout bounds the read and the hand-on of one ask event.
const askTimeout = 10 * time.Second

// askInOrder runs fn on a goroutine of its own (the events' goroutine
// must not wait on the database) once the ask events before it are
// handed on. The drain waits for it; once the drain began, asks are not
// handed on (the channels are closing their clients).
func (r *relay) askInOrder(fn func(ctx context.Context)) {
	if !r.m.life.enterSweep() {
		return
	}
	r.asksMu.Lock()
	prev, done := r.lastAsk, make(chan struct{})
	r.lastAsk = done
	r.asksMu.Unlock()
	go func() {
		defer r.m.life.leaveSweep()
		defer close(done)
		if prev != nil {
			<-prev
		}
		ctx, cancel := context.WithTimeout(r.m.life.base, askTimeout)
		defer cancel()
		fn(ctx)
	}()
}

// announceAsk tells other replicas that call c of the turn led by lead
// asks its user, so that their channels ask the user's clients there.
func (r *relay) announceAsk(channel, key string, c *ledger.ToolCall, lead int64) {
	r.announce(ledger.Event{Kind: ledger.EventAsk, Channel: channel, Key: key, Conv: c.ConversationID, Seq: lead, Call: c.ID})
}

// announceAskSettled tells other replicas that the ask a names is over
// (a.Call.Status says how), so that their channels take it back.
func (r *relay) announceAskSettled(a ToolAsk) {
	r.announce(ledger.Event{Kind: ledger.EventAskSettled, Channel: a.Channel, Key: a.SessionKey, Conv: a.Call.ConversationID,
		Seq: a.Call.Seq, Call: a.Call.ID, State: a.Call.Status})
}

// publish tells a reset made here to the metrics, to the other replicas
// and to the route of its channel.
func (r *relay) publish(ev ResetEvent) {
	r.m.opts.Observer.ResetDone(ev.Channel, ev.Reason, 1)
	r.announceReset(ev)
	r.m.routes.reset(ev)
	r.m.routes.archived(ev)
}

// announce publishes an event of this replica, when the store carries
// events.
func (r *relay) announce(ev ledger.Event) {
	m := r.m
	if !m.hb.peers.Load() || r.events == nil {
		return // nobody else to tell; the rows stay the truth
	}
	ev.Origin = m.opts.ReplicaID
	r.events.Publish(ev)
}

// announceReply tells other replicas that the turn of user message
// userSeq has its reply replySeq stored, in state (interrupted: claimable
// again).
func (r *relay) announceReply(conv *ledger.Conversation, userSeq, replySeq int64, state string) {
	r.announce(ledger.Event{Kind: ledger.EventReply, Channel: conv.Channel, Key: conv.SessionKey, Conv: conv.ID,
		Seq: userSeq, Reply: replySeq, State: state})
}

// announceReset tells other replicas about a reset made here; forwarded
// resets are not announced again.
func (r *relay) announceReset(ev ResetEvent) {
	if ev.Remote {
		return
	}
	r.announce(ledger.Event{Kind: ledger.EventReset, Channel: ev.Channel, Key: ev.SessionKey, Conv: ev.NewConversation,
		Old: ev.OldConversation, Reason: ev.Reason})
}

// PeersKnown is closed once this replica first learns that another one
// lives (its heartbeat, or an event of it): from then on it publishes its
// events.
func (m *Manager) PeersKnown() <-chan struct{} { return m.hb.known }
