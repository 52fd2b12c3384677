package telegram

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/telegramtest"
	"github.com/chatgate/chatgate/sessions"
)

// previewThenCut is an echo agent whose first call writes a first piece,
// waits until the bot has shown it in a preview message, then waits
// until its turn is cancelled.
type previewThenCut struct {
	calls
	api     *telegramtest.Server
	started chan struct{}
}

func (c *previewThenCut) Reply(ctx context.Context, req agent.Request, onDelta func(string)) (agent.Reply, error) {
	if c.count() > 0 {
		return c.calls.Reply(ctx, req, onDelta)
	}
	c.calls.Reply(ctx, req, nil)
	onDelta("Once upon a time, ")
	c.api.WaitCalls(func(calls []telegramtest.Call) bool {
		for _, call := range calls {
			if call.Method == "sendMessage" {
				return true
			}
		}
		return false
	}, 20*time.Second)
	close(c.started)
	<-ctx.Done()
	return agent.Reply{}, ctx.Err()
}

// TestInterruptedStreamLeavesNoPreview: in busy mode interrupt with
// edited previews, a turn cut by a newer message had started a preview
// message; the next turn answers both messages in a message of its own,
// and the cut turn's preview, half a reply nobody finishes, is deleted.
func TestInterruptedStreamLeavesNoPreview(t *testing.T) {
	api := telegramtest.New(t)
	ag := &previewThenCut{api: api, started: make(chan struct{})}
	deliveries := make(chan string, 4)
	h := start(t, api, t.TempDir(), setup{agent: ag, policies: busy(sessions.BusyPolicy{Mode: sessions.BusyInterrupt}),
		opts: Options{Streaming: StreamEdits},
		sess: func(m *sessions.Manager) Sessions { return allDoors(deliveryNotes{Manager: m, ch: deliveries}) }})
	long := api.Push(telegramtest.DM(7, "tell me a long story"))
	<-ag.started
	short := api.Push(telegramtest.DM(7, "actually, a short one"))
	select {
	case <-deliveries:
	case <-time.After(20 * time.Second):
		t.Fatal("no delivery recorded")
	}
	sent, ids := api.Messages(), api.SentIDs()
	if len(sent) != 2 || sent[0].ReplyTo != long || sent[1].ReplyTo != short {
		t.Fatalf("sent %+v, want the cut turn's preview, then the reply to the newer message", sent)
	}
	if want := "echo: tell me a long story\nactually, a short one (history: 0)"; sent[1].Text != want {
		t.Fatalf("reply %q, want %q", sent[1].Text, want)
	}
	if !api.Deleted(7, ids[0]) {
		t.Fatalf("the cut turn's preview %q stays in the chat", sent[0].Text)
	}
	if api.Deleted(7, ids[1]) {
		t.Fatal("the reply was deleted")
	}
	// The deleted preview is not what a restart would edit.
	if v, err := h.bot.sess.ChannelState(context.Background(), h.bot.previewKey(sessions.TelegramDMKey(7))); err != nil ||
		strings.Contains(v, `"message":`+strconv.Itoa(ids[0])+",") {
		t.Fatalf("the preview record still names the deleted preview: %q (%v)", v, err)
	}
}

// TestHistoryEntriesRenderApart: /history with format html converts each
// line of the history on its own, so a code block cut short in one line
// does not take the lines after it into it; every message is valid HTML.
func TestHistoryEntriesRenderApart(t *testing.T) {
	api := telegramtest.New(t)
	start(t, api, t.TempDir(), setup{})
	// The message fits in a line of the history, its echo is cut inside
	// the code block.
	code := "see:\n```\n" + strings.Repeat("x <y> ", 47) + "\n```"
	if n := len([]rune(code)); n > historyLineRunes || n+len("echo: ") < historyLineRunes {
		t.Fatalf("the message is %d runes", n)
	}
	api.Push(telegramtest.DM(7, code))
	api.WaitSent(t, 1)
	api.Push(telegramtest.DM(7, "thanks"))
	api.WaitSent(t, 2)
	api.Push(telegramtest.DM(7, "/history"))
	got := api.WaitSent(t, 3)[2:]
	modes := api.ParseModes()[2:]
	all := ""
	for i, m := range got {
		if modes[i] != "HTML" {
			t.Fatalf("/history part %d sent with parse mode %q, want HTML", i, modes[i])
		}
		if err := telegramtest.CheckHTML(m.Text); err != nil {
			t.Fatalf("/history part %d is invalid HTML: %v\n%s", i, err, m.Text)
		}
		all += m.Text
	}
	at := strings.Index(all, "You: thanks")
	if at < 0 {
		t.Fatalf("/history lacks the last message:\n%s", all)
	}
	if before := all[:at]; strings.Count(before, "<pre>") != strings.Count(before, "</pre>") {
		t.Fatalf("the last message is inside the code block of the line before:\n%s", all)
	}
	if !strings.Contains(all, "x &lt;y&gt;") {
		t.Fatalf("the code is not escaped:\n%s", all)
	}
}

// fixedReply answers every message with text.
type fixedReply struct{ text string }

func (fixedReply) Name() string  { return "fixed" }
func (fixedReply) Model() string { return "fixed" }
func (f fixedReply) Reply(ctx context.Context, req agent.Request, onDelta func(string)) (agent.Reply, error) {
	return agent.Reply{Messages: []agent.Message{{Role: agent.RoleAssistant, Content: f.text}}}, nil
}

// TestEmptyReplySaysSo: a model answer with no visible text, which
// Telegram refuses to send ("message text is empty"), reaches the user as
// a short notice, delivered, in both formats, instead of nothing.
func TestEmptyReplySaysSo(t *testing.T) {
	for _, format := range []string{FormatHTML, FormatPlain} {
		for _, text := range []string{"", " \n "} {
			t.Run(format+"/"+strconv.Quote(text), func(t *testing.T) {
				api := telegramtest.New(t)
				deliveries := make(chan string, 4)
				h := start(t, api, t.TempDir(), setup{agent: fixedReply{text}, opts: Options{Format: format},
					sess: func(m *sessions.Manager) Sessions { return allDoors(deliveryNotes{Manager: m, ch: deliveries}) }})
				id := api.Push(telegramtest.DM(7, "hm?"))
				select {
				case <-deliveries:
				case <-time.After(20 * time.Second):
					t.Fatal("no delivery recorded")
				}
				if sent := api.Messages(); len(sent) != 1 || sent[0] != (telegramtest.Sent{ChatID: 7, Text: emptyReplyText, ReplyTo: id}) {
					t.Fatalf("sent %+v, want the empty-answer notice", sent)
				}
				stored(t, h, sessions.TelegramDMKey(7))
			})
		}
	}
}

// holdFirstDelivery holds the bot's first delivery mark until release is
// closed, and closes recorded when a preview record naming forMsg is
// stored.
type holdFirstDelivery struct {
	*sessions.Manager
	// ChannelStates are the manager's, whose SetChannelState it watches.
	ChannelStates
	forMsg   string
	once     *sync.Once
	release  chan struct{}
	recorded chan struct{}
	rec      *sync.Once
}

func (h holdFirstDelivery) Delivered(ctx context.Context, t sessions.TurnRef, ref string, err error) error {
	h.once.Do(func() { <-h.release })
	return h.Manager.Delivered(ctx, t, ref, err)
}

func (h holdFirstDelivery) SetChannelState(ctx context.Context, key, value string) error {
	err := h.ChannelStates.SetChannelState(ctx, key, value)
	if strings.Contains(key, ":preview:") && strings.Contains(value, `"for":"`+h.forMsg+`"`) {
		h.rec.Do(func() { close(h.recorded) })
	}
	return err
}

// TestPreviewRecordOfTheNextReplyIsKept: in busy mode queue two replies
// of one chat stream by edits one after the other; the first is marked
// delivered only after the second's preview message was recorded. The
// first's clean-up must not take the second's record: the gateway stops
// while the second streams, and after the restart its reply goes into
// its preview message, not into a new one beside half a text.
func TestPreviewRecordOfTheNextReplyIsKept(t *testing.T) {
	api := telegramtest.New(t)
	dir := t.TempDir()
	second := &previewThenCut{api: api, started: make(chan struct{})}
	var calls atomic.Int64
	mixed := agentFunc(func(ctx context.Context, req agent.Request, onDelta func(string)) (agent.Reply, error) {
		if calls.Add(1) == 1 {
			onDelta("first reply")
			return agent.Reply{Messages: []agent.Message{{Role: agent.RoleAssistant, Content: "first reply"}}}, nil
		}
		second.calls.Reply(ctx, req, nil)
		onDelta("Once upon a time, ")
		close(second.started)
		<-ctx.Done()
		return agent.Reply{}, ctx.Err()
	})
	hold := holdFirstDelivery{once: &sync.Once{}, rec: &sync.Once{}, release: make(chan struct{}), recorded: make(chan struct{}), forMsg: "7:2"}
	// Both wait before the bot starts: their ids are 1 and 2.
	if api.Push(telegramtest.DM(7, "first")) != 1 || api.Push(telegramtest.DM(7, "second")) != 2 {
		t.Fatal("message ids are not 1 and 2")
	}
	h := start(t, api, dir, setup{agent: mixed, policies: queued, opts: Options{Streaming: StreamEdits},
		sess: func(m *sessions.Manager) Sessions {
			hold.Manager, hold.ChannelStates = m, m.Conversations()
			s := allDoors(hold)
			s.ChannelStates = hold
			return s
		}})
	<-second.started
	select {
	case <-hold.recorded:
	case <-time.After(20 * time.Second):
		t.Fatal("the second reply's preview was never recorded")
	}
	close(hold.release)
	h.shutdown(0) // the second turn is cut and stored interrupted

	h2 := start(t, api, dir, setup{policies: queued, opts: Options{Streaming: StreamEdits}})
	waitConnected(t, h2.bot)
	if ran, _, err := h2.mgr.Rescuer().Recover(context.Background(), time.Hour); ran != 1 || err != nil {
		t.Fatalf("recovery ran %d (%v), want the interrupted turn", ran, err)
	}
	reply, _ := stored(t, h2, sessions.TelegramDMKey(7))
	sent := api.Messages()
	if len(sent) != 2 || sent[0].Text != "first reply" || sent[1].Text != reply || sent[1].ReplyTo != 2 {
		t.Fatalf("messages %+v, want the first reply, then the second's preview ending as %q", sent, reply)
	}
}

type agentFunc func(ctx context.Context, req agent.Request, onDelta func(string)) (agent.Reply, error)

func (agentFunc) Name() string  { return "func" }
func (agentFunc) Model() string { return "func" }
func (f agentFunc) Reply(ctx context.Context, req agent.Request, onDelta func(string)) (agent.Reply, error) {
	return f(ctx, req, onDelta)
}

// TestPreviewGivenUpIsDeleted: Telegram answers every edit 429. The final
// edit is retried as retry_after says, then given up: the whole reply
// goes as a new message, and the preview showing half of it is deleted.
func TestPreviewGivenUpIsDeleted(t *testing.T) {
	api := telegramtest.New(t)
	api.Throttle429Edits(1)
	ag := &streamAgent{chunks: chunks(8, 40), step: 250 * time.Millisecond, lockstep: true}
	s := startStreaming(t, api, t.TempDir(), StreamEdits, ag)
	s.post(t, 500, telegramtest.DM(7, "write"))
	reply, ref := s.delivered(t, sessions.TelegramDMKey(7))
	sent, ids := api.Messages(), api.SentIDs()
	if len(sent) != 2 || sent[1] != (telegramtest.Sent{ChatID: 7, Text: reply, ReplyTo: 500}) || ref != strconv.Itoa(ids[1]) {
		t.Fatalf("messages %+v (ref %s), want the preview, then the whole reply", sent, ref)
	}
	if !api.Deleted(7, ids[0]) {
		t.Fatalf("the given-up preview %q stays beside the reply", sent[0].Text)
	}
}

// TestDraftsFailingFallBackToEdits: a Bot API server that knows
// sendMessageDraft but answers every draft 400 (it will not take drafts
// from this bot) still gets a preview: the reply streams by edits, and
// ends as the stored reply.
func TestDraftsFailingFallBackToEdits(t *testing.T) {
	api := telegramtest.New(t)
	api.FailDrafts("drafts are not available for this bot")
	ag := &streamAgent{chunks: chunks(16, 40), step: 250 * time.Millisecond, lockstep: true}
	s := startStreaming(t, api, t.TempDir(), StreamAuto, ag)
	s.post(t, 500, telegramtest.DM(7, "write"))
	reply, _ := s.delivered(t, sessions.TelegramDMKey(7))
	ag.check(t)
	if n := len(api.Calls("sendMessageDraft")); n != 1 {
		t.Fatalf("%d draft calls, want the one that failed", n)
	}
	if n := len(api.Calls("editMessageText")); n < 2 {
		t.Fatalf("%d edits, want the reply streamed by edits", n)
	}
	if sent := api.Messages(); len(sent) != 1 || sent[0] != (telegramtest.Sent{ChatID: 7, Text: reply, ReplyTo: 500}) {
		t.Fatalf("messages %+v, want the preview ending as %q", sent, reply)
	}
}
