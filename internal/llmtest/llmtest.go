// Package llmtest is a local OpenAI-compatible server for tests: its
// chat-completions endpoint records every request's messages and answers
// each with a short fixed text, without streaming; its transcription
// endpoint (transcribe.go) answers the audio it was given a transcript
// for.
package llmtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
)

// Reply is the text every answer carries.
const Reply = "seen"

// Part is one content part of a message as the server received it: a
// plain string content is one text part.
type Part struct {
	Type     string // text | image_url
	Text     string
	ImageURL string
}

// Message is one message of a request.
type Message struct {
	Role  string
	Parts []Part
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

// Server records requests; mount it on an httptest.Server and point the
// openai backend at its URL + "/v1".
type Server struct {
	mu       sync.Mutex
	requests [][]Message
	raw      []string
	audio    audioState // transcribe.go
}

// Requests are the messages of every request so far.
func (s *Server) Requests() [][]Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]Message(nil), s.requests...)
}

// Raw are the request bodies so far.
func (s *Server) Raw() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.raw...)
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/audio/transcriptions" {
		s.transcribe(w, r)
		return
	}
	if r.URL.Path != "/v1/chat/completions" {
		http.Error(w, `{"error":{"message":"not found"}}`, http.StatusNotFound)
		return
	}
	data, _ := io.ReadAll(r.Body)
	var body struct {
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(data, &body); err != nil {
		http.Error(w, `{"error":{"message":"bad JSON"}}`, http.StatusBadRequest)
		return
	}
	var msgs []Message
	for _, m := range body.Messages {
		msg := Message{Role: m.Role}
		var text string
		var parts []struct {
			Type     string `json:"type"`
			Text     string `json:"text"`
			ImageURL struct {
				URL string `json:"url"`
			} `json:"image_url"`
		}
		switch {
		case json.Unmarshal(m.Content, &text) == nil:
			msg.Parts = []Part{{Type: "text", Text: text}}
		case json.Unmarshal(m.Content, &parts) == nil:
			for _, p := range parts {
				msg.Parts = append(msg.Parts, Part{Type: p.Type, Text: p.Text, ImageURL: p.ImageURL.URL})
			}
		default:
			http.Error(w, `{"error":{"message":"bad content"}}`, http.StatusBadRequest)
			return
		}
		msgs = append(msgs, msg)
	}
	s.mu.Lock()
	s.requests = append(s.requests, msgs)
	s.raw = append(s.raw, string(data))
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":"c1","object":"chat.completion","created":1,"model":"m-1","choices":[{"index":0,"message":{"role":"assistant","content":%q},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`, Reply)
}
