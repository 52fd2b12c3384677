package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chatgate/chatgate/cmd/chatgate-mcp-demo/demo"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/tools"
	"github.com/chatgate/chatgate/tools/mcpclient"
)

// toolGapResult is the gateway's own time between a tool's result and the
// model request that carries it, over turns of one tool round each: from
// the moment the MCP client has the result (the call returns, in this
// process) to the moment the model server receives the next request. In
// between: the result kept, the request built and sent; the round's
// store overlaps the model call (the sessions package's roundStore).
type toolGapResult struct {
	Store     string  `json:"store"`
	Turns     int     `json:"turns"`
	P50Millis float64 `json:"p50_ms"`
	P99Millis float64 `json:"p99_ms"`
	Errors    int     `json:"errors"`
}

// benchTools is an MCP server in the process (the demo's tools, and
// "stamp", which answers at once, over the SDK's in-memory transport) as
// the tool server "demo", every tool run without asking.
func benchTools(ctx context.Context) (mcpclient.Offer, func(), error) {
	srv := demo.New(demo.Options{})
	mcp.AddTool(srv, &mcp.Tool{Name: "stamp", Description: "Answers at once."},
		func(ctx context.Context, req *mcp.CallToolRequest, in struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "stamped"}}}, nil, nil
		})
	st, ct := mcp.NewInMemoryTransports()
	sctx, stop := context.WithCancel(context.Background())
	ss, err := srv.Connect(sctx, st, nil)
	if err != nil {
		stop()
		return mcpclient.Offer{}, nil, err
	}
	set := mcpclient.New([]mcpclient.ServerConfig{{Name: "demo", Transport: ct, Approve: tools.ApproveAuto}}, discard)
	set.Start(context.Background())
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := set.WaitListed(wctx, "demo"); err != nil {
		set.Close()
		ss.Close()
		stop()
		return mcpclient.Offer{}, nil, err
	}
	return mcpclient.Offer{Set: set}, func() { set.Close(); ss.Close(); stop() }, nil
}

// toolGap measures toolGapResult on driver: one client, o.messages turns
// (at least 50), each asking the model, which calls the tool "stamp" and
// then answers.
func toolGap(ctx context.Context, driver string, o options) (toolGapResult, error) {
	var mu sync.Mutex
	var returned time.Time
	var gaps []time.Duration
	tb, stopTools, err := benchTools(ctx)
	if err != nil {
		return toolGapResult{}, err
	}
	defer stopTools()
	timed := timedTools{Offer: tb, returned: func() {
		mu.Lock()
		returned = time.Now()
		mu.Unlock()
	}}
	llm, stopLLM, err := toolCallingLLM(func(at time.Time) {
		mu.Lock()
		if !returned.IsZero() {
			gaps = append(gaps, at.Sub(returned))
			returned = time.Time{}
		}
		mu.Unlock()
	})
	if err != nil {
		return toolGapResult{}, err
	}
	defer stopLLM()
	db, closeDB, err := openStore(ctx, driver, o)
	if err != nil {
		return toolGapResult{}, err
	}
	url, stop, err := serveGatewayWith(db, closeDB, false, benchOpenAI(llm), sessions.Policy{MaxHistory: ttfdMaxHistory}, timed)
	if err != nil {
		return toolGapResult{}, err
	}
	defer stop()
	turns := o
	turns.messages = max(o.messages, 50)
	l := driveFirstDelta(ctx, url, 1, turns)
	mu.Lock()
	defer mu.Unlock()
	r := toolGapResult{Store: driver, Turns: len(gaps), Errors: l.ErrorCount}
	if len(gaps) > 0 {
		slices.Sort(gaps)
		ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
		r.P50Millis, r.P99Millis = ms(gaps[len(gaps)/2]), ms(gaps[min(len(gaps)-1, len(gaps)*99/100)])
	}
	return r, nil
}

// timedTools tells returned when each call's result is back.
type timedTools struct {
	mcpclient.Offer
	returned func()
}

func (t timedTools) Call(ctx context.Context, name, arguments, key string) (tools.Result, error) {
	res, err := t.Offer.Call(ctx, name, arguments, key)
	t.returned()
	return res, err
}

// toolCallingLLM is a streaming model server that answers a request whose
// last message is not a tool result with a call of demo__stamp, and one
// whose last message is with a short text; arrived is told when each of
// the latter arrived (before its body is parsed).
func toolCallingLLM(arrived func(time.Time)) (string, func(), error) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		at := time.Now()
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		flush := w.(http.Flusher).Flush
		var req struct {
			Messages []struct {
				Role string `json:"role"`
			} `json:"messages"`
		}
		json.Unmarshal(body, &req)
		if n := len(req.Messages); n > 0 && req.Messages[n-1].Role == "tool" {
			arrived(at)
			for _, part := range []string{"Stamped", " and done."} {
				sseChunk(w, contentDelta(part), "")
				flush()
			}
			sseChunk(w, "{}", "stop")
		} else {
			sseChunk(w, `{"role":"assistant","tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"demo__stamp","arguments":"{}"}}]}`, "")
			sseChunk(w, "{}", "tool_calls")
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
		flush()
	})
	return serveModel(h)
}
