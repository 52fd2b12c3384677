package sessions

// A turn's agent call (Manager.callTurn's): the request — the history
// window and the batch's messages — the call itself, streamed, and the
// messages it leaves to store.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions/ledger"
)

// callFor calls the agent for a batch, on model — the history before its
// lead without the batch's own messages, then each of them as a user
// message — and returns what to store: the reply, a failure notice, or the
// partial reply of an interrupted turn, and the turn's state after it.
// With early, the call was made already (its deltas went to the lead's
// hooks since its ack): its answer is taken instead.
func (m *Manager) callFor(turnCtx context.Context, hc *hotConv, b *ledger.Batch, hist []agent.Message, model *agent.ModelSpec, in Inbound, h Hooks, early *earlyCall) ([]ledger.Message, agent.Reply, string) {
	lead := b.Lead()
	var partial strings.Builder
	var reply agent.Reply
	var err error
	// The turn runs with the settings of its start: a reload meanwhile
	// applies to the next one.
	live := m.settings()
	var tt *toolTurn
	var results *roundStore // the last round's results, being stored
	if m.opts.Tools != nil {
		// A turn run before resumes its tool rounds: a round whose calls
		// are not all answered is finished before the model is called.
		err = m.untilStored(turnCtx, "read the turn's tool rounds", func() (err error) {
			tt, err = m.newToolTurn(turnCtx, hc, b, in, h)
			return err
		})
		if err == nil {
			if un := tt.unfinished(); un != nil {
				results, err = tt.finish(turnCtx, un)
			}
		}
	}
	maxRounds := m.opts.MaxToolRounds
	if maxRounds <= 0 {
		maxRounds = DefaultMaxToolRounds
	}
	for first := true; err == nil; first = false {
		if early != nil && first && (tt == nil || len(tt.rounds) == 0) {
			var text string
			reply, err, text = early.result()
			partial.WriteString(text)
		} else {
			req := m.request(b.Rows, hist, in, live.instructions, model)
			if early != nil {
				req.History = early.history
			}
			if tt != nil {
				req.Turn = tt.turn()
				req.NoMoreTools = tt.n >= maxRounds
			}
			m.prepare(turnCtx, live.agent, hc.conv.Channel, in, &req, nil)
			sink := &deltaSink{next: h.OnDelta}
			deltas, callCtx := sink.add, turnCtx
			if results != nil {
				deltas, callCtx = results.hold(sink.add), results.sent(turnCtx)
			}
			reply, err = m.callAgent(callCtx, live.agent, req, deltas)
			serr := results.wait()
			partial.WriteString(sink.partial.String()) // every delta passed on (none comes after wait)
			if serr != nil {
				// The results were never stored: the model's answer to
				// them is dropped, and the turn ends.
				reply, err = agent.Reply{}, serr
			}
			results = nil
		}
		if err != nil || tt == nil || len(reply.Messages) == 0 {
			break
		}
		last := reply.Messages[len(reply.Messages)-1]
		if len(last.ToolCalls) == 0 {
			break
		}
		if tt.n >= maxRounds {
			// Told to answer without tools, it asked again: what it wrote
			// is the answer.
			last.ToolCalls = nil
			if strings.TrimSpace(last.Content) == "" {
				last.Content = ToolRoundsText
			}
			reply.Messages = []agent.Message{last}
			break
		}
		stored := tt.n
		results, err = tt.round(turnCtx, last, reply.Usage, reply.Cost, modelOf(reply))
		if tt.n > stored {
			// The round's stored message carries the call's spend: a
			// turn that ends here does not count it again (spentBy).
			reply.Usage, reply.Cost = agent.Usage{}, 0
		}
		partial.Reset() // the partial reply is the last round's
	}
	if serr := results.wait(); serr != nil && err == nil {
		err = serr // (the loop ended before the model was called with them)
	}
	now := m.now()
	conv := hc.conv.ID
	failed := func(text, why string) ([]ledger.Message, agent.Reply, string) {
		return []ledger.Message{{ConversationID: conv, Role: agent.RoleAssistant, Content: text,
			ReplyTo: lead, Status: ledger.MsgFailed, Error: why, CreatedAt: now}}, agent.Reply{}, ledger.TurnFailed
	}
	switch {
	case err == nil && len(reply.Messages) > 0 && len(reply.Messages[len(reply.Messages)-1].ToolCalls) > 0:
		// The gateway offers the model no tools; a turn that ends asking
		// for one cannot be answered, and running it again would not help.
		var names []string
		for _, tc := range reply.Messages[len(reply.Messages)-1].ToolCalls {
			names = append(names, tc.Name)
		}
		m.log.WarnContext(turnCtx, "model asked for tools the gateway does not offer", slog.String("session_key", in.SessionKey),
			slog.String("tools", strings.Join(names, ",")))
		return failed(ToolCallsText, "model returned tool calls: "+strings.Join(names, ", "))
	case err == nil && len(reply.Messages) > 0:
		var msgs []ledger.Message
		for _, am := range reply.Messages {
			msgs = append(msgs, ledger.Message{
				ConversationID: conv, Role: am.Role, Content: am.Content,
				ToolCalls: encodeToolCalls(am.ToolCalls), ToolCallID: am.ToolCallID,
				ReplyTo: lead, Status: ledger.MsgOK, CreatedAt: now,
			})
		}
		last := &msgs[len(msgs)-1]
		last.PromptTokens, last.CompletionTkns, last.Cost = reply.Usage.PromptTokens, reply.Usage.CompletionTokens, reply.Cost
		return msgs, reply, ledger.TurnAnswered
	case turnCtx.Err() != nil:
		why, state := ledger.InterruptedByShutdown, ledger.TurnAnswered
		switch cause := context.Cause(turnCtx); {
		case errors.Is(cause, errStoppedByUser):
			why = ledger.InterruptedByUser
		case errors.Is(cause, errNewMessage):
			// Claimable again at once: the next turn answers these
			// messages with the newer ones.
			why, state = ledger.InterruptedByMessage, ledger.TurnInterrupted
		case m.opts.NoRerun:
			why = ledger.InterruptedByShutdownFinal
		default:
			// Claimable again at once: by this replica's next start or by
			// any live replica now.
			state = ledger.TurnInterrupted
		}
		msg := ledger.Message{ConversationID: conv, Role: agent.RoleAssistant, Content: partial.String(),
			ReplyTo: lead, Status: ledger.MsgInterrupted, Error: why, CreatedAt: now}
		return []ledger.Message{msg}, spentBy(&msg, reply), state
	default:
		if err == nil {
			err = errors.New("agent returned no message")
		}
		m.log.WarnContext(turnCtx, "agent call failed", slog.String("session_key", in.SessionKey), slog.String("conversation", conv),
			slog.Int64("seq", lead), slog.String("error", err.Error()))
		if errors.Is(err, ledger.ErrRejected) {
			return failed(RejectedText, RejectedPrefix+err.Error()) // a tool round's storage (untilStored, appendRound)
		}
		msgs, _, state := failed(m.opts.FailureText, err.Error())
		return msgs, spentBy(&msgs[0], reply), state
	}
}

// models are the names of the model a call used: as configured (what
// the usage is tallied under) and as the API said (what the conversation
// records).
type models struct{ name, api string }

func modelOf(r agent.Reply) models { return models{r.Model, r.APIModel} }

// recorded is the model the conversation records: the API's id, else
// the configured name.
func (m models) recorded() string { return cmp.Or(m.api, m.name) }

// spentBy puts what a call that ended in an error spent — reply's usage
// and cost, the backend's estimate when it streamed before it was
// stopped or cut (agent.Usage's Estimated) — on msg, the interrupted or
// failed reply stored for it, and returns the reply that carries it to
// the append (and so to the user's tally and budget).
func spentBy(msg *ledger.Message, reply agent.Reply) agent.Reply {
	if reply.Usage.PromptTokens == 0 && reply.Usage.CompletionTokens == 0 && reply.Cost == 0 {
		return agent.Reply{}
	}
	msg.PromptTokens, msg.CompletionTkns, msg.Cost = reply.Usage.PromptTokens, reply.Usage.CompletionTokens, reply.Cost
	return agent.Reply{Usage: reply.Usage, Cost: reply.Cost, Model: reply.Model, APIModel: reply.APIModel}
}

// deltaSink passes a call's deltas on to next and keeps them: the
// partial reply of a turn cut short. One per call made here (an early
// call keeps its own), so that a turn whose early call answered builds
// none.
type deltaSink struct {
	partial strings.Builder
	next    func(string)
}

func (s *deltaSink) add(d string) {
	s.partial.WriteString(d)
	if s.next != nil {
		s.next(d)
	}
}

// request is the agent request of a turn answering rows after hist — the
// history before its lead without its own messages (historyFor of
// priorOf), then each of them as a user message — on model (nil: the
// agent's own; Standing.modelSpec).
// Its pictures are not fetched yet (fetchImages does that, outside any
// lock), nor its tools and notes put in (prepare): each may wait on what
// is slow, which is not done under the key's state lock.
func (m *Manager) request(rows []ledger.BatchRow, hist []agent.Message, in Inbound, instructions string, model *agent.ModelSpec) agent.Request {
	req := agent.Request{SessionKey: in.SessionKey, Instructions: instructions, History: hist, Model: model}
	last := len(rows) - 1
	if last > 0 {
		req.Earlier = make([]string, last)
		for i, r := range rows[:last] {
			req.Earlier[i] = withQuote(r.Quote, r.Content)
		}
	}
	req.Input = withQuote(rows[last].Quote, rows[last].Content)
	for i, r := range rows {
		if r.Attachments == "" {
			continue // (InputAttachments stays nil when no input has any)
		}
		if req.InputAttachments == nil {
			req.InputAttachments = make([][]agent.Attachment, len(rows))
		}
		req.InputAttachments[i] = decodeAttachments(r.Attachments)
	}
	return req
}

// prepare completes a turn's request outside any lock: the tools the
// turn offers (a tool server still starting is waited for, within its
// timeout), its pictures, and the user's notes.
// With gate (an early call's) the notes wait for the message's commit.
func (m *Manager) prepare(ctx context.Context, ag agent.Agent, channel string, in Inbound, req *agent.Request, gate *notesGate) {
	req.Tools = m.offered(in)
	m.routes.fetchImages(ctx, ag, channel, req)
	m.media.images(ctx, ag, req)
	m.memory.inject(ctx, in, req, gate)
}

// priorOf is the history a turn with lead and members sees: every stored
// message but the turn's own and the user messages stored after it, in
// turn order — each reply right after the message it answers, even when
// later messages were stored before it (they arrived while it ran). The
// messages are the window's own, not copies: use them under the key's
// state lock, which alone changes the window.
func priorOf(window []ledger.Message, members seqSet, lead int64) []*ledger.Message {
	prior := make([]*ledger.Message, 0, len(window))
	for i := range window {
		msg := &window[i]
		if members.has(msg.Seq) || members.has(msg.ReplyTo) || (msg.Role == agent.RoleUser && msg.Seq > lead) {
			continue // the turn's own, or what an earlier run of it left
		}
		prior = append(prior, msg)
	}
	at := func(msg *ledger.Message) int64 {
		if msg.Role == agent.RoleUser {
			return msg.Seq
		}
		return msg.ReplyTo
	}
	order := func(a, b *ledger.Message) int {
		if c := cmp.Compare(at(a), at(b)); c != 0 {
			return c
		}
		// A message before the replies to it.
		return cmp.Compare(boolInt(a.Role != agent.RoleUser), boolInt(b.Role != agent.RoleUser))
	}
	// Stored order is turn order unless a message arrived while a turn
	// ran; only then is there anything to sort.
	if !slices.IsSortedFunc(prior, order) {
		slices.SortStableFunc(prior, order)
	}
	return prior
}

// seqSet is the seqs of a turn's messages: a batch's few (max_batch, 20
// by default), where a map would cost allocations on every turn.
type seqSet []int64

func (s seqSet) has(seq int64) bool { return slices.Contains(s, seq) }

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func toReply(msg *ledger.Message) Reply {
	return Reply{Seq: msg.Seq, Text: msg.Content, Status: msg.Status, Error: msg.Error}
}

// callAgent calls the agent; a panicking backend fails the turn (the user
// message stays, the user is told) instead of taking the gateway down.
func (m *Manager) callAgent(ctx context.Context, ag agent.Agent, req agent.Request, onDelta func(string)) (reply agent.Reply, err error) {
	ctx, call := m.tr.startAgentCall(ctx, ag)
	if call != nil {
		defer func() { call.end(ctx, &agentReplyInfo{tokens: reply.Usage.TotalTokens}, err) }()
		next := onDelta
		onDelta = func(d string) {
			call.delta()
			if next != nil {
				next(d)
			}
		}
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("agent %s panicked: %v", ag.Name(), p)
		}
	}()
	return ag.Reply(ctx, req, onDelta)
}

// callTurn is the call: the agent's answer to the batch, or the stored
// answer of a turn that is not run — too old to run (expired), or stopped
// while it waited. It returns the turn's kind, the messages to store, the
// agent's reply and the state the turn settles in.
func (m *Manager) callTurn(ctx context.Context, t *turnRun, maxAge time.Duration) (string, []ledger.Message, agent.Reply, string) {
	b, lead := t.b, t.b.Lead()
	switch {
	case maxAge > 0 && b.Rows[0].CreatedAt.Before(t.now.Add(-maxAge)):
		return ledger.TurnExpired, []ledger.Message{{ConversationID: t.conv, Role: agent.RoleAssistant, Content: ExpiredText,
			ReplyTo: lead, Status: ledger.MsgFailed, Error: ledger.NotRunPrefix + " older than recovery.max_age", CreatedAt: t.now}}, agent.Reply{}, ledger.TurnExpired
	case t.early == nil && m.takeStop(t.in.SessionKey):
		// (A Stop reaches an early call through its running context.)
		// Stopped while it waited: settled as stopped, the agent not called.
		return ledger.TurnRunning, []ledger.Message{{ConversationID: t.conv, Role: agent.RoleAssistant, ReplyTo: lead, Status: ledger.MsgInterrupted,
			Error: ledger.InterruptedByUser, CreatedAt: t.now}}, agent.Reply{}, ledger.TurnAnswered
	}
	if t.early == nil {
		// (A turn started early had no budget to check: Manager.Submit.)
		if s := m.standing.overBudget(ctx, t.in, t.policy); s != nil {
			m.opts.Observer.BudgetRefused(t.in.Channel, s.Over())
			return ledger.TurnRunning, []ledger.Message{{ConversationID: t.conv, Role: agent.RoleAssistant, Content: BudgetText(*s, t.now),
				ReplyTo: lead, Status: ledger.MsgFailed, Error: OverBudgetPrefix + s.Over(), CreatedAt: t.now}}, agent.Reply{}, ledger.TurnFailed
		}
	}
	var hooks Hooks
	if t.lead != nil {
		hooks = t.lead.hooks
	}
	var turnCtx context.Context
	var endTurn func()
	if t.early != nil {
		turnCtx, endTurn = t.early.ctx, t.early.stop
	} else {
		turnCtx, endTurn = m.life.startTurn(t.in.SessionKey)
	}
	turnCtx = m.tr.withTurn(ctx, turnCtx)
	t.called = true
	msgs, reply, state := m.callFor(turnCtx, t.hc, b, t.hist, t.model, t.in, hooks, t.early)
	endTurn()
	return ledger.TurnRunning, msgs, reply, state
}

// takeStop consumes a Stop that came while the key's burst waited.
func (m *Manager) takeStop(key string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if b := m.bursts[key]; b != nil && b.stop {
		b.stop = false
		return true
	}
	return false
}
