package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/store"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	// A port below the kernel's ephemeral range (32768 and up on Linux):
	// the gateway binds it after this listener closes, and meanwhile a
	// port from that range may go to any listener or outgoing connection
	// of the tests running beside this one — a server answering on the
	// gateway's address that is not the gateway.
	for try := 0; try < 100; try++ {
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", 20000+rand.IntN(12000)))
		if err != nil {
			continue // taken
		}
		defer ln.Close()
		return ln.Addr().String()
	}
	t.Fatal("no free port in 20000–31999 on 127.0.0.1")
	return ""
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "bot.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func runCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// storeTurn runs one turn of in with the echo agent on the SQLite
// database at dbPath, closed again after it, and returns the turn.
func storeTurn(t *testing.T, dbPath string, in sessions.Inbound) sessions.Outcome {
	t.Helper()
	db, err := store.Open(context.Background(), "sqlite", dbPath, store.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m := sessions.New(db, agent.Echo{}, sessions.Options{})
	out, err := m.Handle(context.Background(), in, sessions.Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	m.Shutdown(context.Background())
	db.Close()
	return out
}

func TestCheckExample(t *testing.T) {
	code, out, errOut := runCmd(t, "check", "-c", "../../bot.yaml.example")
	if code != 0 {
		t.Fatalf("check bot.yaml.example = %d\n%s", code, errOut)
	}
	for _, want := range []string{"bot.yaml.example: ok", "channel websocket (enabled)", "max_history", "session.max_history (../../bot.yaml.example:"} {
		if !strings.Contains(out, want) {
			t.Fatalf("check output lacks %q:\n%s", want, out)
		}
	}
}

func TestCheckReportsEveryErrorWithFileAndLine(t *testing.T) {
	path := writeConfig(t, "session:\n  reset:\n    mode: daily\n    at_hour: 25\nagent:\n  backend: gpt\n")
	code, _, errOut := runCmd(t, "check", "-c", path)
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], path+":6: agent.backend:") || !strings.HasPrefix(lines[1], path+":4: session.reset.at_hour:") {
		// Validate reports in a fixed order: agent before session.
		t.Fatalf("stderr:\n%s", errOut)
	}
}

func TestCheckPrintsProvenanceAndConflictWarning(t *testing.T) {
	path := writeConfig(t, `
session:
  max_history: 40
  reset: {mode: idle, idle_minutes: 30}
channels:
  telegram:
    max_history: 10
    session:
      max_history: 20
`)
	code, out, errOut := runCmd(t, "check", "-c", path)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"channels.telegram.max_history (" + path + ":7)",
		"reset.idle_minutes  30",
		"warning: " + path + ":7: channels.telegram.max_history: channels.telegram.max_history (10) and channels.telegram.session.max_history (20",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestServeRunsAndStopsCleanly(t *testing.T) {
	dir := t.TempDir()
	addr := freeAddr(t)
	stop := serveConfig(t, fmt.Sprintf("gateway:\n  listen: %s\nstorage:\n  dsn: %s\nlog:\n  level: warn\n", addr, filepath.Join(dir, "g.db")))
	// Healthy as soon as it listens; ready once started.
	waitHealthy(t, "http://"+addr)
	waitReadyz(t, "http://"+addr, http.StatusOK, "ready\n")
	stop()
	if _, err := os.Stat(filepath.Join(dir, "g.db")); err != nil {
		t.Fatalf("database not created: %v", err)
	}
}

func waitHealthy(t *testing.T, base string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/healthz never answered: %v", base, err)
		}
		time.Sleep(50 * time.Millisecond) // polling a starting process, not waiting on a policy
	}
}

// waitReadyz polls /readyz, bounded, until it answers status with body;
// it fails with the last answer.
func waitReadyz(t *testing.T, base string, status int, body string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last string
	for {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == status && string(b) == body {
				return
			}
			last = fmt.Sprintf("%d %q", resp.StatusCode, b)
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/readyz never answered %d %q; last: %s", base, status, body, last)
		}
		time.Sleep(20 * time.Millisecond) // polling a running process, not waiting on a policy
	}
}

func TestUnreachableDatabaseFailsCleanly(t *testing.T) {
	path := writeConfig(t, "storage:\n  driver: postgres\n  dsn: postgres://u:secretpw@127.0.0.1:1/x?sslmode=disable&connect_timeout=2\n")
	code, _, errOut := runCmd(t, "serve", "-c", path)
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	if !strings.Contains(errOut, path+": storage: ") || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
		t.Fatalf("want one line naming the file and storage, got:\n%s", errOut)
	}
	if strings.Contains(errOut, "secretpw") {
		t.Fatalf("error leaks the password: %s", errOut)
	}
}

func TestInvalidConfigWritesNothing(t *testing.T) {
	dir := t.TempDir()
	path := writeConfig(t, fmt.Sprintf("storage:\n  dsn: %s\nsession:\n  max_histroy: 3\n", filepath.Join(dir, "g.db")))
	code, _, errOut := runCmd(t, "serve", "-c", path)
	if code != 1 || !strings.Contains(errOut, path+":4: session.max_histroy: unknown key") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(dir, "g.db")); !os.IsNotExist(err) {
		t.Fatal("a database was created for an invalid configuration")
	}
}

func TestSessionsCommands(t *testing.T) {
	dir := t.TempDir()
	dbPath := filepath.Join(dir, "g.db")
	path := writeConfig(t, fmt.Sprintf("storage:\n  dsn: %s\n", dbPath))
	out := storeTurn(t, dbPath, sessions.Inbound{Channel: "websocket", SessionKey: "websocket:ann", Text: "hello"})

	code, list, _ := runCmd(t, "sessions", "list", "-c", path)
	if code != 0 || !strings.Contains(list, out.ConversationID) || !strings.Contains(list, "websocket:ann") {
		t.Fatalf("list (%d):\n%s", code, list)
	}
	code, shown, _ := runCmd(t, "sessions", "show", "-c", path, "websocket:ann")
	if code != 0 || !strings.Contains(shown, "echo: hello (history: 0)") {
		t.Fatalf("show (%d):\n%s", code, shown)
	}
	code, exported, _ := runCmd(t, "sessions", "export", "-c", path, out.ConversationID)
	var doc struct {
		Conversation struct{ ID, Status string }
		Messages     []struct {
			Seq     int64
			Role    string
			Content string
		}
	}
	if err := json.Unmarshal([]byte(exported), &doc); code != 0 || err != nil {
		t.Fatalf("export (%d, %v):\n%s", code, err, exported)
	}
	if doc.Conversation.ID != out.ConversationID || len(doc.Messages) != 2 || doc.Messages[1].Role != "assistant" {
		t.Fatalf("export = %+v", doc)
	}
	code, reset, _ := runCmd(t, "sessions", "reset", "-c", path, "websocket:ann")
	if code != 0 || !strings.Contains(reset, "archived "+out.ConversationID) {
		t.Fatalf("reset (%d): %s", code, reset)
	}
	_, list, _ = runCmd(t, "sessions", "list", "-c", path, "-status", "archived")
	if !strings.Contains(list, out.ConversationID) || !strings.Contains(list, "manual") {
		t.Fatalf("archived list:\n%s", list)
	}
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// buildBinary builds the gateway once per test run.
func buildBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary: skipped in -short")
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "chatgate-bin")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "gateway")
		if out, err := exec.Command("go", "build", "-race", "-o", binPath, ".").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// TestSIGTERMExitsZero builds the real binary, starts it on its embedded
// defaults in an empty directory, and stops it with SIGTERM.
func TestSIGTERMExitsZero(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary: skipped in -short")
	}
	dir := t.TempDir()
	bin := buildBinary(t)
	addr := freeAddr(t)
	cfg := filepath.Join(dir, "bot.yaml")
	os.WriteFile(cfg, []byte("gateway:\n  listen: "+addr+"\n"), 0o600)
	cmd := exec.Command(bin)
	cmd.Dir = dir // ./bot.yaml is picked up without -c
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitHealthy(t, "http://"+addr)
	cmd.Process.Signal(syscall.SIGTERM)
	errc := make(chan error, 1)
	go func() { errc <- cmd.Wait() }()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("exit: %v\n%s", err, stderr.String())
		}
	case <-time.After(60 * time.Second): // a hang guard, not a speed check
		cmd.Process.Kill()
		t.Fatalf("no exit after SIGTERM\n%s", stderr.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "gateway.db")); err != nil {
		t.Fatalf("gateway.db not created in the working directory: %v", err)
	}
}

// TestServeChatsOverWebSocket drives the whole wiring: configuration, store,
// manager and the WebSocket channel of a running gateway.
func TestServeChatsOverWebSocket(t *testing.T) {
	dir := t.TempDir()
	addr := freeAddr(t)
	path := writeConfig(t, fmt.Sprintf(`
gateway:
  listen: %s
storage:
  dsn: %s
session:
  max_history: 1
log:
  level: error
`, addr, filepath.Join(dir, "g.db")))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"-c", path}, &bytes.Buffer{}, &bytes.Buffer{}) }()
	waitHealthy(t, "http://"+addr)
	c, _, err := websocket.DefaultDialer.Dial("ws://"+addr+"/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	c.WriteJSON(map[string]any{"type": "hello", "user": "ann"})
	for i, text := range []string{"one", "two", "three"} {
		c.WriteJSON(map[string]any{"type": "message", "id": text, "text": text})
		want := fmt.Sprintf("echo: %s (history: %d)", text, min(i*2, 1))
		if f := readReply(t, c); f["text"] != want {
			t.Fatalf("reply = %v, want %q (max_history 1 from bot.yaml)", f["text"], want)
		}
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`chatgate_turns_total{channel="websocket",status="ok"} 3`, `chatgate_websocket_connections 1`, `chatgate_turn_duration_seconds_count{channel="websocket"} 3`} {
		if !strings.Contains(string(body), want) {
			t.Fatalf("/metrics lacks %s", want)
		}
	}
	cancel()
	var ce *websocket.CloseError
	for {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, _, err := c.ReadMessage(); err != nil {
			if !errors.As(err, &ce) || ce.Code != websocket.CloseGoingAway {
				t.Fatalf("on shutdown the client got %v, want close 1001", err)
			}
			break
		}
	}
	if code := <-done; code != 0 {
		t.Fatalf("exit %d", code)
	}
}

// readReply reads the client's frames, each within 10 s, up to the next
// reply, and returns it.
func readReply(t *testing.T, c *websocket.Conn) map[string]any {
	t.Helper()
	for {
		var f map[string]any
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if err := c.ReadJSON(&f); err != nil {
			t.Fatal(err)
		}
		if f["type"] == "reply" {
			return f
		}
	}
}

func TestRejectedTelegramTokenLeavesTheRestServing(t *testing.T) {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"ok":false,"error_code":401,"description":"Unauthorized"}`)
	}))
	defer api.Close()
	addr := freeAddr(t)
	path := writeConfig(t, fmt.Sprintf("gateway:\n  listen: %s\nstorage:\n  dsn: %s\nchannels:\n  telegram:\n    token: \"42:SECRET-token\"\n    api_url: %s\n",
		addr, filepath.Join(t.TempDir(), "g.db"), api.URL))
	ctx, cancel := context.WithCancel(context.Background())
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"-c", path}, &bytes.Buffer{}, &stderr) }()
	// The bot connects in the background: the gateway serves while the
	// rejection is logged (and retried).
	waitHealthy(t, "http://"+addr)
	eventually(t, "the rejected token logged", func() bool {
		return strings.Contains(stderr.String(), "telegram: cannot start the bot: Unauthorized")
	})
	waitHealthy(t, "http://"+addr)
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d", code)
	}
	if logs := stderr.String(); strings.Contains(logs, "SECRET") {
		t.Fatalf("the token leaked into the logs:\n%s", logs)
	}
}

// syncBuffer is a bytes.Buffer safe for the logger's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }
