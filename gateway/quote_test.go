package gateway

import (
	"testing"

	"github.com/chatgate/chatgate/agent/openai"
	"github.com/chatgate/chatgate/internal/llmtest"
)

// A message's reply_to names an earlier message of the conversation, the
// bot's or the user's: its text reaches the model quoted before the
// message. An unknown seq is refused with not_found and nothing is stored.
func TestReplyToReachesTheModel(t *testing.T) {
	llm, ag := llmtest.AgentWith(t, openai.Config{})
	e := newEnv(t, ag, WSOptions{}, nil, nil)
	c, _ := e.connect(map[string]any{"user": "ann"})
	c.send(map[string]any{"type": "message", "id": "m1", "text": "two things, please"})
	r := c.expect("reply")
	botSeq := int64(r["seq"].(float64))

	c.send(map[string]any{"type": "message", "id": "m2", "text": "what did you mean?", "reply_to": botSeq})
	c.expect("reply")
	c.send(map[string]any{"type": "message", "id": "m3", "text": "and this?", "reply_to": 1})
	c.expect("reply")
	c.send(map[string]any{"type": "message", "id": "m4", "text": "lost", "reply_to": 99})
	if er := c.expect("error"); er["code"] != "not_found" || er["id"] != "m4" {
		t.Fatalf("reply_to an unknown seq: %v", er)
	}
	c.send(map[string]any{"type": "message", "id": "m5", "text": "bad", "reply_to": 0})
	if er := c.expect("error"); er["code"] != "bad_frame" {
		t.Fatalf("reply_to 0: %v", er)
	}

	reqs := llm.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d model requests, want 3 (the refused messages ran nothing)", len(reqs))
	}
	if got, want := reqs[1][len(reqs[1])-1].Text(), "> "+llmtest.Reply+"\n\nwhat did you mean?"; got != want {
		t.Errorf("a reply to the bot reached the model as %q, want %q", got, want)
	}
	if got, want := reqs[2][len(reqs[2])-1].Text(), "> two things, please\n\nand this?"; got != want {
		t.Errorf("a reply to the user's message reached the model as %q, want %q", got, want)
	}

	// A client that comes back sees each reply with what it quoted.
	_, ready := e.connect(map[string]any{"user": "ann"})
	quotes := map[string]any{}
	for _, h := range ready["history"].([]any) {
		m := h.(map[string]any)
		if id, ok := m["id"].(string); ok {
			quotes[id] = m["quote"]
		}
	}
	if quotes["m1"] != nil || quotes["m2"] != llmtest.Reply || quotes["m3"] != "two things, please" {
		t.Fatalf("ready.history quotes by message id = %v, want none for m1, the bot's reply for m2, m1's text for m3", quotes)
	}
}
