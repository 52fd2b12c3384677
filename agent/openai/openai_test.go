package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
)

// chatServer speaks the chat-completions wire format: a JSON body, or SSE
// chunks when the request asks to stream.
type chatServer struct {
	t        *testing.T
	requests atomic.Int32
	fail     []int // status codes for the first requests, then success
	got      chan map[string]any
}

func (s *chatServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := int(s.requests.Add(1))
	if r.URL.Path != "/v1/chat/completions" || r.Header.Get("Authorization") != "Bearer sk-test" {
		http.Error(w, `{"error":{"message":"bad path or key"}}`, http.StatusNotFound)
		return
	}
	var body map[string]any
	data, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(data, &body); err != nil {
		s.t.Errorf("request body is not JSON: %v", err)
	}
	if s.got != nil {
		s.got <- body
	}
	if n <= len(s.fail) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After-Ms", "5")
		w.WriteHeader(s.fail[n-1])
		fmt.Fprintf(w, `{"error":{"message":"failure %d","type":"server_error"}}`, s.fail[n-1])
		return
	}
	last := body["messages"].([]any)
	input := last[len(last)-1].(map[string]any)["content"]
	reply := fmt.Sprintf("you said %v", input)
	if body["stream"] == true {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, part := range strings.SplitAfter(reply, " ") {
			fmt.Fprintf(w, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m-1\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":%q},\"finish_reason\":null}]}\n\n", part)
			w.(http.Flusher).Flush()
		}
		fmt.Fprint(w, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m-1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n")
		fmt.Fprint(w, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m-1\",\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":3,\"total_tokens\":15}}\n\n")
		fmt.Fprint(w, "data: [DONE]\n\n")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":"c1","object":"chat.completion","created":1,"model":"m-1","choices":[{"index":0,"message":{"role":"assistant","content":%q},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15}}`, reply)
}

func newOpenAI(t *testing.T, s *chatServer, stream bool, retries int) *Backend {
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return New(Config{
		BaseURL: srv.URL + "/v1", APIKey: "sk-test", Model: "m-1", Timeout: 10 * time.Second,
		MaxRetries: retries, Stream: stream, PricePer1KPrompt: 0.5, PricePer1KCompletion: 2,
	})
}

func TestOpenAIRequestCarriesInstructionsAndHistory(t *testing.T) {
	s := &chatServer{t: t, got: make(chan map[string]any, 1)}
	o := newOpenAI(t, s, false, 0)
	r, err := o.Reply(context.Background(), agent.Request{
		Instructions: "be brief",
		History: []agent.Message{
			{Role: agent.RoleUser, Content: "weather?"},
			{Role: agent.RoleAssistant, ToolCalls: []agent.ToolCall{{ID: "call_1", Name: "weather", Arguments: `{"city":"Oslo"}`}}},
			{Role: agent.RoleTool, Content: "rain", ToolCallID: "call_1"},
			{Role: agent.RoleAssistant, Content: "Rain."},
		},
		Earlier: []string{"ok"},
		Input:   "thanks",
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Text() != "you said thanks" || r.Usage.TotalTokens != 15 || r.Model != "m-1" {
		t.Fatalf("reply = %+v", r)
	}
	if want := 12*0.5/1000 + 3*2.0/1000; r.Cost != want {
		t.Fatalf("cost = %v, want %v", r.Cost, want)
	}
	body := <-s.got
	msgs := body["messages"].([]any)
	roles := []string{}
	for _, m := range msgs {
		roles = append(roles, m.(map[string]any)["role"].(string))
	}
	if strings.Join(roles, ",") != "system,user,assistant,tool,assistant,user,user" {
		t.Fatalf("roles sent = %v", roles)
	}
	tc := msgs[2].(map[string]any)["tool_calls"].([]any)[0].(map[string]any)
	if tc["id"] != "call_1" || tc["function"].(map[string]any)["name"] != "weather" {
		t.Fatalf("tool call sent = %v", tc)
	}
	if msgs[3].(map[string]any)["tool_call_id"] != "call_1" {
		t.Fatalf("tool message sent = %v", msgs[3])
	}
	if msgs[5].(map[string]any)["content"] != "ok" || msgs[6].(map[string]any)["content"] != "thanks" {
		t.Fatalf("a burst's messages are sent one by one, in order: %v %v", msgs[5], msgs[6])
	}
}

func TestOpenAIStreaming(t *testing.T) {
	s := &chatServer{t: t}
	o := newOpenAI(t, s, true, 0)
	var deltas []string
	r, err := o.Reply(context.Background(), agent.Request{Input: "hello there"}, func(d string) { deltas = append(deltas, d) })
	if err != nil {
		t.Fatal(err)
	}
	if r.Text() != "you said hello there" {
		t.Fatalf("text = %q", r.Text())
	}
	if len(deltas) < 2 || strings.Join(deltas, "") != r.Text() {
		t.Fatalf("deltas = %q", deltas)
	}
	if r.Usage != (agent.Usage{PromptTokens: 12, CompletionTokens: 3, TotalTokens: 15}) {
		t.Fatalf("usage = %+v", r.Usage)
	}
}

func TestOpenAIRetriesOn429(t *testing.T) {
	s := &chatServer{t: t, fail: []int{429}}
	o := newOpenAI(t, s, true, 2)
	r, err := o.Reply(context.Background(), agent.Request{Input: "x"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Text() != "you said x" || s.requests.Load() != 2 {
		t.Fatalf("reply %q after %d requests", r.Text(), s.requests.Load())
	}
}

func TestOpenAIServerErrorIsReported(t *testing.T) {
	s := &chatServer{t: t, fail: []int{500, 500, 500}}
	o := newOpenAI(t, s, false, 1)
	_, err := o.Reply(context.Background(), agent.Request{Input: "x"}, nil)
	var ae *agent.Error
	if !errors.As(err, &ae) || ae.Status != 500 {
		t.Fatalf("err = %v, want an *agent.Error with status 500", err)
	}
	if s.requests.Load() != 2 {
		t.Fatalf("%d requests, want 2 (one retry)", s.requests.Load())
	}
	if strings.Contains(err.Error(), "sk-test") {
		t.Fatal("error text leaks the API key")
	}
}

func TestOpenAIUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there any more
	o := New(Config{BaseURL: url + "/v1", APIKey: "k", Model: "m", MaxRetries: 0})
	_, err := o.Reply(context.Background(), agent.Request{Input: "x"}, nil)
	var ae *agent.Error
	if !errors.As(err, &ae) || ae.Status != 0 {
		t.Fatalf("err = %v, want an unreachable *agent.Error", err)
	}
}

func TestOpenAICancelStopsStream(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"partial \"}}]}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	o := New(Config{BaseURL: srv.URL, APIKey: "k", Model: "m", Stream: true})
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan string, 1)
	var r agent.Reply
	var err error
	done := make(chan struct{})
	go func() {
		r, err = o.Reply(ctx, agent.Request{Input: "x"}, func(d string) { got <- d })
		close(done)
	}()
	if d := <-got; d != "partial " {
		t.Fatalf("first delta = %q", d)
	}
	cancel()
	<-done
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if r.Text() != "partial " {
		t.Fatalf("partial reply = %q", r.Text())
	}
}

// A request's Model replaces the backend's model in the request and its
// prices in the reply's cost, streamed or not.
func TestOpenAIRequestModel(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%t", stream), func(t *testing.T) {
			s := &chatServer{t: t, got: make(chan map[string]any, 2)}
			o := newOpenAI(t, s, stream, 0)
			r, err := o.Reply(context.Background(), agent.Request{Input: "hi",
				Model: &agent.ModelSpec{ID: "big-1", PricePer1KPrompt: 10, PricePer1KCompletion: 30}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if body := <-s.got; body["model"] != "big-1" {
				t.Fatalf("model sent = %v, want big-1", body["model"])
			}
			if want := 12*10.0/1000 + 3*30.0/1000; r.Cost != want {
				t.Fatalf("cost = %v, want %v (the chosen model's prices)", r.Cost, want)
			}
			// Without one: the backend's own model and prices.
			r, err = o.Reply(context.Background(), agent.Request{Input: "hi"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if body := <-s.got; body["model"] != "m-1" {
				t.Fatalf("model sent = %v, want m-1", body["model"])
			}
			if want := 12*0.5/1000 + 3*2.0/1000; r.Cost != want {
				t.Fatalf("cost = %v, want %v", r.Cost, want)
			}
		})
	}
}
