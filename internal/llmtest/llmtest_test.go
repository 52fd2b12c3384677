package llmtest

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/agent/openai"
)

func post(t *testing.T, s *Server, body string) (int, string) {
	t.Helper()
	w := httptest.NewRecorder()
	s.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body)))
	return w.Code, w.Body.String()
}

// A streamed tool call is cut as OpenAI cuts it: its index, id, type and
// name in its first chunk, its arguments over the next ones, calls one
// after the other, then the finish reason, the usage and [DONE].
func TestStreamedToolCalls(t *testing.T) {
	s := &Server{}
	s.Script(Queue(Answer{ToolCalls: []ToolCall{
		{Name: "a", Arguments: `{"x":"123456"}`},
		{ID: "given", Name: "b", Arguments: `{"y":1}`},
	}}))
	code, out := post(t, s, `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"a"}},{"type":"function","function":{"name":"b"}}]}`)
	if code != http.StatusOK {
		t.Fatalf("status %d: %s", code, out)
	}
	events := strings.Split(strings.TrimSuffix(out, "\n\n"), "\n\n")
	if events[len(events)-1] != "data: [DONE]" {
		t.Fatalf("last event = %q", events[len(events)-1])
	}
	type call struct {
		Index    int     `json:"index"`
		ID       *string `json:"id"`
		Function struct {
			Name      *string `json:"name"`
			Arguments string  `json:"arguments"`
		} `json:"function"`
	}
	var (
		pieces  = map[int][]string{}
		ids     = map[int]string{}
		order   []int
		reasons []string
		usage   int
	)
	for _, e := range events[:len(events)-1] {
		var c struct {
			Choices []struct {
				Delta struct {
					ToolCalls []call `json:"tool_calls"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage *Usage `json:"usage"`
		}
		if err := json.Unmarshal([]byte(strings.TrimPrefix(e, "data: ")), &c); err != nil {
			t.Fatalf("%q: %v", e, err)
		}
		if c.Usage != nil {
			usage = c.Usage.TotalTokens
		}
		for _, ch := range c.Choices {
			if ch.FinishReason != nil {
				reasons = append(reasons, *ch.FinishReason)
			}
			for _, tc := range ch.Delta.ToolCalls {
				if tc.ID != nil {
					if _, seen := ids[tc.Index]; seen || tc.Function.Name == nil {
						t.Fatalf("id twice, or without the name: %q", e)
					}
					ids[tc.Index] = *tc.ID
					order = append(order, tc.Index)
				} else if tc.Function.Name != nil {
					t.Fatalf("the name outside the first chunk: %q", e)
				}
				if tc.Function.Arguments != "" {
					pieces[tc.Index] = append(pieces[tc.Index], tc.Function.Arguments)
				}
			}
		}
	}
	if len(order) != 2 || order[0] != 0 || order[1] != 1 || ids[0] == "" || ids[1] != "given" {
		t.Fatalf("calls %v with ids %v", order, ids)
	}
	if len(pieces[0]) < 2 || strings.Join(pieces[0], "") != `{"x":"123456"}` || strings.Join(pieces[1], "") != `{"y":1}` {
		t.Fatalf("argument pieces = %v", pieces)
	}
	if strings.Join(reasons, ",") != "tool_calls" || usage != 2 {
		t.Fatalf("finish reasons %v, usage %d", reasons, usage)
	}
}

// The server refuses a transcript OpenAI refuses: a tool result that
// answers no call, a call left unanswered.
func TestRefusesBrokenToolTranscripts(t *testing.T) {
	for name, msgs := range map[string]string{
		"orphan result": `[{"role":"user","content":"hi"},{"role":"tool","tool_call_id":"c9","content":"x"}]`,
		"unanswered":    `[{"role":"user","content":"hi"},{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"a","arguments":"{}"}}]},{"role":"user","content":"?"}]`,
		"answered late": `[{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"a","arguments":"{}"}}]}]`,
		"no content":    `[{"role":"user"}]`,
	} {
		if code, out := post(t, &Server{}, `{"model":"m","messages":`+msgs+`}`); code != http.StatusBadRequest {
			t.Errorf("%s: status %d: %s", name, code, out)
		}
	}
	ok := `[{"role":"user","content":"hi"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"a","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"r"}]`
	s := &Server{}
	s.Script(ToolThenAnswer("a", "{}"))
	if code, out := post(t, s, `{"model":"m","messages":`+ok+`}`); code != http.StatusOK || !strings.Contains(out, `"content":"done: r"`) {
		t.Fatalf("status %d: %s", code, out)
	}
}

// Delay holds the answer back until the request ends, streamed or not.
func TestDelayEndsWithTheRequest(t *testing.T) {
	for _, stream := range []bool{false, true} {
		s, ag := AgentWith(t, openai.Config{Stream: stream})
		s.Delay(time.Hour)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		_, err := ag.Reply(ctx, agent.Request{Input: "x"}, func(d string) { t.Errorf("delta %q before the delay ended", d) })
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("stream %v: err = %v", stream, err)
		}
	}
}
