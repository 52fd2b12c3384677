package main

// An extraction at reset cut by SIGKILL in the middle of its model call:
// the gateway binary on SQLite, a model server speaking OpenAI's format
// that holds the first extraction call until the process dies. The
// restarted gateway claims the extraction again (the dead process's claim
// is no live replica's), and its notes are stored once.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/store"
)

// extractModel answers an extraction's call (its system message is
// sessions.DefaultExtractionPrompt) with two notes — the first such call
// it holds until its request ends — and anything else with "pong",
// streamed or not as asked. It keeps every request's messages.
type extractModel struct {
	held chan struct{} // closed when the first extraction call arrived

	mu          sync.Mutex
	extractions int
	requests    [][]struct{ Role, Content string }
}

func (m *extractModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Stream   bool
		Messages []struct{ Role, Content string }
	}
	data, _ := io.ReadAll(r.Body)
	json.Unmarshal(data, &body)
	extraction := len(body.Messages) > 0 && body.Messages[0].Content == sessions.DefaultExtractionPrompt
	m.mu.Lock()
	m.requests = append(m.requests, body.Messages)
	n := 0
	if extraction {
		m.extractions++
		n = m.extractions
	}
	m.mu.Unlock()
	if extraction && n == 1 {
		close(m.held)
		<-r.Context().Done()
		return
	}
	answer := "pong"
	if extraction {
		answer = "- The user's name is Ann.\n- Ann keeps bees in Graz."
	}
	if body.Stream {
		w.Header().Set("Content-Type", "text/event-stream")
		streamChunk(w, answer)
		streamEnd(w)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":%q},"finish_reason":"stop"}],"usage":{"prompt_tokens":30,"completion_tokens":12,"total_tokens":42}}`, answer)
}

func (m *extractModel) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.extractions
}

func (m *extractModel) last() []struct{ Role, Content string } {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.requests[len(m.requests)-1]
}

func TestExtractionKilledMidCallStoresItsNotesOnce(t *testing.T) {
	model := &extractModel{held: make(chan struct{})}
	llm := httptest.NewServer(model)
	defer llm.Close()
	dir := t.TempDir()
	addr := freeAddr(t)
	config := fmt.Sprintf(`gateway:
  listen: %s
agent:
  backend: openai
  openai: {base_url: %s/v1, model: m, max_retries: 0}
session:
  memory: {enabled: true, extract_on_reset: true}
log:
  level: error
`, addr, llm.URL)
	p := startGateway(t, dir, config)
	waitHealthy(t, "http://"+addr)
	cl, _ := dialClient(t, addr, map[string]any{"user": "ann"})
	cl.c.WriteJSON(map[string]any{"type": "message", "id": "m1", "text": "Hi, I am Ann."})
	cl.next(t, "reply")
	cl.c.WriteJSON(map[string]any{"type": "message", "id": "m1b", "text": "I keep bees in Graz."})
	cl.next(t, "reply")
	cl.c.WriteJSON(map[string]any{"type": "reset"})
	select {
	case <-model.held:
	case <-time.After(20 * time.Second):
		t.Fatal("the extraction's model call never came")
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
	cl.c.Close()

	startGateway(t, dir, config)
	waitHealthy(t, "http://"+addr)
	db, err := store.Open(context.Background(), "sqlite", filepath.Join(dir, "gateway.db"), store.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var x *ledger.Extraction
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var rows []ledger.Extraction
		if err := db.Gorm().Find(&rows).Error; err != nil {
			t.Fatal(err)
		}
		if len(rows) == 1 && rows[0].State != ledger.ExtractRunning && rows[0].State != ledger.ExtractDue {
			x = &rows[0]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the extraction never settled after the restart: %+v", rows)
		}
	}
	notes, err := db.Notes(context.Background(), "websocket:ann", 100)
	if err != nil {
		t.Fatal(err)
	}
	if x.State != ledger.ExtractDone || x.Attempt != 2 || x.Notes != 2 || len(notes) != 2 || model.count() != 2 {
		t.Fatalf("extraction %+v; notes %+v; extraction calls %d", x, notes, model.count())
	}
	for _, n := range notes {
		if n.Author != ledger.NoteByReset || n.ConversationID == "" {
			t.Fatalf("note %+v", n)
		}
	}
	var tallied int64
	db.Gorm().Raw("SELECT COALESCE(SUM(prompt_tokens), 0) FROM usage_days WHERE user_key = 'websocket:ann'").Scan(&tallied)
	if tallied < 30 {
		t.Fatalf("the user's tally holds %d prompt tokens: the extraction's 30 missing", tallied)
	}

	// The next conversation's request carries them, as memory.
	cl2, _ := dialClient(t, addr, map[string]any{"user": "ann"})
	cl2.c.WriteJSON(map[string]any{"type": "message", "id": "m2", "text": "where do I live?"})
	cl2.next(t, "reply")
	var memory string
	for _, m := range model.last() {
		if m.Role == "system" && strings.HasPrefix(m.Content, sessions.MemoryIntro) {
			memory = m.Content
		}
	}
	if !strings.Contains(memory, "Ann keeps bees in Graz.") {
		t.Fatalf("the next request's memory = %q", memory)
	}
}
