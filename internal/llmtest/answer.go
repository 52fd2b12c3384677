package llmtest

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"
)

// Answer is what the model answers one request: text, or tool calls (one
// or several at once, with text before them or not).
type Answer struct {
	Text      string
	ToolCalls []ToolCall
	Usage     *Usage // nil: 1 prompt token, 1 completion token
	// StallAfter, when streaming, sends the role chunk and this many
	// pieces of Text, then nothing more until the client ends the
	// request: a reply stopped or cut mid-stream, with no usage chunk.
	StallAfter int
}

// Usage is an answer's token counts.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

func (a Answer) usage() Usage {
	if a.Usage == nil {
		return Usage{PromptTokens: 1, CompletionTokens: 1, TotalTokens: 2}
	}
	u := *a.Usage
	if u.TotalTokens == 0 {
		u.TotalTokens = u.PromptTokens + u.CompletionTokens
	}
	return u
}

func (a Answer) finishReason() string {
	if len(a.ToolCalls) > 0 {
		return "tool_calls"
	}
	return "stop"
}

func wireCalls(calls []ToolCall) []wireToolCall {
	out := make([]wireToolCall, len(calls))
	for i, c := range calls {
		out[i].ID, out[i].Type = c.ID, "function"
		out[i].Function.Name, out[i].Function.Arguments = c.Name, c.Arguments
	}
	return out
}

// completion is the answer as a chat.completion object.
func (a Answer) completion() []byte {
	type message struct {
		Role      string         `json:"role"`
		Content   *string        `json:"content"`
		ToolCalls []wireToolCall `json:"tool_calls,omitempty"`
	}
	msg := message{Role: "assistant", ToolCalls: wireCalls(a.ToolCalls)}
	if a.Text != "" || len(a.ToolCalls) == 0 {
		msg.Content = &a.Text
	}
	type choice struct {
		Index        int     `json:"index"`
		Message      message `json:"message"`
		FinishReason string  `json:"finish_reason"`
	}
	data, _ := json.Marshal(struct {
		ID      string   `json:"id"`
		Object  string   `json:"object"`
		Created int      `json:"created"`
		Model   string   `json:"model"`
		Choices []choice `json:"choices"`
		Usage   Usage    `json:"usage"`
	}{"c1", "chat.completion", 1, "m-1", []choice{{Message: msg, FinishReason: a.finishReason()}}, a.usage()})
	return data
}

// chunkToolCall is a tool call's piece in a streamed delta: the id, type
// and name come in its first chunk only.
type chunkToolCall struct {
	Index    int    `json:"index"`
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type delta struct {
	Role      string          `json:"role,omitempty"`
	Content   *string         `json:"content,omitempty"`
	ToolCalls []chunkToolCall `json:"tool_calls,omitempty"`
}

// chunks are the answer as OpenAI streams it: a role chunk, the text in
// pieces, each tool call in turn (id and name first, then its arguments
// in pieces), a chunk with the finish reason, and the usage when asked
// for.
func (a Answer) chunks(includeUsage bool) [][]byte {
	type choice struct {
		Index        int     `json:"index"`
		Delta        delta   `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	}
	type chunk struct {
		ID      string   `json:"id"`
		Object  string   `json:"object"`
		Created int      `json:"created"`
		Model   string   `json:"model"`
		Choices []choice `json:"choices"`
		Usage   *Usage   `json:"usage,omitempty"`
	}
	var out [][]byte
	add := func(c chunk) {
		c.ID, c.Object, c.Created, c.Model = "c1", "chat.completion.chunk", 1, "m-1"
		if c.Choices == nil {
			c.Choices = []choice{}
		}
		data, _ := json.Marshal(c)
		out = append(out, data)
	}
	addDelta := func(d delta) { add(chunk{Choices: []choice{{Delta: d}}}) }
	empty := ""
	addDelta(delta{Role: "assistant", Content: &empty})
	for _, piece := range strings.SplitAfter(a.Text, " ") {
		if piece != "" {
			addDelta(delta{Content: &piece})
		}
	}
	for i, c := range a.ToolCalls {
		first := chunkToolCall{Index: i, ID: c.ID, Type: "function"}
		first.Function.Name = c.Name
		addDelta(delta{ToolCalls: []chunkToolCall{first}})
		for _, piece := range split(c.Arguments, 3) {
			next := chunkToolCall{Index: i}
			next.Function.Arguments = piece
			addDelta(delta{ToolCalls: []chunkToolCall{next}})
		}
	}
	reason := a.finishReason()
	add(chunk{Choices: []choice{{Delta: delta{}, FinishReason: &reason}}})
	if includeUsage {
		u := a.usage()
		add(chunk{Usage: &u})
	}
	return out
}

// split cuts s into n pieces of about the same number of runes (fewer
// when s is shorter).
func split(s string, n int) []string {
	size := (utf8.RuneCountInString(s) + n - 1) / n
	if size == 0 {
		return nil
	}
	var out []string
	for s != "" {
		end, runes := 0, 0
		for end < len(s) && runes < size {
			_, w := utf8.DecodeRuneInString(s[end:])
			end, runes = end+w, runes+1
		}
		out = append(out, s[:end])
		s = s[end:]
	}
	return out
}

func (s *Server) stream(w http.ResponseWriter, r *http.Request, a Answer, includeUsage bool, delay time.Duration) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	if flusher != nil {
		flusher.Flush()
	}
	if !wait(r, delay) {
		return
	}
	for i, c := range a.chunks(includeUsage) {
		if a.StallAfter > 0 && i == 1+a.StallAfter {
			<-r.Context().Done()
			return
		}
		if _, err := w.Write([]byte("data: " + string(c) + "\n\n")); err != nil {
			return
		}
		if flusher != nil {
			flusher.Flush()
		}
	}
	_, _ = w.Write([]byte("data: [DONE]\n\n"))
}
