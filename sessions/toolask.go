package sessions

// Approval of tool calls (approve: ask). The call is put up as asking, with
// its expiry, in the ledger — so a restart asks again — and the channel
// asks the user whose turn it is (Route.Ask); other replicas are told
// (ledger.EventAsk), so that the user's clients connected there are asked
// too, and told when the ask is over (ledger.EventAskSettled). A decision
// (Approvals.DecideTool) moves the stored call, on whichever replica it
// arrives, and wakes the waiting turn: at once here, by an event
// elsewhere, and within toolPoll should the event be lost. An ask nobody
// answers in time counts as denied.

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/chatgate/chatgate/sessions/ledger"
)

// toolPoll is how often a turn waiting for a decision reads its call: a
// decision made on another replica reaches it within this even when the
// event telling of it is lost.
const toolPoll = time.Second

// Approvals are the users' decisions on tool calls: DecideTool records
// one, on whichever replica it arrives, and wakes the turn waiting for it
// when that turn runs here; PendingToolAsks are the asks still open. The
// ask itself is the channel's (Route.Ask).
type Approvals struct {
	store ToolLedger
	now   func() time.Time
	// announce tells the other replicas of a decision stored here, so
	// that a turn waiting for it there reads it at once.
	announce func(ledger.Event)

	mu    sync.Mutex
	waits map[int64]chan struct{} // call id → the turn waiting here for its decision
}

func newApprovals(store ToolLedger, now func() time.Time, announce func(ledger.Event)) *Approvals {
	return &Approvals{store: store, now: now, announce: announce, waits: map[int64]chan struct{}{}}
}

// waiter is a channel that wakes the turn waiting for call id, and how
// to stop waiting.
func (r *Approvals) waiter(id int64) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	r.mu.Lock()
	r.waits[id] = ch
	r.mu.Unlock()
	return ch, func() {
		r.mu.Lock()
		if r.waits[id] == ch {
			delete(r.waits, id)
		}
		r.mu.Unlock()
	}
}

// wake wakes the turn waiting for call id, if it waits here.
func (r *Approvals) wake(id int64) {
	r.mu.Lock()
	ch := r.waits[id]
	r.mu.Unlock()
	if ch != nil {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// ask puts call c up for a decision and waits for it: on return c is
// reread (allowed, or denied — also by expiry — or cancelled by the
// turn's cut), or the turn's context ended for a shutdown (the call
// stays asking, for the next run to ask again).
//
// An ask has one deadline for its whole life: the first ask sets it, and
// a run of the turn after a restart or a takeover keeps it (AskTool never
// moves it). An ask whose deadline passed while no gateway ran is not
// asked again: it expires at once.
func (tt *toolTurn) ask(ctx context.Context, c *ledger.ToolCall) error {
	m := tt.m
	timeout := m.opts.ApproveTimeout
	if timeout <= 0 {
		timeout = DefaultApproveTimeout
	}
	expires := m.now().Add(timeout)
	if c.ExpiresAt != nil {
		expires = *c.ExpiresAt
	}
	if err := m.untilStored(ctx, "ask for a tool call", func() error {
		return m.store.AskTool(ctx, c.ID, tt.claim, expires)
	}); err != nil {
		if errors.Is(err, ledger.ErrLostClaim) {
			return tt.reread(ctx, c) // decided meanwhile, or the claim is gone (the next step sees)
		}
		return err
	}
	c.State, c.ExpiresAt = ledger.ToolAsking, &expires
	wake, done := m.asks.waiter(c.ID)
	defer done()
	a := ToolAsk{Channel: tt.in.Channel, SessionKey: tt.in.SessionKey, UserID: tt.in.UserID, ChatID: tt.in.ChatID}
	a.Call = ToolEvent{ConversationID: c.ConversationID, Seq: tt.claim.Lead, ID: c.ID, CallID: c.CallID, Name: c.Name,
		Arguments: c.Arguments, Status: ToolAsking, ExpiresAt: expires}
	// The channel asks; a channel not registered yet (a turn resumed
	// while the gateway starts) asks once it is. ref is the channel's
	// reference to the ask it sent: this run's, or an earlier run's.
	var asked bool
	ref := c.AskRef
	askNow := func() {
		if asked || !m.now().Before(expires) {
			return
		}
		rt, _ := m.routes.route(tt.in.Channel)
		if rt.Ask == nil {
			return
		}
		asked = true
		a.Ref = ref
		got, err := rt.Ask(ctx, a)
		if err != nil {
			m.log.WarnContext(ctx, "asking for a tool call failed; it waits for its expiry", slog.String("session_key", tt.in.SessionKey),
				slog.String("tool", c.Name), slog.String("error", err.Error()))
		} else if got != "" {
			ref = got
			if err := m.store.SetToolAskRef(context.WithoutCancel(ctx), c.ID, ref); err != nil {
				m.log.WarnContext(ctx, "keeping a tool ask's reference failed", slog.String("error", err.Error()))
			}
		}
	}
	if m.now().Before(expires) {
		tt.event(c, ToolAsking, 0)
		m.relay.announceAsk(tt.in.Channel, tt.in.SessionKey, c, tt.claim.Lead)
	}
	askNow()
	// settle tells the user's channel the ask is over (how: c.State), so
	// that it takes its ask back, this run's or an earlier run's.
	settle := func() {
		if c.State == ledger.ToolDenied {
			tt.event(c, ToolDenied, 0) // (an allowed call's next event is its start)
		}
		a.Call.Status = c.State
		switch {
		case c.State == ledger.ToolAllowed:
			a.Call.Status = ToolStarted
		case c.DecidedBy == ledger.ToolExpiredBy:
			a.Call.Status = ToolExpired
		}
		m.relay.announceAskSettled(a)
		rt, _ := m.routes.route(tt.in.Channel)
		if rt.AskSettled == nil || (!asked && ref == "") {
			return
		}
		rt.AskSettled(context.WithoutCancel(ctx), a, ref)
	}
	poll := time.NewTicker(toolPoll)
	defer poll.Stop()
	for {
		left := expires.Sub(m.now())
		if left <= 0 {
			moved, err := m.store.DecideTool(context.WithoutCancel(ctx), c.ID, false, ledger.ToolExpiredBy, ToolExpiredText, m.now())
			if err == nil || moved {
				if err := tt.reread(ctx, c); err != nil {
					return err
				}
				if c.State != ledger.ToolAsking {
					settle()
					return nil
				}
			}
			left = toolPoll // storage failed: try again
		}
		timer := m.opts.After(min(left, toolPoll))
		select {
		case <-ctx.Done():
			text, cut := cutBefore(ctx)
			if !cut {
				return context.Cause(ctx)
			}
			// /stop or a newer message: the ask is over, and the call
			// never runs (also when it was allowed meanwhile).
			sctx := context.WithoutCancel(ctx)
			for c.State == ledger.ToolAsking || c.State == ledger.ToolAllowed {
				if _, err := tt.settle(sctx, c, c.State, "", ledger.ToolCancelled, text); err != nil {
					return err
				}
			}
			settle()
			return nil
		case <-wake:
		case <-poll.C:
		case <-timer:
		}
		if err := tt.reread(ctx, c); err != nil {
			continue // storage, or the turn's end: the next pass sees
		}
		if c.State != ledger.ToolAsking {
			settle()
			return nil
		}
		askNow()
	}
}

// DecideTool records a user's decision on an asking call. Only the user
// whose turn it is may decide (in a group, others' taps are refused,
// ErrToolNotYours); an expired ask is refused with ErrToolExpired, and a
// call decided or cancelled already with ErrToolDecided.
func (r *Approvals) DecideTool(ctx context.Context, d ToolDecision) (ToolEvent, error) {
	c, err := r.store.ToolCall(ctx, d.ID)
	if err != nil {
		return ToolEvent{}, err
	}
	if c == nil {
		return ToolEvent{}, ErrToolNotFound
	}
	ev := ToolEvent{ConversationID: c.ConversationID, Seq: c.TurnSeq, ID: c.ID, CallID: c.CallID, Name: c.Name, Arguments: c.Arguments, Status: c.State}
	if (c.UserID != "" && d.UserID != c.UserID) || (c.UserID == "" && d.SessionKey != c.SessionKey) {
		return ev, ErrToolNotYours
	}
	switch {
	case c.DecidedBy == ledger.ToolExpiredBy || (c.State == ledger.ToolAsking && c.ExpiresAt != nil && !r.now().Before(*c.ExpiresAt)):
		return ev, ErrToolExpired
	case c.State != ledger.ToolAsking:
		return ev, ErrToolDecided
	}
	by := d.UserID
	if by == "" {
		by = d.SessionKey
	}
	moved, err := r.store.DecideTool(ctx, c.ID, d.Allow, by, ToolDeniedText, r.now())
	if err != nil {
		return ev, err
	}
	if !moved {
		if got, err := r.store.ToolCall(ctx, c.ID); err == nil && got != nil && got.DecidedBy == ledger.ToolExpiredBy {
			return ev, ErrToolExpired
		}
		return ev, ErrToolDecided
	}
	ev.Status = ToolDenied
	if d.Allow {
		ev.Status = ToolStarted
	}
	r.wake(c.ID)
	r.announce(ledger.Event{Kind: ledger.EventAskSettled, Key: c.SessionKey, Call: c.ID})
	return ev, nil
}

// PendingToolAsks are the calls of the key waiting for a decision, oldest
// first: a channel asks them again when its user comes back (a WebSocket
// client's hello) — the turn waiting for them needs no new ask. An ask
// past its deadline is not among them: it counts as denied, whether or
// not a turn is there to store that yet.
func (r *Approvals) PendingToolAsks(ctx context.Context, key string) ([]ToolAsk, error) {
	calls, err := r.store.AskingToolCalls(ctx, key)
	if err != nil {
		return nil, err
	}
	out := make([]ToolAsk, 0, len(calls))
	now := r.now()
	for _, c := range calls {
		if c.ExpiresAt != nil && !now.Before(*c.ExpiresAt) {
			continue
		}
		a := ToolAsk{SessionKey: c.SessionKey, UserID: c.UserID, Call: ToolEvent{ConversationID: c.ConversationID, Seq: c.TurnSeq,
			ID: c.ID, CallID: c.CallID, Name: c.Name, Arguments: c.Arguments, Status: ToolAsking}}
		if c.ExpiresAt != nil {
			a.Call.ExpiresAt = *c.ExpiresAt
		}
		out = append(out, a)
	}
	return out, nil
}
