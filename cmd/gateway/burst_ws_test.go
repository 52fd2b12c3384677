package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// burstLLM speaks the chat-completions streaming format and keeps every
// request's messages. It answers "re: " and the request's trailing user
// messages (the new ones of the turn) joined by " + ". A request whose
// last message contains "slow" streams "thinking about <it>... " and then
// hangs until released (or cancelled).
type burstLLM struct {
	mu       sync.Mutex
	requests [][]chatMessage
	started  chan struct{} // one per request, when its first piece is out
	release  chan struct{}
	once     sync.Once
}

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

func newBurstLLM() *burstLLM {
	return &burstLLM{started: make(chan struct{}, 64), release: make(chan struct{})}
}

func (l *burstLLM) open() { l.once.Do(func() { close(l.release) }) }

// calls returns the requests received so far.
func (l *burstLLM) calls() [][]chatMessage {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.requests)
}

// conversation is a request's messages but the system prompt.
func conversation(msgs []chatMessage) []chatMessage {
	return slices.DeleteFunc(slices.Clone(msgs), func(m chatMessage) bool { return m.Role == "system" })
}

// newInputs are a request's trailing user messages: the turn's new ones.
func newInputs(msgs []chatMessage) []string {
	var out []string
	for i := len(msgs) - 1; i >= 0 && msgs[i].Role == "user"; i-- {
		out = append([]string{msgs[i].Content}, out...)
	}
	return out
}

func (l *burstLLM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct{ Messages []chatMessage }
	data, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(data, &body); err != nil || len(body.Messages) == 0 {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	l.mu.Lock()
	l.requests = append(l.requests, body.Messages)
	l.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	last := body.Messages[len(body.Messages)-1].Content
	if strings.Contains(last, "slow") {
		streamChunk(w, "thinking about "+last+"... ")
		l.started <- struct{}{}
		select {
		case <-l.release:
		case <-r.Context().Done():
			return
		}
	} else {
		l.started <- struct{}{}
	}
	streamChunk(w, "re: "+strings.Join(newInputs(body.Messages), " + "))
	streamEnd(w)
}

// burstGateway starts a gateway on SQLite with the WebSocket channel's
// session settings (YAML lines under channels.websocket.session) and
// burstLLM as its model.
func burstGateway(t *testing.T, llm *burstLLM, session string) string {
	t.Helper()
	llmSrv := httptest.NewServer(llm)
	t.Cleanup(llmSrv.Close)
	addr := freeAddr(t)
	var indented strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(session), "\n") {
		indented.WriteString("      " + strings.TrimSpace(line) + "\n")
	}
	startGateway(t, t.TempDir(), fmt.Sprintf(`
gateway:
  listen: %s
agent:
  backend: openai
  openai: {base_url: %s/v1, model: m, max_retries: 0}
channels:
  websocket:
    rate_limit: {per_second: 1000, burst: 1000}
    session:
%slog:
  level: warn
`, addr, llmSrv.URL, indented.String()))
	waitHealthy(t, "http://"+addr)
	return addr
}

// frame returns the client's next frame that is not a delta.
func frame(t *testing.T, cl *wsClient) map[string]any {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case f, ok := <-cl.frames:
			if !ok {
				t.Fatal("connection closed")
			}
			if f["type"] != "delta" {
				return f
			}
		case <-timeout:
			t.Fatal("no frame")
		}
	}
}

// expectFrame reads the next frame that is not a delta and checks its
// type and fields (covers as a list of ids).
func expectFrame(t *testing.T, cl *wsClient, typ string, fields map[string]any) map[string]any {
	t.Helper()
	f := frame(t, cl)
	bad := f["type"] != typ
	for k, want := range fields {
		got := f[k]
		if ids, ok := want.([]string); ok {
			got, want = fmt.Sprint(got), fmt.Sprint(toAny(ids))
		}
		if n, ok := want.(int); ok {
			want = float64(n)
		}
		bad = bad || got != want
	}
	if bad {
		t.Fatalf("got %v, want a %s frame with %v", f, typ, fields)
	}
	return f
}

func toAny(ids []string) []any {
	out := make([]any, len(ids))
	for i, id := range ids {
		out[i] = id
	}
	return out
}

func send(t *testing.T, cl *wsClient, id, text string) {
	t.Helper()
	if err := cl.c.WriteJSON(map[string]any{"type": "message", "id": id, "text": text}); err != nil {
		t.Fatal(err)
	}
}

// historyLines renders ready.history as "role:text" (user) and
// "assistant(status):text" lines.
func historyLines(ready map[string]any) []string {
	var out []string
	for _, item := range ready["history"].([]any) {
		m := item.(map[string]any)
		if m["role"] == "user" {
			out = append(out, fmt.Sprintf("user %v:%v", m["id"], m["text"]))
		} else {
			out = append(out, fmt.Sprintf("assistant(%v)->%v:%v", m["status"], m["reply_to"], m["text"]))
		}
	}
	return out
}

// Busy mode collect: five messages sent while a slow turn runs are each
// acknowledged at once and answered by one agent call, which gets them as
// five user messages, and one reply frame that covers them.
func TestWebSocketBurstIsOneTurn(t *testing.T) {
	llm := newBurstLLM()
	addr := burstGateway(t, llm, "busy_mode: collect")
	cl, _ := dialClient(t, addr, map[string]any{"user": "ann"})

	send(t, cl, "s-0", "slow start")
	expectFrame(t, cl, "ack", map[string]any{"id": "s-0", "seq": 1})
	<-llm.started // the first turn runs until released
	ids := []string{"m-1", "m-2", "m-3", "m-4", "m-5"}
	texts := []string{"one", "two", "three", "four", "five"}
	began := time.Now()
	for i, id := range ids {
		send(t, cl, id, texts[i])
	}
	t.Logf("five messages sent in %s", time.Since(began))
	for i, id := range ids {
		expectFrame(t, cl, "ack", map[string]any{"id": id, "seq": i + 2})
	}
	// Every ack came while the first turn was held at the model.
	if n := len(llm.calls()); n != 1 {
		t.Fatalf("%d model requests before the first turn ended, want 1", n)
	}
	llm.open()
	expectFrame(t, cl, "reply", map[string]any{"reply_to": "s-0", "covers": []string{"s-0"}, "seq": 7,
		"text": "thinking about slow start... re: slow start", "status": "ok"})
	burst := expectFrame(t, cl, "reply", map[string]any{"reply_to": "m-5", "covers": ids, "seq": 8,
		"text": "re: one + two + three + four + five", "status": "ok"})

	calls := llm.calls()
	if len(calls) != 2 {
		t.Fatalf("%d model requests, want 2", len(calls))
	}
	if got := newInputs(calls[1]); !slices.Equal(got, texts) {
		t.Fatalf("the burst's request has new user messages %q, want %q", got, texts)
	}
	if prior := conversation(calls[1]); len(prior) != 7 || prior[0].Content != "slow start" || prior[1].Role != "assistant" {
		t.Fatalf("the burst's request = %+v, want the first turn, then the five", prior)
	}

	// Nothing else comes for the burst: the next frames answer the next
	// message, with the next model request.
	send(t, cl, "m-6", "six")
	expectFrame(t, cl, "ack", map[string]any{"id": "m-6", "seq": 9})
	expectFrame(t, cl, "reply", map[string]any{"reply_to": "m-6", "covers": []string{"m-6"}, "seq": 10})
	if n := len(llm.calls()); n != 3 {
		t.Fatalf("%d model requests, want 3", n)
	}

	// A covered id that is not the last, resent: its ack and the burst's
	// reply, from storage; no model request.
	send(t, cl, "m-2", "two")
	expectFrame(t, cl, "ack", map[string]any{"id": "m-2", "seq": 3})
	expectFrame(t, cl, "reply", map[string]any{"reply_to": "m-5", "covers": ids, "seq": 8, "text": burst["text"]})
	send(t, cl, "m-7", "seven")
	expectFrame(t, cl, "ack", map[string]any{"id": "m-7", "seq": 11})
	expectFrame(t, cl, "reply", map[string]any{"reply_to": "m-7", "covers": []string{"m-7"}, "seq": 12})
	if n := len(llm.calls()); n != 4 {
		t.Fatalf("%d model requests after the resend, want 4", n)
	}

	// The history: five user messages and one reply for them.
	_, ready := dialClient(t, addr, map[string]any{"session": cl.session})
	want := []string{
		"user s-0:slow start",
		"user m-1:one", "user m-2:two", "user m-3:three", "user m-4:four", "user m-5:five",
		"assistant(ok)->1:thinking about slow start... re: slow start",
		"assistant(ok)->6:re: one + two + three + four + five",
		"user m-6:six", "assistant(ok)->9:re: six",
		"user m-7:seven", "assistant(ok)->11:re: seven",
	}
	if got := historyLines(ready); !slices.Equal(got, want) {
		t.Fatalf("history:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// Busy mode interrupt: a message during a streamed turn cuts it; its
// partial text is stored interrupted and sent as its reply, and one new
// turn answers both messages.
func TestWebSocketInterruptAnswersBoth(t *testing.T) {
	llm := newBurstLLM()
	addr := burstGateway(t, llm, "busy_mode: interrupt")
	cl, _ := dialClient(t, addr, map[string]any{"user": "ann"})

	send(t, cl, "i-1", "slow question")
	expectFrame(t, cl, "ack", map[string]any{"id": "i-1", "seq": 1})
	if d := cl.next(t, "delta"); d["reply_to"] != "i-1" || d["text"] != "thinking about slow question... " {
		t.Fatalf("delta = %v", d)
	}
	send(t, cl, "i-2", "and another thing")
	expectFrame(t, cl, "ack", map[string]any{"id": "i-2", "seq": 2})
	expectFrame(t, cl, "reply", map[string]any{"reply_to": "i-1", "covers": []string{"i-1"}, "seq": 3,
		"text": "thinking about slow question... ", "status": "interrupted"})
	expectFrame(t, cl, "reply", map[string]any{"reply_to": "i-2", "covers": []string{"i-1", "i-2"}, "seq": 4,
		"text": "re: slow question + and another thing", "status": "ok"})

	calls := llm.calls()
	if len(calls) != 2 {
		t.Fatalf("%d model requests, want 2", len(calls))
	}
	if got := newInputs(calls[1]); !slices.Equal(got, []string{"slow question", "and another thing"}) || len(conversation(calls[1])) != 2 {
		t.Fatalf("the second request = %+v, want both messages and no history", calls[1])
	}
	_, ready := dialClient(t, addr, map[string]any{"session": cl.session})
	want := []string{
		"user i-1:slow question", "user i-2:and another thing",
		"assistant(interrupted)->1:thinking about slow question... ",
		"assistant(ok)->2:re: slow question + and another thing",
	}
	if got := historyLines(ready); !slices.Equal(got, want) {
		t.Fatalf("history:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// Three messages, each sent once the one before is stored, the first one
// slow: a 1 s debounce gathers them into one turn; queue mode runs one
// turn for each.
func TestWebSocketDebounceAndQueue(t *testing.T) {
	for _, tc := range []struct {
		name    string
		session string
		replies [][]string // covers of each reply, in order
	}{
		{"collect, debounce 1s", "busy_mode: collect\ndebounce_ms: 1000", [][]string{{"m-1", "m-2", "m-3"}}},
		{"queue, no debounce", "busy_mode: queue\ndebounce_ms: 0", [][]string{{"m-1"}, {"m-2"}, {"m-3"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			llm := newBurstLLM()
			addr := burstGateway(t, llm, tc.session)
			cl, _ := dialClient(t, addr, map[string]any{"user": "ann"})
			// Each message is sent once the one before it is stored: with
			// no debounce its turn could start then, so only the debounce
			// gathers them.
			for i, text := range []string{"slow one", "two", "three"} {
				send(t, cl, fmt.Sprint("m-", i+1), text)
				expectFrame(t, cl, "ack", map[string]any{"id": fmt.Sprint("m-", i+1), "seq": i + 1})
			}
			llm.open()
			for _, covers := range tc.replies {
				expectFrame(t, cl, "reply", map[string]any{"reply_to": covers[len(covers)-1], "covers": covers, "status": "ok"})
			}
			if n := len(llm.calls()); n != len(tc.replies) {
				t.Fatalf("%d model requests, want %d", n, len(tc.replies))
			}
			// Nothing more: the next reply answers the next message.
			send(t, cl, "m-4", "four")
			expectFrame(t, cl, "ack", map[string]any{"id": "m-4", "seq": 4 + len(tc.replies)})
			expectFrame(t, cl, "reply", map[string]any{"reply_to": "m-4", "covers": []string{"m-4"}, "text": "re: four"})
			calls := llm.calls()
			if len(calls) != len(tc.replies)+1 {
				t.Fatalf("%d model requests, want %d", len(calls), len(tc.replies)+1)
			}
			for i, covers := range tc.replies {
				if got := newInputs(calls[i]); len(got) != len(covers) {
					t.Fatalf("request %d has new user messages %q, want %d", i, got, len(covers))
				}
			}
		})
	}
}
