package sessions

// Routes: how a turn's work finds its way back to a channel. A channel
// registers one Route, whose handlers say what it does; the turn path
// (tracks, deliver, fetchImages, the tool asks), the rescuer and the
// relay of other replicas' events find them here.

import (
	"context"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"

	"github.com/chatgate/chatgate/sessions/ledger"
)

// Route is how the session manager's work reaches one channel. Each
// handler is one thing the channel does; a nil handler means it does not
// do that. A channel registers its route when it is built
// (Routes.Register).
type Route struct {
	// Deliver delivers replies outside a live turn: the rescuer's, and
	// those whose delivery never completed (Delivery). Without it, the
	// rescuer here leaves the channel's turns to a replica, or a later
	// start, that has one.
	Deliver DeliverFunc
	// Track says that the channel confirms delivery (with Deliver): its
	// turns stay open after they are answered until Manager.Delivered is
	// called, and a delivery that did not complete (the process died) is
	// claimed and made again — at most one duplicate, in the window
	// between a send and its mark.
	Track bool
	// Ask asks the channel's user to allow or deny a tool call; without
	// it the call waits for its expiry, or for a route registered later
	// to ask. AskSettled takes the ask back once the call is decided or
	// expired — a.Call.Status says how — such as removing the buttons.
	// Both are told too of the asks of turns running on other replicas,
	// and of their ends (ToolAsk.Remote), on a goroutine of their own, in
	// the order they were made.
	Ask        ToolAsker
	AskSettled func(ctx context.Context, a ToolAsk, ref string)
	// Fetch returns the bytes of the images the channel's users sent;
	// without it, they reach the agent as no longer available.
	Fetch Fetcher
	// Reset is told of every archive of the channel's conversations —
	// manual, lazy and swept, made here or (ResetEvent.Remote) by another
	// replica — and of every return to an earlier conversation (reason
	// resume). It runs synchronously and must be quick.
	Reset func(ResetEvent)
	// Reply is told of the replies other replicas store in the channel's
	// conversations, so that the channel delivers them to its clients
	// connected here (Manager.StoredReply loads one); replies this replica
	// stores are not told: its channels deliver them themselves. It is
	// told of ReplyEvent.Missed too. It runs on the goroutine receiving
	// events and must be quick.
	Reply func(ReplyEvent)
}

// Routes are the channels' routes, one per channel name. Every event
// goes to the route of its channel only (ResetEvent.Channel,
// ReplyEvent.Channel), except a ReplyEvent.Missed, which belongs to no
// channel and goes to every route.
type Routes struct {
	tr  *tracing
	log *slog.Logger
	// delivered records a tracked delivery's outcome under its claim
	// (Manager.Delivered); delivers tells the rescuer that a route which
	// delivers was registered, so that it looks again at once.
	delivered func(ctx context.Context, t ledger.TurnRef, ref string, err error) error
	delivers  func()

	mu     sync.Mutex // one Register at a time
	routes atomic.Pointer[map[string]Route]
	// archive are the listeners of this replica's archives (OnArchive).
	archive atomic.Pointer[[]func(ResetEvent)]
}

// OnArchive adds fn to what is told of every conversation this replica
// archives (a reset made here: on arrival, by a sweep, on request), after
// the archive is stored; not of another replica's. fn must not block:
// it is called on the path of the message that caused the reset.
func (r *Routes) OnArchive(fn func(ResetEvent)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var next []func(ResetEvent)
	if cur := r.archive.Load(); cur != nil {
		next = append(next, *cur...)
	}
	next = append(next, fn)
	r.archive.Store(&next)
}

// archived tells the archive listeners of a reset made here.
func (r *Routes) archived(ev ResetEvent) {
	if fns := r.archive.Load(); fns != nil {
		for _, fn := range *fns {
			fn(ev)
		}
	}
}

func newRoutes(tr *tracing, log *slog.Logger, delivered func(ctx context.Context, t ledger.TurnRef, ref string, err error) error, delivers func()) *Routes {
	r := &Routes{tr: tr, log: log, delivered: delivered, delivers: delivers}
	r.routes.Store(&map[string]Route{})
	return r
}

// Register sets the channel's route, replacing one it registered before:
// a channel that can deliver only later (the Telegram bot, once it is
// connected) registers again then, with Deliver. Register before turns
// run.
func (r *Routes) Register(channel string, rt Route) {
	r.mu.Lock()
	next := maps.Clone(*r.routes.Load())
	next[channel] = rt
	r.routes.Store(&next)
	r.mu.Unlock()
	if rt.Deliver != nil {
		// Turns of this channel that passes left alone may be claimable
		// now.
		r.delivers()
	}
}

// route is the channel's route; false before it registered one.
func (r *Routes) route(channel string) (Route, bool) {
	rt, ok := (*r.routes.Load())[channel]
	return rt, ok
}

// delivering reports whether the channel delivers replies outside a
// live turn (Route.Deliver).
func (r *Routes) delivering(channel string) bool {
	rt, _ := r.route(channel)
	return rt.Deliver != nil
}

// tracks reports whether the channel confirms delivery (Route.Track).
func (r *Routes) tracks(channel string) bool {
	rt, _ := r.route(channel)
	return rt.Deliver != nil && rt.Track
}

// reset tells the route of the event's channel about a reset.
func (r *Routes) reset(ev ResetEvent) {
	if rt, _ := r.route(ev.Channel); rt.Reset != nil {
		rt.Reset(ev)
	}
}

// ask tells the route of a's channel about another replica's ask.
func (r *Routes) ask(ctx context.Context, a ToolAsk) {
	if rt, _ := r.route(a.Channel); rt.Ask != nil {
		// A client not connected here is asked by the hello it comes
		// back with.
		_, _ = rt.Ask(ctx, a)
	}
}

// askSettled tells the route of a's channel that another replica's ask
// is over.
func (r *Routes) askSettled(ctx context.Context, a ToolAsk) {
	if rt, _ := r.route(a.Channel); rt.AskSettled != nil {
		rt.AskSettled(ctx, a, "")
	}
}

// reply tells the route of the event's channel about a reply another
// replica stored, and every route about a ReplyEvent.Missed.
func (r *Routes) reply(ev ReplyEvent) {
	if !ev.Missed {
		if rt, _ := r.route(ev.Channel); rt.Reply != nil {
			rt.Reply(ev)
		}
		return
	}
	for _, rt := range *r.routes.Load() {
		if rt.Reply != nil {
			rt.Reply(ev)
		}
	}
}
