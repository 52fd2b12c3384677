package main

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
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

// The chaos test's load. Each WebSocket user sends wsPerUser messages, two
// per phase; each Telegram user pushes two in phase 0, a stream in phase 1
// until the kill, and two in phase 2. Some messages hang at the model until
// a chaos step opens their gate, so that turns are running when it comes.
const (
	wsUsers   = 50
	wsPerUser = 6
	tgUsers   = 20
	// tgStream caps a Telegram user's phase-1 messages.
	tgStream = 12
	// gate1 holds its turns across replica A's SIGTERM; gate2 across
	// replica B's kill -9.
	gate1 = "slow1"
	gate2 = "slow2"
)

// chaosLLM speaks the chat-completions streaming format. It answers
// "thinking about <input>... done" after a random 5–300 ms; an input
// naming a gate streams its first piece and then hangs until the gate
// opens (or the request is cancelled). It counts the runs of each input.
type chaosLLM struct {
	mu   sync.Mutex
	cond *sync.Cond
	runs map[string]int
	held map[string]int // requests waiting at each gate now
	open map[string]bool
}

func newChaosLLM() *chaosLLM {
	l := &chaosLLM{runs: map[string]int{}, held: map[string]int{}, open: map[string]bool{}}
	l.cond = sync.NewCond(&l.mu)
	return l
}

func (l *chaosLLM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	input := modelInput(r)
	l.mu.Lock()
	l.runs[input]++
	l.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	chunk := func(s string) { streamChunk(w, s) }
	chunk("thinking about " + input + "... ")
	gate := ""
	for _, g := range []string{gate1, gate2} {
		if strings.Contains(input, g) {
			gate = g
		}
	}
	if gate != "" {
		if !l.hold(r.Context(), gate) {
			return
		}
	} else {
		select {
		case <-time.After(time.Duration(5+rand.IntN(295)) * time.Millisecond): // the model's think time
		case <-r.Context().Done():
			return
		}
	}
	chunk("done")
	streamEnd(w)
}

// hold waits until gate opens; false if the request ended first.
func (l *chaosLLM) hold(ctx context.Context, gate string) bool {
	stop := context.AfterFunc(ctx, func() { l.mu.Lock(); l.cond.Broadcast(); l.mu.Unlock() })
	defer stop()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held[gate]++
	l.cond.Broadcast()
	for !l.open[gate] && ctx.Err() == nil {
		l.cond.Wait()
	}
	l.held[gate]--
	l.cond.Broadcast()
	return ctx.Err() == nil
}

func (l *chaosLLM) release(gate string) {
	l.mu.Lock()
	l.open[gate] = true
	l.cond.Broadcast()
	l.mu.Unlock()
}

// waitHeld waits until n requests wait at gate.
func (l *chaosLLM) waitHeld(t *testing.T, gate string, n int) {
	t.Helper()
	expired := false
	timer := time.AfterFunc(60*time.Second, func() { l.mu.Lock(); expired = true; l.cond.Broadcast(); l.mu.Unlock() })
	defer timer.Stop()
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.held[gate] < n {
		if expired {
			t.Fatalf("%d model requests waiting at %s, want %d", l.held[gate], gate, n)
		}
		l.cond.Wait()
	}
}

func (l *chaosLLM) runCounts() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.runs)
}

// lateSends puts the fake Bot API behind late answers to sendMessage: the
// message is recorded (Telegram accepted it) and answered 20–120 ms later,
// which widens the window between a send and its delivered mark enough
// for a kill -9 to land in it.
type lateSends struct {
	api *telegramtest.Server
	// entered gets a token whenever a send starts waiting for its answer.
	entered chan struct{}
}

func (l *lateSends) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.HasSuffix(r.URL.Path, "/sendMessage") {
		l.api.ServeHTTP(w, r)
		return
	}
	rec := httptest.NewRecorder()
	l.api.ServeHTTP(rec, r)
	select {
	case l.entered <- struct{}{}:
	default:
	}
	time.Sleep(time.Duration(20+rand.IntN(100)) * time.Millisecond) // the Bot API's latency
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	w.Write(rec.Body.Bytes())
}

// chaosLoad is what the clients share with the test: the phase (the
// messages of a later phase wait for it) and progress counters.
type chaosLoad struct {
	addrs  [2]string
	phase  atomic.Int32
	acked  [3]atomic.Int32 // WebSocket messages acknowledged, by phase
	sentWS atomic.Int32    // WebSocket users that sent all their messages
}

type chaosMsg struct {
	id, text string
	phase    int32
}

// shownReply is a reply a client was shown: a reply frame or an
// assistant item of ready.history.
type shownReply struct {
	seq          int64
	text, status string
}

// chaosClient is a WebSocket user following the protocol's rules for
// clients: every message has an id and is kept until its ack; on any
// disconnect it resumes (token, last_seq, conversation) on the other
// replica and resends every unacknowledged message with its id.
type chaosClient struct {
	user string
	msgs []chaosMsg
	at   int      // the replica it talks to
	move chan int // asks it to move to another replica

	// Owned by run until it returns.
	session, conv string
	lastSeq       int64
	sent          int
	unacked       []string
	acked         map[string]bool
	shown         []shownReply
	reconnects    int
	problems      []string
}

func newChaosClient(u int) *chaosClient {
	c := &chaosClient{user: fmt.Sprintf("w%02d", u), at: u % 2, move: make(chan int, 1), acked: map[string]bool{}}
	for i := range wsPerUser {
		text := fmt.Sprintf("w%02d m%d", u, i)
		switch {
		case u%5 == 0 && i == 1:
			text += " " + gate1
		case u%5 == 1 && i == 3:
			text += " " + gate2
		}
		c.msgs = append(c.msgs, chaosMsg{id: fmt.Sprintf("c%d", i), text: text, phase: int32(i / 2)})
	}
	return c
}

func (c *chaosClient) phaseOf(id string) int32 {
	for _, m := range c.msgs {
		if m.id == id {
			return m.phase
		}
	}
	return -1
}

func (c *chaosClient) textOf(id string) string {
	for _, m := range c.msgs {
		if m.id == id {
			return m.text
		}
	}
	return ""
}

// chaosConn is one WebSocket connection and its reader.
type chaosConn struct {
	ws     *websocket.Conn
	frames chan map[string]any // closed when the connection ends
}

func (cc *chaosConn) send(f map[string]any) {
	cc.ws.SetWriteDeadline(time.Now().Add(5 * time.Second))
	cc.ws.WriteJSON(f) // a failed write shows as the reader's end
}

// connect dials replica to (the other one if that fails), says hello —
// resuming once it has a session — and resends what is unacknowledged.
// It returns nil only when ctx ends.
func (c *chaosClient) connect(ctx context.Context, load *chaosLoad, to int) *chaosConn {
	backoff := 50 * time.Millisecond
	for attempt := 0; ctx.Err() == nil; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(backoff): // reconnect backoff, as a client does
			}
			backoff = min(2*backoff, time.Second)
			to = 1 - to
		}
		d := websocket.Dialer{HandshakeTimeout: 5 * time.Second}
		ws, _, err := d.DialContext(ctx, "ws://"+load.addrs[to]+"/ws", nil)
		if err != nil {
			continue
		}
		cc := &chaosConn{ws: ws, frames: make(chan map[string]any, 256)}
		go func() {
			defer close(cc.frames)
			for {
				var f map[string]any
				if err := ws.ReadJSON(&f); err != nil {
					return
				}
				cc.frames <- f
			}
		}()
		hello := map[string]any{"type": "hello", "user": c.user}
		if c.session != "" {
			hello["session"], hello["last_seq"], hello["conversation"] = c.session, c.lastSeq, c.conv
		}
		cc.send(hello)
		ready := c.awaitReady(ctx, cc)
		if ready == nil {
			ws.Close()
			continue
		}
		if c.session != "" {
			c.reconnects++
			if ready["resumed"] != true {
				c.problems = append(c.problems, fmt.Sprintf("resume on %s not accepted: %v", load.addrs[to], ready))
			}
			if ready["conversation"] != c.conv {
				c.problems = append(c.problems, fmt.Sprintf("resumed into conversation %v, had %s", ready["conversation"], c.conv))
			}
		}
		c.session, c.conv = ready["session"].(string), ready["conversation"].(string)
		history, _ := ready["history"].([]any)
		for _, h := range history {
			item := h.(map[string]any)
			seq := int64(item["seq"].(float64))
			c.lastSeq = max(c.lastSeq, seq)
			if item["role"] == "assistant" {
				c.shown = append(c.shown, shownReply{seq: seq, text: item["text"].(string), status: item["status"].(string)})
			}
		}
		c.at = to
		for _, id := range c.unacked {
			cc.send(map[string]any{"type": "message", "id": id, "text": c.textOf(id)})
		}
		return cc
	}
	return nil
}

// awaitReady reads up to the ready frame; nil if the connection ends or
// takes too long.
func (c *chaosClient) awaitReady(ctx context.Context, cc *chaosConn) map[string]any {
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for {
		select {
		case f, ok := <-cc.frames:
			if !ok {
				return nil
			}
			if f["type"] == "ready" {
				return f
			}
		case <-timeout.C:
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

// run talks until ctx ends: a message every 30–250 ms once its phase has
// come, at most three unacknowledged.
func (c *chaosClient) run(ctx context.Context, load *chaosLoad) {
	cc := c.connect(ctx, load, c.at)
	resend := false
	for cc != nil {
		tick := time.NewTimer(time.Duration(30+rand.IntN(220)) * time.Millisecond) // the user's typing pace
		leave := -1                                                                // the replica to leave for, when set
		select {
		case <-ctx.Done():
			tick.Stop()
			cc.ws.Close()
			return
		case to := <-c.move:
			cc.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "moving"), time.Now().Add(time.Second))
			leave = to
		case f, ok := <-cc.frames:
			if !ok {
				leave = 1 - c.at
				break
			}
			switch f["type"] {
			case "ack":
				id, _ := f["id"].(string)
				c.lastSeq = max(c.lastSeq, int64(f["seq"].(float64)))
				if !c.acked[id] {
					c.acked[id] = true
					if p := c.phaseOf(id); p >= 0 {
						load.acked[p].Add(1)
					}
				}
				c.unacked = slices.DeleteFunc(c.unacked, func(u string) bool { return u == id })
			case "reply":
				seq := int64(f["seq"].(float64))
				c.lastSeq = max(c.lastSeq, seq)
				c.shown = append(c.shown, shownReply{seq: seq, text: f["text"].(string), status: f["status"].(string)})
			case "error":
				msg, _ := f["message"].(string)
				switch f["code"] {
				case "unavailable":
					if strings.Contains(msg, "shutting down") {
						leave = 1 - c.at // reconnect to another replica and resend
					}
				case "internal", "rate_limited":
					resend = true
				default:
					c.problems = append(c.problems, fmt.Sprintf("error frame %v", f))
				}
			}
		case <-tick.C:
			if resend {
				resend = false
				for _, id := range c.unacked {
					cc.send(map[string]any{"type": "message", "id": id, "text": c.textOf(id)})
				}
			}
			if c.sent < len(c.msgs) && c.msgs[c.sent].phase <= load.phase.Load() && len(c.unacked) < 3 {
				m := c.msgs[c.sent]
				c.unacked = append(c.unacked, m.id)
				cc.send(map[string]any{"type": "message", "id": m.id, "text": m.text})
				if c.sent++; c.sent == len(c.msgs) {
					load.sentWS.Add(1)
				}
			}
		}
		tick.Stop()
		if leave >= 0 {
			cc.ws.Close()
			for range cc.frames {
			}
			cc = c.connect(ctx, load, leave)
		}
	}
}

// tgPushes records the Telegram messages pushed: message id → text.
type tgPushes struct {
	mu    sync.Mutex
	texts map[int]string
	chats map[int]int64
}

func (p *tgPushes) push(api *telegramtest.Server, user int64, text string) {
	p.mu.Lock()
	defer p.mu.Unlock() // pushing under the lock keeps the record complete when the test reads it
	id := api.Push(telegramtest.DM(user, text))
	p.texts[id], p.chats[id] = text, user
}

// tgUser pushes its messages: two in phase 0, a stream in phase 1 (users
// with a gate2 message end the stream with it), two in phase 2.
func tgUser(ctx context.Context, api *telegramtest.Server, pushes *tgPushes, load *chaosLoad, opened [3]chan struct{}, u int) {
	user := int64(1000 + u)
	pause := func() bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(time.Duration(150+rand.IntN(450)) * time.Millisecond): // the user's typing pace
			return true
		}
	}
	await := func(p int) bool {
		select {
		case <-ctx.Done():
			return false
		case <-opened[p]:
			return true
		}
	}
	n := 0
	text := func(gate string) string {
		s := fmt.Sprintf("t%02d m%d", u, n)
		if gate != "" {
			s += " " + gate
		}
		n++
		return s
	}
	pushes.push(api, user, text(""))
	if !pause() {
		return
	}
	if u%4 == 0 {
		pushes.push(api, user, text(gate1))
	} else {
		pushes.push(api, user, text(""))
	}
	if !await(1) {
		return
	}
	for i := 0; i < tgStream && load.phase.Load() == 1; i++ {
		if !pause() {
			return
		}
		if u%4 == 1 && i == 2 {
			pushes.push(api, user, text(gate2))
			break
		}
		pushes.push(api, user, text(""))
	}
	if !await(2) {
		return
	}
	for range 2 {
		if !pause() {
			return
		}
		pushes.push(api, user, text(""))
	}
}

// chaosRow is a stored message with its conversation.
type chaosRow struct {
	SessionKey     string
	ConversationID string
	LastSeq        int64
	Seq            int64
	Role           string
	Content        string
	ToolCalls      string
	ClientMsgID    *string
	ReplyTo        int64
	Status         string
	Error          string
	TurnState      string
	TurnOwner      string
	TurnAttempt    int
}

func chaosRows(t *testing.T, db *store.DB) []chaosRow {
	t.Helper()
	var rows []chaosRow
	err := db.Gorm().Raw(`SELECT c.session_key, c.id AS conversation_id, c.last_seq, m.seq, m.role, m.content, COALESCE(m.tool_calls, '') AS tool_calls,
			m.client_msg_id, m.reply_to, m.status, COALESCE(m.error, '') AS error, m.turn_state, m.turn_owner, m.turn_attempt
		FROM messages m JOIN conversations c ON c.id = m.conversation_id ORDER BY c.session_key, c.id, m.seq`).Scan(&rows).Error
	if err != nil {
		t.Fatalf("read messages: %v", err)
	}
	return rows
}

// isFinal: a reply that ends its turn (not a shutdown's partial one, not
// a tool call).
func (r *chaosRow) isFinal() bool {
	return r.Role == "assistant" && (r.ToolCalls == "" || r.ToolCalls == "null" || r.ToolCalls == "[]") &&
		(r.Status == sessions.MsgOK || r.Status == sessions.MsgFailed)
}

// chaosWant is what the load sent: session key → client message id →
// text.
type chaosWant map[string]map[string]string

// unanswered lists what is not done yet: a message sent and not stored
// with a final reply, or a Telegram turn not delivered.
func (w chaosWant) unanswered(rows []chaosRow) []string {
	final := map[string]bool{} // conversation/seq of a user message with a final reply
	for _, r := range rows {
		if r.isFinal() {
			final[fmt.Sprintf("%s/%d", r.ConversationID, r.ReplyTo)] = true
		}
	}
	done := map[string]bool{}
	for _, r := range rows {
		if r.Role == "user" && r.ClientMsgID != nil && final[fmt.Sprintf("%s/%d", r.ConversationID, r.Seq)] &&
			(!strings.HasPrefix(r.SessionKey, "telegram:") || r.TurnState == sessions.TurnDelivered) {
			done[r.SessionKey+"/"+*r.ClientMsgID] = true
		}
	}
	var out []string
	for key, ids := range w {
		for id := range ids {
			if !done[key+"/"+id] {
				out = append(out, key+"/"+id)
			}
		}
	}
	sort.Strings(out)
	return out
}

// TestChaosTwoReplicas runs two replicas on PostgreSQL under 50 WebSocket
// users and 20 Telegram users (one token, one poller) while replica A is
// stopped with SIGTERM and started again, then replica B is killed with
// SIGKILL and started again. Every message sent is stored once with one
// final reply; seqs stay gap-free; every Telegram update is answered, once
// — a second send only for the turns B had answered but not yet marked
// delivered when it died, the documented crash window. Most of its time
// is the wait for B's turns, taken over once B's heartbeat is
// ledger.LeaseTTL (30 s) old.
func TestChaosTwoReplicas(t *testing.T) {
	dsn := pgtest.DSN(t)
	buildBinary(t) // not counted in the run's time
	began := time.Now()
	since := func() string { return time.Since(began).Round(100 * time.Millisecond).String() }

	llm := newChaosLLM()
	llmSrv := httptest.NewServer(llm)
	defer llmSrv.Close()
	api := telegramtest.New(t)
	late := &lateSends{api: api, entered: make(chan struct{}, 1)}
	apiSrv := httptest.NewServer(late)
	defer apiSrv.Close()

	load := &chaosLoad{addrs: [2]string{freeAddr(t), freeAddr(t)}}
	dirs := [2]string{t.TempDir(), t.TempDir()}
	// The users push faster than a person types: the per-user rate limit
	// (which refuses what is over it) is lifted, as this test counts on
	// every message being stored.
	telegram := fmt.Sprintf("  telegram:\n    token: %q\n    api_url: %s\n    poll_timeout: 1s\n    rate_limit:\n      per_second: 1000\n      burst: 1000", telegramtest.Token, apiSrv.URL)
	var (
		procMu sync.Mutex
		procs  [2]*process
		names  []string // every process started, for the logs on failure
		byName = map[string]*process{}
	)
	start := func(i int, name string) {
		// One turn per message (busy mode queue): the load checks each
		// message's own reply. Merged bursts under failures are tested in
		// sessions (TestShutdownDuringABurst, TestBurstSplitAcrossReplicasIsOneTurn).
		p := startGateway(t, dirs[i], replicaConfig(load.addrs[i], dsn, llmSrv.URL, "1s", telegram)+"session:\n  busy_mode: queue\n  debounce_ms: 0\n")
		procMu.Lock()
		procs[i] = p
		names = append(names, name)
		byName[name] = p
		procMu.Unlock()
	}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		procMu.Lock()
		defer procMu.Unlock()
		for _, name := range names {
			out := byName[name].stderr.String()
			if len(out) > 20000 {
				out = "…" + out[len(out)-20000:]
			}
			t.Logf("--- replica %s stderr:\n%s", name, out)
		}
	})
	start(0, "A")
	start(1, "B")
	for _, addr := range load.addrs {
		waitHealthy(t, "http://"+addr)
	}
	db, err := store.Open(context.Background(), "postgres", dsn, store.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	// The load.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var opened [3]chan struct{}
	for i := range opened {
		opened[i] = make(chan struct{})
	}
	close(opened[0])
	setPhase := func(p int32) {
		load.phase.Store(p)
		close(opened[p])
	}
	clients := make([]*chaosClient, wsUsers)
	var wsWG, tgWG sync.WaitGroup
	for u := range clients {
		clients[u] = newChaosClient(u)
		wsWG.Add(1)
		go func() { defer wsWG.Done(); clients[u].run(ctx, load) }()
	}
	pushes := &tgPushes{texts: map[int]string{}, chats: map[int]int64{}}
	for u := range tgUsers {
		tgWG.Add(1)
		go func() { defer tgWG.Done(); tgUser(ctx, api, pushes, load, opened, u) }()
	}

	// Chaos 1: SIGTERM A while phase 0 runs, its gate1 turns hanging.
	gated := func(every, rest int, users int) int { return (users + every - 1 - rest) / every }
	llm.waitHeld(t, gate1, gated(5, 0, wsUsers)+gated(4, 0, tgUsers))
	eventually(t, "70% of phase 0 acknowledged", func() bool { return load.acked[0].Load() >= wsUsers*2*7/10 })
	tSIGTERM := since()
	procs[0].cmd.Process.Signal(syscall.SIGTERM)
	setPhase(1)
	select {
	case err := <-procs[0].exited:
		if err != nil {
			t.Fatalf("A exited with %v after SIGTERM", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("A did not exit after SIGTERM")
	}
	llm.release(gate1)
	// B's id in the ledger: the owner of w01's first turn, which ran on B
	// (odd users start there) before any chaos.
	var replicaB string
	db.Gorm().Raw(`SELECT m.turn_owner FROM messages m JOIN conversations c ON c.id = m.conversation_id
		WHERE c.session_key = 'websocket:w01' AND m.client_msg_id = 'c0'`).Scan(&replicaB)
	if replicaB == "" {
		t.Fatal("w01's first message, sent to B, has no turn owner")
	}
	start(0, "A2")
	waitHealthy(t, "http://"+load.addrs[0])
	for u, c := range clients {
		if u%2 == 0 {
			c.move <- 0 // the users who started on A go back to it
		}
	}

	// Chaos 2: kill -9 B mid-traffic, its gate2 turns hanging, while a
	// Telegram send waits for its answer.
	llm.waitHeld(t, gate2, gated(5, 1, wsUsers)+gated(4, 1, tgUsers))
	eventually(t, "70% of phase 1 acknowledged", func() bool { return load.acked[1].Load() >= wsUsers*2*7/10 })
	select {
	case <-late.entered: // a stale token, maybe
	default:
	}
	inWindow := false
	select {
	case <-late.entered:
		inWindow = true
	case <-time.After(5 * time.Second):
	}
	tKill := since()
	procs[1].cmd.Process.Signal(syscall.SIGKILL)
	<-procs[1].exited
	type owned struct {
		ClientMsgID string
		TurnState   string
	}
	var ofB []owned
	// A turn is answered once its final reply is stored after it (the
	// ledger's state is derived from that), delivered once marked.
	db.Gorm().Raw(`SELECT m.client_msg_id, CASE WHEN m.turn_state = 'delivered' THEN 'delivered'
			WHEN EXISTS (SELECT 1 FROM messages r WHERE r.conversation_id = m.conversation_id AND r.seq > m.seq AND r.reply_to = m.seq
				AND r.role = 'assistant' AND (r.tool_calls IS NULL OR r.tool_calls = '') AND NOT (r.status = 'interrupted' AND r.error = 'shutdown'))
			THEN 'answered' ELSE m.turn_state END AS turn_state
		FROM messages m JOIN conversations c ON c.id = m.conversation_id
		WHERE c.session_key LIKE 'telegram:%' AND m.role = 'user' AND m.turn_owner = ?`, replicaB).Scan(&ofB)
	window := map[string]bool{} // Telegram turns B answered and had not marked delivered
	byState := map[string]int{}
	for _, o := range ofB {
		byState[o.TurnState]++
		if o.TurnState == sessions.TurnAnswered {
			window[o.ClientMsgID] = true
		}
	}
	setPhase(2)
	llm.release(gate2)
	start(1, "B2")
	waitHealthy(t, "http://"+load.addrs[1])

	// Done when everything sent is answered: each WebSocket user sent all
	// its messages, each Telegram user pushed all of its, and storage has a
	// final reply for every one (a Telegram one delivered) — B's turns
	// after its heartbeat aged.
	tgWG.Wait()
	eventually(t, "every WebSocket user sent all its messages", func() bool { return load.sentWS.Load() == wsUsers })
	want := chaosWant{}
	pushes.mu.Lock()
	for id, text := range pushes.texts {
		key := fmt.Sprintf("telegram:dm:%d", pushes.chats[id])
		if want[key] == nil {
			want[key] = map[string]string{}
		}
		want[key][fmt.Sprintf("%d:%d", pushes.chats[id], id)] = text
	}
	pushes.mu.Unlock()
	for _, c := range clients {
		want["websocket:"+c.user] = map[string]string{}
		for _, m := range c.msgs {
			want["websocket:"+c.user][m.id] = m.text
		}
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		missing := want.unanswered(chaosRows(t, db))
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			missing = missing[:min(len(missing), 20)]
			for _, r := range chaosRows(t, db) {
				if r.Role == "user" && r.ClientMsgID != nil && slices.Contains(missing, r.SessionKey+"/"+*r.ClientMsgID) {
					t.Logf("unanswered: %s seq %d turn %s owner %s attempt %d (B was %s)", r.SessionKey, r.Seq, r.TurnState, r.TurnOwner, r.TurnAttempt, replicaB)
				}
			}
			t.Fatalf("%d messages never answered (or, on Telegram, delivered), the first: %v", len(missing), missing)
		}
		time.Sleep(250 * time.Millisecond) // polling storage for the takeover, bounded above
	}
	tDone := since()
	cancel()
	wsWG.Wait()
	stopGateway(t, procs[0])
	stopGateway(t, procs[1])

	// Storage: one conversation per user, seqs gap-free, every message
	// sent stored once, each with exactly one final reply.
	rows := chaosRows(t, db)
	convs := map[string]map[string]bool{}
	seqs := map[string][]chaosRow{}
	for _, r := range rows {
		if convs[r.SessionKey] == nil {
			convs[r.SessionKey] = map[string]bool{}
		}
		convs[r.SessionKey][r.ConversationID] = true
		seqs[r.ConversationID] = append(seqs[r.ConversationID], r)
	}
	if len(convs) != len(want) {
		t.Errorf("%d session keys stored, want %d", len(convs), len(want))
	}
	for key, cs := range convs {
		if len(cs) != 1 {
			t.Errorf("%s has %d conversations, want 1", key, len(cs))
		}
	}
	var users, interrupted, failed, rerun int
	stored := map[string]chaosRow{} // key/client id → final reply
	for conv, msgs := range seqs {
		for i, m := range msgs {
			if m.Seq != int64(i+1) {
				t.Errorf("conversation %s (%s): seq %d at position %d; seqs: %v", conv, m.SessionKey, m.Seq, i+1, seqList(msgs))
				break
			}
		}
		if last := msgs[len(msgs)-1]; last.Seq != last.LastSeq {
			t.Errorf("conversation %s (%s): last_seq %d, last message %d", conv, last.SessionKey, last.LastSeq, last.Seq)
		}
		bySeq := map[int64]chaosRow{}
		for _, m := range msgs {
			bySeq[m.Seq] = m
		}
		for _, m := range msgs {
			switch {
			case m.Role == "user":
				users++
				if m.TurnAttempt > 1 {
					rerun++
				}
				if m.ClientMsgID == nil {
					t.Errorf("%s seq %d: a user message without a client id", m.SessionKey, m.Seq)
					continue
				}
				k := m.SessionKey + "/" + *m.ClientMsgID
				if _, dup := stored[k]; dup {
					t.Errorf("%s stored twice as a user message", k)
				}
				text, ok := want[m.SessionKey][*m.ClientMsgID]
				if !ok {
					t.Errorf("%s stored, but never sent", k)
				} else if m.Content != text {
					t.Errorf("%s stored as %q, sent as %q", k, m.Content, text)
				}
				var finals []chaosRow
				for _, r := range msgs {
					if r.ReplyTo == m.Seq && r.isFinal() {
						finals = append(finals, r)
					}
				}
				if len(finals) != 1 {
					t.Errorf("%s (seq %d) has %d final replies, want exactly 1: %+v", k, m.Seq, len(finals), finals)
					continue
				}
				stored[k] = finals[0]
				wantState := sessions.TurnAnswered
				if strings.HasPrefix(m.SessionKey, "telegram:") {
					wantState = sessions.TurnDelivered
				}
				if finals[0].Status == sessions.MsgFailed {
					failed++
					t.Logf("%s failed: %q", k, finals[0].Error)
					if wantState == sessions.TurnAnswered {
						wantState = sessions.TurnFailed
					}
				} else if finals[0].Content != "thinking about "+m.Content+"... done" {
					t.Errorf("%s answered %q", k, finals[0].Content)
				}
				if turn, err := db.TurnAt(context.Background(), m.ConversationID, m.Seq); err != nil || turn == nil || turn.State != wantState {
					t.Errorf("%s turn %+v (%v), want %s", k, turn, err, wantState)
				}
			case m.Role == "assistant" && m.Status == sessions.MsgInterrupted:
				interrupted++
				u := bySeq[m.ReplyTo]
				if m.Error != sessions.InterruptedByShutdown || u.Role != "user" || !strings.HasPrefix("thinking about "+u.Content+"... ", m.Content) {
					t.Errorf("%s seq %d: an interrupted reply %+v to %+v", m.SessionKey, m.Seq, m, u)
				}
			case m.isFinal():
				if bySeq[m.ReplyTo].Role != "user" {
					t.Errorf("%s seq %d answers seq %d, not a user message", m.SessionKey, m.Seq, m.ReplyTo)
				}
			default:
				t.Errorf("%s seq %d: unexpected %+v", m.SessionKey, m.Seq, m)
			}
		}
		// A shutdown's partial reply comes before its turn's final one.
		for _, m := range msgs {
			if m.Role == "assistant" && m.Status == sessions.MsgInterrupted {
				u := bySeq[m.ReplyTo]
				if u.ClientMsgID != nil {
					if f, ok := stored[m.SessionKey+"/"+*u.ClientMsgID]; ok && f.Seq < m.Seq {
						t.Errorf("%s: interrupted reply seq %d after the final reply seq %d", m.SessionKey, m.Seq, f.Seq)
					}
				}
			}
		}
	}
	for key, ids := range want {
		for id := range ids {
			if _, ok := stored[key+"/"+id]; !ok {
				t.Errorf("%s/%s sent and not stored with a reply", key, id)
			}
		}
	}

	// WebSocket: every reply a client was shown is the stored one.
	shown, reconnects := 0, 0
	for _, c := range clients {
		reconnects += c.reconnects
		for _, p := range c.problems {
			t.Errorf("%s: %s", c.user, p)
		}
		key := "websocket:" + c.user
		bySeq := map[int64]chaosRow{}
		for _, r := range rows {
			if r.SessionKey == key {
				bySeq[r.Seq] = r
			}
		}
		for _, s := range c.shown {
			shown++
			r, ok := bySeq[s.seq]
			if !ok || r.Role != "assistant" || r.Content != s.text || r.Status != s.status {
				t.Errorf("%s was shown seq %d %q (%s); stored: %+v", c.user, s.seq, s.text, s.status, r)
			}
		}
		for _, m := range c.msgs {
			if !c.acked[m.id] {
				t.Errorf("%s: %s never acknowledged", c.user, m.id)
			}
		}
	}

	// Telegram: every update answered; a second send only inside the
	// crash window.
	sends := map[int][]telegramtest.Sent{}
	for _, s := range api.Messages() {
		sends[s.ReplyTo] = append(sends[s.ReplyTo], s)
	}
	duplicates := 0
	pushes.mu.Lock()
	for id, text := range pushes.texts {
		chat := pushes.chats[id]
		ref := fmt.Sprintf("%d:%d", chat, id)
		got := sends[id]
		switch {
		case len(got) == 0:
			t.Errorf("Telegram message %s %q never answered", ref, text)
		case len(got) == 2 && window[ref]:
			duplicates++
		case len(got) > 1:
			t.Errorf("Telegram message %s %q answered %d times (in B's crash window: %v)", ref, text, len(got), window[ref])
		}
		for _, s := range got {
			if s.ChatID != chat || s.Text != "thinking about "+text+"... done" {
				t.Errorf("Telegram message %s %q answered %+v", ref, text, s)
			}
		}
		delete(sends, id)
	}
	pushes.mu.Unlock()
	for id, s := range sends {
		t.Errorf("sent %+v, replying to %d, which nobody pushed", s, id)
	}
	if duplicates > len(window) {
		t.Errorf("%d duplicates, more than the %d turns in B's crash window", duplicates, len(window))
	}

	// The model: a turn runs again only after a chaos step cut it off;
	// no input ran more than once per step, plus once.
	runs, reruns := llm.runCounts(), 0
	for input, n := range runs {
		if n > 1 {
			reruns++
		}
		if n > 3 {
			t.Errorf("%q ran %d times", input, n)
		}
	}

	wsMsgs, tgMsgs := wsUsers*wsPerUser, len(pushes.texts)
	t.Logf("SIGTERM A at %s, kill -9 B at %s (a send in flight: %v), all answered at %s, done at %s",
		tSIGTERM, tKill, inWindow, tDone, since())
	t.Logf("%d user messages stored (%d WebSocket, %d Telegram), %d turns claimed more than once, %d shutdown partial replies, %d failed",
		users, wsMsgs, tgMsgs, rerun, interrupted, failed)
	t.Logf("model: %d inputs, %d run more than once; WebSocket: %d resumes, %d replies shown, all stored",
		len(runs), reruns, reconnects, shown)
	t.Logf("Telegram: %d sendMessage, %d duplicates; B owned %d Telegram turns at the kill %v, %d answered but not marked delivered (the crash window); %d getUpdates conflicts",
		len(api.Messages()), duplicates, len(ofB), byState, len(window), api.Conflicts())
}

func seqList(msgs []chaosRow) []int64 {
	out := make([]int64, len(msgs))
	for i, m := range msgs {
		out[i] = m.Seq
	}
	return out
}
