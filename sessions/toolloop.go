package sessions

// The tool loop of a turn (Manager.callFor's). A model's answer that asks
// for tools is a round: its assistant message is stored, each call is
// recorded, started under the turn's claim, run, and its outcome kept
// (ledger.ToolCall), the results are stored as tool messages, and the
// model is called again with them — until it answers without tools, or
// the rounds run out and it is told to answer without them.
//
// A turn run again (after a shutdown, a crash, an outage or a takeover)
// resumes from what is stored: the rounds it stored are sent again, and a
// round whose results are not all stored is finished first — a call with
// a kept outcome is never run again, a call started and never answered
// runs again only when its tool is idempotent, and otherwise its result
// is ToolUnknownText, for the model to decide.

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions/ledger"
)

// What the model is told of a call that did not run to its end.
const (
	ToolUnknownText   = "The gateway stopped while this call ran; whether it took effect is unknown."
	ToolDeniedText    = "The user denied this call."
	ToolExpiredText   = "Nobody allowed this call in time; it was not run."
	ToolForbiddenText = "The operator does not allow this tool; it was not run."
	ToolGoneText      = "No server offers this tool now; it was not run."
	ToolStoppedText   = "The user stopped the turn while this call ran; whether it took effect is unknown."
	ToolCutText       = "A newer message cut the turn while this call ran; whether it took effect is unknown."
	// ToolStoppedBeforeText and ToolCutBeforeText are what the model is
	// told of a call the turn's cut found not started (asking, or
	// allowed and not yet run): it never runs.
	ToolStoppedBeforeText = "The user stopped the turn before this call ran; it was not run."
	ToolCutBeforeText     = "A newer message cut the turn before this call ran; it was not run."
	// ToolUnstoredText is the kept outcome of a call whose own outcome
	// the database rejected for good (ledger.ErrRejected).
	ToolUnstoredText = "The gateway could not store this call's outcome; the turn failed."
	// ToolRoundsText is the reply of a model that still asked for tools
	// when told to answer without them, and wrote nothing.
	ToolRoundsText = "Sorry — I could not finish this within the tools I may use. Please try again, or ask differently."
)

// Defaults of the tool loop.
const (
	DefaultMaxToolRounds  = 8
	DefaultApproveTimeout = 10 * time.Minute
)

// ToolObserver is an Observer that also counts tool calls (by server, tool
// and outcome) and times them.
type ToolObserver interface {
	ToolCalled(server, tool, outcome string, d time.Duration)
}

// toolTurn is the tool side of one turn: its claim, what it offers and
// what it stored so far.
type toolTurn struct {
	m       *Manager
	hc      *hotConv
	b       *ledger.Batch
	in      Inbound
	hooks   Hooks
	claim   ledger.TurnClaim
	offered []agent.Tool
	// rounds are the turn's stored rounds, in seq order: each assistant
	// message with tool calls, then its results.
	rounds []ledger.Message
	n      int // rounds so far
	// images are the pictures this run's calls returned, with their
	// bytes, by their result's index in rounds: the turn's next model
	// call gets them without reading them back (fetchImages skips an
	// attachment that has its bytes).
	images map[int][]agent.Attachment
}

// offered are the tools a turn of in offers the model.
func (m *Manager) offered(in Inbound) []agent.Tool {
	if m.opts.Tools == nil {
		return nil
	}
	return m.memory.offered(in, m.opts.Tools.Offered(in.Channel, in.UserID))
}

// newToolTurn returns the tool side of a turn. On a turn run before (an
// attempt after the first), it reads what the earlier runs stored.
func (m *Manager) newToolTurn(ctx context.Context, hc *hotConv, b *ledger.Batch, in Inbound, h Hooks) (*toolTurn, error) {
	tt := &toolTurn{m: m, hc: hc, b: b, in: in, hooks: h, offered: m.offered(in), images: map[int][]agent.Attachment{},
		claim: ledger.TurnClaim{ConversationID: hc.conv.ID, Lead: b.Lead(), Owner: m.opts.ReplicaID, Attempt: b.Attempt}}
	if b.Attempt <= 1 {
		return tt, nil
	}
	members := map[int64]bool{}
	for _, r := range b.Rows {
		members[r.Seq] = true
	}
	after, err := m.store.MessagesAfter(ctx, hc.conv.ID, b.Rows[0].Seq, 0)
	if err != nil {
		return nil, err
	}
	for _, msg := range after {
		if msg.Status != ledger.MsgOK || !members[msg.ReplyTo] {
			continue
		}
		switch {
		case msg.Role == agent.RoleAssistant && msg.ToolCalls != "":
			tt.rounds = append(tt.rounds, msg)
			tt.n++
		case msg.Role == agent.RoleTool:
			tt.rounds = append(tt.rounds, msg)
		}
	}
	return tt, nil
}

// turn is what the model gets of the turn so far.
func (tt *toolTurn) turn() []agent.Message {
	out := make([]agent.Message, len(tt.rounds))
	for i := range tt.rounds {
		out[i] = agentMessage(&tt.rounds[i])
		if imgs, ok := tt.images[i]; ok {
			out[i].Attachments = slices.Clone(imgs)
		}
	}
	return out
}

// unfinished is the last stored round's assistant message when some of
// its calls have no stored result, else nil.
func (tt *toolTurn) unfinished() *ledger.Message {
	for i := len(tt.rounds) - 1; i >= 0; i-- {
		msg := &tt.rounds[i]
		if msg.Role != agent.RoleAssistant {
			continue
		}
		answered := map[string]bool{}
		for _, r := range tt.rounds[i+1:] {
			answered[r.ToolCallID] = true
		}
		for _, c := range agentMessage(msg).ToolCalls {
			if !answered[c.ID] {
				return msg
			}
		}
		return nil
	}
	return nil
}

// round stores an answer asking for tools, runs its calls and keeps
// their outcomes; the results' store is under way when it returns
// (finish). It returns an error when the turn cannot go on: its claim is
// gone, storage never answered, or ctx ended (the outcome of every call
// that ran is kept all the same).
func (tt *toolTurn) round(ctx context.Context, am agent.Message, usage agent.Usage, cost float64, model models) (*roundStore, error) {
	now := tt.m.now()
	msg := ledger.Message{ConversationID: tt.hc.conv.ID, Role: agent.RoleAssistant, Content: am.Content,
		ToolCalls: encodeToolCalls(am.ToolCalls), ReplyTo: tt.claim.Lead, Status: ledger.MsgOK, CreatedAt: now,
		PromptTokens: usage.PromptTokens, CompletionTkns: usage.CompletionTokens, Cost: cost}
	stored, err := tt.m.appendRound(ctx, tt, []ledger.Message{msg}, usage.TotalTokens, cost, model)
	if err != nil {
		return nil, err
	}
	tt.rounds = append(tt.rounds, stored...)
	tt.n++
	return tt.finish(ctx, &tt.rounds[len(tt.rounds)-1])
}

// finish runs the calls of the stored assistant message msg that have no
// stored result, in parallel, and starts the store of their results in
// call order (roundStore); nil when every result was stored already.
func (tt *toolTurn) finish(ctx context.Context, msg *ledger.Message) (*roundStore, error) {
	m := tt.m
	answered := map[string]bool{}
	for _, r := range tt.rounds {
		if r.Role == agent.RoleTool && r.ReplyTo == msg.ReplyTo {
			answered[r.ToolCallID] = true
		}
	}
	var want []ledger.ToolCall
	for _, c := range agentMessage(msg).ToolCalls {
		if answered[c.ID] {
			continue
		}
		want = append(want, ledger.ToolCall{ConversationID: msg.ConversationID, MessageSeq: msg.Seq, CallID: c.ID, TurnSeq: tt.claim.Lead,
			SessionKey: tt.in.SessionKey, UserID: tt.in.UserID, Name: c.Name, Arguments: c.Arguments, CreatedAt: m.now()})
	}
	if len(want) == 0 {
		return nil, nil
	}
	var rows []ledger.ToolCall
	if err := m.untilStored(ctx, "record tool calls", func() (err error) {
		rows, err = m.store.OpenToolCalls(ctx, want)
		return err
	}); err != nil {
		return nil, err
	}
	outs := make([]toolOutcome, len(rows))
	var running atomic.Int32
	running.Store(int32(len(rows)))
	var wg sync.WaitGroup
	for i := range rows {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i] = tt.run(ctx, &rows[i], &running)
			if !outs[i].counted {
				running.Add(-1)
			}
		}()
	}
	wg.Wait()
	var results []ledger.Message
	var failed error
	var last func() error
	for i, o := range outs {
		if o.err != nil {
			failed = errors.Join(failed, o.err)
			continue
		}
		if o.end != nil {
			last = o.end
		}
		results = append(results, ledger.Message{ConversationID: msg.ConversationID, Role: agent.RoleTool, Content: o.result,
			ToolCallID: rows[i].CallID, ReplyTo: tt.claim.Lead, Status: ledger.MsgOK, CreatedAt: m.now(),
			Attachments: encodeAttachments(mediaAttachments(o.media))})
		if imgs := mediaAttachments(o.media); len(imgs) > 0 {
			tt.images[len(tt.rounds)+len(results)-1] = imgs // (with their bytes, for this turn's next call)
		}
	}
	if failed != nil {
		// Not every call has an outcome (the turn ends: shutdown, lost
		// claim): the next run finishes the round, and stores its results
		// together, so that a call and its results are never apart.
		if last != nil {
			failed = errors.Join(failed, last())
		}
		return nil, failed
	}
	tt.rounds = append(tt.rounds, results...)
	// Stored even when the turn was cut meanwhile (/stop, a newer
	// message): every call has its outcome, and the transcript keeps the
	// calls with their results.
	sctx := context.WithoutCancel(ctx)
	rs := &roundStore{done: make(chan struct{}), store: func() error {
		if last != nil {
			if err := last(); err != nil {
				return err
			}
		}
		_, err := m.appendRound(sctx, tt, slices.Clone(results), 0, 0, models{})
		return err
	}}
	return rs, nil
}
