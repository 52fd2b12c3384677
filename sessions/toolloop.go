package sessions

// The tool loop of a turn (callFor's, call.go). A model's answer that asks
// for tools is a round: its assistant message is stored, each call is
// recorded, started under the turn's claim, run, and its outcome kept
// (ledger/tools.go), the results are stored as tool messages, and the
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
	"fmt"
	"log/slog"
	"net/http/httptrace"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/tools"
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
}

// offered are the tools a turn of in offers the model.
func (m *Manager) offered(in Inbound) []agent.Tool {
	if m.opts.Tools == nil {
		return nil
	}
	return m.opts.Tools.Offered(in.Channel, in.UserID)
}

// newToolTurn returns the tool side of a turn. On a turn run before (an
// attempt after the first), it reads what the earlier runs stored.
func (m *Manager) newToolTurn(ctx context.Context, hc *hotConv, b *ledger.Batch, in Inbound, h Hooks) (*toolTurn, error) {
	tt := &toolTurn{m: m, hc: hc, b: b, in: in, hooks: h, offered: m.offered(in),
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
func (tt *toolTurn) round(ctx context.Context, am agent.Message, usage agent.Usage, cost float64, model string) (*roundStore, error) {
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

// roundStore is the store of a round's results, under way while the
// model is called with them: the outcome of the call that ended last,
// then the results as tool messages. What the model streams meanwhile is
// held until they are stored, as an early call's is until its message
// is (early.go); a store that fails for good fails the turn, and the
// model's answer is dropped. So the commit overlaps the model's time to
// first token instead of coming before it: a crash before it lands loses
// the results as it would have just before the model call — the call is
// found started and unanswered, and settled as such.
//
// The store starts once the model request is written (an HTTP backend's
// request, seen through httptrace), so that its work does not delay the
// request on a busy machine; at the latest when the model answers.
type roundStore struct {
	done  chan struct{}
	err   error
	store func() error
	once  sync.Once

	mu       sync.Mutex
	stored   bool
	held     []string
	onDelta  func(string)
	released bool
}

// hold returns onDelta held until the store lands.
func (rs *roundStore) hold(onDelta func(string)) func(string) {
	rs.mu.Lock()
	rs.onDelta = onDelta
	rs.mu.Unlock()
	return func(d string) {
		rs.start() // (an answer before the request was seen written)
		rs.mu.Lock()
		defer rs.mu.Unlock()
		if !rs.released {
			rs.held = append(rs.held, d)
			return
		}
		if onDelta != nil {
			onDelta(d)
		}
	}
}

// land records the store's outcome and passes the held deltas on when it
// succeeded.
func (rs *roundStore) land(err error) {
	rs.mu.Lock()
	rs.err = err
	if err == nil {
		rs.released = true
		if rs.onDelta != nil {
			for _, d := range rs.held {
				rs.onDelta(d)
			}
		}
		rs.held = nil
	}
	rs.mu.Unlock()
	close(rs.done)
}

// start starts the store, once.
func (rs *roundStore) start() {
	rs.once.Do(func() { go func() { rs.land(rs.store()) }() })
}

// sent is ctx telling rs to start once a request made under it is
// written.
func (rs *roundStore) sent(ctx context.Context) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { rs.start() }})
}

// wait starts the store if it has not started, waits for it and returns
// its error.
func (rs *roundStore) wait() error {
	if rs == nil {
		return nil
	}
	rs.start()
	<-rs.done
	return rs.err
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
			ToolCallID: rows[i].CallID, ReplyTo: tt.claim.Lead, Status: ledger.MsgOK, CreatedAt: m.now()})
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
		_, err := m.appendRound(sctx, tt, slices.Clone(results), 0, 0, "")
		return err
	}}
	return rs, nil
}

// toolOutcome is what one call left for the model, or why it has nothing.
type toolOutcome struct {
	result string
	err    error
	// end, when set, stores the outcome: the call ended last of its round,
	// and its outcome is stored with the round's results (roundStore).
	end func() error
	// counted: the call counted itself out of its round's running calls.
	counted bool
}

// run takes one recorded call to its outcome: the kept one, or by asking,
// starting and running it.
func (tt *toolTurn) run(ctx context.Context, c *ledger.ToolCall, running *atomic.Int32) toolOutcome {
	m := tt.m
	if ledger.ToolSettled(c.State) {
		return toolOutcome{result: c.Result}
	}
	// A run after a restart may come before the tool's server listed its
	// tools: the rule waits for it, so that a call started and never
	// answered runs again when its tool is idempotent, rather than being
	// taken for a tool nobody offers.
	rule, known := m.opts.Tools.Rule(ctx, c.Name)
	if ctx.Err() != nil {
		return toolOutcome{err: context.Cause(ctx)}
	}
	for {
		switch c.State {
		case ledger.ToolDone, ledger.ToolFailed, ledger.ToolDenied, ledger.ToolCancelled, ledger.ToolUnknown:
			return toolOutcome{result: c.Result}
		case ledger.ToolStarted:
			// Started by an earlier run, never answered.
			if known && rule.Idempotent {
				return tt.start(ctx, c, rule, c.Token, running)
			}
			if again, err := tt.settle(ctx, c, ledger.ToolStarted, c.Token, ledger.ToolUnknown, ToolUnknownText); err != nil || !again {
				return toolOutcome{result: c.Result, err: err}
			}
		case ledger.ToolAllowed:
			return tt.start(ctx, c, rule, "", running)
		case ledger.ToolNew, ledger.ToolAsking:
			var text string
			switch {
			case !known:
				text = ToolGoneText
			case rule.Approve == tools.ApproveDeny:
				text = ToolForbiddenText
			case rule.Approve == tools.ApproveAuto && c.State == ledger.ToolNew:
				return tt.start(ctx, c, rule, "", running)
			default:
				if err := tt.ask(ctx, c); err != nil {
					return toolOutcome{err: err}
				}
				continue // decided (or expired): c is reread
			}
			if again, err := tt.settle(ctx, c, c.State, "", ledger.ToolDenied, text); err != nil || !again {
				return toolOutcome{result: c.Result, err: err}
			}
		default:
			return toolOutcome{err: fmt.Errorf("tool call %d in unknown state %q", c.ID, c.State)}
		}
	}
}

// settle settles call c, which never ran here, from state from (and
// token) with text, an error result. again: another runner moved it
// meanwhile — c is reread, to look at again.
func (tt *toolTurn) settle(ctx context.Context, c *ledger.ToolCall, from, token, state, text string) (again bool, err error) {
	err = tt.end(ctx, c, from, token, state, text, true, 0)
	if !errors.Is(err, ledger.ErrLostClaim) {
		return false, err
	}
	return true, tt.reread(ctx, c)
}

// start starts call c under the turn's claim (again, over token again,
// for an idempotent tool's call never answered), runs it and keeps its
// outcome: at once while other calls of its round still run (running
// counts them), else with the round's results.
func (tt *toolTurn) start(ctx context.Context, c *ledger.ToolCall, rule tools.Rule, again string, running *atomic.Int32) toolOutcome {
	m := tt.m
	token := uuid.NewString()
	err := m.untilStored(ctx, "start tool call", func() error {
		err := m.store.StartTool(ctx, c.ID, tt.claim, token, again, m.now())
		if err == nil || !errors.Is(err, ledger.ErrLostClaim) {
			return err
		}
		// Not started by this statement: an earlier try of it may have
		// landed unseen, or the claim is gone.
		got, rerr := m.store.ToolCall(ctx, c.ID)
		if rerr != nil {
			return rerr
		}
		if got != nil && got.State == ledger.ToolStarted && got.Token == token {
			return nil
		}
		return err
	})
	if err != nil {
		return toolOutcome{err: err}
	}
	c.State, c.Token = ledger.ToolStarted, token
	tt.event(c, ToolStarted, 0)
	began := time.Now()
	callCtx, endSpan := m.startSpanCtx(ctx, "tool "+c.Name)
	res, cerr := m.opts.Tools.Call(callCtx, c.Name, c.Arguments, c.IdempotencyKey())
	took := time.Since(began)
	endSpan(cerr)
	state, text, isErr := ledger.ToolDone, res.Text, res.IsError
	switch {
	case cerr != nil && ctx.Err() != nil:
		switch cause := context.Cause(ctx); {
		case errors.Is(cause, errStoppedByUser):
			state, text = ledger.ToolCancelled, ToolStoppedText
		case errors.Is(cause, errNewMessage):
			state, text = ledger.ToolCancelled, ToolCutText
		default:
			// A shutdown: the call stays started, and the turn's next run
			// decides (ToolUnknownText, or again when idempotent).
			tt.observe(c, "interrupted", took)
			return toolOutcome{err: context.Cause(ctx)}
		}
		isErr = true
	case cerr != nil:
		state, text, isErr = ledger.ToolFailed, "The call failed: "+cerr.Error(), true
	case res.IsError:
		state = ledger.ToolFailed
	}
	tt.observe(c, state, took)
	if running.Add(-1) == 0 {
		// The last of its round: its outcome is stored with the round's
		// results, while the model is called with them.
		end := func() error { return tt.end(ctx, c, ledger.ToolStarted, token, state, text, isErr, took) }
		return toolOutcome{result: text, end: end, counted: true}
	}
	if err := tt.end(ctx, c, ledger.ToolStarted, token, state, text, isErr, took); err != nil {
		return toolOutcome{err: err, counted: true}
	}
	return toolOutcome{result: c.Result, counted: true}
}

// end settles call c from state from (and token) with its outcome; the
// outcome is kept even when the turn's context has ended.
func (tt *toolTurn) end(ctx context.Context, c *ledger.ToolCall, from, token, state, text string, isErr bool, took time.Duration) error {
	m := tt.m
	ctx = context.WithoutCancel(ctx)
	e := ledger.ToolEnd{ID: c.ID, Token: token, From: from, State: state, Result: text, IsError: isErr, At: m.now()}
	err := m.untilStored(ctx, "store tool outcome", func() error {
		err := m.store.EndTool(ctx, e)
		if err == nil || !errors.Is(err, ledger.ErrLostClaim) {
			return err
		}
		got, rerr := m.store.ToolCall(ctx, c.ID)
		if rerr != nil {
			return rerr
		}
		if got != nil && got.State == state && got.Token == token && got.Result == text {
			return nil // an earlier try landed unseen
		}
		return err
	})
	if err != nil {
		return err
	}
	c.State, c.Result, c.IsError = state, text, isErr
	tt.event(c, state, took)
	return nil
}

// reread loads call c again (another runner moved it).
func (tt *toolTurn) reread(ctx context.Context, c *ledger.ToolCall) error {
	var got *ledger.ToolCall
	err := tt.m.untilStored(ctx, "load tool call", func() (err error) {
		got, err = tt.m.store.ToolCall(ctx, c.ID)
		return err
	})
	if err != nil {
		return err
	}
	if got == nil {
		return fmt.Errorf("tool call %d vanished", c.ID)
	}
	*c = *got
	return nil
}

func (tt *toolTurn) event(c *ledger.ToolCall, status string, took time.Duration) {
	if tt.hooks.OnTool == nil {
		return
	}
	ev := ToolEvent{ConversationID: c.ConversationID, Seq: tt.claim.Lead, ID: c.ID, CallID: c.CallID, Name: c.Name,
		Arguments: c.Arguments, Status: status, Duration: took}
	if c.ExpiresAt != nil {
		ev.ExpiresAt = *c.ExpiresAt
	}
	tt.hooks.OnTool(ev)
}

func (tt *toolTurn) observe(c *ledger.ToolCall, outcome string, took time.Duration) {
	o, ok := tt.m.opts.Observer.(ToolObserver)
	if !ok {
		return
	}
	server, tool, _ := strings.Cut(c.Name, tools.Separator)
	o.ToolCalled(server, tool, outcome, took)
}

// appendRound stores messages of the turn that do not settle it (a
// round's assistant message, or its results) after the conversation's
// last message, under the turn's claim, and returns them with their seqs.
// A storage failure is retried until storage answers; an append that
// landed unseen is found, not made twice.
func (m *Manager) appendRound(ctx context.Context, tt *toolTurn, msgs []ledger.Message, tokens int64, cost float64, model string) ([]ledger.Message, error) {
	hc, key := tt.hc, tt.in.SessionKey
	wait := min(50*time.Millisecond, m.opts.RetryPause)
	var failed error
	for {
		unlock, err := m.lockState(ctx, key, false)
		if err != nil {
			return nil, err
		}
		if failed == nil {
			for i := range msgs {
				msgs[i].Seq = hc.conv.LastSeq + int64(i) + 1
			}
			failed = m.store.Append(ctx, ledger.Append{Conv: &hc.conv, ExpectSeq: hc.conv.LastSeq, Messages: msgs, At: m.now(),
				Tokens: tokens, Cost: cost, Model: model, TurnSeq: tt.claim.Lead})
			if failed == nil {
				hc.push(msgs...)
				m.hot.Update(key, hc)
				unlock()
				return msgs, nil
			}
		}
		// Did it land after all, is the turn still this runner's, and
		// where does the conversation end now?
		landed, err := m.roundLanded(ctx, tt, msgs)
		unlock()
		switch {
		case err == nil && landed:
			m.hot.Remove(key)
			return msgs, nil
		case err == nil:
			failed = nil // the conversation moved on (hc refreshed): append after it
			continue
		case errors.Is(err, ledger.ErrLostClaim) || errors.Is(err, ledger.ErrClosed):
			return nil, err
		}
		if m.base.Err() != nil {
			return nil, err // the drain's deadline passed: the next run finishes the round
		}
		m.log.WarnContext(ctx, "storing a tool round failed; retried until storage answers", slog.String("conversation", hc.conv.ID),
			slog.String("error", err.Error()))
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, context.Cause(ctx)
		}
		wait = min(wait*2, 4*m.opts.RetryPause)
	}
}

// roundLanded reports whether msgs are stored already (an append whose
// answer was lost), setting their seqs; else it refreshes the cached
// conversation for the next try. It fails with ErrLostClaim when the turn
// is no longer this runner's.
func (m *Manager) roundLanded(ctx context.Context, tt *toolTurn, msgs []ledger.Message) (bool, error) {
	hc := tt.hc
	t, err := m.store.TurnAt(ctx, hc.conv.ID, tt.claim.Lead)
	if err != nil {
		return false, err
	}
	if t == nil || t.Owner != tt.claim.Owner || t.Attempts != tt.claim.Attempt {
		return false, fmt.Errorf("storing a tool round: %w", ledger.ErrLostClaim)
	}
	after, err := m.store.MessagesAfter(ctx, hc.conv.ID, tt.claim.Lead, 0)
	if err != nil {
		return false, err
	}
	same := func(a, b *ledger.Message) bool {
		return a.Role == b.Role && a.ReplyTo == b.ReplyTo && a.ToolCallID == b.ToolCallID && a.ToolCalls == b.ToolCalls && a.Content == b.Content
	}
	for i := range after {
		if i+len(msgs) > len(after) {
			break
		}
		match := true
		for j := range msgs {
			if !same(&after[i+j], &msgs[j]) {
				match = false
				break
			}
		}
		if match {
			for j := range msgs {
				msgs[j].Seq = after[i+j].Seq
			}
			return true, nil
		}
	}
	fresh, err := m.store.Conversation(ctx, hc.conv.ID)
	if err != nil {
		return false, err
	}
	if fresh == nil {
		return false, fmt.Errorf("conversation %s vanished", hc.conv.ID)
	}
	window, err := m.store.RecentMessages(ctx, fresh.ID, hc.cap)
	if err != nil {
		return false, err
	}
	hc.conv, hc.window = *fresh, window
	return false, nil
}

// untilStored runs a storage step until it succeeds, retrying a storage
// failure with backoff; it gives up on ErrLostClaim, ErrClosed, or when
// ctx ends.
func (m *Manager) untilStored(ctx context.Context, what string, step func() error) error {
	wait := min(50*time.Millisecond, m.opts.RetryPause)
	warned := false
	for {
		err := step()
		if err == nil || errors.Is(err, ledger.ErrLostClaim) || errors.Is(err, ledger.ErrClosed) {
			return err
		}
		if ctx.Err() != nil {
			return errors.Join(context.Cause(ctx), err)
		}
		if m.base.Err() != nil {
			return err // the drain's deadline passed: the next run finds what is stored
		}
		if !warned {
			warned = true
			m.log.WarnContext(ctx, what+" failed; retried until storage answers", slog.String("error", err.Error()))
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return errors.Join(context.Cause(ctx), err)
		}
		wait = min(wait*2, 4*m.opts.RetryPause)
	}
}
