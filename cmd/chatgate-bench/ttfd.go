package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	rtrace "runtime/trace"
	"strconv"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/agent/openai"
	"github.com/chatgate/chatgate/gateway"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/store"
)

// ttfdResult is time to first delta at one client count: a streaming
// model server hit directly through the gateway's own OpenAI backend,
// against the same server through the gateway (a WebSocket message sent
// → its first delta frame). Added is what the gateway puts on top.
type ttfdResult struct {
	Store   string     `json:"store"`
	Clients int        `json:"clients"`
	Direct  loadResult `json:"direct"`
	Gateway loadResult `json:"gateway"`
	// AddedP50Millis and AddedP99Millis are gateway minus direct.
	AddedP50Millis float64 `json:"added_p50_ms"`
	AddedP99Millis float64 `json:"added_p99_ms"`
	// Compaction: the gateway sums up what falls out of its window after
	// every turn, on the same model server, while the next turn runs.
	Compaction bool `json:"compaction,omitempty"`
	// Tools: the gateway offers the model this many tools (an MCP server
	// in the process), which it never calls.
	Tools int `json:"tools,omitempty"`
	// InTurn: one client asking directly and through the gateway in
	// turn, question by question (drivePaired), instead of one block of
	// questions after the other.
	InTurn bool `json:"in_turn,omitempty"`
	// Burst: the model server sends the rest of each answer at once after
	// its first chunk, where the other rows' server spaces its chunks
	// (-llm-chunk-gap).
	Burst bool `json:"burst,omitempty"`
}

// ttfdClients are the client counts of the time-to-first-delta rows.
var ttfdClients = []int{1, 50}

// ttfdMaxHistory is the gateway's max_history in these rows; the direct
// callers send as much history.
const ttfdMaxHistory = 20

// streamingLLM is an OpenAI-compatible chat-completions server on
// loopback that streams every answer as server-sent chunks: the first
// after firstChunk (at once when 0), then four more and the usage, each
// flushed on its own gap after the one before (all at once when 0), as a
// model server streams tokens while it makes them.
func streamingLLM(firstChunk, gap time.Duration) (baseURL string, stop func(), err error) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		flush, ok := startStream(w, r, firstChunk)
		if !ok {
			return
		}
		sseChunk(w, contentDelta("Hello"), "")
		flush()
		streamAnswer(r.Context(), w, flush, gap, ", this", " is", " a streamed", " answer.")
	})
	return serveModel(h)
}

// serveModel serves a model server's handler on loopback and returns its
// base URL (…/v1) and how to stop it.
func serveModel(h http.Handler) (baseURL string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	return "http://" + ln.Addr().String() + "/v1", func() { srv.Close() }, nil
}

// sseChunk writes one server-sent chat.completion.chunk with delta (its
// JSON) and finish ("" while the answer goes on).
func sseChunk(w io.Writer, delta, finish string) {
	fin := "null"
	if finish != "" {
		fin = strconv.Quote(finish)
	}
	fmt.Fprintf(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"mock\",\"choices\":[{\"index\":0,\"delta\":%s,\"finish_reason\":%s}]}\n\n", delta, fin)
}

// streamAnswer streams parts of the answer, a chunk each, then its end:
// the stop, the usage and [DONE]; each gap after the chunk before it. It
// stops early when ctx ends (the client left).
func streamAnswer(ctx context.Context, w io.Writer, flush func(), gap time.Duration, parts ...string) {
	for _, part := range parts {
		if !pause(ctx, gap) {
			return
		}
		sseChunk(w, contentDelta(part), "")
		flush()
	}
	if !pause(ctx, gap) {
		return
	}
	sseChunk(w, "{}", "stop")
	fmt.Fprint(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"mock\",\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":5,\"total_tokens\":17}}\n\n")
	fmt.Fprint(w, "data: [DONE]\n\n")
	flush()
}

// pause waits d (not at all when 0); false when ctx ended first.
func pause(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// contentDelta is the delta of a piece of the answer's text.
func contentDelta(text string) string { return fmt.Sprintf(`{"role":"assistant","content":%q}`, text) }

// benchOpenAI is the OpenAI backend as the gateway builds it from a
// bot.yaml with defaults (streaming, 2 retries, the library's HTTP
// client), pointed at baseURL. Direct runs and the gateway use one each.
func benchOpenAI(baseURL string) *openai.Backend {
	return openai.New(openai.Config{BaseURL: baseURL, APIKey: "bench", Model: "mock",
		Timeout: time.Minute, MaxRetries: 2, Stream: true})
}

// firstDelta measures time to first delta on driver at each of
// ttfdClients: direct, then through a gateway whose WebSocket channel
// runs turns on the same kind of server.
func firstDelta(ctx context.Context, driver string, o options) ([]ttfdResult, error) {
	llm, url, stop, err := ttfdGateway(ctx, driver, o, o.chunkGap)
	if err != nil {
		return nil, err
	}
	defer stop()
	direct := benchOpenAI(llm)
	var out []ttfdResult
	row := func(n int, url string, compaction bool, tools int) {
		r := ttfdResult{Store: driver, Clients: n, Direct: driveDirect(ctx, direct, n, o), Gateway: driveFirstDelta(ctx, url, n, o),
			Compaction: compaction, Tools: tools}
		r.setAdded()
		out = append(out, r)
	}
	for _, n := range ttfdClients {
		row(n, url, false, 0)
	}
	// One client again, asking both sides in turn: each message then
	// reaches a gateway that sat idle through a direct call, as a user's
	// next message usually does.
	r := ttfdResult{Store: driver, Clients: 1, InTurn: true}
	r.Direct, r.Gateway = drivePaired(ctx, direct, url, o)
	r.setAdded()
	out = append(out, r)
	// The same, 1 client, with tools offered and never called: the
	// request carries their definitions; nothing else changes.
	tb, stopTools, err := benchTools(ctx)
	if err != nil {
		return nil, err
	}
	defer stopTools()
	tdb, closeT, err := openStore(ctx, driver, o)
	if err != nil {
		return nil, err
	}
	turl, stopT, err := serveGatewayWith(tdb, closeT, false, benchOpenAI(llm), sessions.Policy{MaxHistory: ttfdMaxHistory}, tb)
	if err != nil {
		return nil, err
	}
	defer stopT()
	row(1, url, false, 0) // beside it, again without: the pair is alternated
	row(1, turl, false, len(tb.Offered(gateway.Channel, "")))
	if driver == store.DriverSQLite {
		// The same, 1 client, with compaction on: past the first 10 turns
		// every turn's reply is followed by a summary call.
		cdb, closeC, err := openStore(ctx, driver, o)
		if err != nil {
			return nil, err
		}
		curl, stopC, err := serveGateway(cdb, closeC, false, benchOpenAI(llm),
			sessions.Policy{MaxHistory: ttfdMaxHistory, Compaction: sessions.CompactionPolicy{Enabled: true}})
		if err != nil {
			return nil, err
		}
		defer stopC()
		row(1, curl, true, 0)
	}
	if o.chunkGap > 0 {
		// 1 client on a model server that sends the rest of each answer
		// at once after its first chunk: the gateway then parses the whole
		// answer and stores the reply right behind the first delta, on
		// the same cores as the delta's way out.
		bllm, burl, stopB, err := ttfdGateway(ctx, driver, o, 0)
		if err != nil {
			return nil, err
		}
		defer stopB()
		r := ttfdResult{Store: driver, Clients: 1, Burst: true, Direct: driveDirect(ctx, benchOpenAI(bllm), 1, o), Gateway: driveFirstDelta(ctx, burl, 1, o)}
		r.setAdded()
		out = append(out, r)
	}
	return out, nil
}

// ttfdGateway starts a model server child whose chunks after the first
// come gap apart, and a gateway on a store of its own that calls it; it
// returns the model server's base URL, the gateway's WebSocket URL, and
// how to stop both.
func ttfdGateway(ctx context.Context, driver string, o options, gap time.Duration) (llm, url string, stop func(), err error) {
	llm, stopLLM, err := childLLM(ctx, o.firstChunk, gap, false)
	if err != nil {
		return "", "", nil, err
	}
	db, closeDB, err := openStore(ctx, driver, o)
	if err != nil {
		stopLLM()
		return "", "", nil, err
	}
	url, stopGW, err := serveGateway(db, closeDB, false, benchOpenAI(llm), sessions.Policy{MaxHistory: ttfdMaxHistory})
	if err != nil {
		stopLLM()
		return "", "", nil, err
	}
	return llm, url, func() { stopGW(); stopLLM() }, nil
}

// setAdded sets what the gateway added: its times minus the direct ones.
func (r *ttfdResult) setAdded() {
	r.AddedP50Millis = r.Gateway.P50Millis - r.Direct.P50Millis
	r.AddedP99Millis = r.Gateway.P99Millis - r.Direct.P99Millis
}

// An asker times one question, from its start to the first delta that
// answers it, and reads on to its end; ok is false for a question that
// failed or streamed nothing, fatal when the asker cannot go on.
type asker func(ctx context.Context, m int) (first time.Duration, ok, fatal bool)

// directAsker calls the backend as caller i. It keeps its conversation
// as a client of the model would, and as the gateway does: its history,
// trimmed to the gateway's max_history (ttfdMaxHistory), goes with every
// question, so that both sides send the model the same request.
func directAsker(ag agent.Agent, i int) asker { return directAskerSaying(ag, i, nil) }

// directAskerSaying is directAsker whose question m says
// texts[m % len(texts)] ("hello gateway" when there are none).
func directAskerSaying(ag agent.Agent, i int, texts []string) asker {
	var history []agent.Message
	return func(ctx context.Context, m int) (time.Duration, bool, bool) {
		var first time.Duration
		t0 := time.Now()
		mark(ctx, "direct asked", m)
		req := agent.Request{SessionKey: fmt.Sprint("bench-", i), History: history, Input: question(texts, m)}
		reply, err := ag.Reply(ctx, req, func(string) {
			if first == 0 {
				first = time.Since(t0)
				mark(ctx, "direct first delta", m)
			}
		})
		if err != nil || first == 0 {
			return 0, false, false
		}
		history = append(history, agent.Message{Role: agent.RoleUser, Content: req.Input}, agent.Message{Role: agent.RoleAssistant, Content: reply.Text()})
		if len(history) > ttfdMaxHistory {
			history = history[len(history)-ttfdMaxHistory:]
		}
		return first, true, false
	}
}

// gatewayAsker connects WebSocket client i to the gateway at url; each
// question is a message, timed from its send to the first delta frame
// that answers it, and the client reads on to the reply. A reply without
// a delta before it is an error.
func gatewayAsker(ctx context.Context, url string, i int) (asker, func(), error) {
	return gatewayAskerAs(ctx, url, fmt.Sprintf("ttfd-%d-%s", i, shortID()), nil)
}

// gatewayAskerAs is gatewayAsker as user, whose question m says
// texts[m % len(texts)] ("hello gateway" when there are none).
func gatewayAskerAs(ctx context.Context, url, user string, texts []string) (asker, func(), error) {
	c, err := dialClient(ctx, url, user)
	if err != nil {
		return nil, nil, err
	}
	return func(ctx context.Context, m int) (time.Duration, bool, bool) {
		id := fmt.Sprint("m", m)
		t0 := time.Now()
		mark(ctx, "gateway asked", m)
		if c.WriteJSON(map[string]any{"type": "message", "id": id, "text": question(texts, m)}) != nil {
			return 0, false, true
		}
		var first time.Duration
		for {
			f, ok := readFrame(c)
			if !ok {
				return 0, false, true
			}
			if f["type"] == "delta" && f["reply_to"] == id && first == 0 {
				first = time.Since(t0)
				mark(ctx, "gateway first delta", m)
			}
			if f["type"] == "reply" && f["reply_to"] == id {
				break
			}
		}
		return first, first != 0, false
	}, func() { c.Close() }, nil
}

// question is what question m of texts says: texts[m % len(texts)], or
// "hello gateway" when there are none.
func question(texts []string, m int) string {
	if len(texts) == 0 {
		return "hello gateway"
	}
	return texts[m%len(texts)]
}

// mark logs a question's moment (what, for question m) to the execution
// trace of a run with -trace, where `go tool trace` shows it among the
// goroutines' events: the span between "gateway asked" and "gateway first
// delta" of one question is its time to first delta. Nothing is built
// when no trace is being taken.
func mark(ctx context.Context, what string, m int) {
	if rtrace.IsEnabled() {
		rtrace.Log(ctx, "ttfd", what+" "+strconv.Itoa(m))
	}
}

// ask runs one client's questions until o.messages or deadline; nil when
// it gave up.
func ask(ctx context.Context, a asker, o options, deadline time.Time, fail func()) []time.Duration {
	mine := make([]time.Duration, 0, o.messages)
	for m := 0; m < o.messages && time.Now().Before(deadline); m++ {
		first, ok, fatal := a(ctx, m)
		if fatal {
			fail()
			return nil
		}
		if !ok {
			fail()
			continue
		}
		mine = append(mine, first)
	}
	return mine
}

// driveDirect runs n callers of the backend, each asking one question
// at a time (directAsker). Bounded like drive.
func driveDirect(ctx context.Context, ag agent.Agent, n int, o options) loadResult {
	return runClients(ctx, n, o, func(ctx context.Context, i int, deadline time.Time, fail func()) []time.Duration {
		return ask(ctx, directAsker(ag, i), o, deadline, fail)
	})
}

// driveFirstDelta runs n WebSocket clients against the gateway at url,
// each sending one message at a time (gatewayAsker). Bounded like drive.
func driveFirstDelta(ctx context.Context, url string, n int, o options) loadResult {
	return runClients(ctx, n, o, func(ctx context.Context, i int, deadline time.Time, fail func()) []time.Duration {
		a, closeClient, err := gatewayAsker(ctx, url, i)
		if err != nil {
			fail()
			return nil
		}
		defer closeClient()
		return ask(ctx, a, o, deadline, fail)
	})
}

// drivePaired is one client asking directly and through the gateway in
// turn, question by question, so that whatever the machine does meanwhile
// (another process waking, the database's own work) falls on both sides
// alike rather than on whichever block of questions it came in. Bounded
// by o.messages questions a side and twice o.duration.
func drivePaired(ctx context.Context, ag agent.Agent, url string, o options) (direct, gw loadResult) {
	ctx, cancel := context.WithTimeout(ctx, 2*o.duration+10*time.Second)
	defer cancel()
	deadline := time.Now().Add(2 * o.duration)
	start := time.Now()
	var dLat, gLat []time.Duration
	dErr, gErr := 0, 0
	defer func() {
		elapsed := time.Since(start)
		direct, gw = summarize(1, dLat, elapsed, dErr), summarize(1, gLat, elapsed, gErr)
	}()
	g, closeClient, err := gatewayAsker(ctx, url, 0)
	if err != nil {
		gErr++
		return
	}
	defer closeClient()
	d := directAsker(ag, 0)
	for m := 0; m < o.messages && time.Now().Before(deadline); m++ {
		if first, ok, _ := d(ctx, m); ok {
			dLat = append(dLat, first)
		} else {
			dErr++
		}
		first, ok, fatal := g(ctx, m)
		switch {
		case fatal:
			gErr++
			return
		case ok:
			gLat = append(gLat, first)
		default:
			gErr++
		}
	}
	return
}

// startStream answers r as an event stream and waits firstChunk before
// its first chunk; false when the client left meanwhile.
func startStream(w http.ResponseWriter, r *http.Request, firstChunk time.Duration) (flush func(), ok bool) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	if !pause(r.Context(), firstChunk) {
		return nil, false
	}
	return w.(http.Flusher).Flush, true
}
