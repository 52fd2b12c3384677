package sessions

import (
	"context"
	"strings"
	"testing"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/agent/openai"
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
	llm, ag := llmtest.AgentWith(t, openai.Config{})
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

// Exports show a message's stored quote: whole in JSON, nested above the
// message in Markdown, on one line, cut short, before it in text.
func TestExportsShowTheQuote(t *testing.T) {
	db := openStore(t, store.DriverSQLite, t.TempDir()+"/g.db")
	m := New(db, agent.Echo{}, Options{Logger: quiet})
	t.Cleanup(func() { m.Shutdown(context.Background()) })
	in := msg("websocket:a", "which one?")
	in.Quote = "Two options:\nthe red one, " + strings.Repeat("or else the blue one ", 5)
	out := handle(t, m, in)
	ex, err := db.ExportConversation(context.Background(), out.ConversationID)
	if err != nil || ex == nil {
		t.Fatal(ex, err)
	}
	if got := ex.Messages[0].Quote; got != strings.TrimSpace(in.Quote) || ex.Messages[1].Quote != "" {
		t.Fatalf("exported quotes %q, %q", got, ex.Messages[1].Quote)
	}
	for format, want := range map[string]string{
		store.FormatJSON:     `"quote": "Two options:\nthe red one, or else`,
		store.FormatText:     "   1 user      [replying to \"Two options: the red one, or else the blue one or else the blue one or else the…\"] which one?\n",
		store.FormatMarkdown: "> > Two options:\n> > the red one, or else the blue one",
	} {
		var b strings.Builder
		if err := ex.Write(&b, format); err != nil || !strings.Contains(b.String(), want) {
			t.Errorf("%s export lacks %q: %v\n%s", format, want, err, b.String())
		}
	}
	var b strings.Builder
	ex.Write(&b, store.FormatMarkdown)
	if !strings.Contains(b.String(), "blue one\n>\n> which one?\n") {
		t.Errorf("markdown: the message does not follow its quote:\n%s", b.String())
	}
}
