package sessions

import (
	"fmt"
	"testing"
)

// TestPriorOfPutsRepliesAfterTheirMessages: the history a turn sees is in
// turn order — each reply right after the message it answers, even when a
// later message was stored before the reply — and leaves out the turn's own
// messages and the user messages after its lead.
func TestPriorOfPutsRepliesAfterTheirMessages(t *testing.T) {
	u := func(seq int64) Message { return Message{Seq: seq, Role: "user", Content: fmt.Sprint("u", seq)} }
	a := func(seq, to int64) Message {
		return Message{Seq: seq, Role: "assistant", ReplyTo: to, Content: fmt.Sprint("a", to)}
	}
	show := func(ms []*Message) string {
		out := ""
		for _, m := range ms {
			out += m.Content + " "
		}
		return out
	}
	for _, c := range []struct {
		name    string
		window  []Message
		members []int64
		lead    int64
		want    string
	}{
		{"in order", []Message{u(1), a(2, 1), u(3), a(4, 3), u(5)}, []int64{5}, 5, "u1 a1 u3 a3 "},
		// u3 arrived while the turn of u1 ran: its reply a1 was stored after it.
		{"a message stored during a turn", []Message{u(1), u(2), a(3, 1), a(4, 2), u(5)}, []int64{5}, 5, "u1 a1 u2 a2 "},
		{"later messages left out", []Message{u(1), a(2, 1), u(3), u(4)}, []int64{3}, 3, "u1 a1 "},
		{"an earlier run of the turn left out", []Message{u(1), a(2, 1), u(3), a(4, 3)}, []int64{3}, 3, "u1 a1 "},
	} {
		if got := show(priorOf(c.window, seqSet(c.members), c.lead)); got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}
}
