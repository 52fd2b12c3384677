package main

// Tools that run once, with real processes: the gateway binary, a model
// server speaking OpenAI's wire format (llmtest) that asks for the demo
// MCP server's slow tool, and the demo server, started by the gateway
// over stdio. The demo keeps slow's starts in a count file, which
// outlives any gateway and demo process, so a test reads how many times
// the tool started at the server.
//
// Each scenario stops the gateway while slow runs — SIGKILL, SIGTERM, or
// SIGKILL with a second replica to take over — and checks the rules of
// the sessions package's tool loop (toolTurn) end to end: a call started
// and never answered is not started again (the model is told its outcome
// is unknown) unless its tool is idempotent, and the user gets one final
// reply.

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chatgate/chatgate/cmd/chatgate-mcp-demo/demo"
	"github.com/chatgate/chatgate/internal/llmtest"
	"github.com/chatgate/chatgate/internal/pgtest"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/store"
)

const (
	// slowTool is the demo's slow, as the model calls it.
	slowTool = "demo__slow"
	// slowArgs keep slow running well past any fault of a scenario; with
	// -slow-once, only its first start takes that long.
	slowArgs = `{"seconds": 60}`
	// slowAgain is slow's result when it started again (-slow-once).
	slowAgain = "done after 0s"
	// toolsListed is the gateway's log line once a tool server listed its
	// tools: only then does a turn offer them.
	toolsListed = "tool server listed its tools"
)

// toolsE2E is one scenario's world: its database, model server and
// demo server.
type toolsE2E struct {
	driver     string // store.DriverSQLite or store.DriverPostgres
	dsn        string // the SQLite file, or the PostgreSQL DSN of a fresh schema
	llm        *llmtest.Server
	llmURL     string
	demo       string // the demo server's binary
	counts     string // its count file
	stream     bool
	idempotent bool
	// lateBy delays each start of the demo server: a restarted gateway's
	// rescuer runs before the server listed its tools.
	lateBy time.Duration
}

func newToolsE2E(t *testing.T, driver string, stream, idempotent bool) *toolsE2E {
	t.Helper()
	buildBinary(t) // skips in -short
	e := &toolsE2E{driver: driver, stream: stream, idempotent: idempotent, llm: &llmtest.Server{}}
	switch driver {
	case store.DriverSQLite:
		e.dsn = filepath.Join(t.TempDir(), "gateway.db")
	case store.DriverPostgres:
		e.dsn = pgtest.DSN(t)
	}
	// The model asks for slow once a turn, then answers Done(its
	// result); "ping" it answers "pong".
	slowThenAnswer := llmtest.ToolThenAnswer(slowTool, slowArgs)
	e.llm.Script(func(req llmtest.Request) llmtest.Answer {
		if lastUserText(req) == "ping" {
			return llmtest.Answer{Text: "pong"}
		}
		return slowThenAnswer(req)
	})
	srv := httptest.NewServer(e.llm)
	t.Cleanup(srv.Close)
	e.llmURL = srv.URL
	e.demo = filepath.Join(t.TempDir(), "chatgate-mcp-demo")
	if out, err := exec.Command("go", "build", "-o", e.demo, "../chatgate-mcp-demo").CombinedOutput(); err != nil {
		t.Fatalf("go build chatgate-mcp-demo: %v\n%s", err, out)
	}
	e.counts = filepath.Join(t.TempDir(), "counts.json")
	return e
}

func lastUserText(req llmtest.Request) string {
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == "user" {
			return req.Messages[i].Text()
		}
	}
	return ""
}

// config is a gateway's bot.yaml, listening on addr.
func (e *toolsE2E) config(addr string) string {
	command, args := e.demo, fmt.Sprintf("%q, %q, %q", "-count-file", e.counts, "-slow-once")
	if e.lateBy > 0 {
		command = "/bin/sh"
		args = fmt.Sprintf("%q, %q, %q, %s", "-c", fmt.Sprintf(`sleep %g; exec "$0" "$@"`, e.lateBy.Seconds()), e.demo, args)
	}
	return fmt.Sprintf(`
gateway:
  listen: %s
storage:
  driver: %s
  dsn: %q
agent:
  backend: openai
  openai: {base_url: %s/v1, model: m, max_retries: 0, stream: %t}
  tools:
    servers:
      - name: demo
        command: %q
        args: [%s]
        tools: [slow]
        approve: auto
        idempotent: %t
shutdown:
  drain_timeout: 1s
log:
  level: info
`, addr, e.driver, e.dsn, e.llmURL, e.stream, command, args, e.idempotent)
}

// start starts a gateway in dir on addr, and waits until it serves and
// offers the demo's tools.
func (e *toolsE2E) start(t *testing.T, dir, addr string) *process {
	t.Helper()
	p := startGateway(t, dir, e.config(addr))
	waitHealthy(t, "http://"+addr)
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(p.stderr.String(), toolsListed) {
		select {
		case err := <-p.exited:
			t.Fatalf("the gateway exited (%v) before its tools were listed:\n%s", err, p.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the demo server never listed its tools:\n%s", p.stderr.String())
		}
		time.Sleep(20 * time.Millisecond) // polling a starting process, not waiting on a policy
	}
	return p
}

// slowStarts reads how many times slow started at the demo server.
func (e *toolsE2E) slowStarts(t *testing.T) int {
	t.Helper()
	c, err := demo.ReadCounts(e.counts)
	if err != nil {
		t.Fatal(err)
	}
	return c.SlowStarted
}

// awaitSlowStarted waits until slow has started n times.
func (e *toolsE2E) awaitSlowStarted(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for e.slowStarts(t) < n {
		if time.Now().After(deadline) {
			t.Fatalf("slow started %d times, want %d", e.slowStarts(t), n)
		}
		time.Sleep(10 * time.Millisecond) // polling for the start, an event
	}
}

// send sends text as message id and returns its seq from the ack.
func (cl *wsClient) send(t *testing.T, id, text string) int64 {
	t.Helper()
	if err := cl.c.WriteJSON(map[string]any{"type": "message", "id": id, "text": text}); err != nil {
		t.Fatal(err)
	}
	ack := cl.next(t, "ack")
	if ack["id"] != id {
		t.Fatalf("ack %v, want one of %s", ack, id)
	}
	return int64(ack["seq"].(float64))
}

// finalReplies resumes the session of cl on addr after a fault and
// returns the final replies (status ok) of its message id, stored as seq,
// that this connection got, by their seq: from the ready frame's history
// and as reply frames, until the reply is there and a later message of
// the session was answered after it. within bounds the wait: a turn run
// again after a crash waits for the dead runner's lease.
func (cl *wsClient) finalReplies(t *testing.T, addr, id string, seq int64, within time.Duration) map[int64]string {
	t.Helper()
	rc, ready := dialClient(t, addr, map[string]any{"session": cl.session, "last_seq": seq, "conversation": cl.conv})
	defer rc.c.Close()
	if ready["resumed"] != true {
		t.Fatalf("not resumed: %v", ready)
	}
	got := map[int64]string{}
	for _, h := range ready["history"].([]any) {
		item := h.(map[string]any)
		if item["role"] == "assistant" && int64(item["reply_to"].(float64)) == seq && item["status"] == "ok" {
			got[int64(item["seq"].(float64))] = item["text"].(string)
		}
	}
	deadline := time.After(within)
	pinged := false
	for {
		if len(got) > 0 && !pinged {
			// The reply is here: a reply of a later message, answered
			// after it, shows that no second one was on its way.
			rc.c.WriteJSON(map[string]any{"type": "message", "id": "ping", "text": "ping"})
			pinged = true
		}
		select {
		case f, ok := <-rc.frames:
			if !ok {
				t.Fatalf("the resumed connection closed (%d) before the reply", <-rc.closeCh)
			}
			if f["type"] != "reply" {
				continue
			}
			switch {
			case f["reply_to"] == id && f["status"] == "ok":
				got[int64(f["seq"].(float64))] = f["text"].(string)
			case f["reply_to"] == "ping":
				if f["text"] != "pong" {
					t.Fatalf("ping answered %v", f)
				}
				return got
			}
		case <-deadline:
			t.Fatalf("no final reply to %s within %s; got %v", id, within, got)
		}
	}
}

// want is what a scenario ends with.
type toolsWant struct {
	starts int    // slow's starts at the server
	state  string // the call's state in the ledger
	result string // what the model got for the call
}

// check checks the end of a scenario: slow started as often as wanted;
// the model asked for one call in the turn and every request after it
// carried that call's one result, the wanted one; storage holds one call
// with that outcome, one tool message and one final reply to message seq
// — which is the reply the client got, once.
func (e *toolsE2E) check(t *testing.T, seq int64, replies map[int64]string, w toolsWant) {
	t.Helper()
	final := llmtest.Done(w.result)
	if n := e.slowStarts(t); n != w.starts {
		t.Errorf("slow started %d times at the server, want %d", n, w.starts)
	}

	// The model: every request of the turn after the call's round carries
	// the one result.
	var before, withResult int
	for _, req := range e.llm.Received() {
		if lastUserText(req) == "ping" {
			continue
		}
		var calls int
		for _, m := range req.Turn() {
			if m.Role == "assistant" {
				calls += len(m.ToolCalls)
			}
		}
		if calls > 1 {
			t.Errorf("a request carries %d calls of the turn, want 1: %+v", calls, req.Turn())
		}
		if calls == 0 {
			before++
			continue
		}
		if res := req.Results(); len(res) != 1 || res[0] != w.result {
			t.Errorf("the model got the result %q, want [%q]", res, w.result)
		}
		withResult++
	}
	if withResult == 0 {
		t.Errorf("the model never got the call's result (%d requests before it)", before)
	}

	// Storage.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	db, err := store.Open(ctx, e.driver, e.dsn, store.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	convs, err := db.ListConversations(ctx, store.ListFilter{SessionKey: sessions.WebSocketKey("ann")})
	if err != nil || len(convs) != 1 {
		t.Fatalf("conversations of ann: %v, %v", convs, err)
	}
	msgs, err := db.MessagesAfter(ctx, convs[0].ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var finals, results []ledger.Message
	var lines []string
	for _, m := range msgs {
		lines = append(lines, fmt.Sprintf("%d %s reply_to=%d status=%s error=%q tool_calls=%q: %q", m.Seq, m.Role, m.ReplyTo, m.Status, m.Error, m.ToolCalls, m.Content))
		switch {
		case m.ReplyTo != seq:
		case ledger.SettlesTurn(&m):
			finals = append(finals, m)
		case m.Role == "tool":
			results = append(results, m)
		}
	}
	if len(finals) != 1 || finals[0].Content != final || finals[0].Status != ledger.MsgOK {
		t.Errorf("final replies stored: %d, want one %q; transcript:\n%s", len(finals), final, strings.Join(lines, "\n"))
	} else if len(replies) != 1 || replies[finals[0].Seq] != final {
		t.Errorf("the client got the final replies %v, want {%d: %q} once", replies, finals[0].Seq, final)
	}
	if len(results) != 1 || results[0].Content != w.result {
		t.Errorf("tool messages stored: %d, want one %q; transcript:\n%s", len(results), w.result, strings.Join(lines, "\n"))
	}
	calls, err := db.ConversationToolCalls(ctx, convs[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != 1 || calls[0].Name != slowTool || calls[0].State != w.state || calls[0].Runs != w.starts || calls[0].Result != w.result {
		t.Errorf("tool calls stored: %+v, want one %s %s after %d runs", calls, slowTool, w.state, w.starts)
	}
}

// logsOnFailure prints the processes' logs when the test failed.
func logsOnFailure(t *testing.T, procs map[string]*process) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for name, p := range procs {
			out := p.stderr.String()
			if len(out) > 20000 {
				out = "…" + out[len(out)-20000:]
			}
			t.Logf("--- gateway %s stderr:\n%s", name, out)
		}
	})
}

// kill9 kills p with SIGKILL and waits for it to end.
func kill9(t *testing.T, p *process) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-p.exited:
	case <-time.After(20 * time.Second):
		t.Fatal("no exit after SIGKILL")
	}
}

// The wait for a reply after a crash on PostgreSQL is mostly the dead
// runner's lease (ledger.LeaseTTL, 30 s); on SQLite a new process takes
// its file's turns over at once.
const afterCrash = 90 * time.Second

func toolDrivers(t *testing.T, fn func(t *testing.T, driver string)) {
	for _, driver := range []string{store.DriverSQLite, store.DriverPostgres} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			fn(t, driver)
		})
	}
}

// kill9DuringSlow runs the SIGKILL scenario: slow is started, the gateway
// killed and started again on the same database; its rescuer runs the
// turn again.
func kill9DuringSlow(t *testing.T, e *toolsE2E, w toolsWant) {
	dir, addr := t.TempDir(), freeAddr(t)
	procs := map[string]*process{}
	logsOnFailure(t, procs)
	procs["first"] = e.start(t, dir, addr)
	cl, _ := dialClient(t, addr, map[string]any{"user": "ann"})
	seq := cl.send(t, "m1", "look it up slowly")
	e.awaitSlowStarted(t, 1)
	kill9(t, procs["first"])

	procs["restarted"] = e.start(t, dir, addr)
	replies := cl.finalReplies(t, addr, "m1", seq, afterCrash)
	e.check(t, seq, replies, w)
}

// TestToolCallCutBySIGKILLIsNotRunAgain: the gateway is killed while the
// call runs; after the restart the model is told its outcome is unknown,
// the tool is not started again, and the user gets one reply.
func TestToolCallCutBySIGKILLIsNotRunAgain(t *testing.T) {
	toolDrivers(t, func(t *testing.T, driver string) {
		kill9DuringSlow(t, newToolsE2E(t, driver, true, false), toolsWant{starts: 1, state: ledger.ToolUnknown, result: sessions.ToolUnknownText})
	})
}

// TestIdempotentToolCallCutBySIGKILLRunsAgain: the same with the tool
// idempotent: it starts again (the demo's second start answers at once)
// and the model gets its real result.
func TestIdempotentToolCallCutBySIGKILLRunsAgain(t *testing.T) {
	toolDrivers(t, func(t *testing.T, driver string) {
		kill9DuringSlow(t, newToolsE2E(t, driver, false, true), toolsWant{starts: 2, state: ledger.ToolDone, result: slowAgain})
	})
}

// TestIdempotentToolCallRunsAgainWhenItsServerListsLate: the same when
// the restarted gateway's rescuer takes the turn before the MCP server
// listed its tools (it is started in the background, and here takes 2 s
// to start): the call's rule is the configuration's all the same, and the
// call starts again once the server is there. SQLite only: there the
// restart takes its file's turns at once; on PostgreSQL a restarted
// replica waits out the dead one's lease, long after the listing.
func TestIdempotentToolCallRunsAgainWhenItsServerListsLate(t *testing.T) {
	e := newToolsE2E(t, store.DriverSQLite, true, true)
	e.lateBy = 2 * time.Second
	kill9DuringSlow(t, e, toolsWant{starts: 2, state: ledger.ToolDone, result: slowAgain})
}

// TestToolCallCutBySIGTERMIsNotRunAgain: SIGTERM while the call runs; the
// drain's deadline (1 s) cuts the turn, the gateway exits 0, and the
// restart runs the turn again as after a crash.
func TestToolCallCutBySIGTERMIsNotRunAgain(t *testing.T) {
	toolDrivers(t, func(t *testing.T, driver string) {
		e := newToolsE2E(t, driver, false, false)
		dir, addr := t.TempDir(), freeAddr(t)
		procs := map[string]*process{}
		logsOnFailure(t, procs)
		procs["first"] = e.start(t, dir, addr)
		cl, _ := dialClient(t, addr, map[string]any{"user": "ann"})
		seq := cl.send(t, "m1", "look it up slowly")
		e.awaitSlowStarted(t, 1)
		stopGateway(t, procs["first"]) // SIGTERM, exit 0
		if logs := procs["first"].stderr.String(); !strings.Contains(logs, "drain deadline passed") {
			t.Fatalf("the drain did not end at its deadline:\n%s", logs)
		}

		procs["restarted"] = e.start(t, dir, addr)
		replies := cl.finalReplies(t, addr, "m1", seq, afterCrash)
		e.check(t, seq, replies, toolsWant{starts: 1, state: ledger.ToolUnknown, result: sessions.ToolUnknownText})
	})
}

// TestToolCallTakenOverByAnotherReplica: two replicas on one PostgreSQL
// database; the client's turn runs on A, which is killed while the call
// runs; B takes the turn over once A's lease ended, tells the model the
// outcome is unknown, and the client, back on B, gets one reply.
func TestToolCallTakenOverByAnotherReplica(t *testing.T) {
	e := newToolsE2E(t, store.DriverPostgres, true, false)
	addrA, addrB := freeAddr(t), freeAddr(t)
	procs := map[string]*process{}
	logsOnFailure(t, procs)
	procs["A"] = e.start(t, t.TempDir(), addrA)
	procs["B"] = e.start(t, t.TempDir(), addrB)
	cl, _ := dialClient(t, addrA, map[string]any{"user": "ann"})
	seq := cl.send(t, "m1", "look it up slowly")
	e.awaitSlowStarted(t, 1)
	kill9(t, procs["A"])

	replies := cl.finalReplies(t, addrB, "m1", seq, afterCrash)
	e.check(t, seq, replies, toolsWant{starts: 1, state: ledger.ToolUnknown, result: sessions.ToolUnknownText})
}
