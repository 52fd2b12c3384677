package gateway

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/chatgate/chatgate/sessions"
)

// TracerName names the tracer of the WebSocket channel's spans.
const TracerName = "github.com/chatgate/chatgate/gateway"

// traceMessage starts the span "websocket message" of a message frame
// taken by the worker: its "transcribe" spans (audio) and the span
// "message" (sessions) are its children. The returned func ends it once
// the message is stored or refused. A no-op without a tracer.
func (ws *WebSocket) traceMessage(ctx context.Context, f *clientFrame) (context.Context, func(refused *wsError)) {
	tp := ws.opts.TracerProvider
	if tp == nil {
		return ctx, func(*wsError) {}
	}
	ctx, span := tp.Tracer(TracerName).Start(ctx, "websocket message", trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attribute.String("chatgate.channel", Channel), attribute.String("chatgate.client_msg_id", f.ID),
			attribute.Int("chatgate.attachments", len(f.Attachments))))
	return ctx, func(refused *wsError) {
		if refused != nil {
			span.SetStatus(codes.Error, refused.Code)
		}
		span.End()
	}
}

// traceTranscribe starts the span "transcribe" of one audio attachment:
// its size, the limit it was within and its type; its duration is the
// transcription's. The returned func ends it with the error.
func (ws *WebSocket) traceTranscribe(ctx context.Context, size int64, mime string) (context.Context, func(error)) {
	tp := ws.opts.TracerProvider
	if tp == nil {
		return ctx, func(error) {}
	}
	ctx, span := tp.Tracer(TracerName).Start(ctx, "transcribe", trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String("chatgate.channel", Channel),
		attribute.Int64("audio.bytes", size), attribute.Int64("audio.limit_bytes", ws.opts.MaxAudioBytes), attribute.String("audio.mime", mime)))
	return ctx, func(err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

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
