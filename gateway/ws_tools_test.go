package gateway

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/clocktest"
	"github.com/chatgate/chatgate/internal/mcptest"
	"github.com/chatgate/chatgate/internal/tooltest"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/store"
	"github.com/chatgate/chatgate/tools"
	"github.com/chatgate/chatgate/tools/mcpclient"
)

// Tool calls over the WebSocket channel: a model that asks for a tool of
// an MCP test server, the real server and a gorilla client on loopback.

// toolCall is a call of the test server's tool, as the model writes it.
func toolCall(id, tool string, args any) agent.ToolCall {
	return tooltest.Call(id, "t"+tools.Separator+tool, args)
}

// newToolEnv serves a gateway whose model makes calls of the MCP test
// server "t", whose tools are run per approve.
func newToolEnv(t *testing.T, approve tools.Approve, calls ...agent.ToolCall) (*env, *mcptest.Server) {
	t.Helper()
	return newToolEnvAt(t, nil, "", approve, calls...)
}

// newToolEnvAt is newToolEnv whose session manager runs on clock (nil:
// the real one) and stores in the SQLite file path ("": a new one). Two
// of them on one file are two replicas.
func newToolEnvAt(t *testing.T, clock *clocktest.Clock, path string, approve tools.Approve, calls ...agent.ToolCall) (*env, *mcptest.Server) {
	t.Helper()
	return newToolEnvWith(t, clock, path, WSOptions{}, approve, calls...)
}

// newToolEnvWith is newToolEnvAt whose channel has options wsOpts.
func newToolEnvWith(t *testing.T, clock *clocktest.Clock, path string, wsOpts WSOptions, approve tools.Approve, calls ...agent.ToolCall) (*env, *mcptest.Server) {
	t.Helper()
	srv, set := tooltest.Server(t, mcpclient.ServerConfig{Approve: approve})
	if path == "" {
		path = filepath.Join(t.TempDir(), "g.db")
	}
	db, err := store.Open(context.Background(), store.DriverSQLite, path, store.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	opts := sessions.Options{Logger: quiet, Tools: mcpclient.Offer{Set: set},
		Policies: map[string]sessions.Policy{Channel: {MaxHistory: 50, Busy: sessions.BusyPolicy{Mode: sessions.BusyQueue}}}}
	if clock != nil {
		opts.Now, opts.After = clock.Now, clock.After
	}
	return serveEnv(t, db, sessions.New(db, tooltest.Asking(calls...), opts), wsOpts, false), srv
}

// until returns the frames up to and including the first of type typ,
// leaving out deltas and acks.
func (c *client) until(typ string) []map[string]any {
	c.t.Helper()
	var out []map[string]any
	for {
		f, err := c.next()
		if err != nil {
			c.t.Fatalf("waiting for %s: %v (after %v)", typ, err, out)
		}
		if f["type"] == "delta" || f["type"] == "ack" {
			continue
		}
		out = append(out, f)
		if f["type"] == typ {
			return out
		}
	}
}

// kinds is each frame's type, with its status when it has one.
func kinds(frames []map[string]any) []string {
	var out []string
	for _, f := range frames {
		k := f["type"].(string)
		if s, ok := f["status"].(string); ok && f["type"] != "reply" {
			k += ":" + s
		}
		out = append(out, k)
	}
	return out
}

// asked sends a message whose turn asks for a call, and returns the
// tool_request for it (after the tool frame saying the call is asking).
func asked(t *testing.T, c *client, id string) map[string]any {
	t.Helper()
	c.send(map[string]any{"type": "message", "id": id, "text": "count it"})
	if ack := c.expect("ack"); ack["id"] != id {
		t.Fatalf("ack = %v", ack)
	}
	frames := c.until("tool_request")
	if got := strings.Join(kinds(frames), " "); got != "tool:asking tool_request" {
		t.Fatalf("frames before the decision: %s (%v)", got, frames)
	}
	ask, req := frames[0], frames[1]
	if ask["id"] != req["id"] || num(req["id"]) <= 0 || ask["name"] != "t__counter" || ask["expires_at"] == nil {
		t.Fatalf("asking = %v, request = %v", ask, req)
	}
	return req
}

// checkRequest checks a tool_request for the counter call of message seq.
func checkRequest(t *testing.T, req map[string]any, seq int64) {
	t.Helper()
	if req["name"] != "t__counter" || req["arguments"] != `{"key":"k"}` || num(req["reply_to"]) != seq || req["call_id"] != "call-1" {
		t.Fatalf("tool_request = %v", req)
	}
	exp, err := time.Parse(time.RFC3339, req["expires_at"].(string))
	if err != nil || !exp.After(time.Now()) {
		t.Fatalf("tool_request expires_at = %v (%v)", req["expires_at"], err)
	}
}

// withoutRepeats drops a repeated tool_resolved (one comes from the
// decision, one from the turn that waited for it).
func withoutRepeats(frames []map[string]any) []map[string]any {
	var out []map[string]any
	seen := false
	for _, f := range frames {
		if f["type"] == "tool_resolved" {
			if seen {
				continue
			}
			seen = true
		}
		out = append(out, f)
	}
	return out
}

func TestToolFramesOfAnAutoCall(t *testing.T) {
	e, srv := newToolEnv(t, tools.ApproveAuto, toolCall("call-1", mcptest.Counter, map[string]string{"key": "k"}))
	c, _ := e.connect(map[string]any{"user": "ann"})
	c.send(map[string]any{"type": "message", "id": "c-1", "text": "count it"})
	frames := c.until("reply")
	if got := strings.Join(kinds(frames), " "); got != "tool:started tool:done reply" {
		t.Fatalf("frames = %s (%v)", got, frames)
	}
	started, done, reply := frames[0], frames[1], frames[2]
	for _, f := range []map[string]any{started, done} {
		if num(f["reply_to"]) != 1 || num(f["id"]) <= 0 || f["id"] != started["id"] || f["call_id"] != "call-1" || f["name"] != "t__counter" {
			t.Fatalf("tool frame = %v", f)
		}
	}
	if _, ok := started["duration_ms"]; ok {
		t.Fatalf("a started call has a duration: %v", started)
	}
	if d, ok := done["duration_ms"].(float64); !ok || d < 0 {
		t.Fatalf("done has no duration: %v", done)
	}
	if reply["reply_to"] != "c-1" || reply["text"] != "answer: 1" || reply["status"] != "ok" {
		t.Fatalf("reply = %v", reply)
	}
	if n := srv.Count(); n != 1 {
		t.Fatalf("the tool ran %d times", n)
	}
}

func TestToolDecisionAllowRunsOnce(t *testing.T) {
	e, srv := newToolEnv(t, tools.ApproveAsk, toolCall("call-1", mcptest.Counter, map[string]string{"key": "k"}))
	c, _ := e.connect(map[string]any{"user": "ann"})
	req := asked(t, c, "c-1")
	checkRequest(t, req, 1)
	if n := srv.Count(); n != 0 {
		t.Fatalf("the tool ran %d times before it was allowed", n)
	}
	id := num(req["id"])
	c.send(map[string]any{"type": "tool_decision", "id": id, "allow": true})
	frames := withoutRepeats(c.until("reply"))
	if got := strings.Join(kinds(frames), " "); got != "tool_resolved:started tool:started tool:done reply" &&
		got != "tool:started tool_resolved:started tool:done reply" {
		t.Fatalf("frames after allowing = %s (%v)", got, frames)
	}
	for _, f := range frames[:3] {
		if num(f["id"]) != id || num(f["reply_to"]) != 1 {
			t.Fatalf("frame of another call: %v", f)
		}
	}
	if r := frames[3]; r["reply_to"] != "c-1" || r["text"] != "answer: 1" {
		t.Fatalf("reply = %v", r)
	}
	if n := srv.Count(); n != 1 {
		t.Fatalf("the tool ran %d times, want once", n)
	}

	// Deciding again is refused, naming the call; nothing runs again.
	c.send(map[string]any{"type": "tool_decision", "id": id, "allow": true})
	for {
		f := c.expect2("error", "tool_resolved")
		if f["type"] == "tool_resolved" {
			continue // the second of the first decision
		}
		if f["code"] != "decided" || num(f["tool_id"]) != id || !strings.Contains(f["message"].(string), "decided already") {
			t.Fatalf("second decision: %v", f)
		}
		break
	}
	if n := srv.Count(); n != 1 {
		t.Fatalf("the tool ran %d times, want once", n)
	}
}

// expect2 returns the next frame of either type, skipping deltas and acks.
func (c *client) expect2(a, b string) map[string]any {
	c.t.Helper()
	for {
		f, err := c.next()
		if err != nil {
			c.t.Fatalf("waiting for %s or %s: %v", a, b, err)
		}
		switch f["type"] {
		case "delta", "ack":
			continue
		case a, b:
			return f
		}
		c.t.Fatalf("got %v, want a %s or %s frame", f, a, b)
	}
}

func TestToolDecisionDenyNeverRuns(t *testing.T) {
	e, srv := newToolEnv(t, tools.ApproveAsk, toolCall("call-1", mcptest.Counter, map[string]string{"key": "k"}))
	c, _ := e.connect(map[string]any{"user": "ann"})
	req := asked(t, c, "c-1")
	c.send(map[string]any{"type": "tool_decision", "id": num(req["id"]), "allow": false})
	frames := withoutRepeats(c.until("reply"))
	// The ask's end and the call's outcome come from two goroutines (the
	// decision's and the turn's), in either order; the reply after both.
	got := strings.Join(kinds(frames), " ")
	if got != "tool_resolved:denied tool:denied reply" && got != "tool:denied tool_resolved:denied reply" {
		t.Fatalf("frames after denying = %s (%v)", got, frames)
	}
	if r := frames[2]; r["text"] != "answer: "+sessions.ToolDeniedText {
		t.Fatalf("reply = %v", r)
	}
	if calls := srv.Calls(); len(calls) != 0 {
		t.Fatalf("a denied call ran: %v", calls)
	}
}

func TestToolDecisionOfAnotherUserIsRefused(t *testing.T) {
	e, srv := newToolEnv(t, tools.ApproveAsk, toolCall("call-1", mcptest.Counter, map[string]string{"key": "k"}))
	ann, _ := e.connect(map[string]any{"user": "ann"})
	bob, _ := e.connect(map[string]any{"user": "bob"})
	req := asked(t, ann, "c-1")
	id := num(req["id"])

	// Bob guesses ann's call id: refused, and it stays asking.
	bob.send(map[string]any{"type": "tool_decision", "id": id, "allow": true})
	if f := bob.expect("error"); f["code"] != "not_yours" || num(f["tool_id"]) != id {
		t.Fatalf("bob's decision: %v", f)
	}
	bob.send(map[string]any{"type": "tool_decision", "id": id + 1000, "allow": true})
	if f := bob.expect("error"); f["code"] != "not_found" || num(f["tool_id"]) != id+1000 {
		t.Fatalf("a decision of no call: %v", f)
	}
	// Bad decisions are bad frames; the connection stays up.
	for _, bad := range []string{
		`{"type":"tool_decision","allow":true}`,
		`{"type":"tool_decision","id":"` + req["call_id"].(string) + `","allow":true}`,
		`{"type":"tool_decision","id":1}`,
	} {
		bob.sendRaw(bad)
		if f := bob.expect("error"); f["code"] != "bad_frame" {
			t.Fatalf("%s: %v", bad, f)
		}
	}
	if n := srv.Count(); n != 0 {
		t.Fatalf("the tool ran %d times", n)
	}

	// Ann still decides it.
	ann.send(map[string]any{"type": "tool_decision", "id": id, "allow": true})
	if r := ann.until("reply"); r[len(r)-1]["text"] != "answer: 1" {
		t.Fatalf("ann's frames: %v", r)
	}
	// Bob heard nothing of ann's call: the first tool frames he gets are
	// of his own turn's.
	bob.send(map[string]any{"type": "message", "id": "b-1", "text": "hi"})
	frames := bob.until("tool_request")
	for _, f := range frames {
		if num(f["id"]) == id || num(f["reply_to"]) != 1 || f["type"] == "reply" {
			t.Fatalf("bob's frames: %v", frames)
		}
	}
	bob.send(map[string]any{"type": "tool_decision", "id": num(frames[len(frames)-1]["id"]), "allow": false})
	bob.until("reply")
}

func TestToolRequestAskedAgainAfterReconnect(t *testing.T) {
	e, srv := newToolEnv(t, tools.ApproveAsk, toolCall("call-1", mcptest.Counter, map[string]string{"key": "k"}))
	c, ready := e.connect(map[string]any{"user": "ann"})
	req := asked(t, c, "c-1")
	id := num(req["id"])
	c.c.Close()
	waitFor(t, func() bool { return e.ws.Connections() == 0 })

	// A new connection resumes the session: the ask comes again after
	// ready, and deciding there goes on with the turn.
	c2, ready2 := e.connect(map[string]any{"session": ready["session"], "last_seq": 1, "conversation": ready["conversation"]})
	if ready2["resumed"] != true {
		t.Fatalf("ready = %v", ready2)
	}
	again := c2.expect("tool_request")
	if num(again["id"]) != id {
		t.Fatalf("asked again for %v, want %d", again, id)
	}
	checkRequest(t, again, 1)
	c2.send(map[string]any{"type": "tool_decision", "id": id, "allow": true})
	frames := withoutRepeats(c2.until("reply"))
	if r := frames[len(frames)-1]; r["reply_to"] != "c-1" || r["text"] != "answer: 1" {
		t.Fatalf("frames after reconnecting = %v", frames)
	}
	if n := srv.Count(); n != 1 {
		t.Fatalf("the tool ran %d times, want once", n)
	}

	// Once decided, a hello asks nothing.
	c3, _ := e.connect(map[string]any{"session": ready["session"]})
	c3.send(map[string]any{"type": "message", "id": "c-2", "text": "count it"})
	f := c3.expect2("tool", "tool_request")
	if f["type"] != "tool" || num(f["id"]) == id {
		t.Fatalf("after ready: %v", f)
	}
	c3.send(map[string]any{"type": "tool_decision", "id": num(f["id"]), "allow": false})
	c3.until("reply")
}

// A decision on a call whose ask has expired is refused as decided, saying
// it expired, and the ask ends as expired for the client (the web page
// then shows the card as over instead of offering its buttons again);
// nothing runs.
func TestToolDecisionAfterTheExpiryIsRefusedAsExpired(t *testing.T) {
	clock := clocktest.New(time.Now())
	e, srv := newToolEnvAt(t, clock, "", tools.ApproveAsk, toolCall("call-1", mcptest.Counter, map[string]string{"key": "k"}))
	c, _ := e.connect(map[string]any{"user": "ann"})
	id := num(asked(t, c, "c-1")["id"])
	clock.Advance(sessions.DefaultApproveTimeout + time.Second)
	frames := c.until("reply")
	if got := strings.Join(kinds(frames), " "); got != "tool_resolved:expired tool:denied reply" && got != "tool:denied tool_resolved:expired reply" {
		t.Fatalf("frames after the expiry = %s (%v)", got, frames)
	}
	if r := frames[2]; r["text"] != "answer: "+sessions.ToolExpiredText {
		t.Fatalf("reply = %v", r)
	}

	for _, allow := range []bool{true, false} {
		c.send(map[string]any{"type": "tool_decision", "id": id, "allow": allow})
		if f := c.expect("tool_resolved"); num(f["id"]) != id || num(f["reply_to"]) != 1 || f["status"] != sessions.ToolExpired {
			t.Fatalf("the ask's end after a late decision: %v", f)
		}
		f := c.expect("error")
		if f["code"] != "decided" || num(f["tool_id"]) != id || !strings.Contains(f["message"].(string), "expired") {
			t.Fatalf("a decision after the expiry: %v", f)
		}
	}
	if n := srv.Count(); n != 0 {
		t.Fatalf("an expired call ran %d times", n)
	}
}

// Every error DecideTool names has its answer in decisionRefusals: none
// falls through to "internal, send it again", which would have a client
// offer the decision again for ever.
func TestEveryDecisionErrorHasItsAnswer(t *testing.T) {
	for _, want := range sessions.ToolDecisionErrors {
		found := false
		for _, r := range decisionRefusals {
			if r.err == want {
				found = true
				if f := r.frame(7); f.Code == errInternal.Code || !strings.Contains(f.Message, "7") {
					t.Errorf("%q is answered %+v", want, f)
				}
			}
		}
		if !found {
			t.Errorf("%q has no entry in decisionRefusals", want)
		}
	}
	if r := refusalOf(errors.New("database is down")); r.frame(7).Code != errInternal.Code || r.ends != "" {
		t.Errorf("a storage error is answered %+v", r.frame(7))
	}
}
