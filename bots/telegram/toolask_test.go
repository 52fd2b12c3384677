package telegram

// Tool approvals on Telegram, against the fake Bot API and a real MCP
// test server: the ask with its buttons, a tap that allows or denies, who
// may tap in a group, the expiry, stale and unknown taps — every callback
// query answered exactly once.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/clocktest"
	"github.com/chatgate/chatgate/internal/mcptest"
	"github.com/chatgate/chatgate/internal/pgtest"
	"github.com/chatgate/chatgate/internal/telegramtest"
	"github.com/chatgate/chatgate/internal/tooltest"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/tools"
	"github.com/chatgate/chatgate/tools/mcpclient"
)

// toolCall is a call of the test server "t"'s tool.
func toolCall(id, tool string, args any) agent.ToolCall {
	return tooltest.Call(id, "t"+tools.Separator+tool, args)
}

// toolSetup is a bot whose model asks for calls of the MCP test server
// "t", every one of which needs the user's approval (10 minutes to
// decide); clock, when set, is the manager's.
func toolSetup(t *testing.T, clock *clocktest.Clock, opts Options, calls ...agent.ToolCall) (setup, *mcptest.Server) {
	t.Helper()
	srv, set := tooltest.Server(t, mcpclient.ServerConfig{Approve: tools.ApproveAsk})
	return setup{agent: tooltest.Asking(calls...), opts: opts, policies: queued, manager: func(o *sessions.Options) {
		o.Tools, o.ApproveTimeout = mcpclient.Offer{Set: set}, 10*time.Minute
		if clock != nil {
			o.Now, o.After = clock.Now, clock.After
		}
	}}, srv
}

// askOf waits for the n-th message sent (1-based), which must be an ask,
// and returns its id and the data of its Allow and Deny buttons.
func askOf(t *testing.T, api *telegramtest.Server, chat int64, n int) (id int, allow, deny string) {
	t.Helper()
	api.WaitSent(t, n)
	id = api.SentIDs()[n-1]
	kb := api.Keyboard(chat, id)
	if len(kb) != 1 || len(kb[0]) != 2 {
		t.Fatalf("message %d: keyboard %+v, want [Allow] [Deny]", id, kb)
	}
	allow, deny = kb[0][0].CallbackData, kb[0][1].CallbackData
	if !strings.HasPrefix(allow, "tool:") || !strings.HasSuffix(allow, ":allow") || !strings.HasSuffix(deny, ":deny") || len(allow) > 64 {
		t.Fatalf("buttons %+v", kb)
	}
	return id, allow, deny
}

// callStates are the states of the stored tool calls, oldest first.
func callStates(t *testing.T, h *harness) []string {
	t.Helper()
	var rows []ledger.ToolCall
	if err := h.db.Gorm().Order("id").Find(&rows).Error; err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range rows {
		out = append(out, r.State)
	}
	return out
}

func TestToolAskAllowedRunsOnce(t *testing.T) {
	for _, pg := range []bool{false, true} {
		t.Run(map[bool]string{false: "sqlite", true: "postgres"}[pg], func(t *testing.T) {
			s, srv := toolSetup(t, nil, Options{}, agent.ToolCall{ID: "c1", Name: "t__counter", Arguments: `{"key": "<b>k</b> & co"}`})
			if pg {
				s.dsn = pgtest.DSN(t)
			}
			api := telegramtest.New(t)
			start(t, api, t.TempDir(), s)
			api.Push(telegramtest.DM(7, "count"))
			id, allow, _ := askOf(t, api, 7, 1)
			ask := api.Messages()[0]
			// The model's arguments are escaped, never markup.
			if !strings.Contains(ask.Text, `<b>t__counter</b> with <code>{"key":"&lt;b&gt;k&lt;/b&gt; &amp; co"}</code>`) ||
				!strings.Contains(ask.Text, "Expires in 10 min.") || ask.ChatID != 7 {
				t.Fatalf("ask = %q", ask.Text)
			}
			if err := telegramtest.CheckHTML(ask.Text); err != nil {
				t.Fatalf("ask's HTML: %v", err)
			}
			// The preview shows the call waiting.
			if !api.WaitCalls(func(calls []telegramtest.Call) bool {
				for _, c := range calls {
					if c.Method == "sendMessageDraft" && strings.Contains(c.Params.Get("text"), "🔧 t__counter — waiting for approval") {
						return true
					}
				}
				return false
			}, 20*time.Second) {
				t.Fatal("the preview never showed the call waiting for approval")
			}
			q := api.Tap(t, 7, 7, id, allow)
			if ans := api.WaitAnswered(t, q); ans.Text != "Allowed" {
				t.Fatalf("answer = %+v", ans)
			}
			if got := api.WaitSent(t, 2)[1]; got.Text != "answer: 1" {
				t.Fatalf("reply = %q", got.Text)
			}
			if n := srv.Count(); n != 1 {
				t.Fatalf("counter ran %d times, want once", n)
			}
			api.WaitKeyboard(t, 7, id, true)
			if text := api.Text(7, id); !strings.Contains(text, "✅ Allowed") || strings.Contains(text, "Expires") {
				t.Fatalf("ask after the decision = %q", text)
			}
			// A tap the client still showed: answered, changes nothing.
			stale := api.TapStale(7, 7, id, allow)
			if ans := api.WaitAnswered(t, stale); ans.Text != "Already decided" {
				t.Fatalf("stale tap answered %+v", ans)
			}
			if n := srv.Count(); n != 1 {
				t.Fatalf("counter ran %d times after a stale tap", n)
			}
			api.CheckAnswers(t)
		})
	}
}

// failDecisions fails the first n decisions, as a database that is down.
type failDecisions struct {
	*sessions.Approvals
	n *atomic.Int32
}

func (f failDecisions) DecideTool(ctx context.Context, d sessions.ToolDecision) (sessions.ToolEvent, error) {
	if f.n.Add(-1) >= 0 {
		return sessions.ToolEvent{}, errors.New("database is down")
	}
	return f.Approvals.DecideTool(ctx, d)
}

// A denied call never runs and the model is told; a tap whose decision
// could not be stored is answered "try again" and leaves the call open.
func TestToolAskDeniedNeverRuns(t *testing.T) {
	s, srv := toolSetup(t, nil, Options{}, toolCall("c1", mcptest.Counter, map[string]string{"key": "k"}))
	var fails atomic.Int32
	fails.Store(1)
	s.sess = func(m *sessions.Manager) Sessions {
		doors := allDoors(m)
		doors.ToolApprovals = failDecisions{Approvals: m.Approvals(), n: &fails}
		return doors
	}
	api := telegramtest.New(t)
	h := start(t, api, t.TempDir(), s)
	api.Push(telegramtest.DM(7, "count"))
	id, _, deny := askOf(t, api, 7, 1)
	q := api.Tap(t, 7, 7, id, deny)
	if ans := api.WaitAnswered(t, q); ans.Text != "Something went wrong — try again" {
		t.Fatalf("answer = %+v", ans)
	}
	if states := callStates(t, h); len(states) != 1 || states[0] != ledger.ToolAsking || len(api.Keyboard(7, id)) != 1 {
		t.Fatalf("after a failed decision the calls are %v, keyboard %v; want it asking", states, api.Keyboard(7, id))
	}
	q = api.Tap(t, 7, 7, id, deny)
	if ans := api.WaitAnswered(t, q); ans.Text != "Denied" {
		t.Fatalf("answer = %+v", ans)
	}
	if got := api.WaitSent(t, 2)[1]; got.Text != "answer: "+sessions.ToolDeniedText {
		t.Fatalf("reply = %q, want the model told of the denial", got.Text)
	}
	api.WaitKeyboard(t, 7, id, true)
	if text := api.Text(7, id); !strings.Contains(text, "❌ Denied") {
		t.Fatalf("ask after the decision = %q", text)
	}
	if n := srv.Count(); n != 0 {
		t.Fatalf("counter ran %d times, want never", n)
	}
	api.CheckAnswers(t)
}

// /stop while a call waits for its user's decision ends the ask: its
// message says it was cancelled and loses its buttons, a tap on them is
// told so, and the call never runs.
func TestToolAskStoppedIsCancelled(t *testing.T) {
	s, srv := toolSetup(t, nil, Options{Streaming: StreamOff}, toolCall("c1", mcptest.Counter, map[string]string{"key": "k"}))
	api := telegramtest.New(t)
	h := start(t, api, t.TempDir(), s)
	api.Push(telegramtest.DM(7, "count"))
	id, allow, _ := askOf(t, api, 7, 1)
	api.Push(telegramtest.DM(7, "/stop"))
	api.WaitKeyboard(t, 7, id, true)
	if text := api.Text(7, id); !strings.Contains(text, "⏹ Cancelled — not run") || !strings.Contains(text, "t__counter") {
		t.Fatalf("ask after /stop = %q", text)
	}
	q := api.TapStale(7, 7, id, allow)
	if ans := api.WaitAnswered(t, q); ans.Text != "This request was cancelled" {
		t.Fatalf("a tap after /stop answered %+v", ans)
	}
	if states := callStates(t, h); len(states) != 1 || states[0] != ledger.ToolCancelled {
		t.Fatalf("calls = %v, want the ask cancelled", states)
	}
	if n := srv.Count(); n != 0 {
		t.Fatalf("counter ran %d times, want never", n)
	}
	api.CheckAnswers(t)
}

// In a group (here a forum topic) only the user whose turn it is decides: another member's
// tap is answered with who may and changes nothing; a tap from someone
// outside allowed_users is answered and ignored; a button the bot does
// not know is answered too.
func TestToolAskInAGroupOnlyTheTurnsUserDecides(t *testing.T) {
	const chat = -100
	s, srv := toolSetup(t, nil, Options{AllowedUsers: []int64{5, 6}}, toolCall("c1", mcptest.Counter, map[string]string{"key": "k"}))
	api := telegramtest.New(t)
	h := start(t, api, t.TempDir(), s)
	// In a forum topic: the ask goes to the topic the turn came from.
	api.Push(telegramtest.Topic(chat, 5, 42, "@"+telegramtest.BotName+" count"))
	id, allow, _ := askOf(t, api, chat, 1)
	if ask := api.Messages()[0]; !strings.Contains(ask.Text, "Only U can decide.") || ask.ChatID != chat || ask.Thread != 42 {
		t.Fatalf("ask = %+v", ask)
	}
	for _, tc := range []struct {
		user   int64
		data   string
		answer string
	}{
		{9, allow, ""}, // not in allowed_users
		{6, allow, "Only U can decide this"},
		{5, "vote:yes", unknownButtonText},
		{5, "tool:x:allow", unknownButtonText},
	} {
		q := api.TapStale(tc.user, chat, id, tc.data)
		if ans := api.WaitAnswered(t, q); ans.Text != tc.answer {
			t.Fatalf("user %d's tap on %q answered %q, want %q", tc.user, tc.data, ans.Text, tc.answer)
		}
	}
	if states := callStates(t, h); len(states) != 1 || states[0] != ledger.ToolAsking {
		t.Fatalf("after the refused taps the calls are %v, want one asking", states)
	}
	if kb := api.Keyboard(chat, id); len(kb) != 1 {
		t.Fatalf("the buttons went: %+v", kb)
	}
	q := api.Tap(t, 5, chat, id, allow)
	if ans := api.WaitAnswered(t, q); ans.Text != "Allowed" {
		t.Fatalf("answer = %+v", ans)
	}
	if got := api.WaitSent(t, 2)[1]; got.Text != "answer: 1" || got.ChatID != chat || got.Thread != 42 {
		t.Fatalf("reply = %+v", got)
	}
	if n := srv.Count(); n != 1 {
		t.Fatalf("counter ran %d times", n)
	}
	api.WaitKeyboard(t, chat, id, true)
	api.CheckAnswers(t)
}

// An ask nobody answers expires (the manager's clock passes its timeout):
// the call counts as denied, the model is told, and the ask says it
// expired and loses its buttons; a tap after that is answered as expired.
func TestToolAskExpires(t *testing.T) {
	clock := clocktest.New(time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC))
	s, srv := toolSetup(t, clock, Options{Now: clock.Now, Streaming: StreamOff}, toolCall("c1", mcptest.Counter, map[string]string{"key": "k"}))
	api := telegramtest.New(t)
	start(t, api, t.TempDir(), s)
	api.Push(telegramtest.DM(7, "count"))
	id, allow, _ := askOf(t, api, 7, 1)
	clock.Advance(11 * time.Minute)
	if got := api.WaitSent(t, 2)[1]; got.Text != "answer: "+sessions.ToolExpiredText {
		t.Fatalf("reply = %q", got.Text)
	}
	api.WaitKeyboard(t, 7, id, true)
	if text := api.Text(7, id); !strings.Contains(text, "⌛ Expired") {
		t.Fatalf("ask after the expiry = %q", text)
	}
	q := api.TapStale(7, 7, id, allow)
	if ans := api.WaitAnswered(t, q); ans.Text != "This request has expired" {
		t.Fatalf("late tap answered %+v", ans)
	}
	if n := srv.Count(); n != 0 {
		t.Fatalf("counter ran %d times", n)
	}
	api.CheckAnswers(t)
}

// A tap on an ask that has expired while its message still shows the
// buttons (the turn's own edit of it failed; or the turn runs on no
// replica now) is answered as expired, and the ask is edited to say so,
// which removes its buttons.
func TestToolAskTappedAfterTheExpiryLosesItsButtons(t *testing.T) {
	for _, pg := range []bool{false, true} {
		t.Run(map[bool]string{false: "sqlite", true: "postgres"}[pg], func(t *testing.T) {
			clock := clocktest.New(time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC))
			noWait := func(ctx context.Context, _ time.Duration) error { return ctx.Err() }
			s, srv := toolSetup(t, clock, Options{Now: clock.Now, Sleep: noWait, Streaming: StreamOff},
				toolCall("c1", mcptest.Counter, map[string]string{"key": "k"}))
			if pg {
				s.dsn = pgtest.DSN(t)
			}
			api := telegramtest.New(t)
			start(t, api, t.TempDir(), s)
			api.Push(telegramtest.DM(7, "count"))
			id, allow, _ := askOf(t, api, 7, 1)
			api.FailBare("editMessageText", http.StatusInternalServerError, 4) // every try of the turn's edit
			clock.Advance(11 * time.Minute)
			// The reply comes after the turn tried to end the ask.
			if got := api.WaitSent(t, 2)[1]; got.Text != "answer: "+sessions.ToolExpiredText {
				t.Fatalf("reply = %q", got.Text)
			}
			if n := len(api.Calls("editMessageText")); n != 4 {
				t.Fatalf("%d edits before the tap, want the turn's 4 failed ones", n)
			}
			api.WaitKeyboard(t, 7, id, false)

			q := api.Tap(t, 7, 7, id, allow)
			if ans := api.WaitAnswered(t, q); ans.Text != "This request has expired" {
				t.Fatalf("tap after the expiry answered %+v", ans)
			}
			api.WaitKeyboard(t, 7, id, true)
			if text := api.Text(7, id); !strings.Contains(text, "⌛ Expired — not run") || !strings.Contains(text, "t__counter") {
				t.Fatalf("ask after the tap = %q", text)
			}
			if n := srv.Count(); n != 0 {
				t.Fatalf("counter ran %d times", n)
			}
			api.CheckAnswers(t)
		})
	}
}

// Every error DecideTool names has its answer in tapRefusals: none falls
// through to "try again", which would leave the ask's buttons for ever.
func TestEveryDecisionErrorHasATapAnswer(t *testing.T) {
	b := &Bot{asks: newToolAsks()}
	for _, want := range sessions.ToolDecisionErrors {
		found := false
		for _, r := range tapRefusals {
			if r.err == want {
				found = true
				if a := r.answer(b, 7); a == "" || a == tapTryAgainText {
					t.Errorf("%q is answered %q", want, a)
				}
			}
		}
		if !found {
			t.Errorf("%q has no entry in tapRefusals", want)
		}
	}
}

// The preview's tool lines: one per call, its status as it moves, the
// model's name escaped.
func TestToolLinesInThePreview(t *testing.T) {
	s := &stream{b: &Bot{opts: Options{Format: FormatHTML}}, started: true, kick: make(chan struct{}, 1)}
	s.tool(sessions.ToolEvent{ID: 1, Name: "a<b>__x", Status: sessions.ToolStarted})
	s.tool(sessions.ToolEvent{ID: 2, Name: "t__fail", Status: sessions.ToolStarted})
	s.tool(sessions.ToolEvent{ID: 1, Name: "a<b>__x", Status: sessions.ToolDone, Duration: 230 * time.Millisecond})
	s.tool(sessions.ToolEvent{ID: 2, Name: "t__fail", Status: sessions.ToolFailed})
	s.soFar.WriteString("**so far**")
	text, mode := s.preview()
	want := "🔧 a&lt;b&gt;__x ✓ 0.2 s\n🔧 t__fail ✗ failed\n\n<b>so far</b>"
	if text != want || mode != "HTML" {
		t.Fatalf("preview = %q (%s), want %q", text, mode, want)
	}
	if err := telegramtest.CheckHTML(text); err != nil {
		t.Fatal(err)
	}
	for i := 3; i < 12; i++ {
		s.tool(sessions.ToolEvent{ID: int64(i), Name: "t__" + strconv.Itoa(i), Status: sessions.ToolDenied})
	}
	if text, _ := s.preview(); strings.Count(text, "🔧") != maxToolLines || !strings.Contains(text, "🔧 t__11 — denied") {
		t.Fatalf("preview = %q, want the last %d calls", text, maxToolLines)
	}
}

// A turn run again after a restart asks again in a new message: the
// earlier ask loses its buttons, and the new one still names the user who
// may decide (this process never saw them write). Deciding there goes on
// with the turn, which runs the call once.
func TestToolAskedAgainAfterARestart(t *testing.T) {
	const chat = -100
	call := toolCall("c1", mcptest.Counter, map[string]string{"key": "k"})
	s, _ := toolSetup(t, nil, Options{AllowedUsers: []int64{5, 6}}, call)
	api := telegramtest.New(t)
	dir := t.TempDir()
	h := start(t, api, dir, s)
	msg := telegramtest.Group(chat, 5, "@"+telegramtest.BotName+" count")
	msg["from"].(map[string]any)["first_name"] = "Ann"
	api.Push(msg)
	first, _, _ := askOf(t, api, chat, 1)
	if ask := api.Messages()[0]; !strings.Contains(ask.Text, "Only Ann can decide.") {
		t.Fatalf("first ask = %q", ask.Text)
	}
	h.shutdown(0) // the turn is cut; its call stays asking

	s2, srv := toolSetup(t, nil, Options{AllowedUsers: []int64{5, 6}}, call)
	h2 := start(t, api, dir, s2)
	waitConnected(t, h2.bot)
	recovered := make(chan error, 1)
	go func() { // it runs the turn, which waits for the decision
		ran, _, err := h2.mgr.Rescuer().Recover(context.Background(), time.Hour)
		if err == nil && ran != 1 {
			err = fmt.Errorf("recovery ran %d turns, want the cut one", ran)
		}
		recovered <- err
	}()
	second, allow, _ := askOf(t, api, chat, 2)
	if ask := api.Messages()[1]; !strings.Contains(ask.Text, "Only Ann can decide.") {
		t.Fatalf("ask after the restart = %q, want it to name Ann", ask.Text)
	}
	api.WaitKeyboard(t, chat, first, true)
	if kb := api.Keyboard(chat, second); len(kb) != 1 {
		t.Fatalf("the new ask has no buttons: %+v", kb)
	}
	q := api.TapStale(6, chat, second, allow)
	if ans := api.WaitAnswered(t, q); ans.Text != "Only Ann can decide this" {
		t.Fatalf("another member's tap answered %q", ans.Text)
	}
	q = api.Tap(t, 5, chat, second, allow)
	if ans := api.WaitAnswered(t, q); ans.Text != "Allowed" {
		t.Fatalf("answer = %+v", ans)
	}
	if got := api.WaitSent(t, 3)[2]; got.Text != "answer: 1" || got.ChatID != chat {
		t.Fatalf("reply = %+v", got)
	}
	if err := <-recovered; err != nil {
		t.Fatal(err)
	}
	api.WaitKeyboard(t, chat, second, true)
	if n := srv.Count(); n != 1 {
		t.Fatalf("counter ran %d times, want once", n)
	}
	api.CheckAnswers(t)
}

// Another replica's ask and its end (Remote) send nothing to the Bot
// API: the replica running the turn asked in the chat, and settles the
// ask there. With two replicas, the chat is asked once.
func TestAnotherReplicasAskSendsNothing(t *testing.T) {
	s, _ := toolSetup(t, nil, Options{})
	api := telegramtest.New(t)
	h := start(t, api, t.TempDir(), s)
	waitConnected(t, h.bot)
	a := sessions.ToolAsk{Channel: Channel, SessionKey: sessions.TelegramDMKey(7), UserID: "7", Remote: true,
		Call: sessions.ToolEvent{ID: 1, Seq: 1, Name: "t__counter", Status: sessions.ToolAsking, ExpiresAt: time.Now().Add(time.Minute)}}
	if ref, err := h.bot.askTool(context.Background(), a); ref != "" || err != nil {
		t.Fatalf("a remote ask = %q, %v; want nothing asked, no error", ref, err)
	}
	a.Call.Status = sessions.ToolStarted
	h.bot.toolSettled(context.Background(), a, "7:1")
	for _, m := range []string{"sendMessage", "editMessageText", "editMessageReplyMarkup"} {
		if n := len(api.Calls(m)); n != 0 {
			t.Fatalf("%d %s calls for another replica's ask", n, m)
		}
	}
}

// seenEvents hears, after the manager, every event of other replicas.
type seenEvents struct {
	sessions.Events
	self string
	seen chan ledger.Event
}

func (s *seenEvents) Listen(ctx context.Context, fn func(ledger.Event)) error {
	return s.Events.Listen(ctx, func(ev ledger.Event) {
		fn(ev)
		if ev.Origin != s.self && !ev.Missed {
			select {
			case s.seen <- ev:
			default:
			}
		}
	})
}

// Two replicas on one PostgreSQL database: the replica running the turn
// asks the chat; the other hears of the ask and of its end (for its
// WebSocket clients) and sends Telegram nothing. The chat gets one ask.
func TestToolAskedOnceWithTwoReplicas(t *testing.T) {
	dsn := pgtest.DSN(t)
	api := telegramtest.New(t)
	seen := make(chan ledger.Event, 64)
	var hs []*harness
	for i := range 2 {
		s, _ := toolSetup(t, nil, Options{Streaming: StreamOff}, toolCall("c1", mcptest.Counter, map[string]string{"key": "k"}))
		s.dsn = dsn
		replica := fmt.Sprintf("replica-%d", i)
		manager := s.manager
		s.manager = func(o *sessions.Options) {
			manager(o)
			o.ReplicaID = replica
			o.Events = &seenEvents{Events: o.Events, self: replica, seen: seen}
		}
		h := start(t, api, t.TempDir(), s)
		h.mgr.Rescuer().Listen()
		hs = append(hs, h)
	}
	for _, h := range hs {
		select {
		case <-h.mgr.PeersKnown():
		case <-time.After(20 * time.Second):
			t.Fatal("the replicas did not learn of each other")
		}
	}
	api.Push(telegramtest.DM(7, "count"))
	id, allow, _ := askOf(t, api, 7, 1)
	q := api.Tap(t, 7, 7, id, allow)
	if ans := api.WaitAnswered(t, q); ans.Text != "Allowed" {
		t.Fatalf("answer = %+v", ans)
	}
	if got := api.WaitSent(t, 2)[1]; got.Text != "answer: 1" {
		t.Fatalf("reply = %q", got.Text)
	}
	// The other replica heard of the ask's end, which comes after the ask.
	var other *harness
	for other == nil {
		select {
		case ev := <-seen:
			if ev.Kind == ledger.EventAskSettled && ev.Channel == Channel {
				for _, h := range hs {
					if h.mgr.ReplicaID() != ev.Origin {
						other = h
					}
				}
			}
		case <-time.After(20 * time.Second):
			t.Fatal("no replica heard of the other's ask ending")
		}
	}
	other.shutdown(5 * time.Second) // its drain waits for what it was handing on
	asks := 0
	for _, c := range api.Calls("sendMessage") {
		if c.Params.Get("reply_markup") != "" {
			asks++
		}
	}
	if sent := api.Messages(); asks != 1 || len(sent) != 2 {
		t.Fatalf("%d asks and messages %q; want one ask, then the reply", asks, texts(sent))
	}
}
