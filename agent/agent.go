// Package agent defines what the gateway asks of an LLM agent: the Agent
// port, the messages, requests and replies it carries, the token
// estimates, and echo (no model, for running without a key). It imports
// no model SDK: a backend that talks to a server (package openai, any
// OpenAI-compatible chat-completions server) implements Agent apart, and
// only the gateway's wiring chooses one.
package agent

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Roles of a message.
const (
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
	// RoleSystem is context the gateway gives the model within the
	// history: the summary of the earlier conversation (compaction).
	RoleSystem = "system"
)

// ToolCall is a function call an assistant message asks for.
type ToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Message is one message of a transcript.
type Message struct {
	Role       string
	Content    string
	ToolCalls  []ToolCall // assistant messages only
	ToolCallID string     // tool messages only: the call this answers
	// Attachments of a user message (images, files), with an image's
	// bytes when the agent reads images.
	Attachments []Attachment
}

// Tool is a function the model may call: an MCP server's tool, offered
// under the name server__tool with its JSON Schema.
type Tool struct {
	Name        string
	Description string
	Parameters  map[string]any // JSON Schema of the arguments (an object)
}

// Request is everything an agent is given for one turn. The gateway sends the
// whole history every time and never relies on state kept upstream.
type Request struct {
	SessionKey   string
	Instructions string    // system prompt, rebuilt for every call
	History      []Message // prior messages, already trimmed to max_history
	// Earlier are the turn's other new user messages, oldest first, when
	// several arrived together and are answered by one call (a burst);
	// Input is the newest. Each is sent as a user message of its own.
	Earlier []string
	Input   string // the new user message (the newest of a burst)
	// InputAttachments are the attachments of each of Inputs(), in the
	// same order; nil, or shorter, when the last ones have none.
	InputAttachments [][]Attachment
	// Tools are offered to the model (none: the model is offered none).
	Tools []Tool
	// Turn is what this turn did so far, after its inputs: each round's
	// assistant message with its tool calls, then the calls' results
	// (RoleTool), oldest first.
	Turn []Message
	// NoMoreTools: the turn ran out of tool rounds; the model is told to
	// answer without calling tools (tool_choice none).
	NoMoreTools bool
	// Unstreamed asks for the answer in one piece even from a backend
	// that streams (agent.openai.stream): a call nobody watches (a
	// summary) has no use for the parts.
	Unstreamed bool
	// Model, when set, is the model this call asks for in place of the
	// backend's own (a chat's choice among agent.models), with what its
	// tokens cost.
	Model *ModelSpec
	// Memory are notes the gateway keeps about the user, the most
	// relevant to the inputs first; MemoryIntro says what they are. A
	// backend gives them as one system message (MemoryText) after the
	// history and before the inputs: marked as memory, not as the user's
	// words, and after the part of the prompt that stays the same from
	// turn to turn (a provider's prompt cache keeps it).
	Memory      []Note
	MemoryIntro string
}

// Note is one note of a request's memory.
type Note struct {
	ID      int64
	Text    string
	Written time.Time
	// By is who wrote it: the assistant, the user, the operator, or a
	// summary at a reset.
	By string
}

// MemoryText is the request's memory as one message: the intro, then a
// line per note with the day it was written; "" without notes.
func (r Request) MemoryText() string {
	if len(r.Memory) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(r.MemoryIntro)
	for _, n := range r.Memory {
		b.WriteString("\n- (")
		if !n.Written.IsZero() {
			b.WriteString(n.Written.UTC().Format(time.DateOnly))
		}
		if n.By != "" {
			b.WriteString(", by " + n.By)
		}
		b.WriteString(") ")
		b.WriteString(n.Text)
	}
	return b.String()
}

// ModelSpec is a model a request asks for: its id as the API knows it,
// and its prices per 1,000 tokens, for the reply's cost.
type ModelSpec struct {
	// Name is the operator's name of the model (agent.models), under
	// which its use is tallied; "" is ID.
	Name                 string
	ID                   string
	PricePer1KPrompt     float64
	PricePer1KCompletion float64
}

// InputMessages are the turn's new user messages, oldest first, with
// their attachments.
func (r Request) InputMessages() []Message {
	ins := r.Inputs()
	out := make([]Message, len(ins))
	for i, in := range ins {
		out[i] = Message{Role: RoleUser, Content: in}
		if i < len(r.InputAttachments) {
			out[i].Attachments = r.InputAttachments[i]
		}
	}
	return out
}

// Inputs are the turn's new user messages, oldest first.
func (r Request) Inputs() []string {
	return append(append(make([]string, 0, len(r.Earlier)+1), r.Earlier...), r.Input)
}

// Usage counts tokens.
type Usage struct {
	PromptTokens     int64
	CompletionTokens int64
	TotalTokens      int64
	// Estimated: the server reported no usage (a stream stopped or cut
	// before its usage chunk), so the counts are the gateway's estimate —
	// EstimatePrompt of the request, EstimateTokens of what streamed.
	Estimated bool
}

// EstimateTokens estimates the tokens of one message of n bytes of text
// (its content and tool calls): a token per 4 bytes, and 4 for the
// message. It is the rule session.max_history_tokens counts by.
func EstimateTokens(n int) int { return n/4 + 4 }

// EstimatePrompt estimates the prompt tokens of req as EstimateTokens
// counts a message: the instructions, the history, the inputs and the
// turn's rounds so far. Images are not counted.
func EstimatePrompt(req Request) int64 {
	n := EstimateMessages(req.Instructions, req.History, req.InputMessages(), req.Turn)
	if m := req.MemoryText(); m != "" {
		n += EstimateTokens(len(m))
	}
	return int64(n)
}

// EstimateMessages estimates the tokens of instructions (a system
// prompt; "" is none) and of every message of msgs, as EstimateTokens
// counts each.
func EstimateMessages(instructions string, msgs ...[]Message) int {
	n := 0
	if instructions != "" {
		n += EstimateTokens(len(instructions))
	}
	for _, ms := range msgs {
		for _, m := range ms {
			n += EstimateTokens(messageBytes(m))
		}
	}
	return n
}

// messageBytes is the text of m EstimateTokens counts: its content and
// its tool calls.
func messageBytes(m Message) int {
	size := len(m.Content)
	for _, tc := range m.ToolCalls {
		size += len(tc.ID) + len(tc.Name) + len(tc.Arguments)
	}
	return size
}

// Reply is what a turn produced: every message in order (assistant tool
// calls and tool results, if any, then the final assistant message).
type Reply struct {
	Messages []Message
	Usage    Usage
	Cost     float64
	// Model is the model as the operator configured it (ModelSpec.Name,
	// or the backend's model): what the usage is tallied under.
	// APIModel is the model the API said answered (often a dated id);
	// "" when it said none.
	Model    string
	APIModel string
}

// Text is the final assistant message's content.
func (r Reply) Text() string {
	if len(r.Messages) == 0 {
		return ""
	}
	return r.Messages[len(r.Messages)-1].Content
}

// Agent writes replies. Reply calls onDelta (which may be nil) with each
// streamed piece of the final reply as it arrives; it must return promptly
// when ctx ends.
type Agent interface {
	Name() string
	Model() string
	Reply(ctx context.Context, req Request, onDelta func(string)) (Reply, error)
}

// Echo is the default backend: it answers "echo: <text> (history: N)" where N
// is the number of prior messages it was given, so that resets, trimming and
// resume are visible in a demo. A burst's messages are echoed one a line;
// an attachment is named after its message's text ("[image image/png, N
// bytes]"), so that a demo shows what reached the agent.
type Echo struct{}

// ReadsImages implements ImageReader: images are fetched for echo so that
// it can tell whether they arrived.
func (Echo) ReadsImages() bool { return true }

// Name implements Agent.
func (Echo) Name() string { return "echo" }

// Model implements Agent.
func (Echo) Model() string { return "echo" }

// Reply implements Agent.
func (Echo) Reply(ctx context.Context, req Request, onDelta func(string)) (Reply, error) {
	if err := ctx.Err(); err != nil {
		return Reply{}, err
	}
	lines := req.Inputs()
	for i, m := range req.InputMessages() {
		if d := describe(m.Attachments); d != "" {
			lines[i] = strings.TrimSpace(lines[i] + " " + d)
		}
	}
	text := fmt.Sprintf("echo: %s (history: %d)", strings.Join(lines, "\n"), len(req.History))
	if onDelta != nil {
		onDelta(text)
	}
	return Reply{
		Messages: []Message{{Role: RoleAssistant, Content: text}},
		Model:    "echo", // no model, no tokens: Usage stays zero
	}, nil
}

// Error is a failed call to the model server, with the HTTP status when
// there was an answer, as a backend returns it. Its message never
// contains the API key.
type Error struct {
	Status int // 0 when no answer came (connection refused, timeout)
	Err    error
}

func (e *Error) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("model server answered %d: %v", e.Status, e.Err)
	}
	return fmt.Sprintf("model server unreachable: %v", e.Err)
}

func (e *Error) Unwrap() error { return e.Err }
