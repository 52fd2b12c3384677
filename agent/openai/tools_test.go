package openai_test

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/agent/openai"
	"github.com/chatgate/chatgate/internal/llmtest"
)

var weather = agent.Tool{
	Name:        "weather__forecast",
	Description: "The forecast for a city.",
	Parameters: map[string]any{
		"type":       "object",
		"properties": map[string]any{"city": map[string]any{"type": "string"}},
		"required":   []any{"city"},
	},
}

var clock = agent.Tool{Name: "clock__now", Parameters: map[string]any{"type": "object"}}

// body is a recorded request body, decoded.
func body(t *testing.T, raw string) map[string]any {
	t.Helper()
	var b map[string]any
	if err := json.Unmarshal([]byte(raw), &b); err != nil {
		t.Fatal(err)
	}
	return b
}

func modes(t *testing.T, f func(t *testing.T, stream bool)) {
	for _, stream := range []bool{false, true} {
		name := "json"
		if stream {
			name = "stream"
		}
		t.Run(name, func(t *testing.T) { f(t, stream) })
	}
}

func TestOpenAIOffersTools(t *testing.T) {
	modes(t, func(t *testing.T, stream bool) {
		llm, ag := llmtest.AgentWith(t, openai.Config{Stream: stream})
		if _, err := ag.Reply(context.Background(), agent.Request{Input: "rain?", Tools: []agent.Tool{weather, clock}}, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := ag.Reply(context.Background(), agent.Request{Input: "hi"}, nil); err != nil {
			t.Fatal(err)
		}
		raw := llm.Raw()
		b := body(t, raw[0])
		want := []any{
			map[string]any{"type": "function", "function": map[string]any{
				"name": "weather__forecast", "description": "The forecast for a city.",
				"parameters": weather.Parameters,
			}},
			// No description: none is sent.
			map[string]any{"type": "function", "function": map[string]any{"name": "clock__now", "parameters": clock.Parameters}},
		}
		if !reflect.DeepEqual(b["tools"], want) {
			t.Fatalf("tools sent = %#v\nwant %#v", b["tools"], want)
		}
		if _, ok := b["tool_choice"]; ok {
			t.Fatalf("tool_choice sent while tools remain: %v", b["tool_choice"])
		}
		// Without tools the body is what it was before tools existed.
		for _, key := range []string{"tools", "tool_choice", "parallel_tool_calls"} {
			if strings.Contains(raw[1], `"`+key+`"`) {
				t.Fatalf("a request without tools has %q: %s", key, raw[1])
			}
		}
		if got := llm.Received()[1].Tools; got != nil {
			t.Fatalf("tools read from a request without tools = %v", got)
		}
	})
}

// Two calls asked for at once, with arguments long enough to be streamed
// in several pieces each, come back whole, in order, with their ids; only
// the text before them is streamed to onDelta.
func TestOpenAIParallelToolCalls(t *testing.T) {
	calls := []llmtest.ToolCall{
		{ID: "call_a", Name: "weather__forecast", Arguments: `{"city":"Oslo","days":3,"units":"metric"}`},
		{ID: "call_b", Name: "weather__forecast", Arguments: `{"city":"Zürich — Hauptbahnhof","days":1}`},
	}
	modes(t, func(t *testing.T, stream bool) {
		llm, ag := llmtest.AgentWith(t, openai.Config{Stream: stream})
		llm.Script(llmtest.Queue(llmtest.Answer{
			Text:      "Let me look. ",
			ToolCalls: calls,
			Usage:     &llmtest.Usage{PromptTokens: 40, CompletionTokens: 9},
		}))
		var deltas []string
		r, err := ag.Reply(context.Background(), agent.Request{Input: "Oslo or Zürich?", Tools: []agent.Tool{weather}},
			func(d string) { deltas = append(deltas, d) })
		if err != nil {
			t.Fatal(err)
		}
		want := []agent.Message{{Role: agent.RoleAssistant, Content: "Let me look. ", ToolCalls: []agent.ToolCall{
			{ID: "call_a", Name: "weather__forecast", Arguments: calls[0].Arguments},
			{ID: "call_b", Name: "weather__forecast", Arguments: calls[1].Arguments},
		}}}
		if !reflect.DeepEqual(r.Messages, want) {
			t.Fatalf("messages = %+v\nwant %+v", r.Messages, want)
		}
		if strings.Join(deltas, "") != "Let me look. " {
			t.Fatalf("deltas = %q: want the text only", deltas)
		}
		if r.Usage != (agent.Usage{PromptTokens: 40, CompletionTokens: 9, TotalTokens: 49}) {
			t.Fatalf("usage = %+v", r.Usage)
		}
	})
}

func TestOpenAIToolCallWithoutText(t *testing.T) {
	modes(t, func(t *testing.T, stream bool) {
		llm, ag := llmtest.AgentWith(t, openai.Config{Stream: stream})
		llm.Script(llmtest.ToolThenAnswer("clock__now", `{}`))
		var deltas []string
		r, err := ag.Reply(context.Background(), agent.Request{Input: "time?", Tools: []agent.Tool{clock}},
			func(d string) { deltas = append(deltas, d) })
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Messages) != 1 || r.Text() != "" || len(r.Messages[0].ToolCalls) != 1 {
			t.Fatalf("messages = %+v", r.Messages)
		}
		if tc := r.Messages[0].ToolCalls[0]; tc.ID == "" || tc.Name != "clock__now" || tc.Arguments != `{}` {
			t.Fatalf("call = %+v", tc)
		}
		if len(deltas) != 0 {
			t.Fatalf("deltas of a tool call = %q", deltas)
		}
	})
}

// A turn of two rounds as the gateway runs it: each round's assistant
// message and tool results go back after the inputs, in order, and the
// last result reaches the model and comes back in its answer.
func TestOpenAISendsTheTurn(t *testing.T) {
	modes(t, func(t *testing.T, stream bool) {
		llm, ag := llmtest.AgentWith(t, openai.Config{Stream: stream})
		llm.Script(llmtest.Rounds(
			[]llmtest.ToolCall{{Name: "weather__forecast", Arguments: `{"city":"Oslo"}`}, {Name: "clock__now", Arguments: `{}`}},
			[]llmtest.ToolCall{{Name: "weather__forecast", Arguments: `{"city":"Bergen"}`}},
		))
		req := agent.Request{
			Instructions: "be brief",
			History:      []agent.Message{{Role: agent.RoleUser, Content: "hello"}, {Role: agent.RoleAssistant, Content: "hi"}},
			Earlier:      []string{"a question"},
			Input:        "rain in Oslo, or Bergen?",
			Tools:        []agent.Tool{weather, clock},
		}
		results := map[string]string{`{"city":"Oslo"}`: "rain", `{}`: "09:00", `{"city":"Bergen"}`: "more rain"}
		var r agent.Reply
		for round := 0; ; round++ {
			var err error
			r, err = ag.Reply(context.Background(), req, nil)
			if err != nil {
				t.Fatal(err)
			}
			m := r.Messages[0]
			if len(m.ToolCalls) == 0 {
				break
			}
			if round == 2 {
				t.Fatal("the model is still calling tools after two rounds")
			}
			req.Turn = append(req.Turn, m)
			for _, tc := range m.ToolCalls {
				req.Turn = append(req.Turn, agent.Message{Role: agent.RoleTool, ToolCallID: tc.ID, Content: results[tc.Arguments]})
			}
		}
		if r.Text() != llmtest.Done("more rain") {
			t.Fatalf("answer = %q", r.Text())
		}
		got := llm.Received()
		if len(got) != 3 {
			t.Fatalf("%d requests, want 3", len(got))
		}
		last := got[2].Messages
		var roles []string
		for _, m := range last {
			roles = append(roles, m.Role)
		}
		if strings.Join(roles, ",") != "system,user,assistant,user,user,assistant,tool,tool,assistant,tool" {
			t.Fatalf("roles = %v", roles)
		}
		first, second := last[5], last[8]
		if len(first.ToolCalls) != 2 || first.ToolCalls[0].Name != "weather__forecast" || first.ToolCalls[1].Name != "clock__now" ||
			len(second.ToolCalls) != 1 || second.ToolCalls[0].Arguments != `{"city":"Bergen"}` {
			t.Fatalf("assistant calls sent = %+v, %+v", first.ToolCalls, second.ToolCalls)
		}
		for i, want := range []struct {
			msg  llmtest.Message
			call llmtest.ToolCall
			text string
		}{{last[6], first.ToolCalls[0], "rain"}, {last[7], first.ToolCalls[1], "09:00"}, {last[9], second.ToolCalls[0], "more rain"}} {
			if want.msg.ToolCallID != want.call.ID || want.msg.Text() != want.text {
				t.Fatalf("tool message %d = %+v, want the answer %q to %s", i, want.msg, want.text, want.call.ID)
			}
		}
		if first.ToolCalls[0].ID == first.ToolCalls[1].ID || first.ToolCalls[0].ID == second.ToolCalls[0].ID {
			t.Fatalf("call ids repeat: %+v %+v", first.ToolCalls, second.ToolCalls)
		}
	})
}

// Out of tool rounds: the model is told tool_choice none, with the tools
// still listed since the turn's messages call them, and answers in text.
func TestOpenAINoMoreTools(t *testing.T) {
	modes(t, func(t *testing.T, stream bool) {
		llm, ag := llmtest.AgentWith(t, openai.Config{Stream: stream})
		llm.Script(llmtest.AlwaysTool("clock__now", `{}`))
		req := agent.Request{Input: "time?", Tools: []agent.Tool{clock}}
		r, err := ag.Reply(context.Background(), req, nil)
		if err != nil {
			t.Fatal(err)
		}
		call := r.Messages[0].ToolCalls[0]
		req.Turn = []agent.Message{r.Messages[0], {Role: agent.RoleTool, ToolCallID: call.ID, Content: "09:00"}}
		req.NoMoreTools = true
		r, err = ag.Reply(context.Background(), req, nil)
		if err != nil {
			t.Fatal(err)
		}
		if r.Text() != llmtest.Reply || len(r.Messages[0].ToolCalls) != 0 {
			t.Fatalf("reply = %+v", r.Messages)
		}
		got := llm.Received()[1]
		if got.ToolChoice != "none" || !reflect.DeepEqual(got.Tools, []string{"clock__now"}) {
			t.Fatalf("tool_choice %q, tools %v", got.ToolChoice, got.Tools)
		}
		if c := body(t, got.Raw)["tool_choice"]; c != "none" {
			t.Fatalf("tool_choice on the wire = %#v", c)
		}
		if llm.Received()[0].ToolChoice != "" {
			t.Fatalf("tool_choice while tools remain = %q", llm.Received()[0].ToolChoice)
		}
	})
}

// NoMoreTools without tools changes nothing: there is no tool to refuse.
func TestOpenAINoMoreToolsWithoutTools(t *testing.T) {
	llm, ag := llmtest.AgentWith(t, openai.Config{})
	if _, err := ag.Reply(context.Background(), agent.Request{Input: "x", NoMoreTools: true}, nil); err != nil {
		t.Fatal(err)
	}
	if raw := llm.Raw()[0]; strings.Contains(raw, "tool") {
		t.Fatalf("body = %s", raw)
	}
}
