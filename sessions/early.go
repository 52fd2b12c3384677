package sessions

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/gopool"
)

// An early call is the agent call of a message stored already claimed
// (its own turn, run by this replica at once: see accept), started while
// the message's commit is still in flight. A model's time to first token
// then overlaps the commit instead of following it — on SQLite with
// synchronous=FULL the commit is an fsync, which a user otherwise waits
// for twice before seeing anything.
//
// It is sound only there: the turn is this replica's before the commit
// lands (the row is written claimed, attempt 1, with nothing before it
// waiting), so no other runner can start the same turn, and the request is
// built from the hot copy under the state lock, from exactly what the
// commit makes true — the history before the message and the message. What
// the model streams is held back until the commit has landed and OnAck has
// been called, so no client sees a reply to a message that is not stored;
// a failed commit cancels the call and the user gets the commit's error,
// as before (nothing was acknowledged, nothing shown).
//
// The call runs under the key's turn lock and in the turn's context
// (registered as running), both taken when it starts and handed to the
// runner with the stored message: Stop, interrupt and Shutdown reach it
// as they reach any running turn, and no other turn of the key (the
// rescuer's) can run beside it.
type earlyCall struct {
	ctx context.Context // the turn's; Stop, interrupt and Shutdown cancel it
	end func()          // ends the turn's context
	// trace is the turn's trace context (its span, when tracing), begun
	// with the call so that the call is a child of the turn; endTrace
	// ends it. The runner takes both.
	trace    context.Context
	endTrace func(error)
	ended    sync.Once
	unlock   func()        // the key's turn lock, held until the turn ends
	done     chan struct{} // the agent returned
	reply    agent.Reply
	err      error
	// history and model are the request's, for the turn's later tool
	// rounds.
	history []agent.Message
	model   *agent.ModelSpec

	// sent is closed once the call's request is written, or it streamed
	// or returned (wrote).
	sent     chan struct{}
	sentOnce sync.Once

	mu       sync.Mutex
	partial  strings.Builder // every delta, for an interrupted turn's partial reply
	held     []string        // deltas before release
	heldBuf  [2]string       // held's first, usually all of them
	released bool
	onDelta  func(string)
}

// earlyLeaseWait bounds the wait for the lease of an early call, taken
// under the key's state lock: one statement's time.
const earlyLeaseWait = 50 * time.Millisecond

// startEarly starts the agent call of a message about to be stored
// claimed, if the key's turn lock is free (the rescuer may hold it for
// another turn of the key: then the turn starts after the commit, as any
// other) and its lease is this replica's at once (kept from the key's
// last turn, or free; on SQLite always). With gate, the request's notes
// wait for the message's commit (notesGate). Called under the key's state
// lock; nil when not started.
func (m *Manager) startEarly(in Inbound, channel string, ag agent.Agent, gate *notesGate, req agent.Request) *earlyCall {
	key := in.SessionKey
	unlock, err := m.lockTurn(m.life.base, key, earlyLeaseWait)
	if err != nil {
		return nil // the turn runs after the commit, once its lock and lease are free
	}
	tctx, endTrace := m.tr.traceTurn(m.life.base, in)
	ctx, end := m.life.startTurn(key)
	ctx = m.tr.withTurn(tctx, ctx)
	e := &earlyCall{ctx: ctx, end: end, trace: tctx, endTrace: endTrace, unlock: unlock, done: make(chan struct{}), history: req.History, model: req.Model}
	e.held = e.heldBuf[:0]
	e.sent = make(chan struct{})
	// On a goroutine whose stack earlier calls grew (internal/gopool):
	// the model library's request encoding runs deep.
	gopool.Go(func() {
		defer close(e.done)
		defer e.wrote()
		m.prepare(ctx, ag, channel, in, &req, gate) // here, not under the state lock
		e.reply, e.err = m.callAgent(whenWritten(ctx, e.wrote), ag, req, e.delta)
	})
	// The model's request goes out before the message's commit starts:
	// the caller hands the append to the committer next, whose work
	// would otherwise hold the core the call needs (docs/performance.md,
	// "The early call's request before the commit"). The request is seen
	// written through whenWritten; an agent that makes no HTTP request
	// frees the caller with its first delta or its return, and
	// earlySendWait bounds the wait. A request whose notes wait for the
	// commit (gate) cannot go before it.
	if gate != nil {
		return e
	}
	t := time.NewTimer(m.earlySendWait)
	select {
	case <-e.sent:
	case <-t.C:
	}
	t.Stop()
	return e
}

// earlySendWait bounds how long a message's commit waits for its early
// call's request to be written.
const earlySendWait = 2 * time.Millisecond

// wrote tells startEarly that the call's request is out.
func (e *earlyCall) wrote() { e.sentOnce.Do(func() { close(e.sent) }) }

// delta keeps a streamed piece for the partial reply and passes it on
// once released; until then it is held.
func (e *earlyCall) delta(d string) {
	e.wrote()
	e.mu.Lock()
	defer e.mu.Unlock() // held across onDelta: deltas reach the hook in order
	e.partial.WriteString(d)
	if !e.released {
		e.held = append(e.held, d)
		return
	}
	if e.onDelta != nil {
		e.onDelta(d)
	}
}

// release passes the held deltas, then every later one, to onDelta
// (which may be nil). Called once the message is stored and acknowledged.
func (e *earlyCall) release(onDelta func(string)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.released, e.onDelta = true, onDelta
	if onDelta != nil {
		for _, d := range e.held {
			onDelta(d)
		}
	}
	e.held = nil
}

// result waits for the agent and returns what it answered and every
// delta it streamed.
func (e *earlyCall) result() (agent.Reply, error, string) {
	<-e.done
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.reply, e.err, e.partial.String()
}

// stop ends the turn's context (cancelling the call if it still runs)
// and waits for the agent to return. Safe to call more than once.
func (e *earlyCall) stop() {
	e.ended.Do(e.end)
	<-e.done
}

// abandon stops the call and gives back the turn lock: the message was
// not stored (err), so nothing of the call was shown.
func (e *earlyCall) abandon(err error) {
	e.stop()
	e.unlock()
	e.endTrace(err)
}
