package telegram

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/chatgate/chatgate/sessions"
)

// TracerName names the tracer of the bot's spans.
const TracerName = "github.com/chatgate/chatgate/bots/telegram"

// traceUpdate starts the span "telegram update" of an update: the span
// "message" of its message (sessions) is its child. The returned func
// ends it, once, when the update is settled. A no-op without a tracer.
func (b *Bot) traceUpdate(ctx context.Context, u update) (context.Context, func(processed bool)) {
	tp := b.opts.TracerProvider
	if tp == nil {
		return ctx, func(bool) {}
	}
	attrs := []attribute.KeyValue{attribute.Int("telegram.update_id", u.UpdateID)}
	if m := u.Message; m != nil && m.Chat != nil {
		attrs = append(attrs, attribute.String("telegram.chat_kind", m.Chat.Type))
	}
	ctx, span := tp.Tracer(TracerName).Start(ctx, "telegram update", trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attrs...))
	var once sync.Once
	return ctx, func(processed bool) {
		once.Do(func() {
			span.SetAttributes(attribute.Bool("telegram.processed", processed))
			span.End()
		})
	}
}

// traceTranscribe starts the span "transcribe" of a voice note or an
// audio file, a child of its update's: the audio's size, the limit it was
// within and its type; its duration is the transcription's. The returned
// func ends it with the transcription's error.
func (b *Bot) traceTranscribe(ctx context.Context, size, limit int64, mime string) (context.Context, func(error)) {
	tp := b.opts.TracerProvider
	if tp == nil {
		return ctx, func(error) {}
	}
	ctx, span := tp.Tracer(TracerName).Start(ctx, "transcribe", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(audioAttrs(size, limit, mime)...))
	return ctx, func(err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

// audioRefused records on the update's span that its audio was over the
// limit and not transcribed.
func (b *Bot) audioRefused(ctx context.Context, size, limit int64, mime string) {
	if b.opts.TracerProvider != nil {
		trace.SpanFromContext(ctx).AddEvent("audio over the size limit", trace.WithAttributes(audioAttrs(size, limit, mime)...))
	}
}

func audioAttrs(size, limit int64, mime string) []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.String("chatgate.channel", Channel),
		attribute.Int64("audio.bytes", size), attribute.Int64("audio.limit_bytes", limit), attribute.String("audio.mime", mime),
	}
}

// traceDelivery starts the span "delivery" of a reply, a child of the turn
// that produced it; the returned func ends it with the send's error.
func (b *Bot) traceDelivery(ctx context.Context, out sessions.Outcome) (context.Context, func(error)) {
	tp := b.opts.TracerProvider
	if tp == nil || !out.Trace.IsValid() {
		return ctx, func(error) {}
	}
	ctx, span := tp.Tracer(TracerName).Start(trace.ContextWithSpanContext(ctx, out.Trace), "delivery",
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.String("chatgate.channel", Channel), attribute.Int64("chatgate.reply_seq", out.Reply.Seq)))
	return ctx, func(err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

// deliveryFailed counts a reply that could not be sent.
func (b *Bot) deliveryFailed(err error) {
	if err != nil && b.opts.OnDeliveryFailed != nil {
		b.opts.OnDeliveryFailed()
	}
}
