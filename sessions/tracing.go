package sessions

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions/ledger"
)

// Tracing. With Options.TracerProvider unset (or a no-op one) tr.tracer is
// nil and every helper here returns after that one check: no span, no
// attribute is built. With a provider, a turn is one trace: a root span
// "turn" with children "lock wait", "agent call" (an event "first token"
// and the attribute ttft_ms), "store reply" and "delivery" — the latter
// from the channel when it sends a reply it waited for (Outcome.Trace is
// its parent). Each user message has a span "message", child of what the
// channel passed to Submit (a Telegram update), with a child "store" for
// its commit; the turn links to the messages it answers.

// AgentObserver is an Observer that is also told about agent calls: the
// time to the first streamed text of each call, and every failed call
// (not one a stop or shutdown cancelled) with its error.
type AgentObserver interface {
	FirstToken(channel string, d time.Duration)
	AgentFailed(channel string, err error)
}

// TracerName names the tracer of the turn spans.
const TracerName = "github.com/chatgate/chatgate/sessions"

// newTracer returns the tracer for tp, nil when tracing is off.
// tracing makes the spans of messages, turns and their steps; its
// tracer is nil when tracing is off, and each span then costs a nil
// check.
type tracing struct {
	tracer   trace.Tracer
	log      *slog.Logger
	observer Observer
}

func newTracer(tp trace.TracerProvider) trace.Tracer {
	switch tp.(type) {
	case nil, noop.TracerProvider, *noop.TracerProvider:
		return nil
	}
	return tp.Tracer(TracerName)
}

// SessionKeyHash is the session key as spans carry it: a short hash, so
// that traces leaving the gateway name no user.
func SessionKeyHash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:8])
}

// turnInfo travels in a turn's context: the channel for the agent
// observer, and the turn span when tracing.
type turnInfo struct {
	channel string
}

type turnInfoKey struct{}

// spanEnd ends a span with an error status when err is set.
type spanEnd func(err error)

func noEnd(error) {}

// startSpan starts a child span of the span in ctx; a no-op without a
// tracer or without a recording parent.
func (tr *tracing) startSpan(ctx context.Context, name string) spanEnd {
	_, end := tr.startSpanCtx(ctx, name)
	return end
}

func (tr *tracing) startSpanCtx(ctx context.Context, name string) (context.Context, spanEnd) {
	if tr.tracer == nil || !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, noEnd
	}
	ctx, span := tr.tracer.Start(ctx, name)
	return ctx, func(err error) { endSpan(span, err) }
}

// traceFire starts a fire's span "schedule fire", a root span (a fire
// has no caller), with the fire's key, due time and lag; the fire's
// message and turn are its children. The returned func ends it with the
// fire's outcome at that point (its state attribute, and err).
func (tr *tracing) traceFire(ctx context.Context, key string, due, now time.Time) (context.Context, func(state string, err error)) {
	if tr.tracer == nil {
		return ctx, func(string, error) {}
	}
	ctx, span := tr.tracer.Start(ctx, "schedule fire", trace.WithNewRoot(), trace.WithAttributes(
		attribute.String("chatgate.fire", key), attribute.String("chatgate.due", due.UTC().Format(time.RFC3339)),
		attribute.Int64("chatgate.lag_ms", now.Sub(due).Milliseconds())))
	return ctx, func(state string, err error) {
		if state != "" {
			span.SetAttributes(attribute.String("chatgate.fire_state", state))
		}
		endSpan(span, err)
	}
}

func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// traceMessage starts a message's span "message", ended once it is
// stored (or refused).
func (tr *tracing) traceMessage(ctx context.Context, in Inbound) (context.Context, func(*Ticket, error)) {
	if tr.tracer == nil {
		return ctx, func(*Ticket, error) {}
	}
	ctx, span := tr.tracer.Start(ctx, "message", trace.WithAttributes(
		attribute.String("chatgate.channel", in.Channel),
		attribute.String("chatgate.session_key_hash", SessionKeyHash(in.SessionKey)),
		attribute.String("chatgate.client_msg_id", in.ClientMsgID),
	))
	return ctx, func(t *Ticket, err error) {
		if t != nil {
			span.SetAttributes(attribute.String("chatgate.conversation", t.ref.conv), attribute.Int64("chatgate.seq", t.ref.seq),
				attribute.Bool("chatgate.duplicate", t.resend))
		}
		endSpan(span, err)
	}
}

// traceTurn starts a turn's root span (when tracing) and puts what the
// agent call needs into the context. The returned func ends the span.
func (tr *tracing) traceTurn(ctx context.Context, in Inbound) (context.Context, func(err error)) {
	if !tr.tracesTurns() {
		return ctx, noEnd
	}
	ctx = context.WithValue(ctx, turnInfoKey{}, &turnInfo{channel: in.Channel})
	if tr.tracer == nil {
		return ctx, noEnd
	}
	channel, key := in.Channel, in.SessionKey // (the closure takes these, not in: in stays on the stack)
	ctx, span := tr.tracer.Start(ctx, "turn", trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(
			attribute.String("chatgate.channel", channel),
			attribute.String("chatgate.session_key_hash", SessionKeyHash(key)),
		))
	start := time.Now()
	return ctx, func(err error) {
		// Logged before the span ends: whoever sees the turn ended finds
		// its line.
		tr.log.DebugContext(ctx, "turn done", slog.String("channel", channel), slog.String("session_key", key),
			slog.Duration("took", time.Since(start)))
		endSpan(span, err)
	}
}

// tracesTurns tells whether a turn's context carries anything of
// traceTurn's: its span, or the channel for the agent observer.
func (tr *tracing) tracesTurns() bool {
	if tr.tracer != nil {
		return true
	}
	_, ok := tr.observer.(AgentObserver)
	return ok
}

// traceClaim names on the turn span what the turn answers: its batch and
// the messages' own spans, as links.
func (tr *tracing) traceClaim(ctx context.Context, b *ledger.Batch, tickets []*Ticket) {
	if tr.tracer == nil {
		return
	}
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(
		attribute.String("chatgate.conversation", b.ConversationID),
		attribute.Int64("chatgate.lead", b.Lead()),
		attribute.Int("chatgate.messages", len(b.Rows)),
		attribute.Int("chatgate.attempt", b.Attempt),
	)
	for _, t := range tickets {
		if t.span.IsValid() {
			span.AddLink(trace.Link{SpanContext: t.span, Attributes: []attribute.KeyValue{attribute.Int64("chatgate.seq", t.ref.seq)}})
		}
	}
}

// traceStatus records the turn's result on its span.
func (tr *tracing) traceStatus(ctx context.Context, status string) {
	if tr.tracer == nil {
		return
	}
	trace.SpanFromContext(ctx).SetAttributes(attribute.String("chatgate.status", status))
}

// withTurn carries the turn's span and info from ctx into turnCtx (the
// cancellable context of the agent call). Without a tracer or an agent
// observer, traceTurn put neither there, and nothing is looked up (a
// lookup in a context.WithoutCancel allocates).
func (tr *tracing) withTurn(ctx, turnCtx context.Context) context.Context {
	if !tr.tracesTurns() {
		return turnCtx
	}
	if ti, ok := ctx.Value(turnInfoKey{}).(*turnInfo); ok {
		turnCtx = context.WithValue(turnCtx, turnInfoKey{}, ti)
	}
	if span := trace.SpanFromContext(ctx); span.SpanContext().IsValid() {
		turnCtx = trace.ContextWithSpan(turnCtx, span)
	}
	return turnCtx
}

// agentCall wraps one agent call: its span "agent call", the time to
// its first delta (an event, an attribute, and the observer's
// FirstToken), and a failure for the observer.
type agentCall struct {
	channel string
	start   time.Time
	first   bool
	span    trace.Span
	obs     AgentObserver
}

func (tr *tracing) startAgentCall(ctx context.Context, ag agent.Agent) (context.Context, *agentCall) {
	obs, _ := tr.observer.(AgentObserver)
	if obs == nil && tr.tracer == nil {
		return ctx, nil
	}
	c := &agentCall{start: time.Now(), obs: obs}
	if ti, ok := ctx.Value(turnInfoKey{}).(*turnInfo); ok {
		c.channel = ti.channel
	}
	if tr.tracer != nil && trace.SpanFromContext(ctx).IsRecording() {
		ctx, c.span = tr.tracer.Start(ctx, "agent call", trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(attribute.String("chatgate.agent", ag.Name()), attribute.String("chatgate.model", ag.Model())))
	}
	return ctx, c
}

// delta notes a streamed piece of the reply; the first one is the time
// to first token.
func (c *agentCall) delta() {
	if c == nil || c.first {
		return
	}
	c.first = true
	d := time.Since(c.start)
	if c.obs != nil {
		c.obs.FirstToken(c.channel, d)
	}
	if c.span != nil {
		c.span.AddEvent("first token")
		c.span.SetAttributes(attribute.Float64("chatgate.ttft_ms", float64(d)/float64(time.Millisecond)))
	}
}

func (c *agentCall) end(ctx context.Context, reply *agentReplyInfo, err error) {
	if c == nil {
		return
	}
	if err != nil && ctx.Err() == nil && c.obs != nil {
		c.obs.AgentFailed(c.channel, err)
	}
	if c.span != nil {
		if reply != nil {
			c.span.SetAttributes(attribute.Int64("chatgate.tokens", reply.tokens))
		}
		if err != nil && ctx.Err() != nil {
			c.span.SetAttributes(attribute.Bool("chatgate.cancelled", true))
		}
		endSpan(c.span, err)
	}
}

type agentReplyInfo struct{ tokens int64 }
