// Package llmtest is a local OpenAI-compatible server for tests: its
// chat-completions endpoint records every request and answers it, as JSON
// or, when the request streams, as SSE chunks the way OpenAI sends them.
// By default every answer is the short fixed text Reply; a test scripts a
// model that calls tools with Script. Its transcription endpoint
// (Server.AddAudio) answers the audio it was given a transcript for.
package llmtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Reply is the text every answer carries unless a script says otherwise.
const Reply = "seen"

// Part is one content part of a message as the server received it: a
// plain string content is one text part.
type Part struct {
	Type     string // text | image_url
	Text     string
	ImageURL string
}

// ToolCall is a function call: one an assistant message of a request
// carries, or one an Answer asks for.
type ToolCall struct {
	ID        string // in an Answer, empty: the server makes one up
	Name      string
	Arguments string // JSON
}

// Message is one message of a request.
type Message struct {
	Role       string
	Parts      []Part
	ToolCallID string     // tool messages: the call this answers
	ToolCalls  []ToolCall // assistant messages that called tools
}

// Text is the message's text parts, joined by newlines.
func (m Message) Text() string {
	var out []string
	for _, p := range m.Parts {
		if p.Type == "text" {
			out = append(out, p.Text)
		}
	}
	return strings.Join(out, "\n")
}

// Images are the message's image URLs.
func (m Message) Images() []string {
	var out []string
	for _, p := range m.Parts {
		if p.Type == "image_url" {
			out = append(out, p.ImageURL)
		}
	}
	return out
}

// Request is one chat-completions request as the server read it.
type Request struct {
	// Model is the model id the request asks for.
	Model    string
	Messages []Message
	Tools    []string // the names of the function tools offered
	// ToolChoice is "none", "auto" or "required" as sent, the raw JSON of
	// a named choice, or empty when the request has none.
	ToolChoice string
	Stream     bool
	Raw        string // the body
}

// Last is the request's last message.
func (r Request) Last() Message {
	if len(r.Messages) == 0 {
		return Message{}
	}
	return r.Messages[len(r.Messages)-1]
}

// Server records requests; mount it on an httptest.Server and point the
// openai backend at its URL + "/v1".
type Server struct {
	mu       sync.Mutex
	received []Request
	script   Script
	delay    time.Duration
	calls    int        // tool call ids made up so far
	audio    audioState // the transcription endpoint's
}

// Requests are the messages of every request so far.
func (s *Server) Requests() [][]Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([][]Message, len(s.received))
	for i, r := range s.received {
		out[i] = r.Messages
	}
	return out
}

// Raw are the request bodies so far.
func (s *Server) Raw() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, len(s.received))
	for i, r := range s.received {
		out[i] = r.Raw
	}
	return out
}

// Received are the chat-completions requests read so far, in order.
func (s *Server) Received() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.received...)
}

// Script makes script answer every request from now on (nil: Reply
// again).
func (s *Server) Script(script Script) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.script = script
}

// Delay makes the server wait d before its answer (when streaming, after
// the headers and before the first chunk), or until the request is
// canceled.
func (s *Server) Delay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.delay = d
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/audio/transcriptions" {
		s.transcribe(w, r)
		return
	}
	if r.URL.Path != "/v1/chat/completions" {
		apiError(w, http.StatusNotFound, "not found")
		return
	}
	data, _ := io.ReadAll(r.Body)
	req, includeUsage, err := parseRequest(data)
	if err != nil {
		apiError(w, http.StatusBadRequest, "%v", err)
		return
	}
	s.mu.Lock()
	s.received = append(s.received, req)
	script, delay := s.script, s.delay
	s.mu.Unlock()
	a := Answer{Text: Reply}
	if script != nil {
		a = script(req)
	}
	if req.ToolChoice == "none" {
		// As OpenAI: a model told not to call tools answers in text.
		a.ToolCalls = nil
		if a.Text == "" {
			a.Text = Reply
		}
	}
	a.ToolCalls = s.withIDs(a.ToolCalls)
	if req.Stream {
		s.stream(w, r, a, includeUsage, delay)
		return
	}
	if !wait(r, delay) {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(a.completion())
}

// withIDs gives each call without an id one no other call of this server
// has.
func (s *Server) withIDs(calls []ToolCall) []ToolCall {
	out := append([]ToolCall(nil), calls...)
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range out {
		if out[i].ID == "" {
			s.calls++
			out[i].ID = "call_" + strconv.Itoa(s.calls)
		}
	}
	return out
}

// wait waits d, and reports false when the request ended first.
func wait(r *http.Request, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	}
}

type wireToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// parseRequest reads a request body, refusing what OpenAI refuses of a
// transcript: content missing but from an assistant message that calls
// tools, a tool message that answers no call before it, a call no tool
// message answers.
func parseRequest(data []byte) (Request, bool, error) {
	var body struct {
		Model    string `json:"model"`
		Messages []struct {
			Role       string          `json:"role"`
			Content    json.RawMessage `json:"content"`
			ToolCallID string          `json:"tool_call_id"`
			ToolCalls  []wireToolCall  `json:"tool_calls"`
		} `json:"messages"`
		Tools []struct {
			Type     string `json:"type"`
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		} `json:"tools"`
		ToolChoice    json.RawMessage `json:"tool_choice"`
		Stream        bool            `json:"stream"`
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	if err := json.Unmarshal(data, &body); err != nil {
		return Request{}, false, fmt.Errorf("bad JSON: %v", err)
	}
	req := Request{Model: body.Model, Stream: body.Stream, Raw: string(data)}
	for _, t := range body.Tools {
		req.Tools = append(req.Tools, t.Function.Name)
	}
	if len(body.ToolChoice) > 0 {
		var choice string
		if json.Unmarshal(body.ToolChoice, &choice) != nil {
			choice = string(body.ToolChoice)
		}
		req.ToolChoice = choice
	}
	unanswered := map[string]bool{} // calls not yet answered by a tool message
	for i, m := range body.Messages {
		msg := Message{Role: m.Role, ToolCallID: m.ToolCallID}
		for _, tc := range m.ToolCalls {
			msg.ToolCalls = append(msg.ToolCalls, ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
		}
		parts, err := parseContent(m.Content)
		switch {
		case err == errNoContent && m.Role == "assistant" && len(msg.ToolCalls) > 0:
		case err != nil:
			return Request{}, false, fmt.Errorf("messages[%d]: %v", i, err)
		}
		msg.Parts = parts
		if m.Role != "tool" && len(unanswered) > 0 {
			return Request{}, false, fmt.Errorf("messages[%d]: an assistant message with tool_calls must be followed by tool messages responding to each tool_call_id", i)
		}
		switch m.Role {
		case "tool":
			if !unanswered[m.ToolCallID] {
				return Request{}, false, fmt.Errorf("messages[%d]: a tool message must answer a tool call of the preceding assistant message (tool_call_id %q)", i, m.ToolCallID)
			}
			delete(unanswered, m.ToolCallID)
		case "assistant":
			for _, tc := range msg.ToolCalls {
				unanswered[tc.ID] = true
			}
		}
		req.Messages = append(req.Messages, msg)
	}
	if len(unanswered) > 0 {
		return Request{}, false, fmt.Errorf("an assistant message with tool_calls must be followed by tool messages responding to each tool_call_id")
	}
	return req, body.StreamOptions.IncludeUsage, nil
}

var errNoContent = errors.New("no content")

// parseContent reads a message's content: a string, or an array of parts.
func parseContent(raw json.RawMessage) ([]Part, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, errNoContent
	}
	var text string
	if json.Unmarshal(raw, &text) == nil {
		return []Part{{Type: "text", Text: text}}, nil
	}
	var parts []struct {
		Type     string `json:"type"`
		Text     string `json:"text"`
		ImageURL struct {
			URL string `json:"url"`
		} `json:"image_url"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return nil, fmt.Errorf("bad content")
	}
	out := make([]Part, 0, len(parts))
	for _, p := range parts {
		out = append(out, Part{Type: p.Type, Text: p.Text, ImageURL: p.ImageURL.URL})
	}
	return out, nil
}
