package sessions

import (
	"context"
	"strings"
	"testing"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/llmtest"
	"github.com/chatgate/chatgate/sessions/store"
)

func TestWithQuote(t *testing.T) {
	long := strings.Repeat("é", MaxQuoteRunes+5)
	for _, c := range []struct{ quote, text, want string }{
		{"", "hi", "hi"},
		{"the second point", "what did you mean?", "> the second point\n\nwhat did you mean?"},
		{"one\n\ntwo", "and?", "> one\n>\n> two\n\nand?"},
		{"only the quote", "", "> only the quote"},
	} {
		if got := withQuote(c.quote, c.text); got != c.want {
			t.Errorf("withQuote(%q, %q) = %q, want %q", c.quote, c.text, got, c.want)
		}
	}
	if got := boundQuote(long); len([]rune(got)) != MaxQuoteRunes || !strings.HasSuffix(got, "é…") {
		t.Errorf("a quote of %d characters is stored as %d, ending %q", MaxQuoteRunes+5, len([]rune(got)), got[len(got)-8:])
	}
	if got := boundQuote("  short \n"); got != "short" {
		t.Errorf("boundQuote trims: %q", got)
	}
}

// A message's quote reaches the model before it, marked, in its own turn
// and in the history of the turns after it, and is stored with it.
func TestAQuoteReachesTheModel(t *testing.T) {
	db := openStore(t, store.DriverSQLite, t.TempDir()+"/g.db")
	llm, ag := llmtest.AgentWith(t, agent.OpenAIConfig{})
	m := New(db, ag, Options{Logger: quiet})
	t.Cleanup(func() { m.Shutdown(context.Background()) })
	in := msg("websocket:a", "what did you mean?")
	in.Quote = "the second point"
	out := handle(t, m, in)
	handle(t, m, msg("websocket:a", "thanks"))
	want := "> the second point\n\nwhat did you mean?"
	reqs := llm.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests, want 2", len(reqs))
	}
	if got := reqs[0][len(reqs[0])-1].Text(); got != want {
		t.Fatalf("the turn's input = %q, want %q", got, want)
	}
	var seen bool
	for _, msg := range reqs[1] {
		seen = seen || (msg.Role == "user" && msg.Text() == want)
	}
	if !seen {
		t.Fatalf("the next turn's history lacks the quoted message: %+v", reqs[1])
	}
	if rows := transcript(t, db, out.ConversationID); rows[0].Quote != "the second point" || rows[0].Content != "what did you mean?" {
		t.Fatalf("stored = %+v", rows[0])
	}
}
