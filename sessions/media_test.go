package sessions_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/agent/openai"
	"github.com/chatgate/chatgate/internal/llmtest"
	"github.com/chatgate/chatgate/internal/mcptest"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/store"
	"github.com/chatgate/chatgate/sessions/storetest"
	"github.com/chatgate/chatgate/tools/mcpclient"
)

// Media from tools: a tool's picture and file are kept with the turn,
// once, within the limits, told to the model, and go with the reply.

func mediaRows(t *testing.T, db *store.DB) []ledger.ToolMedia {
	t.Helper()
	var rows []ledger.ToolMedia
	if err := db.Gorm().Order("tool_call_id, idx").Find(&rows).Error; err != nil {
		t.Fatal(err)
	}
	return rows
}

// loseFirst loses the answer of the first call named op that lands: the
// caller sees a failure of a write that was made.
type loseFirst struct {
	op   string
	mu   sync.Mutex
	lost int
}

func (l *loseFirst) Before(context.Context, ledger.Call) error { return nil }

func (l *loseFirst) After(_ context.Context, c ledger.Call, err error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err == nil && c.Op == l.op && l.lost == 0 {
		l.lost++
		return errors.New("injected: the answer of a landed write was lost")
	}
	return err
}

// failOp fails every call named op before it runs.
type failOp string

func (f failOp) Before(_ context.Context, c ledger.Call) error {
	if c.Op == string(f) {
		return errors.New("injected: " + c.Op + " failed")
	}
	return nil
}

func (failOp) After(_ context.Context, _ ledger.Call, err error) error { return err }

func TestToolMediaIsKeptOnceAndGoesWithTheReply(t *testing.T) {
	storetest.Drivers(t, func(t *testing.T, open func() *store.DB) {
		r := newToolRig(t, open, mcpclient.ServerConfig{}, once(call("c1", "t__media", map[string]any{})))
		// The outcome's store lands and its answer is lost: the runner
		// stores it again, and finds it stored — the media once.
		lose := &loseFirst{op: "EndTool"}
		defer r.db.Observe(lose)()
		m := r.manager(t, "a", nil, sessions.Options{})
		defer m.Shutdown(context.Background())
		out := wait(t, r.submit(t, m, "u1", "m1", "draw it"))
		if lose.lost != 1 {
			t.Fatalf("EndTool answers lost: %d, want 1", lose.lost)
		}
		got := out.Reply.Media
		if len(got) != 2 || got[0].Kind != "image" || got[0].Mime != "image/png" || got[0].Size != int64(len(mcptest.PNG)) ||
			got[1].Kind != "file" || got[1].Mime != "application/pdf" || got[1].Name != "report.pdf" || got[1].Size != int64(len(mcptest.PDF)) {
			t.Fatalf("reply media = %+v", got)
		}
		rows := mediaRows(t, r.db)
		if len(rows) != 2 {
			t.Fatalf("media rows = %d, want 2", len(rows))
		}
		for i, want := range [][]byte{mcptest.PNG, mcptest.PDF} {
			f, err := m.Conversations().ToolMedia(context.Background(), got[i].ID)
			if err != nil || f == nil || !bytes.Equal(f.Data, want) || f.SessionKey != sessions.WebSocketKey("u1") {
				t.Fatalf("media %d = %+v, %v", i, f, err)
			}
			// Its description, without the bytes.
			info, err := m.Conversations().ToolMediaInfo(context.Background(), got[i].ID)
			if err != nil || info == nil || info.Data != nil || info.Media != f.Media || info.SessionKey != f.SessionKey {
				t.Fatalf("media %d info = %+v, %v; want %+v", i, info, err, f.Media)
			}
		}
		if info, err := m.Conversations().ToolMediaInfo(context.Background(), "no-such-id"); info != nil || err != nil {
			t.Fatalf("an unknown id's info = %+v, %v", info, err)
		}
		// The model was told what the tool returned, and that the user
		// gets it.
		lines := transcript(t, r.db, sessions.WebSocketKey("u1"))
		tool := lines[2]
		if !strings.HasPrefix(tool, "tool:a chart and its report\n[image image/png, ") || !strings.Contains(tool, "application/pdf") ||
			!strings.Contains(tool, "[2 of the items above will be sent to the user with your reply]") {
			t.Fatalf("tool result = %q", tool)
		}
		// A reply read back (a duplicate, another replica) carries them too.
		again := wait(t, r.submit(t, m, "u1", "m1", "draw it"))
		if !again.Duplicate || len(again.Reply.Media) != 2 || again.Reply.Media[0].ID != got[0].ID {
			t.Fatalf("duplicate's reply = %+v", again)
		}
		// Read back for a channel (another replica's reply): with them,
		// or, when they cannot be read, saying so.
		_, stored, err := m.Conversations().StoredReply(context.Background(), out.ConversationID, out.UserSeq, out.Reply.Seq)
		if err != nil || len(stored.Media) != 2 || stored.MediaUnread {
			t.Fatalf("stored reply = %+v, %v", stored, err)
		}
		unread := r.db.Observe(failOp("ToolMediaOfTurn"))
		_, stored, err = m.Conversations().StoredReply(context.Background(), out.ConversationID, out.UserSeq, out.Reply.Seq)
		unread()
		if err != nil || len(stored.Media) != 0 || !stored.MediaUnread || stored.Text != out.Reply.Text {
			t.Fatalf("stored reply, its media unreadable = %+v, %v", stored, err)
		}
		// They go with their conversation.
		c, _ := r.db.ActiveConversation(context.Background(), sessions.WebSocketKey("u1"))
		if _, err := m.Reset(context.Background(), sessions.Inbound{Channel: "websocket", SessionKey: sessions.WebSocketKey("u1"), UserID: "u1"}); err != nil {
			t.Fatal(err)
		}
		if ok, err := r.db.PurgeConversation(context.Background(), c.ID); err != nil || !ok {
			t.Fatalf("purge: %v %v", ok, err)
		}
		if rows := mediaRows(t, r.db); len(rows) != 0 {
			t.Fatalf("media rows after the purge = %d", len(rows))
		}
	})
}

func TestToolMediaOverTheLimitsIsDroppedAndTheModelTold(t *testing.T) {
	storetest.Drivers(t, func(t *testing.T, open func() *store.DB) {
		for i, tc := range []struct {
			name   string
			limits sessions.MediaLimits
			args   map[string]any
			kept   string
			note   string
		}{
			{"an item over max_bytes", sessions.MediaLimits{MaxBytes: 1000}, map[string]any{"png_bytes": 1001}, "file",
				"[image image/png of 1001 bytes not kept: over the limit of 1000 bytes per item; the user does not get it]"},
			{"an item past max_items", sessions.MediaLimits{MaxItems: 1}, map[string]any{}, "image",
				"[file application/pdf not kept: a call keeps at most 1 items; the user does not get it]"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				r := newToolRig(t, open, mcpclient.ServerConfig{}, once(call("c1", "t__media", tc.args)))
				m := r.manager(t, "a", nil, sessions.Options{Media: tc.limits})
				defer m.Shutdown(context.Background())
				user := string(rune('a' + i))
				out := wait(t, r.submit(t, m, user, "m1", "draw it"))
				if len(out.Reply.Media) != 1 || out.Reply.Media[0].Kind != tc.kept || out.Reply.Status != ledger.MsgOK {
					t.Fatalf("reply = %+v", out.Reply)
				}
				lines := transcript(t, r.db, sessions.WebSocketKey(user))
				if !strings.Contains(lines[2], tc.note) || !strings.Contains(lines[2], "[1 of the items above will be sent") {
					t.Fatalf("tool result = %q, want the note %q", lines[2], tc.note)
				}
			})
		}
	})
}

// A model that reads images gets a tool's picture as image input: in the
// turn's next model call, right after the round's results, and in the
// requests of later turns (read back from storage); a model that does
// not read images gets the text line only.
func TestVisionModelSeesToolPictures(t *testing.T) {
	storetest.Drivers(t, func(t *testing.T, open func() *store.DB) {
		for _, vision := range []bool{true, false} {
			t.Run(map[bool]string{true: "vision", false: "text only"}[vision], func(t *testing.T) {
				_, set := toolServer(t, mcpclient.ServerConfig{})
				model, ag := llmtest.AgentWith(t, openai.Config{Model: "m", Vision: vision})
				model.Script(func(req llmtest.Request) llmtest.Answer {
					if strings.Contains(req.Messages[len(req.Messages)-1].Text(), "draw") {
						return llmtest.Answer{ToolCalls: []llmtest.ToolCall{{Name: "t__media", Arguments: `{}`}}}
					}
					return llmtest.Answer{Text: "ok"}
				})
				db := open()
				m := sessions.New(db, ag, sessions.Options{Events: db.Events(), Tools: mcpclient.Offer{Set: set},
					Logger: slog.New(slog.DiscardHandler), Policies: map[string]sessions.Policy{"websocket": {MaxHistory: 50}}})
				defer m.Shutdown(context.Background())
				user := fmt.Sprintf("v-%v", vision)
				submit := func(id, text string) sessions.Outcome {
					in := sessions.Inbound{Channel: "websocket", SessionKey: sessions.WebSocketKey(user), UserID: user, ClientMsgID: id, Text: text}
					tk, err := m.Submit(context.Background(), in, sessions.Hooks{})
					if err != nil {
						t.Fatal(err)
					}
					return wait(t, tk)
				}
				submit("m1", "draw it")
				submit("m2", "and now?")
				reqs := model.Received()
				if len(reqs) != 3 {
					t.Fatalf("%d model requests, want 3", len(reqs))
				}
				png := "data:image/png;base64," + base64.StdEncoding.EncodeToString(mcptest.PNG)
				for i, req := range reqs[1:] {
					var pics []string
					after := ""
					for j, msg := range req.Messages {
						if imgs := msg.Images(); len(imgs) > 0 {
							pics = append(pics, imgs...)
							after = req.Messages[j-1].Role
							if msg.Role != "user" || !strings.Contains(msg.Text(), agent.ToolImagesText) {
								t.Fatalf("request %d: the picture came in %s %q", i+2, msg.Role, msg.Text())
							}
						}
					}
					switch {
					case vision && (len(pics) != 1 || pics[0] != png || after != "tool"):
						t.Fatalf("request %d: pictures %d (after a %s message), want the tool's PNG after its result", i+2, len(pics), after)
					case !vision && len(pics) != 0:
						t.Fatalf("request %d: a model that does not read images got %d pictures", i+2, len(pics))
					}
					var results []string
					for _, msg := range req.Messages {
						if msg.Role == "tool" {
							results = append(results, msg.Text())
						}
					}
					if len(results) != 1 || !strings.Contains(results[0], "[image image/png, ") {
						t.Fatalf("request %d: tool results %q", i+2, results)
					}
				}
			})
		}
	})
}

// A picture a tool returned that is larger than a model request takes
// (sessions.MaxToolImageBytes) is kept and delivered, but not given to
// a model that reads images: neither in its turn nor later; its result's
// text line still tells the model what it was.
func TestAToolPictureTooLargeForTheModelIsNotGiven(t *testing.T) {
	_, set := toolServer(t, mcpclient.ServerConfig{})
	model, ag := llmtest.AgentWith(t, openai.Config{Model: "m", Vision: true})
	model.Script(func(req llmtest.Request) llmtest.Answer {
		if strings.Contains(req.Messages[len(req.Messages)-1].Text(), "draw") {
			return llmtest.Answer{ToolCalls: []llmtest.ToolCall{{Name: "t__media", Arguments: fmt.Sprintf(`{"png_bytes": %d}`, sessions.MaxToolImageBytes+1)}}}
		}
		return llmtest.Answer{Text: "ok"}
	})
	db, err := store.Open(context.Background(), store.DriverSQLite, filepath.Join(t.TempDir(), "g.db"), store.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	m := sessions.New(db, ag, sessions.Options{Events: db.Events(), Tools: mcpclient.Offer{Set: set},
		Logger: slog.New(slog.DiscardHandler), Policies: map[string]sessions.Policy{"websocket": {MaxHistory: 50}}})
	defer m.Shutdown(context.Background())
	for _, c := range []struct{ id, text string }{{"m1", "draw it"}, {"m2", "and now?"}} {
		in := sessions.Inbound{Channel: "websocket", SessionKey: sessions.WebSocketKey("big"), UserID: "big", ClientMsgID: c.id, Text: c.text}
		tk, err := m.Submit(context.Background(), in, sessions.Hooks{})
		if err != nil {
			t.Fatal(err)
		}
		if out := wait(t, tk); c.id == "m1" && len(out.Reply.Media) != 2 {
			t.Fatalf("reply media = %+v, want the picture and the PDF", out.Reply.Media)
		}
	}
	reqs := model.Received()
	if len(reqs) != 3 {
		t.Fatalf("%d model requests, want 3", len(reqs))
	}
	for i, req := range reqs[1:] {
		for _, msg := range req.Messages {
			if imgs := msg.Images(); len(imgs) > 0 {
				t.Fatalf("request %d: a picture of %d bytes was given to the model", i+2, sessions.MaxToolImageBytes+1)
			}
		}
		var told bool
		for _, msg := range req.Messages {
			told = told || msg.Role == "tool" && strings.Contains(msg.Text(), fmt.Sprintf("[image image/png, %d bytes]", sessions.MaxToolImageBytes+1))
		}
		if !told {
			t.Fatalf("request %d: the tool's result does not tell the model of the picture", i+2)
		}
	}
}
