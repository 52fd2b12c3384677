package gateway

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/chatgate/chatgate/sessions"
)

// TracerName names the tracer of the WebSocket channel's spans.
const TracerName = "github.com/chatgate/chatgate/gateway"

// traceDelivery starts the span "delivery" of a reply, a child of the
// turn that produced it; the returned func ends it with the number of
// connections the frame was queued to. A no-op without a tracer.
func (ws *WebSocket) traceDelivery(out sessions.Outcome) func(sent int) {
	tp := ws.opts.TracerProvider
	if tp == nil || !out.Trace.IsValid() {
		return func(int) {}
	}
	ctx := trace.ContextWithSpanContext(context.Background(), out.Trace)
	_, span := tp.Tracer(TracerName).Start(ctx, "delivery", trace.WithAttributes(
		attribute.String("chatgate.channel", Channel),
		attribute.Int64("chatgate.reply_seq", out.Reply.Seq),
	))
	return func(sent int) {
		span.SetAttributes(attribute.Int("chatgate.connections", sent))
		if sent == 0 {
			span.AddEvent("no open connection: the reply is read on resume")
		}
		span.End()
	}
}

// delivered counts a reply sent to no connection as a delivery failure.
func (ws *WebSocket) delivered(sent int) {
	if sent == 0 && ws.opts.OnDeliveryFailed != nil {
		ws.opts.OnDeliveryFailed()
	}
}
