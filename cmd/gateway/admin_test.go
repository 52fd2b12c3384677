package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/store"
)

// startServe runs serve with the configuration body (after a listener,
// a database and the log level of its own) until the test ends, and
// returns its base URL once it is ready.
func startServe(t *testing.T, body string) string {
	t.Helper()
	addr := freeAddr(t)
	serveConfig(t, fmt.Sprintf("gateway:\n  listen: %s\nstorage:\n  dsn: %s\nlog:\n  level: warn\n%s", addr, filepath.Join(t.TempDir(), "g.db"), body))
	base := "http://" + addr
	waitHealthy(t, base)
	waitReadyz(t, base, http.StatusOK, "ready\n")
	return base
}

func request(t *testing.T, method, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestServeAdminOffWithoutTokens(t *testing.T) {
	base := startServe(t, "")
	for _, path := range []string{"/admin/api/stats", "/admin/api/sessions", "/admin/"} {
		if code, body := request(t, "GET", base+path, "anything-at-all-here"); code != http.StatusNotFound {
			t.Errorf("%s without admin.tokens: %d %s", path, code, body)
		}
	}
	if code, _ := request(t, "POST", base+"/admin/api/drain", "anything-at-all-here"); code == http.StatusOK {
		t.Error("drain served without admin.tokens")
	}
}

func TestServeAdmin(t *testing.T) {
	const token = "ops-token-0123456789"
	base := startServe(t, "admin:\n  tokens:\n    ops: "+token+"\n")
	if code, _ := request(t, "GET", base+"/admin/api/stats", ""); code != http.StatusUnauthorized {
		t.Fatalf("stats without a token: %d", code)
	}
	code, body := request(t, "GET", base+"/admin/api/stats", token)
	if code != http.StatusOK || !strings.Contains(body, `"replicas_alive"`) {
		t.Fatalf("stats: %d %s", code, body)
	}
	if code, body := request(t, "GET", base+"/admin/", ""); code != http.StatusOK || !strings.Contains(body, "chatgate admin") {
		t.Fatalf("admin page: %d %s", code, body)
	}
	// Drain: /readyz 503 and no new WebSocket connections; undrain: back.
	if code, body := request(t, "POST", base+"/admin/api/drain", token); code != http.StatusOK {
		t.Fatalf("drain: %d %s", code, body)
	}
	if code, body := request(t, "GET", base+"/readyz", ""); code != http.StatusServiceUnavailable || !strings.HasPrefix(body, "admin: drained by ops since ") {
		t.Fatalf("readyz drained: %d %q", code, body)
	}
	if code, _ := request(t, "GET", base+"/ws", ""); code != http.StatusServiceUnavailable {
		t.Fatalf("/ws while drained: %d", code)
	}
	if code, body := request(t, "POST", base+"/admin/api/undrain", token); code != http.StatusOK {
		t.Fatalf("undrain: %d %s", code, body)
	}
	waitReadyz(t, base, http.StatusOK, "ready\n")
}

func TestSessionsExportMarkdown(t *testing.T) {
	dbPath := filepath.Join(t.TempDir(), "g.db")
	path := writeConfig(t, fmt.Sprintf("storage:\n  dsn: %s\n", dbPath))
	out := storeTurn(t, dbPath, sessions.Inbound{Channel: "websocket", SessionKey: "websocket:ann", Text: "hello"})
	code, md, _ := runCmd(t, "sessions", "export", "-c", path, "-format", "markdown", out.ConversationID)
	if code != 0 || !strings.Contains(md, "# Conversation "+out.ConversationID) || !strings.Contains(md, "> echo: hello (history: 0)") {
		t.Fatalf("markdown export (%d):\n%s", code, md)
	}
	if code, _, errOut := runCmd(t, "sessions", "export", "-c", path, "-format", "pdf", out.ConversationID); code != 2 || !strings.Contains(errOut, "want json, text or markdown") {
		t.Fatalf("export -format pdf: %d %s", code, errOut)
	}
}

// `gateway sessions export` carries the notes the conversation's user
// keeps, and no other user's.
func TestSessionsExportCarriesNotes(t *testing.T) {
	dbPath := filepath.Join(t.TempDir(), "g.db")
	path := writeConfig(t, fmt.Sprintf("storage:\n  dsn: %s\n", dbPath))
	out := storeTurn(t, dbPath, sessions.Inbound{Channel: "websocket", SessionKey: "websocket:ann", Text: "hello"})
	db, err := store.Open(context.Background(), "sqlite", dbPath, store.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []ledger.Note{
		{UserKey: "websocket:ann", Text: "Ann prefers tea", Author: ledger.NoteByUser, ConversationID: out.ConversationID, CreatedAt: time.Now()},
		{UserKey: "websocket:bob", Text: "Bob prefers coffee", Author: ledger.NoteByUser, CreatedAt: time.Now()},
	} {
		if ok, err := db.AddNote(context.Background(), &n, 0); err != nil || !ok {
			t.Fatal(ok, err)
		}
	}
	db.Close()
	code, exported, errOut := runCmd(t, "sessions", "export", "-c", path, out.ConversationID)
	var x store.Export
	if code != 0 || json.Unmarshal([]byte(exported), &x) != nil {
		t.Fatalf("export (%d): %s%s", code, exported, errOut)
	}
	if x.MemoryUser != "websocket:ann" || len(x.Notes) != 1 || x.Notes[0].Text != "Ann prefers tea" || x.Notes[0].ConversationID != out.ConversationID {
		t.Fatalf("exported memory %q, notes %+v: want Ann's one note", x.MemoryUser, x.Notes)
	}
}
