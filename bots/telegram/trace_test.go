package telegram

import (
	"log/slog"
	"strconv"
	"testing"

	"github.com/chatgate/chatgate/internal/oteltest"
	"github.com/chatgate/chatgate/internal/telegramtest"
	"github.com/chatgate/chatgate/internal/tracelog"
	"github.com/chatgate/chatgate/sessions"
)

// A Telegram update is a span "telegram update" with the span "message"
// (and its "store") under it; the turn that answers it is one trace
// whose "delivery" is the sendMessage of the reply; a log line of the
// turn carries its trace id.
func TestTracingTelegramTurn(t *testing.T) {
	rec := oteltest.New(t)
	logs := &oteltest.Logs{}
	log := slog.New(tracelog.Handler(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	api := telegramtest.New(t)
	start(t, api, t.TempDir(), setup{
		opts: Options{TracerProvider: rec},
		manager: func(o *sessions.Options) {
			o.TracerProvider, o.Logger = rec, log
		},
	})
	id := api.Push(telegramtest.DM(7, "hi"))
	api.WaitSent(t, 1)
	rec.WaitEnded(t, "turn", 1)
	rec.WaitEnded(t, "delivery", 1)
	rec.WaitEnded(t, "telegram update", 1)

	updates := rec.Named("telegram update")
	if len(updates) != 1 {
		t.Fatalf("update spans: %v", rec.Names())
	}
	update := updates[0]
	if oteltest.Attr(update, "telegram.update_id") != strconv.Itoa(api.LastUpdateID()) ||
		oteltest.Attr(update, "telegram.chat_kind") != "private" {
		t.Errorf("update attributes = %v", update.Attributes)
	}
	messages := rec.Named("message")
	if len(messages) != 1 {
		t.Fatalf("message spans: %v", rec.Names())
	}
	msg := messages[0]
	if msg.Parent.SpanID() != update.SpanContext.SpanID() {
		t.Errorf("the message span is not a child of the update span")
	}
	if oteltest.Attr(msg, "chatgate.client_msg_id") != clientMsgID(7, id) {
		t.Errorf("message attributes = %v", msg.Attributes)
	}
	turns := rec.Named("turn")
	if len(turns) != 1 {
		t.Fatalf("turn spans: %v", rec.Names())
	}
	turn := turns[0]
	if turn.Parent.IsValid() || turn.SpanContext.TraceID() == msg.SpanContext.TraceID() {
		t.Errorf("the turn is not a root span of its own trace")
	}
	if len(turn.Links) != 1 || turn.Links[0].SpanContext.SpanID() != msg.SpanContext.SpanID() {
		t.Errorf("turn links = %v, want the message", turn.Links)
	}
	if oteltest.Attr(turn, "chatgate.channel") != Channel || oteltest.Attr(turn, "chatgate.status") != "ok" ||
		oteltest.Attr(turn, "chatgate.messages") != "1" {
		t.Errorf("turn attributes = %v", turn.Attributes)
	}
	spans := rec.InTrace(turn.SpanContext.TraceID())
	for _, name := range []string{"lock wait", "agent call", "store reply", "delivery"} {
		if s, ok := spans[name]; !ok || s.Parent.SpanID() != turn.SpanContext.SpanID() {
			t.Errorf("%q missing from the turn's trace, or not the turn's child: %v", name, rec.Names())
		}
	}
	if call := spans["agent call"]; !oteltest.HasEvent(call, "first token") {
		t.Errorf("agent call lacks the first token event")
	}
	if d := spans["delivery"]; oteltest.Attr(d, "chatgate.channel") != Channel {
		t.Errorf("delivery attributes = %v", d.Attributes)
	}
	if len(logs.WithTrace(turn.SpanContext.TraceID())) == 0 {
		t.Errorf("no log line carries the turn's trace id: %v", logs.Lines())
	}
}
