// Package tooltest has what tests of the tool loop share across
// packages: a model in the process that asks for tools by a script, and
// the MCP test server (internal/mcptest) connected as the tool server
// "t" over the SDK's in-memory transport.
package tooltest

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/mcptest"
	"github.com/chatgate/chatgate/tools"
	"github.com/chatgate/chatgate/tools/mcpclient"
)

// Model is an agent that asks for tools by a script: given a request, the
// calls to ask for next (none: it answers "answer: " and every result of
// the turn so far, joined by " | "). Told to answer without tools, it
// answers.
type Model struct {
	Script func(req agent.Request) []agent.ToolCall
	// Answered, when set, hears of each answer without calls, by the
	// number of the request it answers (1 the first).
	Answered chan int

	mu   sync.Mutex
	reqs []agent.Request
}

// Asking is a model that asks for calls in each turn's first round.
func Asking(calls ...agent.ToolCall) *Model { return &Model{Script: Once(calls...)} }

// Once is a script that asks for calls in a turn's first round, then
// answers.
func Once(calls ...agent.ToolCall) func(agent.Request) []agent.ToolCall {
	return func(req agent.Request) []agent.ToolCall {
		if len(req.Turn) == 0 {
			return calls
		}
		return nil
	}
}

// Call is a call of tool name (server__tool) with args as JSON.
func Call(id, name string, args any) agent.ToolCall {
	b, _ := json.Marshal(args)
	return agent.ToolCall{ID: id, Name: name, Arguments: string(b)}
}

// Name implements agent.Agent.
func (*Model) Name() string { return "tool-model" }

// Model implements agent.Agent.
func (*Model) Model() string { return "tool-model" }

// Reply implements agent.Agent.
func (tm *Model) Reply(ctx context.Context, req agent.Request, onDelta func(string)) (agent.Reply, error) {
	tm.mu.Lock()
	tm.reqs = append(tm.reqs, req)
	n := len(tm.reqs)
	tm.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return agent.Reply{}, err
	}
	var calls []agent.ToolCall
	if !req.NoMoreTools {
		calls = tm.Script(req)
	}
	if len(calls) > 0 {
		return agent.Reply{Messages: []agent.Message{{Role: agent.RoleAssistant, ToolCalls: calls}},
			Usage: agent.Usage{PromptTokens: 3, CompletionTokens: 2, TotalTokens: 5}}, nil
	}
	var results []string
	for _, m := range req.Turn {
		if m.Role == agent.RoleTool {
			results = append(results, m.Content)
		}
	}
	text := "answer: " + strings.Join(results, " | ")
	if onDelta != nil {
		onDelta(text)
	}
	if tm.Answered != nil {
		tm.Answered <- n
	}
	return agent.Reply{Messages: []agent.Message{{Role: agent.RoleAssistant, Content: text}}}, nil
}

// Requests are the requests so far.
func (tm *Model) Requests() []agent.Request {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	return slices.Clone(tm.reqs)
}

// Server is the MCP test server as the tool server "t" with cfg's rules
// (approve: auto unless cfg says), its tools listed; both stop when the
// test ends.
func Server(t testing.TB, cfg mcpclient.ServerConfig) (*mcptest.Server, *mcpclient.Set) {
	t.Helper()
	srv, tr := mcptest.InMemory(t)
	cfg.Name, cfg.Transport = "t", tr
	if cfg.Approve == "" {
		cfg.Approve = tools.ApproveAuto
	}
	set := mcpclient.New([]mcpclient.ServerConfig{cfg}, slog.New(slog.DiscardHandler))
	set.Start(context.Background())
	t.Cleanup(set.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := set.WaitListed(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	return srv, set
}
