package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/chatgate/chatgate/internal/pgtest"
	"github.com/chatgate/chatgate/internal/telegramtest"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/store"
)

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "tool-exec" {
		// A gateway served in the test's process starts its stdio tool
		// servers through its own executable: this one.
		os.Exit(toolExec(os.Args[2:], os.Stderr))
	}
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// modelInput is the newest message of a chat-completions request.
func modelInput(r *http.Request) string {
	var body struct {
		Messages []struct{ Role, Content string }
	}
	data, _ := io.ReadAll(r.Body)
	json.Unmarshal(data, &body)
	return body.Messages[len(body.Messages)-1].Content
}

// streamChunk writes one piece of a streamed chat completion;
// streamEnd ends the stream.
func streamChunk(w http.ResponseWriter, s string) {
	fmt.Fprintf(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":%q}}]}\n\n", s)
	w.(http.Flusher).Flush()
}

func streamEnd(w http.ResponseWriter) {
	fmt.Fprint(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
}

// slowLLM speaks the chat-completions streaming format. Messages containing
// "slow" stream one piece and then hang until released (or the request is
// cancelled); the others answer at once.
type slowLLM struct {
	released atomic.Bool
	release  chan struct{}
	once     sync.Once
}

func newSlowLLM() *slowLLM { return &slowLLM{release: make(chan struct{})} }

func (l *slowLLM) open() {
	l.released.Store(true)
	l.once.Do(func() { close(l.release) })
}

func (l *slowLLM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	input := modelInput(r)
	w.Header().Set("Content-Type", "text/event-stream")
	chunk := func(s string) { streamChunk(w, s) }
	chunk("thinking about " + input + "... ")
	if strings.Contains(input, "slow") && !l.released.Load() {
		select {
		case <-l.release:
		case <-r.Context().Done():
			return
		}
	}
	chunk("done")
	streamEnd(w)
}

type process struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
	exited chan error
}

func startGateway(t *testing.T, dir, config string) *process {
	t.Helper()
	bin := buildBinary(t)
	path := filepath.Join(dir, "bot.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: exec.Command(bin, "serve", "-c", path), stderr: &syncBuffer{}, exited: make(chan error, 1)}
	p.cmd.Dir = dir
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() { p.cmd.Process.Kill() })
	return p
}

type wsClient struct {
	c       *websocket.Conn
	session string
	conv    string
	ackSeq  int64
	frames  chan map[string]any
	closeCh chan int
}

// readFrames reads c's frames into a client's frames channel until the
// connection ends, whose close code then goes to closeCh.
func readFrames(c *websocket.Conn) *wsClient {
	cl := &wsClient{c: c, frames: make(chan map[string]any, 64), closeCh: make(chan int, 1)}
	go func() {
		for {
			var f map[string]any
			if err := c.ReadJSON(&f); err != nil {
				var ce *websocket.CloseError
				code := 0
				if errors.As(err, &ce) {
					code = ce.Code
				}
				cl.closeCh <- code
				close(cl.frames)
				return
			}
			cl.frames <- f
		}
	}()
	return cl
}

func dialClient(t *testing.T, addr string, hello map[string]any) (*wsClient, map[string]any) {
	t.Helper()
	c, _, err := websocket.DefaultDialer.Dial("ws://"+addr+"/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	hello["type"] = "hello"
	c.WriteJSON(hello)
	cl := readFrames(c)
	ready := cl.next(t, "ready")
	cl.session, cl.conv = ready["session"].(string), ready["conversation"].(string)
	return cl, ready
}

func (cl *wsClient) next(t *testing.T, typ string) map[string]any {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case f, ok := <-cl.frames:
			if !ok {
				t.Fatalf("connection closed while waiting for %s", typ)
			}
			if f["type"] == typ {
				return f
			}
		case <-timeout:
			t.Fatalf("no %s frame", typ)
		}
	}
}

// TestSIGTERMDrainsFiftyTurns stops a gateway with 50 WebSocket turns in
// flight against a slow model server, then starts it again.
func TestSIGTERMDrainsFiftyTurns(t *testing.T) {
	llm := newSlowLLM()
	llmSrv := httptest.NewServer(llm)
	defer llmSrv.Close()
	dir := t.TempDir()
	addr := freeAddr(t)
	config := fmt.Sprintf(`
gateway:
  listen: %s
agent:
  backend: openai
  openai:
    base_url: %s/v1
    model: m
    max_retries: 0
shutdown:
  drain_timeout: 1s
log:
  level: warn
`, addr, llmSrv.URL)
	p := startGateway(t, dir, config)
	waitHealthy(t, "http://"+addr)

	const n = 50
	clients := make([]*wsClient, n)
	for i := range clients {
		clients[i], _ = dialClient(t, addr, map[string]any{"user": fmt.Sprint("u", i)})
	}
	// Even users ask something slow, odd users something fast.
	for i, cl := range clients {
		kind := "fast"
		if i%2 == 0 {
			kind = "slow"
		}
		cl.c.WriteJSON(map[string]any{"type": "message", "id": "m1", "text": fmt.Sprintf("%s %d", kind, i)})
	}
	for i, cl := range clients {
		cl.ackSeq = int64(cl.next(t, "ack")["seq"].(float64))
		if i%2 == 1 {
			if r := cl.next(t, "reply"); r["status"] != "ok" {
				t.Fatalf("fast reply = %v", r)
			}
		}
	}

	// The slow turns never end by themselves (the model is released only
	// for the restart): the gateway exits because the drain's deadline
	// interrupts them. The bound only keeps a hang from stalling the run.
	stopGateway(t, p)
	if logs := p.stderr.String(); !strings.Contains(logs, "drain deadline passed") {
		t.Fatalf("the drain did not end at its deadline:\n%s", logs)
	}
	for i, cl := range clients {
		if i%2 == 0 {
			if r := cl.next(t, "reply"); r["status"] != "interrupted" || !strings.HasPrefix(r["text"].(string), "thinking about slow") {
				t.Fatalf("slow client %d got %v, want its interrupted partial reply", i, r)
			}
		}
		if code := <-cl.closeCh; code != websocket.CloseGoingAway {
			t.Fatalf("client %d closed with %d, want 1001", i, code)
		}
	}

	// Everything is on disk: 50 user messages, 25 replies, 25 interrupted.
	db, err := store.Open(context.Background(), "sqlite", filepath.Join(dir, "gateway.db"), store.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var users, ok, interrupted int64
	db.Gorm().Model(&sessions.Message{}).Where("role = 'user'").Count(&users)
	db.Gorm().Model(&sessions.Message{}).Where("role = 'assistant' AND status = 'ok'").Count(&ok)
	db.Gorm().Model(&sessions.Message{}).Where("role = 'assistant' AND status = 'interrupted' AND error = 'shutdown'").Count(&interrupted)
	db.Close()
	if users != n || ok != n/2 || interrupted != n/2 {
		t.Fatalf("stored %d user messages, %d replies, %d interrupted; want %d, %d, %d", users, ok, interrupted, n, n/2, n/2)
	}

	// Restart: the interrupted turns run again and reach their clients on
	// resume (in ready.history, or as a reply frame if the rerun ends after
	// the client is back).
	llm.open()
	startGateway(t, dir, config)
	waitHealthy(t, "http://"+addr)
	for i := 0; i < n; i += 2 {
		cl, ready := dialClient(t, addr, map[string]any{"session": clients[i].session, "last_seq": clients[i].ackSeq + 1, "conversation": clients[i].conv})
		if ready["resumed"] != true {
			t.Fatalf("client %d not resumed: %v", i, ready)
		}
		want := fmt.Sprintf("thinking about slow %d... done", i)
		found := false
		for _, h := range ready["history"].([]any) {
			item := h.(map[string]any)
			found = found || (item["text"] == want && item["status"] == "ok")
		}
		if !found {
			if r := cl.next(t, "reply"); r["text"] != want || r["status"] != "ok" {
				t.Fatalf("client %d after restart got %v, want %q", i, r, want)
			}
		}
		cl.c.Close()
	}
}

// TestKill9LosesNothingAcknowledged kills the gateway with SIGKILL in the
// middle of a bounded load: every acknowledged message must be stored after
// a restart, exactly once, in a database that opens cleanly.
func TestKill9LosesNothingAcknowledged(t *testing.T) {
	dir := t.TempDir()
	addr := freeAddr(t)
	config := fmt.Sprintf("gateway:\n  listen: %s\nchannels:\n  websocket:\n    rate_limit: {per_second: 1000, burst: 1000}\nlog:\n  level: error\n", addr)
	p := startGateway(t, dir, config)
	waitHealthy(t, "http://"+addr)

	const users, perUser = 20, 50
	var mu sync.Mutex
	acked := map[string]bool{} // "user/id"
	var total atomic.Int32
	killed := make(chan struct{})
	var wg sync.WaitGroup
	for u := 0; u < users; u++ {
		wg.Add(1)
		go func(u int) {
			defer wg.Done()
			c, _, err := websocket.DefaultDialer.Dial("ws://"+addr+"/ws", nil)
			if err != nil {
				return
			}
			defer c.Close()
			c.WriteJSON(map[string]any{"type": "hello", "user": fmt.Sprint("k", u)})
			// Two messages in flight per user: the next goes out on each ack.
			sent := 0
			send := func() {
				if sent < perUser {
					c.WriteJSON(map[string]any{"type": "message", "id": fmt.Sprint("m", sent), "text": fmt.Sprint("msg ", sent)})
					sent++
				}
			}
			send()
			send()
			for {
				var f map[string]any
				if c.ReadJSON(&f) != nil {
					return
				}
				if f["type"] == "ack" {
					mu.Lock()
					acked[fmt.Sprintf("websocket:k%d/%s", u, f["id"])] = true
					mu.Unlock()
					if total.Add(1) == users*perUser/3 {
						close(killed)
					}
					send()
				}
			}
		}(u)
	}
	select {
	case <-killed:
	case <-time.After(60 * time.Second):
		t.Fatal("load never reached a third of its messages")
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
	wg.Wait()

	// The restarted gateway opens the database and serves.
	startGateway(t, dir, config)
	waitHealthy(t, "http://"+addr)
	db, err := store.Open(context.Background(), "sqlite", filepath.Join(dir, "gateway.db"), store.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var check string
	db.Gorm().Raw("PRAGMA integrity_check").Scan(&check)
	if check != "ok" {
		t.Fatalf("integrity_check = %q", check)
	}
	type row struct {
		SessionKey  string
		ClientMsgID string
		N           int
	}
	var rows []row
	db.Gorm().Raw(`SELECT c.session_key, m.client_msg_id, COUNT(*) AS n FROM messages m JOIN conversations c ON c.id = m.conversation_id
		WHERE m.role = 'user' GROUP BY c.session_key, m.client_msg_id`).Scan(&rows)
	stored := map[string]int{}
	for _, r := range rows {
		stored[r.SessionKey+"/"+r.ClientMsgID] = r.N
	}
	mu.Lock()
	defer mu.Unlock()
	if len(acked) < users*perUser/3 {
		t.Fatalf("only %d acks", len(acked))
	}
	for k := range acked {
		if stored[k] != 1 {
			t.Fatalf("acknowledged message %s stored %d times, want exactly once", k, stored[k])
		}
	}
	t.Logf("%d acknowledged messages, all stored once; %d stored in all", len(acked), len(rows))
}

// TestTwoReplicasShareOneUser runs two gateways on one PostgreSQL database.
// One user talks to both at once: nothing is lost, seqs are unique and
// gap-free, turns never interleave, and a session resumes on the other
// replica.
func TestTwoReplicasShareOneUser(t *testing.T) {
	dsn := pgtest.DSN(t)
	llm := newSlowLLM()
	llm.open()
	llmSrv := httptest.NewServer(llm)
	defer llmSrv.Close()
	addrs := []string{freeAddr(t), freeAddr(t)}
	for _, addr := range addrs {
		startGateway(t, t.TempDir(), fmt.Sprintf(`
gateway:
  listen: %s
storage:
  driver: postgres
  dsn: %q
agent:
  backend: openai
  openai: {base_url: %s/v1, model: m}
channels:
  websocket:
    rate_limit: {per_second: 1000, burst: 1000}
# One turn per message: this test is about one user's turns on two
# replicas never overlapping.
session:
  busy_mode: queue
log:
  level: warn
`, addr, dsn, llmSrv.URL))
	}
	for _, addr := range addrs {
		waitHealthy(t, "http://"+addr)
	}
	a, _ := dialClient(t, addrs[0], map[string]any{"user": "ann"})
	b, readyB := dialClient(t, addrs[1], map[string]any{"session": a.session})
	if readyB["resumed"] != true || readyB["user"] != "ann" {
		t.Fatalf("resume on the other replica: %v", readyB)
	}
	const each = 10
	var wg sync.WaitGroup
	for name, cl := range map[string]*wsClient{"a": a, "b": b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				cl.c.WriteJSON(map[string]any{"type": "message", "id": fmt.Sprintf("%s%d", name, i), "text": fmt.Sprintf("%s%d", name, i)})
			}
			// Replies to the other connection's messages reach this one
			// too (one user): wait for its own.
			mine := map[string]bool{}
			for len(mine) < each {
				r := cl.next(t, "reply")
				if r["status"] != "ok" {
					t.Errorf("reply on %s: %v", name, r)
				}
				if id, _ := r["reply_to"].(string); strings.HasPrefix(id, name) {
					mine[id] = true
				}
			}
		}()
	}
	wg.Wait()

	db, err := store.Open(context.Background(), "postgres", dsn, store.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	convs, _ := db.ListConversations(context.Background(), store.ListFilter{SessionKey: "websocket:ann"})
	if len(convs) != 1 {
		t.Fatalf("%d conversations", len(convs))
	}
	msgs, _ := db.MessagesAfter(context.Background(), convs[0].ID, 0, 0)
	if len(msgs) != 4*each {
		t.Fatalf("%d messages stored, want %d", len(msgs), 4*each)
	}
	// Messages are stored as they arrive, so replies may come after later
	// messages; but each answers one message, in the order they were
	// stored (one turn at a time), and every message once.
	bySeq := map[int64]sessions.Message{}
	lastAnswered := int64(0)
	for i, m := range msgs {
		if m.Seq != int64(i+1) {
			t.Fatalf("seq %d at position %d", m.Seq, i)
		}
		bySeq[m.Seq] = m
		if m.Role != "assistant" {
			continue
		}
		u := bySeq[m.ReplyTo]
		if u.Role != "user" || m.ReplyTo <= lastAnswered || m.Content != "thinking about "+u.Content+"... done" {
			t.Fatalf("message %d %q answers %d %q after %d was answered: turns interleaved", m.Seq, m.Content, m.ReplyTo, u.Content, lastAnswered)
		}
		lastAnswered = m.ReplyTo
	}
	// A client that left replica A resumes on replica B with everything.
	_, ready := dialClient(t, addrs[1], map[string]any{"session": a.session, "last_seq": 0, "conversation": a.conv})
	if h := ready["history"].([]any); ready["resumed"] != true || len(h) != 4*each {
		t.Fatalf("resume on B: resumed=%v with %d history items", ready["resumed"], len(h))
	}
}

// TestSIGTERMWithTelegramPolling stops a polling gateway while updates are
// in flight; after the restart every message is answered exactly once.
func TestSIGTERMWithTelegramPolling(t *testing.T) {
	api := telegramtest.New(t)
	apiSrv := httptest.NewServer(api)
	defer apiSrv.Close()
	llm := newSlowLLM()
	llmSrv := httptest.NewServer(llm)
	defer llmSrv.Close()
	dir := t.TempDir()
	addr := freeAddr(t)
	config := fmt.Sprintf(`
gateway:
  listen: %s
agent:
  backend: openai
  openai: {base_url: %s/v1, model: m, max_retries: 0}
channels:
  telegram:
    token: %q
    api_url: %s
    poll_timeout: 1s
# One turn per update: this test is about which update's turn runs where.
session:
  busy_mode: queue
  debounce_ms: 0
shutdown:
  drain_timeout: 1s
log:
  level: warn
`, addr, llmSrv.URL, telegramtest.Token, apiSrv.URL)
	ids := []int{
		api.Push(telegramtest.DM(1, "fast 1")),
		api.Push(telegramtest.DM(2, "slow 2")),  // running at SIGTERM: interrupted
		api.Push(telegramtest.DM(2, "fast 2b")), // stored on arrival; its turn waits behind slow 2 (queue)
		api.Push(telegramtest.DM(3, "fast 3")),
	}
	p := startGateway(t, dir, config)
	api.WaitSent(t, 2) // fast 1 and fast 3 answered; slow 2 hangs
	stopGateway(t, p)
	if n := len(api.Messages()); n != 2 {
		t.Fatalf("%d messages sent before the restart, want 2 (the interrupted turn is not sent half-done)", n)
	}

	llm.open()
	p = startGateway(t, dir, config)
	api.WaitSent(t, 4)
	// A duplicate would come from an update Telegram sends again (each
	// chat's updates run in arrival order) or from a rerun still under way.
	// One more message per chat, answered, proves each chat's queue is past
	// the old updates; the graceful stop then waits for anything running.
	ids = append(ids,
		api.Push(telegramtest.DM(1, "fast 1c")),
		api.Push(telegramtest.DM(2, "fast 2c")),
		api.Push(telegramtest.DM(3, "fast 3c")))
	api.WaitSent(t, 7)
	stopGateway(t, p)
	answers := map[int][]string{}
	for _, m := range api.Messages() {
		answers[m.ReplyTo] = append(answers[m.ReplyTo], m.Text)
	}
	if n := len(api.Messages()); n != 7 {
		t.Errorf("%d messages sent in all, want 7 (one answer each)", n)
	}
	for i, text := range []string{"fast 1", "slow 2", "fast 2b", "fast 3", "fast 1c", "fast 2c", "fast 3c"} {
		want := "thinking about " + text + "... done"
		if got := answers[ids[i]]; len(got) != 1 || got[0] != want {
			t.Errorf("%q answered %q, want exactly [%q]", text, got, want)
		}
	}
}

// TestSecondSignalCutsTheDrainShort: with a drain_timeout no test would
// wait out, a second SIGTERM interrupts the running turn at once, stores it
// and exits 0. While the drain runs, the listener is open and /readyz says
// "draining".
func TestSecondSignalCutsTheDrainShort(t *testing.T) {
	llm := newSlowLLM()
	llmSrv := httptest.NewServer(llm)
	defer llmSrv.Close()
	dir := t.TempDir()
	addr := freeAddr(t)
	p := startGateway(t, dir, fmt.Sprintf(`
gateway:
  listen: %s
agent:
  backend: openai
  openai: {base_url: %s/v1, model: m, max_retries: 0}
shutdown:
  drain_timeout: 1h
log:
  level: warn
`, addr, llmSrv.URL))
	waitHealthy(t, "http://"+addr)
	cl, _ := dialClient(t, addr, map[string]any{"user": "ann"})
	cl.c.WriteJSON(map[string]any{"type": "message", "id": "m", "text": "slow one"})
	cl.next(t, "ack")
	cl.next(t, "delta")
	p.cmd.Process.Signal(syscall.SIGTERM)
	waitReadyz(t, "http://"+addr, http.StatusServiceUnavailable, "draining\n")
	if _, resp, err := websocket.DefaultDialer.Dial("ws://"+addr+"/ws", nil); err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a WebSocket upgrade during the drain: %v %v, want 503", resp, err)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.exited:
		if err != nil {
			t.Fatalf("exit: %v\n%s", err, p.stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("a second SIGTERM did not cut the 1h drain short\n%s", p.stderr.String())
	}
	if r := cl.next(t, "reply"); r["status"] != "interrupted" {
		t.Fatalf("reply = %v", r)
	}
	if logs := p.stderr.String(); !strings.Contains(logs, "second signal") {
		t.Fatalf("logs:\n%s", logs)
	}
}
