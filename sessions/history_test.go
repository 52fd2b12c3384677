package sessions

import (
	"strings"
	"testing"
)

// rows builds messages from a compact notation: u=user, a=assistant,
// A=assistant with tool calls (ids from the digits after it, e.g. A12),
// t1=tool result for call 1, f=failed assistant, i=interrupted assistant.
func rows(spec string) []Message {
	var out []Message
	for n, tok := range strings.Fields(spec) {
		m := Message{Seq: int64(n + 1), Status: MsgOK, Content: tok}
		switch tok[0] {
		case 'u':
			m.Role = "user"
		case 'a':
			m.Role = "assistant"
		case 'f':
			m.Role, m.Status = "assistant", MsgFailed
		case 'i':
			m.Role, m.Status = "assistant", MsgInterrupted
		case 'A':
			m.Role, m.Content = "assistant", ""
			var calls []string
			for _, d := range tok[1:] {
				calls = append(calls, `{"id":"`+string(d)+`","name":"f","arguments":"{}"}`)
			}
			m.ToolCalls = "[" + strings.Join(calls, ",") + "]"
		case 't':
			m.Role, m.ToolCallID = "tool", tok[1:]
		}
		out = append(out, m)
	}
	return out
}

func render(msgs []Message, max int) string {
	var out []string
	for _, m := range History(msgs, max) {
		switch {
		case len(m.ToolCalls) > 0:
			ids := ""
			for _, c := range m.ToolCalls {
				ids += c.ID
			}
			out = append(out, "A"+ids)
		default:
			out = append(out, m.Content)
		}
	}
	return strings.Join(out, " ")
}

func TestHistoryTrimming(t *testing.T) {
	tests := []struct {
		name string
		spec string
		max  int
		want string
	}{
		{"under the limit", "u1 a1 u2 a2", 10, "u1 a1 u2 a2"},
		{"last max", "u1 a1 u2 a2 u3 a3", 4, "u2 a2 u3 a3"},
		{"zero means none", "u1 a1", 0, ""},
		{"failed replies are not history", "u1 f1 u2 a2", 10, "u1 u2 a2"},
		{"interrupted partial replies are", "u1 i1 u2 a2", 10, "u1 i1 u2 a2"},
		{"tool pair kept whole", "u1 A1 t1 a1", 4, "u1 A1 t1 a1"},
		{"window starting on a tool result drops the orphan", "u1 A1 t1 a1 u2", 3, "a1 u2"},
		{"window cutting between call and results drops the orphans", "u0 u1 A12 t1 t2 a1", 3, "a1"},
		{"window cutting between two results", "u0 A12 t1 t2 a1", 2, "a1"},
		{"parallel calls kept whole", "u1 A12 t1 t2 a1", 5, "u1 A12 t1 t2 a1"},
		{"call with a missing result is dropped", "u1 A12 t1 u2", 10, "u1 u2"},
		{"call without results at the end is dropped", "u1 a1 u2 A1", 10, "u1 a1 u2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := render(rows(tt.spec), tt.max); got != tt.want {
				t.Fatalf("History(%q, %d) = %q, want %q", tt.spec, tt.max, got, tt.want)
			}
		})
	}
}

func TestHistoryNeverStartsWithToolMessage(t *testing.T) {
	msgs := rows("u1 A1 t1 a1 u2 A23 t2 t3 a2 u3 a3")
	for max := 0; max <= len(msgs)+1; max++ {
		h := History(msgs, max)
		if len(h) > max {
			t.Fatalf("max %d: %d messages", max, len(h))
		}
		if len(h) > 0 && h[0].Role == "tool" {
			t.Fatalf("max %d: history starts with a tool message", max)
		}
		for i, m := range h {
			if len(m.ToolCalls) > 0 {
				for j := range m.ToolCalls {
					if i+1+j >= len(h) || h[i+1+j].Role != "tool" {
						t.Fatalf("max %d: call at %d lost its results: %+v", max, i, h)
					}
				}
			}
		}
	}
}
