package sessions

// One tool call of a round (toolTurn.round), from its record to its
// outcome: kept already, or asked for (toolTurn.ask), started under the
// turn's claim with a token of its own, run and settled — every move a
// conditional write of the ledger (ledger.ToolCall).

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/tools"
)

// toolOutcome is what one call left for the model, or why it has nothing.
type toolOutcome struct {
	result string
	err    error
	// media are what the call returned besides text, kept (keepMedia).
	media []ledger.ToolMedia
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
	rule, known := m.opts.Tools.Rule(ctx, tt.in.Channel, tt.in.UserID, c.Name)
	known = known && m.memory.allows(tt.in, c.Name)
	rule = m.memory.rule(tt.in, c.Name, rule)
	if ctx.Err() != nil {
		return toolOutcome{err: context.Cause(ctx)}
	}
	for {
		if text, cut := cutBefore(ctx); cut && !ledger.ToolSettled(c.State) && c.State != ledger.ToolStarted {
			// /stop or a newer message cut the turn before the call
			// started: it never runs, and nothing is left to decide.
			if again, err := tt.settle(context.WithoutCancel(ctx), c, c.State, "", ledger.ToolCancelled, text); err != nil || !again {
				return toolOutcome{result: c.Result, err: err}
			}
			continue
		}
		switch {
		case ledger.ToolSettled(c.State):
			return toolOutcome{result: c.Result}
		case c.State == ledger.ToolStarted:
			// Started by an earlier run, never answered.
			if known && rule.Idempotent {
				return tt.start(ctx, c, rule, c.Token, running)
			}
			if again, err := tt.settle(ctx, c, ledger.ToolStarted, c.Token, ledger.ToolUnknown, ToolUnknownText); err != nil || !again {
				return toolOutcome{result: c.Result, err: err}
			}
		case c.State == ledger.ToolAllowed:
			return tt.start(ctx, c, rule, "", running)
		case c.State == ledger.ToolNew || c.State == ledger.ToolAsking:
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

// cutBefore is what the model is told of a call that had not started
// when the user cut its turn (/stop, or a newer message in busy mode
// interrupt); false while the turn runs, and when it ends for a shutdown
// (the call waits for the turn's next run).
func cutBefore(ctx context.Context) (string, bool) {
	if ctx.Err() == nil {
		return "", false
	}
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errStoppedByUser):
		return ToolStoppedBeforeText, true
	case errors.Is(cause, errNewMessage):
		return ToolCutBeforeText, true
	}
	return "", false
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
	callCtx, endSpan := m.tr.startSpanCtx(ctx, "tool "+c.Name)
	// Whom the call runs for is the turn's conversation's, never the
	// model's to say: the gateway's own tools (reminders) act for it.
	callCtx = tools.WithCaller(callCtx, tools.Caller{SessionKey: tt.hc.conv.SessionKey, Channel: tt.hc.conv.Channel, UserID: tt.in.UserID,
		Scheduled: fireOf(tt.b) != "", ConversationID: tt.hc.conv.ID, MessageSeq: tt.b.Lead()})
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
	var media []ledger.ToolMedia
	if cerr == nil && len(res.Media) > 0 {
		media, text = keepMedia(m.opts.Media, c, tt.in.SessionKey, res.Media, text)
	}
	tt.observe(c, state, took)
	if running.Add(-1) == 0 {
		// The last of its round: its outcome is stored with the round's
		// results, while the model is called with them.
		end := func() error { return tt.end(ctx, c, ledger.ToolStarted, token, state, text, isErr, took, media...) }
		return toolOutcome{result: text, media: media, end: end, counted: true}
	}
	if err := tt.end(ctx, c, ledger.ToolStarted, token, state, text, isErr, took, media...); err != nil {
		return toolOutcome{err: err, counted: true}
	}
	return toolOutcome{result: c.Result, media: media, counted: true}
}

// end settles call c from state from (and token) with its outcome; the
// outcome is kept even when the turn's context has ended.
// The media it returned (media) are stored with it, each once.
func (tt *toolTurn) end(ctx context.Context, c *ledger.ToolCall, from, token, state, text string, isErr bool, took time.Duration, media ...ledger.ToolMedia) error {
	m := tt.m
	ctx = context.WithoutCancel(ctx)
	e := ledger.ToolEnd{ID: c.ID, Token: token, From: from, State: state, Result: text, IsError: isErr, At: m.now(), Media: media}
	err := m.untilStored(ctx, "store tool outcome", func() error {
		err := m.store.EndTool(ctx, e)
		if err == nil || !errors.Is(err, ledger.ErrLostClaim) {
			return err
		}
		got, rerr := m.store.ToolCall(ctx, c.ID)
		if rerr != nil {
			return rerr
		}
		if got != nil && got.State == state && got.Token == token && got.Result == ledger.StorableText(text) {
			return nil // an earlier try landed unseen
		}
		return err
	})
	if errors.Is(err, ledger.ErrRejected) && text != ToolUnstoredText {
		// The outcome cannot be kept: the call is settled failed with a
		// note, not left started; the turn fails all the same.
		return errors.Join(err, tt.end(ctx, c, from, token, ledger.ToolFailed, ToolUnstoredText, true, took))
	}
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
