package telegram

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/bots/telegram/tgformat"
	"github.com/chatgate/chatgate/internal/telegramtest"
	"github.com/chatgate/chatgate/sessions"
)

// stepClock is the bot's clock in the streaming tests. While the model
// writes, time moves only when the model moves it, and a sleeper wakes
// once time reaches its deadline; once the model is done, a sleep moves
// time itself, so the end of a turn runs at once. The Bot API server
// stamps calls with it, so a test measures the bot's pace on the clock the
// bot paced itself by.
type stepClock struct {
	mu       sync.Mutex
	now      time.Time
	free     bool
	changed  chan struct{} // closed and replaced whenever time moves
	sleepers map[*int]time.Time
	poke     func() // tells the Bot API server's waiters to look again
}

func newStepClock() *stepClock {
	return &stepClock{now: time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC), free: true,
		changed: make(chan struct{}), sleepers: map[*int]time.Time{}, poke: func() {}}
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	if c.free {
		c.now = c.now.Add(d)
		c.mu.Unlock()
		return nil
	}
	deadline := c.now.Add(d)
	id := new(int)
	c.sleepers[id] = deadline
	c.mu.Unlock()
	c.poke()
	defer func() {
		c.mu.Lock()
		delete(c.sleepers, id)
		c.mu.Unlock()
	}()
	for {
		c.mu.Lock()
		// Going free releases no sleeper: a preview waiting for its
		// time when the model ends is cut by the turn's end, as it
		// would be on a real clock.
		if !c.now.Before(deadline) {
			c.mu.Unlock()
			return nil
		}
		ch := c.changed
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// sleeping counts sleepers whose time has not come.
func (c *stepClock) sleeping() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, d := range c.sleepers {
		if c.now.Before(d) {
			n++
		}
	}
	return n
}

func (c *stepClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
}

func (c *stepClock) setFree(free bool) {
	c.mu.Lock()
	c.free = free
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
}

// streamAgent writes its reply in chunks, one every step of the clock.
// After each chunk it waits until the bot has dealt with it — shown the
// text so far, or gone to sleep until the chat's pace allows — so that the
// bot sees the deltas as spread over time as the clock says, however fast
// the machine runs.
type streamAgent struct {
	api    *telegramtest.Server
	clock  *stepClock
	chunks []string
	step   time.Duration
	// lockstep waits for the bot after each chunk (no preview expected:
	// false).
	lockstep bool
	// block, when set, writes that many chunks, then waits for the turn
	// to be cancelled.
	block int
	// before, when set, runs before each chunk; it may end the lockstep
	// (the bot is not expected to show anything more).
	before func(i int) (lockstep bool)

	// format is the bot's reply format (default plain: the tests
	// compare the messages with the stored text).
	format string

	mu     sync.Mutex
	lost   []string // chunks the bot never dealt with
	called int
}

func (a *streamAgent) formatOr(def string) string {
	if a.format == "" {
		return def
	}
	return a.format
}

func (a *streamAgent) Name() string  { return "stream" }
func (a *streamAgent) Model() string { return "stream" }

func (a *streamAgent) Reply(ctx context.Context, req agent.Request, onDelta func(string)) (agent.Reply, error) {
	a.mu.Lock()
	a.called++
	a.mu.Unlock()
	a.clock.setFree(false)
	defer a.clock.setFree(true)
	var soFar strings.Builder
	for i, c := range a.chunks {
		if a.block > 0 && i == a.block {
			a.clock.setFree(true)
			<-ctx.Done()
			return agent.Reply{}, ctx.Err()
		}
		if a.before != nil && !a.before(i) {
			a.lockstep = false
		}
		a.clock.advance(a.step)
		soFar.WriteString(c)
		onDelta(c)
		if !a.lockstep {
			continue
		}
		want, _ := previewOf(a.formatOr(FormatPlain), soFar.String(), false)
		plain, _ := previewOf(a.formatOr(FormatPlain), soFar.String(), true)
		dealt := a.api.WaitCalls(func(calls []telegramtest.Call) bool {
			for _, c := range slices.Backward(calls) {
				if isPreviewCall(c) && (c.Params.Get("text") == want || c.Params.Get("text") == plain) {
					return true
				}
			}
			return a.clock.sleeping() > 0
		}, 20*time.Second)
		if !dealt {
			a.mu.Lock()
			a.lost = append(a.lost, c)
			a.mu.Unlock()
		}
	}
	return agent.Reply{Messages: []agent.Message{{Role: agent.RoleAssistant, Content: soFar.String()}}}, nil
}

func isPreviewCall(c telegramtest.Call) bool {
	return c.Method == "sendMessageDraft" || c.Method == "sendMessage" || c.Method == "editMessageText"
}

// chunks are n pieces of a reply, each size bytes or so, lines of words.
func chunks(n, size int) []string {
	out := make([]string, n)
	for i := range out {
		var b strings.Builder
		for j := 0; b.Len() < size; j++ {
			fmt.Fprintf(&b, "w%d.%d ", i, j)
		}
		out[i] = strings.TrimSpace(b.String()) + "\n"
	}
	return out
}

// streaming is a bot in webhook mode (so that only the stream sleeps on
// the clock) with a streaming agent.
type streaming struct {
	h     *harness
	api   *telegramtest.Server
	clock *stepClock
	ag    *streamAgent
	hook  *httptest.Server
	next  int // the next update id
	// deliveries has the ref of each delivery the bot recorded.
	deliveries chan string
}

func startStreaming(t *testing.T, api *telegramtest.Server, dir, mode string, ag *streamAgent) *streaming {
	t.Helper()
	clock := newStepClock()
	clock.poke = api.Poke
	api.SetClock(clock.Now)
	ag.api, ag.clock = api, clock
	deliveries := make(chan string, 16)
	h := start(t, api, dir, setup{agent: ag, policies: queued, sleep: clock.Sleep, sess: func(m *sessions.Manager) Sessions {
		return allDoors(deliveryNotes{Manager: m, ch: deliveries})
	}, opts: Options{
		Mode: "webhook", WebhookURL: "https://bot.example.com/hook", WebhookSecret: "s",
		Streaming: mode, Now: clock.Now, Format: ag.formatOr(FormatPlain),
	}})
	<-h.done // webhook registered
	hook := httptest.NewServer(h.bot.WebhookHandler())
	t.Cleanup(hook.Close)
	return &streaming{h: h, api: api, clock: clock, ag: ag, hook: hook, next: 1, deliveries: deliveries}
}

// post delivers message (telegramtest.DM or Group) as message id, and
// returns once the bot has stored it.
func (s *streaming) post(t *testing.T, id int, message map[string]any) {
	t.Helper()
	message["message_id"], message["date"] = id, 1
	body, _ := json.Marshal(map[string]any{"update_id": s.next, "message": message})
	s.next++
	req, _ := http.NewRequest(http.MethodPost, s.hook.URL, strings.NewReader(string(body)))
	req.Header.Set("X-Telegram-Bot-Api-Secret-Token", "s")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("update answered %d", resp.StatusCode)
	}
}

// deliveryNotes tells the test of each delivery the bot records.
type deliveryNotes struct {
	*sessions.Manager
	ch chan<- string
}

func (d deliveryNotes) Delivered(ctx context.Context, t sessions.TurnRef, ref string, err error) error {
	rerr := d.Manager.Delivered(ctx, t, ref, err)
	d.ch <- ref
	return rerr
}

// delivered waits until the bot has recorded a delivery, then returns
// the stored reply to the key's newest message and its delivery ref.
func (s *streaming) delivered(t *testing.T, key string) (reply, ref string) {
	t.Helper()
	select {
	case <-s.deliveries:
	case <-time.After(20 * time.Second):
		t.Fatal("no delivery recorded")
	}
	return stored(t, s.h, key)
}

// stored returns the stored reply to the key's newest message and its
// delivery ref; the turn must be marked delivered.
func stored(t *testing.T, h *harness, key string) (reply, ref string) {
	t.Helper()
	rows := transcript(t, h, key)
	var lead *sessions.Message
	for i := range rows {
		if rows[i].Role == agent.RoleUser {
			lead = &rows[i]
		}
	}
	if lead == nil || lead.TurnState != sessions.TurnDelivered || lead.DeliveredAt == nil {
		t.Fatalf("the turn of %s is not marked delivered: %+v", key, rows)
	}
	for _, r := range slices.Backward(rows) {
		// The newest: a turn run again after a restart stored its cut
		// reply before.
		if r.Role == agent.RoleAssistant && r.ReplyTo == lead.Seq {
			return r.Content, lead.DeliveryRef
		}
	}
	t.Fatalf("no reply to %s's newest message: %+v", key, rows)
	return "", ""
}

// checkPace fails unless each call came at least every after the one
// before it (on the bot's clock), or, after a call Telegram answered 429,
// at least its retry_after later.
func checkPace(t *testing.T, what string, calls []telegramtest.Call, every time.Duration, throttled map[int]bool) {
	t.Helper()
	for i := 1; i < len(calls); i++ {
		gap := calls[i].At.Sub(calls[i-1].At)
		want := every
		if throttled[i-1] {
			want = max(want, 2*time.Second)
		}
		if gap < want {
			t.Errorf("%s %d came %v after the one before, want at least %v", what, i, gap, want)
		}
	}
}

func (a *streamAgent) check(t *testing.T) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.lost) > 0 {
		t.Errorf("the bot neither showed nor waited after %d chunks", len(a.lost))
	}
}

// TestStreamDraftsInPrivateChat: a reply written over 4 s of the clock
// shows as drafts, at most one a second, each the text so far under one
// draft id; then exactly one sendMessage carries the stored reply, marked
// delivered with its message id.
func TestStreamDraftsInPrivateChat(t *testing.T) {
	api := telegramtest.New(t)
	ag := &streamAgent{chunks: chunks(16, 40), step: 250 * time.Millisecond, lockstep: true}
	s := startStreaming(t, api, t.TempDir(), StreamAuto, ag)
	s.post(t, 500, telegramtest.DM(7, "write"))
	reply, ref := s.delivered(t, sessions.TelegramDMKey(7))
	ag.check(t)

	drafts := api.Calls("sendMessageDraft")
	if len(drafts) < 3 {
		t.Fatalf("%d drafts over a 4 s reply, want one about every second", len(drafts))
	}
	checkPace(t, "draft", drafts, time.Second, nil)
	prev := ""
	for i, d := range drafts {
		text := d.Params.Get("text")
		if d.Params.Get("draft_id") != "500" || d.Params.Get("chat_id") != "7" || d.Params.Get("parse_mode") != "" {
			t.Errorf("draft %d: %v, want draft_id 500 in chat 7 as plain text", i, d.Params)
		}
		if !strings.HasPrefix(reply, text) || len(text) <= len(prev) {
			t.Errorf("draft %d shows %q: not the growing text so far", i, text)
		}
		prev = text
	}
	sent := api.Messages()
	if len(sent) != 1 || sent[0] != (telegramtest.Sent{ChatID: 7, Text: reply, ReplyTo: 500}) {
		t.Fatalf("sent %+v, want one message with the stored reply %q", sent, reply)
	}
	if n := len(api.Calls("editMessageText")); n != 0 {
		t.Fatalf("%d edits in a private chat with drafts", n)
	}
	if ids := api.SentIDs(); ref != strconv.Itoa(ids[0]) {
		t.Fatalf("delivery ref %q, want the message id %d", ref, ids[0])
	}
	if want := strings.Join(ag.chunks, ""); reply != want {
		t.Fatalf("stored reply %q, want %q", reply, want)
	}
}

// TestStreamEditsWhenDraftsRefused: a Bot API server without
// sendMessageDraft (404 Not Found) is remembered for the bot: the first
// reply streams into a message edited at most once a second, which ends
// as the whole stored reply — one message, delivered once, its id the
// delivery ref — and the next reply does not try drafts again.
func TestStreamEditsWhenDraftsRefused(t *testing.T) {
	api := telegramtest.New(t)
	api.RefuseDrafts()
	ag := &streamAgent{chunks: chunks(16, 40), step: 250 * time.Millisecond, lockstep: true}
	s := startStreaming(t, api, t.TempDir(), StreamAuto, ag)
	s.post(t, 500, telegramtest.DM(7, "write"))
	reply, ref := s.delivered(t, sessions.TelegramDMKey(7))
	ag.check(t)

	if n := len(api.Calls("sendMessageDraft")); n != 1 {
		t.Fatalf("%d draft calls, want the one refused", n)
	}
	edits := api.Calls("editMessageText")
	if len(edits) < 2 {
		t.Fatalf("%d edits over a 4 s reply, want about one a second", len(edits))
	}
	previews := append(api.Calls("sendMessage"), edits...)
	checkPace(t, "preview call", previews, time.Second, nil)
	sent := api.Messages()
	if len(sent) != 1 || sent[0] != (telegramtest.Sent{ChatID: 7, Text: reply, ReplyTo: 500}) {
		t.Fatalf("messages %+v, want one, ending as the stored reply %q", sent, reply)
	}
	if ids := api.SentIDs(); ref != strconv.Itoa(ids[0]) {
		t.Fatalf("delivery ref %q, want the preview's message id %d", ref, ids[0])
	}
	if n := api.NotModified(); n != 0 {
		t.Errorf("%d edits that changed nothing", n)
	}

	// The next reply edits at once: the refusal is remembered.
	s.post(t, 501, telegramtest.DM(7, "again"))
	reply2, _ := s.delivered(t, sessions.TelegramDMKey(7))
	if n := len(api.Calls("sendMessageDraft")); n != 1 {
		t.Fatalf("%d draft calls after the refusal, want none more", n)
	}
	if sent := api.Messages(); len(sent) != 2 || sent[1].Text != reply2 || sent[1].ReplyTo != 501 {
		t.Fatalf("messages %+v, want a second one ending as %q", sent, reply2)
	}
}

// TestStreamEditsFollowRetryAfter: Telegram answers every second edit
// with 429 retry_after 2. The bot waits the 2 s before its next edit
// (including the final one), and the message still ends as the whole
// stored reply, delivered once.
func TestStreamEditsFollowRetryAfter(t *testing.T) {
	api := telegramtest.New(t)
	api.Throttle429Edits(2)
	ag := &streamAgent{chunks: chunks(16, 40), step: 250 * time.Millisecond, lockstep: true}
	s := startStreaming(t, api, t.TempDir(), StreamEdits, ag)
	s.post(t, 500, telegramtest.DM(7, "write"))
	reply, ref := s.delivered(t, sessions.TelegramDMKey(7))
	ag.check(t)

	if api.EditsRefused() == 0 {
		t.Fatal("no edit was answered 429")
	}
	previews := append(api.Calls("sendMessage"), api.Calls("editMessageText")...)
	throttled := map[int]bool{}
	for i, c := range previews {
		// Every second edit call (the preview message is call 0).
		throttled[i] = c.Method == "editMessageText" && i%2 == 0
	}
	checkPace(t, "preview call", previews, time.Second, throttled)
	sent := api.Messages()
	if len(sent) != 1 || sent[0].Text != reply {
		t.Fatalf("messages %+v, want one ending as the stored reply %q", sent, reply)
	}
	if ids := api.SentIDs(); ref != strconv.Itoa(ids[0]) {
		t.Fatalf("delivery ref %q, want %d", ref, ids[0])
	}
}

// TestStreamGroupEditsEveryThreeSeconds: in a group (auto) the reply
// streams by edits at most one per 3 s, and ends as the stored reply.
func TestStreamGroupEditsEveryThreeSeconds(t *testing.T) {
	const chat = -1001
	api := telegramtest.New(t)
	ag := &streamAgent{chunks: chunks(32, 30), step: 250 * time.Millisecond, lockstep: true}
	s := startStreaming(t, api, t.TempDir(), StreamAuto, ag)
	s.post(t, 500, telegramtest.Group(chat, 7, "@"+telegramtest.BotName+" write"))
	reply, _ := s.delivered(t, sessions.TelegramGroupKey(chat, 7, true))
	ag.check(t)

	if n := len(api.Calls("sendMessageDraft")); n != 0 {
		t.Fatalf("%d drafts in a group", n)
	}
	edits := api.Calls("editMessageText")
	if len(edits) < 2 {
		t.Fatalf("%d edits over an 8 s reply, want about one every 3 s", len(edits))
	}
	checkPace(t, "preview call", append(api.Calls("sendMessage"), edits...), 3*time.Second, nil)
	if sent := api.Messages(); len(sent) != 1 || sent[0] != (telegramtest.Sent{ChatID: chat, Text: reply, ReplyTo: 500}) {
		t.Fatalf("messages %+v, want one ending as %q", sent, reply)
	}
}

// TestStreamLongReplyEndsWhole: a streamed reply over 4,096 UTF-16 code
// units ends whole: the preview becomes its first part, the rest is sent
// as new messages, and the delivery ref names them all.
func TestStreamLongReplyEndsWhole(t *testing.T) {
	api := telegramtest.New(t)
	api.RefuseDrafts()
	// Emoji count two units each: 16 chunks of about 400 bytes with one.
	parts := chunks(16, 400)
	for i := range parts {
		parts[i] = "😀" + parts[i]
	}
	ag := &streamAgent{chunks: parts, step: 250 * time.Millisecond, lockstep: true}
	s := startStreaming(t, api, t.TempDir(), StreamAuto, ag)
	s.post(t, 500, telegramtest.DM(7, "write a lot"))
	reply, ref := s.delivered(t, sessions.TelegramDMKey(7))
	ag.check(t)

	want := Split(reply, MaxMessageUnits)
	if len(want) < 2 {
		t.Fatalf("the reply is %d units, want it over the limit", utf16Len(reply))
	}
	sent := api.Messages()
	if got := texts(sent); !slices.Equal(got, want) {
		t.Fatalf("messages end as %d parts, want the reply's %d parts", len(got), len(want))
	}
	for i, c := range api.Calls("editMessageText") {
		if utf16Len(c.Params.Get("text")) > MaxMessageUnits {
			t.Fatalf("edit %d is over the limit", i)
		}
	}
	var ids []string
	for _, id := range api.SentIDs() {
		ids = append(ids, strconv.Itoa(id))
	}
	if ref != strings.Join(ids, ",") {
		t.Fatalf("delivery ref %q, want %q", ref, strings.Join(ids, ","))
	}
	if n := len(api.Calls("sendMessage")); n != len(want) {
		t.Fatalf("%d sendMessage calls, want %d", n, len(want))
	}
}

// TestStreamOffSendsNoPreview: streaming off sends the reply as one
// message after the typing action, nothing before it.
func TestStreamOffSendsNoPreview(t *testing.T) {
	api := telegramtest.New(t)
	ag := &streamAgent{chunks: chunks(16, 40), step: 250 * time.Millisecond}
	s := startStreaming(t, api, t.TempDir(), StreamOff, ag)
	s.post(t, 500, telegramtest.DM(7, "write"))
	reply, _ := s.delivered(t, sessions.TelegramDMKey(7))
	if n, m := len(api.Calls("sendMessageDraft")), len(api.Calls("editMessageText")); n+m != 0 {
		t.Fatalf("%d drafts and %d edits with streaming off", n, m)
	}
	if sent := api.Messages(); len(sent) != 1 || sent[0].Text != reply {
		t.Fatalf("messages %+v, want the reply once", sent)
	}
	if api.Actions() == 0 {
		t.Fatal("no typing action")
	}
}

// TestStoredReplyReplacesPreview: the gateway stops while a reply streams
// into an edited message. After the restart the recovery pass runs the
// turn again and delivers its reply into that preview message: the chat
// ends with one message, the whole reply, and nothing is sent twice.
func TestStoredReplyReplacesPreview(t *testing.T) {
	api := telegramtest.New(t)
	dir := t.TempDir()
	ag := &streamAgent{chunks: chunks(8, 40), step: 250 * time.Millisecond, lockstep: true, block: 5}
	s := startStreaming(t, api, dir, StreamEdits, ag)
	s.post(t, 500, telegramtest.DM(7, "write"))
	// The preview message shows the first chunks, then the model stalls.
	api.WaitCalls(func(calls []telegramtest.Call) bool {
		for _, c := range calls {
			if c.Method == "sendMessage" {
				return true
			}
		}
		return false
	}, 20*time.Second)
	s.h.shutdown(0) // the turn is cut and stored interrupted
	partial := api.Messages()
	if len(partial) != 1 || partial[0].Text == "" {
		t.Fatalf("before the restart: %+v, want the preview message", partial)
	}

	ag2 := &streamAgent{chunks: chunks(8, 40), step: 250 * time.Millisecond}
	s2 := startStreaming(t, api, dir, StreamEdits, ag2)
	waitConnected(t, s2.h.bot)
	if ran, _, err := s2.h.mgr.Rescuer().Recover(context.Background(), time.Hour); ran != 1 || err != nil {
		t.Fatalf("recovery ran %d (%v), want the interrupted turn", ran, err)
	}
	reply, ref := stored(t, s2.h, sessions.TelegramDMKey(7))
	sent := api.Messages()
	if len(sent) != 1 || sent[0].Text != reply || reply != strings.Join(ag2.chunks, "") {
		t.Fatalf("messages %+v, want the preview ending as the reply %q", sent, reply)
	}
	if ids := api.SentIDs(); ref != strconv.Itoa(ids[0]) {
		t.Fatalf("delivery ref %q, want the preview's id %d", ref, ids[0])
	}
	if n := len(api.Calls("sendMessage")); n != 1 {
		t.Fatalf("%d sendMessage calls, want the preview only", n)
	}
}

// TestPacerIsPerChat: the replies streaming into one chat share its
// pacer: a call waits while another is in flight, the next comes every
// after the end of the one before, a 429 puts it off by retry_after, and
// the pacer is let go once the last reply using it is delivered.
func TestPacerIsPerChat(t *testing.T) {
	b := &Bot{}
	p1, p2 := b.pacerFor(-1001, groupEvery), b.pacerFor(-1001, groupEvery)
	if p1 != p2 || b.pacerFor(7, privateEvery) == p1 {
		t.Fatal("two replies in one chat have different pacers, or two chats share one")
	}
	t0 := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	check := func(what string, got, want time.Duration) {
		t.Helper()
		if got != want {
			t.Errorf("%s: wait %v, want %v", what, got, want)
		}
	}
	check("first call", p1.take(t0), 0)
	check("another reply's call while one is in flight", p2.take(at(time.Second)), groupEvery)
	p1.done(at(500*time.Millisecond), nil)
	check("another reply's call 1 s after the end", p2.take(at(1500*time.Millisecond)), 2*time.Second)
	check("its call 3 s after the end", p2.take(at(3500*time.Millisecond)), 0)
	p2.done(at(4*time.Second), &tgbotapi.Error{Code: 429, ResponseParameters: tgbotapi.ResponseParameters{RetryAfter: 5}})
	check("a call after a 429", p1.take(at(4*time.Second)), 5*time.Second)
	b.releasePacer(-1001)
	if b.pacers[-1001] == nil {
		t.Fatal("the pacer went while a reply still uses it")
	}
	b.releasePacer(-1001)
	if b.pacers[-1001] != nil {
		t.Fatal("the pacer stayed after its last reply")
	}
}

// TestDraftRefusal: which Bot API answers mean "no sendMessageDraft here"
// (edits from then on) and which are a failed call like any other.
func TestDraftRefusal(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&tgbotapi.Error{Code: 404, Message: "Not Found"}, true},
		{&tgbotapi.Error{Code: 400, Message: "Bad Request: method not found"}, true},
		{&tgbotapi.Error{Code: 400, Message: "Bad Request: unknown method"}, true},
		{&tgbotapi.Error{Code: 400, Message: "Bad Request: chat not found"}, false},
		{&tgbotapi.Error{Code: 429, Message: "Too Many Requests: retry after 2", ResponseParameters: tgbotapi.ResponseParameters{RetryAfter: 2}}, false},
		{&tgbotapi.Error{Code: 500, Message: "Internal Server Error"}, false},
		{errors.New("connection refused"), false},
	} {
		if got := draftRefused(tc.err); got != tc.want {
			t.Errorf("draftRefused(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// TestStreamPreviewDeleted: the user deletes the preview message while
// the reply streams. The bot stops editing it and sends the whole reply
// as a new message, marked delivered with that message's id.
func TestStreamPreviewDeleted(t *testing.T) {
	api := telegramtest.New(t)
	ag := &streamAgent{chunks: chunks(16, 40), step: 250 * time.Millisecond, lockstep: true}
	ag.before = func(i int) bool {
		if i == 6 {
			api.DeleteMessage(7, api.SentIDs()[0])
			return false
		}
		return true
	}
	s := startStreaming(t, api, t.TempDir(), StreamEdits, ag)
	s.post(t, 500, telegramtest.DM(7, "write"))
	reply, ref := s.delivered(t, sessions.TelegramDMKey(7))
	sent := api.Messages()
	if len(sent) != 2 || sent[1] != (telegramtest.Sent{ChatID: 7, Text: reply, ReplyTo: 500}) {
		t.Fatalf("messages %+v, want the deleted preview, then the reply %q", sent, reply)
	}
	if ids := api.SentIDs(); ref != strconv.Itoa(ids[1]) {
		t.Fatalf("delivery ref %q, want the new message's id %d", ref, ids[1])
	}
}

// TestStreamFormatsMarkdown: with format html, every preview shows the
// text so far converted as the final reply is (an unclosed code fence as
// code) and valid for Telegram, and the preview message ends as the
// stored reply's HTML. When Telegram refuses a preview's markup, the
// previews go on without it, and the final edit still carries the HTML.
func TestStreamFormatsMarkdown(t *testing.T) {
	for _, refused := range []int{0, 1} {
		t.Run(fmt.Sprintf("refused=%d", refused), func(t *testing.T) {
			api := telegramtest.New(t)
			api.RefuseDrafts()
			api.FailParse(refused)
			ag := &streamAgent{chunks: []string{
				"**Plan** for `a<b>` & co:\n\n",
				"1. first\n2. second\n\n",
				"```go\nif a < b {\n",
				"\treturn a & b\n",
				"}\n```\n\nDone, _really_.\n",
			}, step: 1500 * time.Millisecond, lockstep: true, format: FormatHTML}
			s := startStreaming(t, api, t.TempDir(), StreamAuto, ag)
			s.post(t, 500, telegramtest.DM(7, "write"))
			reply, _ := s.delivered(t, sessions.TelegramDMKey(7))
			ag.check(t)

			previews := append(api.Calls("sendMessage"), api.Calls("editMessageText")...)
			if len(previews) < 3 {
				t.Fatalf("%d preview calls, want the message and edits", len(previews))
			}
			html := 0
			for _, c := range previews {
				text := c.Params.Get("text")
				if c.Params.Get("parse_mode") != "HTML" {
					continue
				}
				html++
				if err := telegramtest.CheckHTML(text); err != nil {
					t.Errorf("%s with invalid HTML %q: %v", c.Method, text, err)
				}
				if strings.Contains(text, "```") || strings.Contains(text, "**") {
					t.Errorf("%s shows Markdown unconverted: %q", c.Method, text)
				}
			}
			if refused == 0 && html != len(previews) {
				t.Errorf("%d of %d preview calls as HTML, want all", html, len(previews))
			}
			if refused == 1 && html != 2 {
				t.Errorf("%d preview calls as HTML, want the refused one and the final edit", html)
			}
			want := tgformat.Split(reply, MaxMessageUnits)
			sent := api.Messages()
			if len(want) != 1 || len(sent) != 1 || sent[0].Text != want[0].HTML {
				t.Fatalf("messages %+v, want the preview ending as %q", sent, want[0].HTML)
			}
		})
	}
}
